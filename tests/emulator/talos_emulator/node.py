# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One emulated Talos node: its state and its life cycle (boot, reboot, power).

Every method that changes state runs on the cluster's event loop; tests read
attributes from their own thread and change state through ``EmulatedCluster``.
"""

import asyncio
import ipaddress
import os
import time
import uuid

from google.protobuf import timestamp_pb2
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from . import configgen, pki
from .events import EventLog
from .image_factory import factory_schematic
from .kubernetes import NodeKubernetes
from .routing import Machined
from .runners import HEALTH_CHECKED, started_message
from .server import NodeServer
from .services.image import pull_boot_images
from .versions import image_tag

MACHINE_STAGE = machine_pb2.MachineStatusEvent.MachineStage
SERVICE_ACTION = machine_pb2.ServiceStateEvent.Action

_MAINTENANCE_SERVICES = ("apid", "auditd", "containerd", "dashboard", "machined", "syslogd", "udevd")
_NODE_SERVICES = _MAINTENANCE_SERVICES + ("cri", "kubelet")
_CONTROL_PLANE_SERVICES = ("etcd", "trustd")
_GOING_DOWN_SECONDS = 0.1
_IDENTITY_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _timestamp(seconds):
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


class ServiceState:
    """A system service as machined's service runner tracks it."""

    def __init__(self, service_id, state="Running", healthy=None, message=None):
        self.id = service_id
        self.events = []
        self.healthy = None
        self.last_message = ""
        self.last_change = time.time()
        if state == "Running" and message is None:
            # A service started at boot: its pre state, its runner, then (with a health check) the first check.
            self.events = [("Running pre state", "Preparing", self.last_change), ("Creating service runner", "Preparing", self.last_change)]
            self.set("Running", started_message(service_id), healthy)
            if service_id in HEALTH_CHECKED:
                self.set("Running", "Health check successful", healthy)
        else:
            self.set(state, message or "", healthy)

    @property
    def state(self):
        return self.events[-1][1]

    @property
    def running(self):
        return self.state == "Running"

    def set(self, state, message, healthy=None):
        self.events.append((message, state, time.time()))
        del self.events[:-64]
        if self.id in HEALTH_CHECKED:
            healthy = healthy if healthy is not None else state == "Running"
            if healthy != self.healthy:
                self.last_change = time.time()
            self.healthy = healthy
            self.last_message = "" if healthy else ("service is %s" % state.lower())

    def info(self):
        health = machine_pb2.ServiceHealth(unknown=self.healthy is None)
        if self.healthy is not None:
            health.healthy = self.healthy
            health.last_message = self.last_message
            health.last_change.CopyFrom(_timestamp(self.last_change))
        events = [machine_pb2.ServiceEvent(msg=msg, state=state, ts=_timestamp(stamp)) for msg, state, stamp in self.events]
        return machine_pb2.ServiceInfo(id=self.id, state=self.state, events=machine_pb2.ServiceEvents(events=events), health=health)


class EmulatedNode:
    def __init__(self, cluster, name, address, port, role, talos_version):
        self.cluster = cluster
        self.name = name
        self.address = address
        # Other addresses the node has (a second interface, a NAT address): apid reaches it there too, Kubernetes
        # does not report them (``ClusterModel.add_address``).
        self.extra_addresses = []
        self.port = port
        self.role = role
        # A node's discovery identity: random, stable for the node's life.
        self.identity = "".join(_IDENTITY_ALPHABET[byte % len(_IDENTITY_ALPHABET)] for byte in os.urandom(43))
        self.talos_version = talos_version
        self.installed_version = talos_version
        # The other boot slot: the installation an upgrade replaced, which Rollback returns to.
        self.previous_version = None
        self.installed = False
        self.config_bytes = None
        self.config = None
        self.configured_hostname = None
        self.persistent_config_bytes = None
        self.boot_id = None
        self.booted_at = None
        self.stage = "booting"
        self.services = {}
        self.extension_services = []
        # Diagnostics.runtime.talos.dev: id -> {"message", "details"}; extra COSI labels: (type, id) -> {key: value}.
        self.diagnostics = {}
        self.resource_labels = {}
        self.etcd_data = False
        self.etcd_snapshot = None
        # containerd namespace (NS_SYSTEM, NS_CRI) -> {image name: ImageRecord} (services/image.py).
        self.images = {}
        # The kubelet and static pods its config asks for (kubernetes.py).
        self.kubernetes = NodeKubernetes(self)
        # COSI (type, id) -> (yaml_spec, version, created): versions grow with every change (services/cosi.py).
        self.resource_versions = {}
        # What the node was built from, as Version, SecurityState and ExtensionStatuses report it.
        self.platform = "metal"
        self.secure_boot = False
        # System extensions: {"name", "version", "author", "description"}; an Image Factory build adds
        # its schematic as the virtual extension "schematic" (see image_factory.py).
        self.extensions = []
        self.schematic_id = None
        self.factory_url = None
        # (version, schematic id, factory URL, extensions) written by the last installer run, taken at the next boot.
        self.installed_build = None
        self.events = EventLog()
        self.time_synced = True
        self.apply_in_progress = False
        self.install_in_progress = False
        self.try_rollback = None
        self.reachable = False
        self.powered = False
        self.reboots = 0
        # Files a test put on the node (place_file), served beside those the node's state makes (services/files.py).
        self.placed_files = {}
        self.sequence = None
        self.machined = Machined(self)
        self.server = NodeServer(self)
        self._held_unreachable = False

    # Identity and configuration.

    @property
    def endpoint(self):
        return "%s:%d" % (self.address, self.port)

    @property
    def maintenance(self):
        return self.config is None

    @property
    def machine_type(self):
        """``controlplane``, ``worker`` or None in maintenance mode."""
        if self.config is None:
            return None
        kind = self.config["machine"].get("type")
        return {"init": "controlplane", "join": "worker"}.get(kind, kind)

    @property
    def is_control_plane(self):
        return self.machine_type == "controlplane"

    @property
    def hostname(self):
        return (self.configured_hostname if self.config is not None else None) or self.name

    @property
    def cert_sans(self):
        return list((self.config or {}).get("machine", {}).get("certSANs") or [])

    @property
    def has_etcd_ca(self):
        return bool((((self.config or {}).get("cluster") or {}).get("etcd") or {}).get("ca"))

    @property
    def staged_config_bytes(self):
        """The config written to disk but not running yet (STAGED apply), or None."""
        if self.persistent_config_bytes is not None and self.persistent_config_bytes != self.config_bytes:
            return self.persistent_config_bytes
        return None

    def load_installed_config(self, config_bytes):
        """Start as an installed, configured node (before the first boot)."""
        self.installed = True
        self.persistent_config_bytes = config_bytes

    def apply_active_config(self, config_bytes):
        """Make ``config_bytes`` the running config (NO_REBOOT, TRY, boot)."""
        self.config = configgen.parse_machine_config(config_bytes, self.talos_version)
        self.config_bytes = config_bytes
        self.configured_hostname = configgen.configured_hostname(config_bytes)
        self.kubernetes.config_applied()

    def config_text(self):
        return self.config_bytes.decode() if self.config_bytes else ""

    # Files a test places on the node (services/files.py serves them with the node's own file tree).

    def place_file(self, path, content=b"", size=None, mode=0o644, link=None):
        """Put a regular file at ``path`` (or a symlink to ``link``); parent directories appear as needed.

        ``size`` without ``content`` makes a file of that many generated bytes, produced only while it is read,
        so a test can fetch a file far larger than it wants to hold in memory.
        """
        if not path.startswith("/") or path.endswith("/"):
            raise ValueError("a placed file needs an absolute file path, got %r" % (path,))
        if size is not None and content:
            raise ValueError("a placed file takes content or a size, not both")
        self.placed_files[path] = {"content": content if size is None else None, "size": len(content) if size is None else size,
                                   "mode": mode, "link": link, "modified": time.time()}

    def remove_file(self, path):
        self.placed_files.pop(path, None)

    # TLS material for the API server.

    def server_tls_material(self):
        """``(ca_crt_pem, crt_pem, key_pem, client_ca_pem or None)`` for this boot."""
        ips, names = self.api_certificate_sans()
        if self.maintenance:
            ca_crt, crt, key = pki.maintenance_certificate([self.address], [self.hostname])
            return ca_crt, crt, key, None
        crt_pem, key_pem = configgen.machine_os_ca(self.config)
        authority = self.cluster.issuing_authority(crt_pem, key_pem)
        server_crt, server_key = authority.issue_server(self.hostname, ip_addresses=ips, dns_names=names)
        return crt_pem, server_crt, server_key, pki.accepted_client_cas(self.config)

    def api_certificate_sans(self):
        """``(IP addresses, DNS names)`` of apid's certificate: the node's address, 127.0.0.1 and its hostname, then
        the config's ``machine.certSANs``."""
        ips, names = [self.address, "127.0.0.1"], [self.hostname]
        for san in self.cert_sans:
            (ips if _is_ip(san) else names).append(san)
        return ips, names

    def server_tls_inputs(self):
        """What apid's certificates are made from: when it changes, Talos issues new ones (no reboot)."""
        if self.maintenance:
            return None
        machine = self.config.get("machine") or {}
        return (machine.get("ca"), pki.accepted_client_cas(self.config), self.hostname, tuple(self.cert_sans))

    # Services.

    def _build_services(self):
        if self.maintenance:
            ids = _MAINTENANCE_SERVICES
        else:
            ids = _NODE_SERVICES + (_CONTROL_PLANE_SERVICES if self.is_control_plane else ())
        services = {service_id: ServiceState(service_id) for service_id in ids}
        if "etcd" in services and not self.etcd_data:
            services["etcd"] = ServiceState("etcd", "Preparing", message="Running pre state")
        for service_id in self.extension_services:
            services[service_id] = ServiceState(service_id)
        self.services = dict(sorted(services.items()))
        # Each service's start shows on the Events stream, as machined publishes every state change.
        for service in self.services.values():
            for message, state, _stamp in service.events:
                self.events.emit(machine_pb2.ServiceStateEvent(
                    service=service.id, action=SERVICE_ACTION.Value(state.upper()), message=message, health=service.info().health,
                ))

    def set_service(self, service_id, state, message, healthy=None):
        service = self.services[service_id]
        service.set(state, message, healthy)
        self.events.emit(machine_pb2.ServiceStateEvent(
            service=service_id, action=SERVICE_ACTION.Value(state.upper()), message=message,
            health=service.info().health,
        ))

    def add_extension_service(self, service_id):
        if not service_id.startswith("ext-"):
            raise ValueError("extension service ids start with 'ext-'")
        self.extension_services.append(service_id)
        self.services[service_id] = ServiceState(service_id)

    # Life cycle.

    def _emit_stage(self, stage, ready, actor_id=""):
        self.stage = stage
        status = machine_pb2.MachineStatusEvent.MachineStatus(ready=ready)
        self.events.emit(
            machine_pb2.MachineStatusEvent(stage=MACHINE_STAGE.Value(stage.upper().replace(" ", "_")), status=status),
            actor_id=actor_id,
        )

    async def boot(self):
        """Power on: a new boot ID, staged config and installed version take effect, API served."""
        self.events = EventLog()
        self.boot_id = str(uuid.uuid4())
        self.booted_at = time.time()
        self.powered = True
        if self.persistent_config_bytes is not None:
            self.apply_active_config(self.persistent_config_bytes)
        else:
            self.config = None
            self.config_bytes = None
        if self.installed_version != self.talos_version and self.cluster.faults.boot_rolls_back(self):
            self.installed_version, self.previous_version = self.talos_version, self.installed_version
        self.talos_version = self.installed_version
        if self.installed_build is not None and self.installed_build[0] == self.talos_version:
            self.schematic_id, self.factory_url, self.extensions = self.installed_build[1:]
        self.installed_build = None
        self._emit_stage("booting", False)
        self._build_services()
        pull_boot_images(self)
        if self.is_control_plane and self.cluster.etcd.bootstrapped:
            self._start_etcd()
        if not self.maintenance and not self.is_control_plane:
            await self.cluster.wait_for_authority(configgen.machine_os_ca(self.config)[0])
        if not self._held_unreachable:
            await self.server.start()
            self.reachable = True
        self._emit_stage("maintenance" if self.maintenance else "running", True)

    async def power_off(self):
        self.reachable = False
        self.powered = False
        self.cancel_try_rollback()
        await self.server.stop()
        self.machined.drop_calls()
        await self.cluster.etcd.stop_member(self)

    def run_sequence(self, name, coroutine, actor_id=""):
        """Run a machined sequence (reboot, reset, shutdown, upgrade, install) in the background.

        One sequence at a time: a second one is not started, which shows only as
        a SequenceEvent error on the Events stream, as on Talos.
        """
        if self.sequence is not None:
            coroutine.close()
            self.events.emit(machine_pb2.SequenceEvent(
                sequence=name, action=machine_pb2.SequenceEvent.NOOP,
                error=common_pb2.Error(code=common_pb2.LOCKED, message="sequence not started: %s sequence is running" % self.sequence),
            ), actor_id=actor_id)
            return None
        self.sequence = name

        async def run():
            try:
                await coroutine
            finally:
                self.sequence = None
        return self.cluster.spawn(run())

    async def reboot(self, actor_id="", sequence="reboot", stage="rebooting", graceful=True):
        """The reboot sequence: announce, go away for ``reboot_seconds``, come back with a new boot ID.

        ``graceful=False`` (Reboot mode FORCE) skips stopping the services.
        """
        self.events.emit(machine_pb2.SequenceEvent(sequence=sequence, action=machine_pb2.SequenceEvent.START), actor_id=actor_id)
        self._emit_stage(stage, False, actor_id)
        if graceful:
            self._stop_all_services(actor_id)
        # Let the reply that triggered the reboot, and watchers, see the node going down first.
        await asyncio.sleep(_GOING_DOWN_SECONDS)
        await self.power_off()
        await asyncio.sleep(self.cluster.reboot_seconds)
        self.reboots += 1
        await self.boot()

    async def legacy_upgrade(self, image_ref, actor_id):
        """MachineService/Upgrade: run the installer, then reboot into the new version."""
        if self.is_control_plane:
            self.cluster.upgrade_lock = self
        try:
            self.install_version(image_ref)
            await self.reboot(actor_id, sequence="upgrade", stage="upgrading")
        finally:
            if self.cluster.upgrade_lock is self:
                self.cluster.upgrade_lock = None

    async def reset(self, actor_id, graceful, reboot, wiped_volumes):
        """The reset sequence: leave etcd when graceful, wipe the volumes, then reboot or power off."""
        self.events.emit(machine_pb2.SequenceEvent(sequence="reset", action=machine_pb2.SequenceEvent.START), actor_id=actor_id)
        etcd = self.cluster.etcd
        if graceful and self.is_control_plane and etcd.member_of(self) is not None:
            try:
                await etcd.leave(self)
            except GRPCError as error:
                self.events.emit(machine_pb2.SequenceEvent(
                    sequence="reset", action=machine_pb2.SequenceEvent.STOP,
                    error=common_pb2.Error(code=common_pb2.FATAL, message=error.message),
                ), actor_id=actor_id)
                return
        self._emit_stage("resetting", False, actor_id)
        self._stop_all_services(actor_id)
        if "EPHEMERAL" in wiped_volumes:
            # etcd stops before its data is wiped: a member still starting never comes up on data that is gone.
            await self.cluster.etcd.stop_member(self)
            self.etcd_data = False
            self.images = {}
        if "STATE" in wiped_volumes:
            self.persistent_config_bytes = None
        if set(wiped_volumes) >= {"EFI", "BOOT", "META", "STATE", "EPHEMERAL"}:
            self.installed = False
        await asyncio.sleep(_GOING_DOWN_SECONDS)
        await self.power_off()
        if reboot:
            await asyncio.sleep(self.cluster.reboot_seconds)
            self.reboots += 1
            await self.boot()

    async def shutdown(self, actor_id=""):
        self.events.emit(machine_pb2.SequenceEvent(sequence="shutdown", action=machine_pb2.SequenceEvent.START), actor_id=actor_id)
        self._emit_stage("shutting down", False, actor_id)
        self._stop_all_services(actor_id)
        await asyncio.sleep(_GOING_DOWN_SECONDS)
        await self.power_off()

    def _stop_all_services(self, actor_id):
        self.events.emit(machine_pb2.TaskEvent(task="stopAllServices", action=machine_pb2.TaskEvent.START), actor_id=actor_id)
        self.events.emit(machine_pb2.TaskEvent(task="stopAllServices", action=machine_pb2.TaskEvent.STOP), actor_id=actor_id)

    async def set_unreachable(self):
        self._held_unreachable = True
        self.reachable = False
        await self.server.stop()

    async def set_reachable(self):
        self._held_unreachable = False
        if self.powered and not self.reachable:
            await self.server.start()
            self.reachable = True

    # Configuration changes that outlive the call.

    def install(self, config_bytes):
        """Maintenance apply: install Talos with this config, then reboot into it."""
        self.persistent_config_bytes = config_bytes
        self.installed = True
        return self.run_sequence("install", self.reboot(sequence="install", stage="installing"))

    def start_try_rollback(self, seconds):
        self.cancel_try_rollback()
        self.try_rollback = asyncio.get_running_loop().call_later(seconds, self._rollback_try)

    def cancel_try_rollback(self):
        if self.try_rollback is not None:
            self.try_rollback.cancel()
            self.try_rollback = None

    def _rollback_try(self):
        self.try_rollback = None
        if self.persistent_config_bytes is not None:
            self.apply_active_config(self.persistent_config_bytes)

    def install_version(self, image_ref):
        """What an installer run leaves on disk: the version named by the image tag, active after reboot.

        On an installed node the installer writes the other boot slot, so the
        running version stays there as the one Rollback returns to.
        """
        if self.installed:
            self.previous_version = self.talos_version
        self.installed_version = image_tag(image_ref) or self.installed_version
        # An installer carries its extensions: those of the node's schematic only when it is the same schematic.
        schematic = factory_schematic(image_ref)
        if schematic is not None and schematic == self.schematic_id:
            self.installed_build = (self.installed_version, schematic, self.factory_url, self.extensions)
        else:
            factory_url = "https://%s" % image_ref.split("/", 1)[0] if schematic else None
            self.installed_build = (self.installed_version, schematic, factory_url, [])

    @property
    def platform_mode(self):
        """Talos's runtime mode of the platform (Version.platform.mode)."""
        return {"metal": "metal", "container": "container"}.get(self.platform, "cloud")

    def roll_back(self):
        """Make the previous installation the one to boot (the bootloader's other entry); False when there is none."""
        if self.previous_version is None:
            return False
        self.installed_version, self.previous_version = self.previous_version, self.talos_version
        return True

    # etcd.

    @property
    def etcd_running(self):
        etcd = self.services.get("etcd")
        return self.powered and etcd is not None and etcd.running

    def _start_etcd(self):
        """etcd at boot once the cluster exists: rejoin as a member, or join fresh with an empty data directory."""
        if self.cluster.etcd.member_of(self) is not None or not self.etcd_data:
            self.join_etcd()
        else:
            self.set_service("etcd", "Failed", "etcd data directory belongs to a member that was removed", False)

    def join_etcd(self):
        """etcd starts as a member of the cluster; the service runs once the member is ready (``etcd_ready``). A member
        that joins afresh waits, its data directory empty, until the cluster takes it (as Talos's etcd service waits in
        its pre state), so Bootstrap is still allowed meanwhile."""
        self.cluster.etcd.join(self)

    def etcd_ready(self):
        self.etcd_data = True
        if "etcd" in self.services:
            self.set_service("etcd", "Running", started_message("etcd"), healthy=True)
            self.set_service("etcd", "Running", "Health check successful", healthy=True)

    def leave_etcd(self):
        member = self.cluster.etcd.member_of(self)
        if member is not None:
            self.cluster.etcd.remove(member)
        self.etcd_data = False
        if "etcd" in self.services:
            self.set_service("etcd", "Finished", "Service finished successfully")


def _is_ip(value):
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
