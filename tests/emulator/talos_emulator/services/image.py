# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""machine.ImageService/Pull (Talos v1.13+): pull an image into one containerd store of the node."""

from google.protobuf import duration_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_grpc, image_pb2

from ..context import current_call

LayerStatus = image_pb2.ImageServicePullLayerProgress.Status


def check_containerd_instance(instance):
    """Talos ``ctrhelper``: a driver and namespace pair that names a store."""
    if instance.namespace == common_pb2.NS_UNKNOWN:
        raise GRPCError(Status.INVALID_ARGUMENT, "containerd namespace is not specified")
    if instance.driver == common_pb2.CONTAINERD and instance.namespace == common_pb2.NS_CRI:
        raise GRPCError(Status.INVALID_ARGUMENT, "CRI namespace is only accessible with the CRI driver")


class ImageService(image_grpc.ImageServiceBase):
    def __init__(self, node):
        self.node = node

    async def Pull(self, stream):
        request = await stream.recv_message()
        node = self.node
        namespace = common_pb2.ContainerdNamespace.Name(request.containerd.namespace)
        current_call().audit.update(image=request.image_ref, namespace=namespace)
        check_containerd_instance(request.containerd)
        if not request.image_ref:
            raise GRPCError(Status.INVALID_ARGUMENT, "image reference is required")
        if not node.cluster.registry_has(request.image_ref):
            raise GRPCError(Status.NOT_FOUND, 'failed to pull image "%s": not found' % request.image_ref)
        store = node.images.setdefault(namespace, set())
        layers = ("sha256:%064x" % 1, "sha256:%064x" % 2)
        if request.image_ref in store:
            steps = [(layer, LayerStatus.ALREADY_EXISTS, 1048576) for layer in layers]
        else:
            steps = [(layer, status, 1048576) for layer in layers
                     for status in (LayerStatus.DOWNLOADING, LayerStatus.DOWNLOAD_COMPLETE, LayerStatus.EXTRACTING, LayerStatus.EXTRACT_COMPLETE)]
        for layer, status, size in steps:
            progress = image_pb2.ImageServicePullLayerProgress(
                status=status, elapsed=duration_pb2.Duration(nanos=250000000), offset=size, total=size,
            )
            await stream.send_message(image_pb2.ImageServicePullResponse(
                pull_progress=image_pb2.ImageServicePullProgress(layer_id=layer, progress=progress),
            ))
        store.add(request.image_ref)
        await stream.send_message(image_pb2.ImageServicePullResponse(name=request.image_ref))
