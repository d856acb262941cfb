# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""machine.MachineService: node life cycle, services, files, events and statistics.

ApplyConfiguration lives in ``apply.py``, the etcd RPCs in ``etcd.py``, the
file and process RPCs in ``files.py`` and the legacy image RPCs in ``image.py``;
they are mixed into the one generated service class here.
"""

import asyncio
import gzip
import io
import tarfile

import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_grpc, machine_pb2

from .. import configgen
from ..context import current_call
from ..kubernetes import admin_kubeconfig
from ..versions import older_than
from .apply import ApplyConfigurationRPC
from .common import MEMTOTAL_KIB, new_actor_id, require_machine_type
from .etcd import EtcdRPCs
from .files import FileRPCs
from .image import LegacyImageRPCs
from .logs import LogRPCs
from .monitoring import MonitoringRPCs
from . import volumes
from .storage import SYSTEM_DISK, USER_DISKS

# The partitions a Reset without system_partitions_to_wipe wipes: the whole system disk (volumes.py says which
# of them a Reset may name).
_SYSTEM_VOLUMES = ("EFI", "BOOT", "META", "STATE", "EPHEMERAL")


class MachineService(ApplyConfigurationRPC, EtcdRPCs, FileRPCs, LegacyImageRPCs, LogRPCs, MonitoringRPCs,
                     machine_grpc.MachineServiceBase):
    def __init__(self, node):
        self.node = node

    def __mapping__(self):
        # The generated mapping, and the RPCs whose messages the collection's protos leave out (monitoring.py).
        mapping = super(MachineService, self).__mapping__()
        mapping.update(self.monitoring_handlers())
        return mapping

    # Identity.

    async def Version(self, stream):
        await stream.recv_message()
        node = self.node
        version = machine_pb2.Version(
            version=machine_pb2.VersionInfo(
                tag=node.talos_version, sha="emulated", built="", go_version="go1.25.4", os="linux", arch="amd64",
            ),
            platform=machine_pb2.PlatformInfo(name=node.platform, mode=node.platform_mode),
        )
        if not node.maintenance:
            version.features.rbac = True
        await stream.send_message(machine_pb2.VersionResponse(messages=[version]))

    async def Hostname(self, stream):
        await stream.recv_message()
        await stream.send_message(machine_pb2.HostnameResponse(messages=[machine_pb2.Hostname(hostname=self.node.hostname)]))

    # Bootstrap.

    async def Bootstrap(self, stream):
        request = await stream.recv_message()
        node = self.node
        call = current_call()
        call.audit.update(recover_etcd=request.recover_etcd)
        cri = node.services.get("cri")
        if cri is None or not (cri.running and cri.healthy) or node.stage != "running":
            raise GRPCError(Status.FAILED_PRECONDITION, "bootstrap is not available yet")
        require_machine_type(node, "bootstrap")
        if not node.is_control_plane:
            if older_than(node.talos_version, "v1.13.0"):
                raise GRPCError(Status.FAILED_PRECONDITION, "bootstrap can only be performed on a control plane node")
            raise GRPCError(Status.UNIMPLEMENTED, "bootstrap is only available on control plane nodes")
        if not node.has_etcd_ca and not older_than(node.talos_version, "v1.13.0"):
            raise GRPCError(Status.INVALID_ARGUMENT, "etcd is not configured, bootstrap is not possible")
        if not node.time_synced:
            raise GRPCError(Status.FAILED_PRECONDITION, "time is not in sync yet")
        if node.etcd_data:
            raise GRPCError(Status.ALREADY_EXISTS, "etcd data directory is not empty")
        node.cluster.bootstrap_etcd(node, recover=request.recover_etcd, skip_hash_check=request.recover_skip_hash_check)
        await stream.send_message(machine_pb2.BootstrapResponse(messages=[machine_pb2.Bootstrap()]))

    # Power and upgrade.

    async def Reboot(self, stream):
        request = await stream.recv_message()
        call = current_call()
        mode = machine_pb2.RebootRequest.Mode
        call.audit.update(mode=mode.Name(request.mode))
        # FORCE (Talos v1.12+) skips the graceful stop; older releases do not know it and reboot as DEFAULT.
        graceful = request.mode != mode.FORCE or older_than(self.node.talos_version, "v1.12.0")
        actor_id = new_actor_id()
        self.node.run_sequence("reboot", self.node.reboot(actor_id, graceful=graceful), actor_id)
        await stream.send_message(machine_pb2.RebootResponse(messages=[machine_pb2.Reboot(actor_id=actor_id)]))

    async def Shutdown(self, stream):
        request = await stream.recv_message()
        current_call().audit.update(force=request.force)
        actor_id = new_actor_id()
        self.node.run_sequence("shutdown", self.node.shutdown(actor_id), actor_id)
        await stream.send_message(machine_pb2.ShutdownResponse(messages=[machine_pb2.Shutdown(actor_id=actor_id)]))

    async def Reset(self, stream):
        request = await stream.recv_message()
        node = self.node
        wipe_mode = machine_pb2.ResetRequest.WipeMode
        current_call().audit.update(
            graceful=request.graceful, reboot=request.reboot, mode=wipe_mode.Name(request.mode),
            system_partitions_to_wipe=[spec.label for spec in request.system_partitions_to_wipe],
            user_disks_to_wipe=list(request.user_disks_to_wipe),
        )
        if request.mode == wipe_mode.SYSTEM_DISK and request.user_disks_to_wipe:
            raise GRPCError(Status.UNKNOWN, "reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
        if request.mode == wipe_mode.USER_DISKS and request.system_partitions_to_wipe:
            raise GRPCError(Status.UNKNOWN, "reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
        refusal = volumes.reset_refusal(node, [spec.label for spec in request.system_partitions_to_wipe if spec.wipe])
        if refusal is not None:
            raise GRPCError(Status.UNKNOWN, refusal)
        for device in request.user_disks_to_wipe:
            if device == SYSTEM_DISK:
                raise GRPCError(Status.UNKNOWN, "reset user disk failed: device %s is the system disk" % device)
            if device not in USER_DISKS:
                raise GRPCError(Status.UNKNOWN, "reset user disk failed: device %s wasn't found" % device)
        labels = {spec.label for spec in request.system_partitions_to_wipe if spec.wipe}
        if request.mode == wipe_mode.USER_DISKS:
            wiped = set()
        elif request.system_partitions_to_wipe:
            wiped = labels
        else:
            wiped = set(_SYSTEM_VOLUMES)
        actor_id = new_actor_id()
        node.run_sequence(
            "reset", node.reset(actor_id, graceful=request.graceful, reboot=request.reboot, wiped_volumes=wiped), actor_id,
        )
        await stream.send_message(machine_pb2.ResetResponse(messages=[machine_pb2.Reset(actor_id=actor_id)]))

    async def Rollback(self, stream):
        await stream.recv_message()
        node = self.node
        # The bootloader is switched before the reply; the reboot follows in the background.
        if not node.roll_back():
            raise GRPCError(Status.UNKNOWN, 'cannot rollback to "B", label does not exist')
        node.run_sequence("reboot", node.reboot(sequence="reboot"))
        await stream.send_message(machine_pb2.RollbackResponse(messages=[machine_pb2.Rollback()]))

    async def Upgrade(self, stream):
        request = await stream.recv_message()
        node = self.node
        cluster = node.cluster
        current_call().audit.update(image=request.image, stage=request.stage, force=request.force, preserve=request.preserve)
        if not node.installed:
            raise GRPCError(Status.FAILED_PRECONDITION, "Talos is not installed")
        if not cluster.registry_has(request.image):
            raise GRPCError(Status.UNKNOWN, 'error validating installer image "%s": failed to pull image: not found' % request.image)
        skip_etcd_checks = request.force or (request.preserve and not older_than(node.talos_version, "v1.14.0"))
        if node.is_control_plane and not skip_etcd_checks:
            cluster.validate_etcd_for_upgrade(node)
        actor_id = new_actor_id()
        node.run_sequence("upgrade", node.legacy_upgrade(request.image, actor_id), actor_id)
        reply = machine_pb2.Upgrade(ack="Upgrade request received", actor_id=actor_id)
        await stream.send_message(machine_pb2.UpgradeResponse(messages=[reply]))

    # Kubernetes access.

    async def Kubeconfig(self, stream):
        await stream.recv_message()
        node = self.node
        require_machine_type(node, "kubeconfig")
        if not node.is_control_plane:
            raise GRPCError(Status.UNIMPLEMENTED, "kubeconfig is only available on control plane nodes")
        kubernetes = configgen.kubernetes_settings(node.config_bytes)
        if not kubernetes["ca_crt"] or not kubernetes["ca_key"]:
            raise GRPCError(Status.FAILED_PRECONDITION, "failed to generate kubeconfig: Kubernetes API server CA is not available")
        await stream.send_message(common_pb2.Data(bytes=_kubeconfig_archive(node, kubernetes)))

    # Events.

    async def Events(self, stream):
        request = await stream.recv_message()
        log = self.node.events
        queue = log.subscribe()
        try:
            # An empty event first tells the client the subscription is established.
            await stream.send_message(machine_pb2.Event())
            for event in log.history(request.tail_events, request.tail_id, request.tail_seconds):
                if not request.with_actor_id or event.actor_id == request.with_actor_id:
                    await stream.send_message(event)
            while True:
                event = await queue.get()
                if not request.with_actor_id or event.actor_id == request.with_actor_id:
                    await stream.send_message(event)
        finally:
            log.unsubscribe(queue)

    # Services.

    async def ServiceList(self, stream):
        await stream.recv_message()
        services = [service.info() for service in self.node.services.values()]
        await stream.send_message(machine_pb2.ServiceListResponse(messages=[machine_pb2.ServiceList(services=services)]))

    def _controllable(self, service_id, operation):
        current_call().audit.update(service=service_id)
        if service_id not in self.node.services:
            raise GRPCError(Status.UNKNOWN, 'service "%s" not defined' % service_id)
        allowed = service_id.startswith("ext-") or (service_id == "kubelet" and operation in ("start", "restart"))
        if not allowed:
            raise GRPCError(Status.UNKNOWN, 'service "%s" doesn\'t support %s operation via API' % (service_id, operation))
        return self.node.services[service_id]

    async def ServiceStart(self, stream):
        request = await stream.recv_message()
        service = self._controllable(request.id, "start")
        if not service.running:
            self.node.set_service(request.id, "Running", "Service started via API")
        reply = machine_pb2.ServiceStart(resp='Service "%s" started' % request.id)
        await stream.send_message(machine_pb2.ServiceStartResponse(messages=[reply]))

    async def ServiceStop(self, stream):
        request = await stream.recv_message()
        service = self._controllable(request.id, "stop")
        if service.state not in ("Finished", "Skipped"):
            self.node.set_service(request.id, "Finished", "Service finished successfully")
        reply = machine_pb2.ServiceStop(resp='Service "%s" stopped' % request.id)
        await stream.send_message(machine_pb2.ServiceStopResponse(messages=[reply]))

    async def ServiceRestart(self, stream):
        request = await stream.recv_message()
        self._controllable(request.id, "restart")
        self.node.set_service(request.id, "Finished", "Service finished successfully")
        await asyncio.sleep(0)
        self.node.set_service(request.id, "Running", "Service restarted via API")
        reply = machine_pb2.ServiceRestart(resp='Service "%s" restarted' % request.id)
        await stream.send_message(machine_pb2.ServiceRestartResponse(messages=[reply]))

    # Statistics (values as /proc reports them: memory in kB, CPU times in seconds).

    async def Memory(self, stream):
        await stream.recv_message()
        meminfo = machine_pb2.MemInfo(
            memtotal=MEMTOTAL_KIB, memfree=5210344, memavailable=7012456, buffers=62300, cached=1873220,
            swapcached=0, active=1321048, inactive=1201880, swaptotal=0, swapfree=0, hugepagesize=2048,
        )
        await stream.send_message(machine_pb2.MemoryResponse(messages=[machine_pb2.Memory(meminfo=meminfo)]))

    async def LoadAvg(self, stream):
        await stream.recv_message()
        await stream.send_message(machine_pb2.LoadAvgResponse(messages=[machine_pb2.LoadAvg(load1=0.12, load5=0.2, load15=0.18)]))

    async def SystemStat(self, stream):
        await stream.recv_message()
        cpus = [machine_pb2.CPUStat(user=120.5, system=40.25, idle=3600.0, iowait=1.5) for _cpu in range(2)]
        total = machine_pb2.CPUStat(user=241.0, system=80.5, idle=7200.0, iowait=3.0)
        stat = machine_pb2.SystemStat(
            boot_time=int(self.node.booted_at), cpu_total=total, cpu=cpus, context_switches=1203344,
            process_created=5321, process_running=2, process_blocked=0,
        )
        await stream.send_message(machine_pb2.SystemStatResponse(messages=[stat]))

    async def CPUInfo(self, stream):
        await stream.recv_message()
        cpus = [
            machine_pb2.CPUInfo(
                processor=index, vendor_id="GenuineIntel", cpu_family="6", model="85", model_name="Intel Xeon Processor (Cascadelake)",
                cpu_mhz=2793.438, cache_size="16384 KB", siblings=2, core_id=str(index), cpu_cores=2, flags=["fpu", "vme", "sse2"],
                bogo_mips=5586.87, address_sizes="46 bits physical, 48 bits virtual",
            )
            for index in range(2)
        ]
        await stream.send_message(machine_pb2.CPUInfoResponse(messages=[machine_pb2.CPUsInfo(cpu_info=cpus)]))

    async def Mounts(self, stream):
        await stream.recv_message()
        stats = [machine_pb2.MountStat(filesystem=device, size=size, available=size - used, mounted_on=target)
                 for device, target, size, used in volumes.mounts(self.node)]
        await stream.send_message(machine_pb2.MountsResponse(messages=[machine_pb2.Mounts(stats=stats)]))


def _kubeconfig_archive(node, kubernetes):
    """A fresh admin kubeconfig as Talos sends it: a gzip'd tar holding one file ``kubeconfig`` (0600)."""
    document = admin_kubeconfig(kubernetes, "https://%s:6443" % node.address)
    content = yaml.safe_dump(document, sort_keys=False).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as compressed:
        with tarfile.open(fileobj=compressed, mode="w") as archive:
            info = tarfile.TarInfo("kubeconfig")
            info.size = len(content)
            info.mode = 0o600
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
