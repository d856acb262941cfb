# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One emulated Talos node: its state and its life cycle (boot, reboot, power).

Every method that changes state runs on the cluster's event loop; tests read
attributes from their own thread and change state through ``EmulatedCluster``.
"""

import asyncio
import time
import uuid

import yaml
from google.protobuf import timestamp_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from . import configgen, pki
from .events import EventLog
from .server import NodeServer
from .versions import image_tag

MACHINE_STAGE = machine_pb2.MachineStatusEvent.MachineStage
SERVICE_ACTION = machine_pb2.ServiceStateEvent.Action

# Services with a health check report healthy/unhealthy; the others report unknown health.
_HEALTH_CHECKED = frozenset(["apid", "containerd", "cri", "etcd", "kubelet", "trustd"])
_MAINTENANCE_SERVICES = ("apid", "auditd", "containerd", "dashboard", "machined", "syslogd", "udevd")
_NODE_SERVICES = _MAINTENANCE_SERVICES + ("cri", "kubelet")
_CONTROL_PLANE_SERVICES = ("etcd", "trustd")


def _timestamp(seconds):
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


class ServiceState:
    """A system service as machined's service runner tracks it."""

    def __init__(self, service_id, state="Running", healthy=None, message="Service started as goroutine"):
        self.id = service_id
        self.events = []
        self.healthy = None
        self.last_message = ""
        self.last_change = time.time()
        self.set(state, message, healthy)

    @property
    def state(self):
        return self.events[-1][1]

    @property
    def running(self):
        return self.state == "Running"

    def set(self, state, message, healthy=None):
        self.events.append((message, state, time.time()))
        del self.events[:-64]
        if self.id in _HEALTH_CHECKED:
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
    def __init__(self, cluster, name, address, port, role, talos_version, config_bytes=None):
        self.cluster = cluster
        self.name = name
        self.address = address
        self.port = port
        self.role = role
        self.talos_version = talos_version
        self.installed_version = talos_version
        self.installed = config_bytes is not None
        self.config_bytes = None
        self.config = None
        self.persistent_config_bytes = None
        self.staged_config_bytes = None
        if config_bytes is not None:
            self._set_active_config(config_bytes)
            self.persistent_config_bytes = config_bytes
        self.boot_id = None
        self.booted_at = None
        self.stage = "booting"
        self.services = {}
        self.extension_services = []
        self.etcd_data = False
        self.etcd_snapshot = None
        self.images = {}
        self.events = EventLog()
        self.time_synced = True
        self.apply_in_progress = False
        self.install_in_progress = False
        self.try_rollback = None
        self.reachable = False
        self.powered = False
        self.reboots = 0
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
        configured = ((self.config or {}).get("machine", {}).get("network") or {}).get("hostname")
        return configured or self.name

    @property
    def cluster_name(self):
        return ((self.config or {}).get("cluster") or {}).get("clusterName", "")

    @property
    def cert_sans(self):
        return list((self.config or {}).get("machine", {}).get("certSANs") or [])

    @property
    def has_etcd_ca(self):
        return bool((((self.config or {}).get("cluster") or {}).get("etcd") or {}).get("ca"))

    def _set_active_config(self, config_bytes):
        self.config_bytes = config_bytes
        self.config = configgen.parse_machine_config(config_bytes)

    def apply_active_config(self, config_bytes):
        """Make ``config_bytes`` the running config (NO_REBOOT, TRY)."""
        self._set_active_config(config_bytes)

    def config_text(self):
        return self.config_bytes.decode() if self.config_bytes else ""

    # TLS material for the API server.

    def server_tls_material(self):
        """``(ca_crt_pem, crt_pem, key_pem, client_ca_pem or None)`` for this boot."""
        ips = [self.address, "127.0.0.1"]
        names = [self.hostname]
        for san in self.cert_sans:
            (ips if _is_ip(san) else names).append(san)
        if self.maintenance:
            ca_crt, crt, key = pki.maintenance_certificate([self.address], [self.hostname])
            return ca_crt, crt, key, None
        crt_pem, key_pem = configgen.machine_os_ca(self.config)
        authority = self.cluster.issuing_authority(crt_pem, key_pem)
        server_crt, server_key = authority.issue_server(self.hostname, ip_addresses=ips, dns_names=names)
        return crt_pem, server_crt, server_key, crt_pem

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

    @property
    def machine_stage(self):
        return self.stage

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
        if self.staged_config_bytes is not None:
            self.persistent_config_bytes = self.staged_config_bytes
            self.staged_config_bytes = None
        if self.persistent_config_bytes is not None:
            self._set_active_config(self.persistent_config_bytes)
        else:
            self.config = None
            self.config_bytes = None
        self.talos_version = self.installed_version
        self._emit_stage("booting", False)
        self._build_services()
        if self.is_control_plane and self.cluster.etcd.bootstrapped:
            self.join_etcd()
        if not self._held_unreachable:
            await self.server.start()
            self.reachable = True
        self._emit_stage("maintenance" if self.maintenance else "running", True)

    async def power_off(self):
        self.reachable = False
        self.powered = False
        self._cancel_try_rollback()
        await self.server.stop()

    def schedule(self, coroutine):
        return self.cluster.spawn(coroutine)

    async def reboot(self, actor_id="", sequence="reboot", stage="rebooting"):
        """The reboot sequence: announce, go away for ``reboot_seconds``, come back with a new boot ID."""
        self.events.emit(machine_pb2.SequenceEvent(sequence=sequence, action=machine_pb2.SequenceEvent.START), actor_id=actor_id)
        self._emit_stage(stage, False, actor_id)
        self._stop_all_services(actor_id)
        # Let the reply that triggered the reboot reach the caller first.
        await asyncio.sleep(0.05)
        await self.power_off()
        await asyncio.sleep(self.cluster.reboot_seconds)
        self.reboots += 1
        await self.boot()

    async def shutdown(self, actor_id=""):
        self.events.emit(machine_pb2.SequenceEvent(sequence="shutdown", action=machine_pb2.SequenceEvent.START), actor_id=actor_id)
        self._emit_stage("shutting down", False, actor_id)
        self._stop_all_services(actor_id)
        await asyncio.sleep(0.05)
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
        return self.schedule(self.reboot(stage="installing"))

    def start_try_rollback(self, seconds):
        self._cancel_try_rollback()
        self.try_rollback = self.cluster.loop.call_later(seconds, self._rollback_try)

    def cancel_try_rollback(self):
        self._cancel_try_rollback()

    def _cancel_try_rollback(self):
        if self.try_rollback is not None:
            self.try_rollback.cancel()
            self.try_rollback = None

    def _rollback_try(self):
        self.try_rollback = None
        if self.persistent_config_bytes is not None:
            self._set_active_config(self.persistent_config_bytes)

    def install_version(self, image_ref):
        """What an installer run leaves on disk: the version named by the image tag, active after reboot."""
        self.installed_version = image_tag(image_ref) or self.installed_version

    # etcd.

    def join_etcd(self):
        self.cluster.etcd.join(self)
        self.etcd_data = True
        if "etcd" in self.services:
            self.set_service("etcd", "Running", "Health check successful", healthy=True)

    def leave_etcd(self):
        member = self.cluster.etcd.member_of(self)
        if member is not None:
            self.cluster.etcd.remove(member)
        self.etcd_data = False
        if "etcd" in self.services:
            self.set_service("etcd", "Finished", "Service finished successfully")

    # COSI views.

    def config_document(self):
        return yaml.safe_load(self.config_text()) if self.config_bytes else None


def _is_ip(value):
    import ipaddress
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
