# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""machine.ImageService (Talos v1.13+) and the legacy MachineService ImageList/ImagePull: a node's containerd images.

As Talos's ``internal/app/images``: a pull normalizes the reference
(``nginx`` -> ``docker.io/library/nginx:latest``), skips what is already
there, and leaves three names for the image (the tag, ``name@digest`` and the
bare digest, ``image/aliases.go``); it answers with ``name@digest``. Remove
deletes exactly the name it is given (no normalization), ``NotFound`` when
there is none. The stores are per containerd namespace.
"""

import hashlib
import re
import time

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.empty_pb2 import Empty
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_grpc, image_pb2, machine_pb2

from .. import kubernetes
from ..context import current_call

LayerStatus = image_pb2.ImageServicePullLayerProgress.Status

# Talos's etcd image when the config names none (constants.EtcdImage and DefaultEtcdVersion of v1.14).
DEFAULT_ETCD_IMAGE = "registry.k8s.io/etcd:3.7.1"
# The pod sandbox image of Talos's CRI configuration.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LAYER_SIZE = 1048576
_LAYERS = 2

# distribution/reference: [domain/]path[:tag][@digest], lower-case path components.
_REFERENCE = re.compile(
    r"^(?P<name>(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


class ImageRecord:
    """One name in a containerd image store."""

    def __init__(self, name, digest):
        self.name = name
        self.digest = digest
        self.size = LAYER_SIZE * _LAYERS
        self.created = time.time()


def parse_reference(ref):
    """``(name, tag, digest)`` of a reference normalized as ``reference.ParseDockerRef`` does; ValueError when invalid."""
    match = _REFERENCE.match(ref or "")
    if not match:
        raise ValueError("invalid reference format")
    name, tag, digest = match.group("name"), match.group("tag"), match.group("digest")
    first, _slash, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + name
    elif first == "index.docker.io":
        name = "docker.io/" + rest
    if name.startswith("docker.io/") and "/" not in name[len("docker.io/"):]:
        name = "docker.io/library/" + name[len("docker.io/"):]
    if digest:
        return name, None, digest
    return name, tag or "latest", None


def normalized(ref):
    name, tag, digest = parse_reference(ref)
    return "%s@%s" % (name, digest) if digest else "%s:%s" % (name, tag)


def store(node, namespace):
    """The node's image store of ``namespace`` (``NS_SYSTEM``, ``NS_CRI``): name -> ImageRecord."""
    return node.images.setdefault(namespace, {})


def has_image(node, namespace, ref):
    """Whether ``ref`` names an image of the store, as containerd's GetImage finds it after normalization."""
    try:
        return normalized(ref) in store(node, namespace)
    except ValueError:
        return False


def check_containerd_instance(instance):
    """Talos ``ctrhelper.ContainerdInstanceHelper``: a driver and namespace pair that names a store."""
    if instance.namespace not in (common_pb2.NS_SYSTEM, common_pb2.NS_CRI):
        raise GRPCError(Status.INVALID_ARGUMENT, "invalid containerd namespace %s" % common_pb2.ContainerdNamespace.Name(instance.namespace))
    if instance.driver == common_pb2.CONTAINERD and instance.namespace == common_pb2.NS_CRI:
        raise GRPCError(Status.INVALID_ARGUMENT, "cannot use CRI namespace with containerd driver")


def _check_namespace(namespace):
    if namespace not in (common_pb2.NS_SYSTEM, common_pb2.NS_CRI):
        raise GRPCError(Status.INVALID_ARGUMENT, "invalid namespace %s" % common_pb2.ContainerdNamespace.Name(namespace))


def _timestamp(seconds):
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


async def pull(node, namespace, ref, send_progress=None):
    """Pull ``ref`` into the store of ``namespace``; returns the pinned ``name@digest``.

    ``send_progress(layer, status)`` reports each layer's progress (the
    ImageService stream); an image already present reports ALREADY_EXISTS.
    """
    try:
        name, tag, digest = parse_reference(ref)
    except ValueError as error:
        raise GRPCError(Status.UNKNOWN, 'failed to parse image reference "%s": %s' % (ref, error))
    if not node.cluster.registry_has(ref):
        raise GRPCError(Status.NOT_FOUND, 'error pulling image: failed to pull image "%s": %s: not found'
                        % (normalized(ref), normalized(ref)))
    present = normalized(ref) in store(node, namespace)
    if send_progress is not None:
        layers = ["sha256:%064x" % (index + 1) for index in range(_LAYERS)]
        statuses = ([LayerStatus.ALREADY_EXISTS] if present else
                    [LayerStatus.DOWNLOADING, LayerStatus.DOWNLOAD_COMPLETE, LayerStatus.EXTRACTING, LayerStatus.EXTRACT_COMPLETE])
        for layer in layers:
            for status in statuses:
                await send_progress(layer, status)
    return add_image(node, namespace, ref)


def add_image(node, namespace, ref):
    """Store ``ref`` under the three names containerd gives a pulled image; returns the pinned ``name@digest``."""
    name, tag, digest = parse_reference(ref)
    digest = digest or "sha256:" + hashlib.sha256(normalized(ref).encode()).hexdigest()
    images = store(node, namespace)
    aliases = [digest, "%s@%s" % (name, digest)] + (["%s:%s" % (name, tag)] if tag else [])
    for alias in aliases:
        images.setdefault(alias, ImageRecord(alias, digest))
    return "%s@%s" % (name, digest)


def pull_boot_images(node):
    """What a configured node pulls as it boots, where the registry has it (one it lacks is not there, and the
    service or pod cannot start): machined pulls the kubelet's and, on a control plane, etcd's image into the system
    namespace of the CRI containerd (``system/services/kubelet.go``, ``etcd.go``); the kubelet pulls the pod sandbox's
    and, on a control plane, the static pods' images into the CRI namespace ``k8s.io``."""
    for namespace, refs in boot_images(node).items():
        for ref in refs:
            if node.cluster.registry_has(ref):
                add_image(node, namespace, ref)


def boot_images(node):
    """``{namespace: [image]}`` of what a configured node pulls as it boots (none in maintenance mode)."""
    if node.maintenance:
        return {}
    images = kubernetes.settings(node.config_bytes)["images"]
    system, cri = [images["kubelet"]], [PAUSE_IMAGE]
    if node.is_control_plane:
        system.append(((node.config.get("cluster") or {}).get("etcd") or {}).get("image") or DEFAULT_ETCD_IMAGE)
        cri += [images[component] for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    return {"NS_SYSTEM": system, "NS_CRI": cri}


class ImageService(image_grpc.ImageServiceBase):
    def __init__(self, node):
        self.node = node

    async def List(self, stream):
        request = await stream.recv_message()
        check_containerd_instance(request.containerd)
        namespace = common_pb2.ContainerdNamespace.Name(request.containerd.namespace)
        for record in list(store(self.node, namespace).values()):
            await stream.send_message(image_pb2.ImageServiceListResponse(
                name=record.name, digest=record.digest, size=record.size, created_at=_timestamp(record.created),
                labels={"io.cri-containerd.image": "managed"} if namespace == "NS_CRI" else {},
            ))

    async def Pull(self, stream):
        request = await stream.recv_message()
        namespace = common_pb2.ContainerdNamespace.Name(request.containerd.namespace)
        current_call().audit.update(image=request.image_ref, namespace=namespace)
        check_containerd_instance(request.containerd)

        async def send_progress(layer, status):
            progress = image_pb2.ImageServicePullLayerProgress(
                status=status, elapsed=duration_pb2.Duration(nanos=250000000), offset=LAYER_SIZE, total=LAYER_SIZE,
            )
            await stream.send_message(image_pb2.ImageServicePullResponse(
                pull_progress=image_pb2.ImageServicePullProgress(layer_id=layer, progress=progress),
            ))

        await self.node.cluster.faults.hold(self.node, current_call().method)
        name = await pull(self.node, namespace, request.image_ref, send_progress)
        await stream.send_message(image_pb2.ImageServicePullResponse(name=name))

    async def Remove(self, stream):
        request = await stream.recv_message()
        namespace = common_pb2.ContainerdNamespace.Name(request.containerd.namespace)
        current_call().audit.update(image=request.image_ref, namespace=namespace)
        check_containerd_instance(request.containerd)
        images = store(self.node, namespace)
        if request.image_ref not in images:
            raise GRPCError(Status.NOT_FOUND, "image %s not found" % request.image_ref)
        del images[request.image_ref]
        await stream.send_message(Empty())


class LegacyImageRPCs:
    """MachineService ImageList and ImagePull (v1.5 to v1.14, deprecated since v1.13): the CRI containerd only."""

    async def ImageList(self, stream):
        request = await stream.recv_message()
        _check_namespace(request.namespace)
        namespace = common_pb2.ContainerdNamespace.Name(request.namespace)
        for record in list(store(self.node, namespace).values()):
            await stream.send_message(machine_pb2.ImageListResponse(
                name=record.name, digest=record.digest, size=record.size, created_at=_timestamp(record.created),
            ))

    async def ImagePull(self, stream):
        request = await stream.recv_message()
        namespace = common_pb2.ContainerdNamespace.Name(request.namespace)
        current_call().audit.update(image=request.reference, namespace=namespace)
        _check_namespace(request.namespace)
        await pull(self.node, namespace, request.reference)
        await stream.send_message(machine_pb2.ImagePullResponse(messages=[machine_pb2.ImagePull()]))
