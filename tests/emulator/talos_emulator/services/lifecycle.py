# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""machine.LifecycleService (Talos v1.13+): run the installer from an image already pulled.

Upgrade only writes the new version to disk: no drain, no reboot, no etcd
checks. The version shows after the next reboot. A non-zero installer exit
code is streamed, not turned into a gRPC error.
"""

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import lifecycle_grpc, lifecycle_pb2

from ..context import current_call
from ..versions import image_tag
from .image import check_containerd_instance, has_image


def _progress(reply_type, **fields):
    return reply_type(progress=lifecycle_pb2.LifecycleServiceInstallProgress(**fields))


class LifecycleService(lifecycle_grpc.LifecycleServiceBase):
    def __init__(self, node):
        self.node = node

    async def Install(self, stream):
        request = await stream.recv_message()
        if self.node.installed:
            raise GRPCError(Status.FAILED_PRECONDITION, "machine is already installed")
        await self._run_installer(stream, request, lifecycle_pb2.LifecycleServiceInstallResponse, "install")

    async def Upgrade(self, stream):
        request = await stream.recv_message()
        await self._run_installer(stream, request, lifecycle_pb2.LifecycleServiceUpgradeResponse, "upgrade")

    async def _run_installer(self, stream, request, reply_type, action):
        node = self.node
        call = current_call()
        image = request.source.image_name
        call.audit.update(image=image, namespace=common_pb2.ContainerdNamespace.Name(request.containerd.namespace))
        check_containerd_instance(request.containerd)
        if node.install_in_progress:
            raise GRPCError(Status.FAILED_PRECONDITION, "another installation/upgrade is already in progress")
        node.install_in_progress = True
        try:
            await node.cluster.faults.hold(node, call.method)
            if action == "upgrade" and not node.installed:
                raise GRPCError(Status.FAILED_PRECONDITION, "machine is not installed")
            if not image:
                raise GRPCError(Status.INVALID_ARGUMENT, "installer image name is required")
            if not has_image(node, common_pb2.ContainerdNamespace.Name(request.containerd.namespace), image):
                raise GRPCError(Status.INTERNAL, 'upgrade failed: installer image "%s" not found in containerd store' % image)
            version = image_tag(image) or node.installed_version
            for line in (
                "running installer %s" % image,
                "validating installer image",
                "%s of Talos %s to %s" % (action, node.talos_version, version),
                "writing bootloader configuration",
            ):
                await stream.send_message(_progress(reply_type, message=line))
            exit_code = node.cluster.faults.installer_exit_code(node)
            if exit_code == 0:
                node.install_version(image)
                node.installed = True
                await stream.send_message(_progress(reply_type, message="%s of Talos %s finished successfully" % (action, version)))
            else:
                await stream.send_message(_progress(reply_type, message="installer failed with exit code %d" % exit_code))
            call.audit.update(exit_code=exit_code)
            await stream.send_message(_progress(reply_type, exit_code=exit_code))
        finally:
            node.install_in_progress = False
