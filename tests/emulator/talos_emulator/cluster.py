# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An emulated Talos cluster: nodes on loopback, their shared state, and the files clients need.

In tests the cluster runs its own asyncio loop in a daemon thread
(``EmulatedCluster.start``); ``tests/talos-emulator`` runs the same code as a
background process (``serve``). Every node listens on its own loopback
address (127.0.0.11 onwards, see ``_reserve_addresses``); all nodes of one
cluster share one port, chosen free at start.
"""

import asyncio
import errno
import ipaddress
import json
import os
import signal
import socket
import threading
import time

import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from . import configgen
from .audit import AuditLog
from .faults import Faults
from .membership import EtcdCluster, SnapshotError
from .node import EmulatedNode
from .pki import CertificateAuthority

DEFAULT_TALOS_VERSION = "v1.14.0"
# What ``talos-emulator fault`` may ask of a running cluster: the fault injection API and the cluster's own calls.
_CLUSTER_CALLS = frozenset(["power_on", "power_off", "add_node", "raise_etcd_alarm", "fragment_etcd"])
CONTROL_CALLS = frozenset([
    "make_unreachable", "make_reachable", "set_latency", "fail", "cut_stream", "pause", "fail_installer",
    "mark_image_unavailable", "clear",
]) | _CLUSTER_CALLS
ROLES = {"admin": ("os:admin",), "operator": ("os:operator",), "reader": ("os:reader",)}

# Loopback addresses handed out to the clusters of this process, so that they
# never share one: 127.0.0.11 onwards, in order, skipping .0-.10 and .255 of
# every /24 (127.0.0.1 is localhost, 127.0.1.1 often the machine's host name).
_next_address = [int(ipaddress.IPv4Address("127.0.0.11"))]
_addresses_lock = threading.Lock()
# Room every cluster keeps for add_node beyond the nodes it starts with (and the
# smallest cluster's capacity, 19 nodes, as before).
SPARE_ADDRESSES = 16
MIN_CAPACITY = 19
MAX_NODES = 1000


def _reserve_addresses(count):
    """``count`` loopback addresses nobody else in this process uses."""
    addresses = []
    with _addresses_lock:
        current = _next_address[0]
        while len(addresses) < count:
            if 11 <= current & 0xFF <= 254:
                addresses.append(str(ipaddress.IPv4Address(current)))
            current += 1
        _next_address[0] = current
    return addresses


def _free_port(address):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


class EmulatedCluster:
    def __init__(self, state_dir, controlplanes=1, workers=0, maintenance=False, talos_version=DEFAULT_TALOS_VERSION,
                 reboot_seconds=0.3, name="emulated", node_versions=None):
        if controlplanes < 1:
            raise ValueError("an emulated cluster needs at least one control plane")
        if workers < 0 or controlplanes + workers > MAX_NODES:
            raise ValueError("an emulated cluster has 1 to %d nodes, got %d control planes and %d workers"
                             % (MAX_NODES, controlplanes, workers))
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.name = name
        self.reboot_seconds = reboot_seconds
        self.maintenance = maintenance
        self.talos_version = talos_version
        self.secrets = configgen.SecretsBundle.generate()
        self.etcd = EtcdCluster()
        # A new cluster starts a new audit log, also when a state directory is reused.
        audit_path = os.path.join(self.state_dir, "audit.jsonl")
        open(audit_path, "w").close()
        self.audit_log = AuditLog(audit_path)
        self.faults = Faults(self)
        self.unavailable_images = set()
        self.upgrade_lock = None
        # Every call a node served (reads included): tests wait on it to act while a client is polling.
        self.calls_served = 0
        self.loop = None
        self._thread = None
        self._tasks = set()
        self._authorities = {self.secrets.os_ca.crt_pem: self.secrets.os_ca}
        self._addresses = _reserve_addresses(max(MIN_CAPACITY, controlplanes + workers + SPARE_ADDRESSES))
        self.port = None
        self.nodes = []
        self._nodes_by_address = {}
        for role in ["controlplane"] * controlplanes + ["worker"] * workers:
            self._new_node(role, node_versions)
        self.endpoint = None

    def _new_node(self, role, node_versions=None):
        """A node named after its role (``worker-3``) on the next of the cluster's reserved addresses."""
        if len(self.nodes) >= len(self._addresses):
            raise ValueError("this emulated cluster has room for %d nodes; start it with more" % len(self._addresses))
        name = "%s-%d" % (role, sum(1 for node in self.nodes if node.role == role) + 1)
        address = self._addresses[len(self.nodes)]
        node = EmulatedNode(self, name, address, self.port, role, (node_versions or {}).get(name, self.talos_version))
        self.nodes.append(node)
        self._nodes_by_address[address] = node
        return node

    # Starting and stopping.

    @classmethod
    def start(cls, state_dir, controlplanes=1, workers=0, maintenance=False, talos_version=DEFAULT_TALOS_VERSION,
              reboot_seconds=0.3, bootstrapped=False, name="emulated", node_versions=None):
        """Start a cluster on a private event loop thread and return it once every node answers.

        ``node_versions`` maps node names to the Talos version they run when it
        differs from ``talos_version`` (a cluster in the middle of an upgrade).
        """
        if bootstrapped and maintenance:
            raise ValueError("a cluster in maintenance mode cannot start bootstrapped")
        cluster = cls(state_dir, controlplanes, workers, maintenance, talos_version, reboot_seconds, name, node_versions)
        cluster.loop = asyncio.new_event_loop()
        cluster._thread = threading.Thread(target=cluster.loop.run_forever, name="talos-emulator-%s" % name, daemon=True)
        cluster._thread.start()
        try:
            cluster.run(cluster._boot_all())
            if bootstrapped:
                cluster.bootstrap()
        except BaseException:
            cluster.stop()
            raise
        cluster.write_state_files()
        return cluster

    async def _boot_all(self):
        endpoint = "https://%s:6443" % self.controlplanes[0].address
        for node in self.nodes:
            if not self.maintenance:
                self._install(node)
        for _attempt in range(20):
            self.port = _free_port(self.nodes[0].address)
            for node in self.nodes:
                node.port = self.port
            try:
                for node in self.nodes:
                    await node.boot()
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                for node in self.nodes:
                    await node.power_off()
                continue
            break
        else:
            raise RuntimeError("no free port for the emulated cluster")
        self.endpoint = self.controlplanes[0].endpoint

    def stop(self):
        """Stop every node and the event loop. Safe to call twice."""
        if self.loop is None or not self.loop.is_running():
            return
        try:
            self.run(self._power_off_all(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()

    def _install(self, node):
        """Give a node its own installed config (hostname = node name, certSANs = its address)."""
        endpoint = "https://%s:6443" % self.controlplanes[0].address
        node.load_installed_config(configgen.generate_machine_config(
            self.secrets, node.role, self.name, endpoint, talos_version=node.talos_version,
            hostname=node.name, cert_sans=[node.address],
        ).encode())

    def add_node(self, role="worker"):
        """Boot one more node, installed and configured, into the running cluster; returns it.

        A new control plane joins etcd when the cluster is bootstrapped. The
        state files (inventory, state.json) list it afterwards.
        """
        if role not in ("controlplane", "worker"):
            raise ValueError("role must be controlplane or worker, got %r" % (role,))
        node = self.call(self._new_node, role)
        if not self.maintenance:
            self._install(node)
        self.run(node.boot())
        self.write_state_files()
        return node

    async def _power_off_all(self):
        for task in list(self._tasks):
            task.cancel()
        for node in self.nodes:
            await node.power_off()

    def run(self, coroutine, timeout=30):
        """Run a coroutine on the cluster's loop from another thread and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function, *args, **kwargs):
        """Call a plain function on the cluster's loop (where node state changes) and return its result."""
        async def invoke():
            return function(*args, **kwargs)
        return self.run(invoke())

    def spawn(self, coroutine):
        """Start background work on the loop (reboots, rollbacks) from a handler."""
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def serve_forever(self):
        """Block until SIGTERM or SIGINT, then stop (the ``talos-emulator up`` background process).

        Meanwhile, requests that ``talos-emulator fault`` appends to ``control.jsonl``
        are applied in order and acknowledged in ``control.done``.
        """
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        handled = 0
        while not stopped.wait(0.1):
            handled = self._apply_control_requests(handled)
        self.stop()

    def _apply_control_requests(self, handled):
        path = os.path.join(self.state_dir, "control.jsonl")
        if not os.path.exists(path):
            return handled
        with open(path) as control:
            requests = [json.loads(line) for line in control if line.strip()]
        for request in requests[handled:]:
            try:
                if request["call"] not in CONTROL_CALLS:
                    raise ValueError("unknown control call %r" % request["call"])
                target = self if request["call"] in _CLUSTER_CALLS else self.faults
                getattr(target, request["call"])(*request.get("args", []), **request.get("kwargs", {}))
                outcome = {"ok": True}
            except Exception as error:  # reported to the command line, which exits non-zero
                outcome = {"ok": False, "error": "%s: %s" % (type(error).__name__, error)}
            with open(os.path.join(self.state_dir, "control.done"), "a") as done:
                done.write(json.dumps(outcome) + "\n")
        return len(requests)

    # Nodes.

    @property
    def controlplanes(self):
        return [node for node in self.nodes if node.role == "controlplane"]

    @property
    def workers(self):
        return [node for node in self.nodes if node.role == "worker"]

    def find_node(self, target):
        """The node a target string names (address, hostname or node name), or None."""
        for node in self.nodes:
            if target in (node.address, node.name, node.hostname, node.endpoint):
                return node
        return None

    def node_at(self, address):
        """The node listening on ``address``, or None."""
        return self._nodes_by_address.get(address)

    def node(self, node):
        """A node given as an EmulatedNode, its name or its address."""
        if isinstance(node, EmulatedNode):
            return node
        found = self.find_node(node)
        if found is None:
            raise KeyError("no emulated node %r" % (node,))
        return found

    def wait_until(self, predicate, timeout=10, interval=0.02):
        """Poll ``predicate()`` until it is true; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("emulated cluster did not reach the expected state in %ss" % timeout)
            time.sleep(interval)

    def wait_ready(self, node, timeout=10):
        """Wait until a node serves its API again (after a reboot, for instance)."""
        node = self.node(node)
        self.wait_until(lambda: node.reachable and node.stage in ("running", "maintenance"), timeout)

    def power_on(self, node):
        """Power on a node that was shut down or reset without reboot."""
        node = self.node(node)
        if not node.powered:
            self.run(node.boot())

    def power_off(self, node):
        """Cut a node's power, as a machine that dies does: no shutdown sequence, it stays an etcd member and a
        discovery member of the others until it is removed."""
        node = self.node(node)
        if node.powered:
            self.run(node.power_off())

    def bootstrap(self, node=None):
        """Bootstrap etcd directly, as if Bootstrap had been called (a fixture shortcut)."""
        self.call(self.bootstrap_etcd, self.node(node) if node is not None else self.controlplanes[0])

    def add_extension_service(self, node, service_id):
        self.call(self.node(node).add_extension_service, service_id)

    def set_service_state(self, node, service_id, state, healthy=None, message="set by the test"):
        self.call(self.node(node).set_service, service_id, state, message, healthy)

    def add_diagnostic(self, node, diagnostic_id, message, details=()):
        """A Diagnostics resource on the node, as Talos raises for a problem it found (None removes it)."""
        diagnostics = self.node(node).diagnostics
        if message is None:
            self.call(diagnostics.pop, diagnostic_id, None)
        else:
            self.call(diagnostics.__setitem__, diagnostic_id, {"message": message, "details": list(details)})

    def set_resource_labels(self, node, resource_type, resource_id, labels):
        """Labels a COSI resource of the node carries (label queries of List and Watch filter on them)."""
        self.call(self.node(node).resource_labels.__setitem__, (resource_type, resource_id), dict(labels))

    def raise_etcd_alarm(self, node, alarm="NOSPACE"):
        """An etcd alarm (NOSPACE, CORRUPT) on the node's member, as etcd raises it."""
        member = self.etcd.member_of(self.node(node))
        self.call(self.etcd.alarms.append, (member.id, machine_pb2.EtcdMemberAlarm.AlarmType.Value(alarm)))

    def fragment_etcd(self, node, free_bytes):
        """Give the node's etcd database ``free_bytes`` of free pages: EtcdStatus db_size exceeds db_size_in_use by
        that much until a defragmentation."""
        member = self.etcd.member_of(self.node(node))
        self.call(setattr, member, "free_bytes", int(free_bytes))

    # Files for clients.

    def talosconfig_path(self, role="admin"):
        return os.path.join(self.state_dir, "talosconfig" if role == "admin" else "talosconfig-%s" % role)

    def talosconfig(self, role="admin", roles=None):
        """A talosconfig for this cluster whose certificate carries ``roles`` (default: the role's)."""
        endpoints = [node.endpoint for node in self.controlplanes]
        return configgen.generate_talosconfig(self.secrets, self.name, endpoints, roles=roles or ROLES[role])

    def machine_config(self, role, hostname=None):
        endpoint = "https://%s:6443" % self.controlplanes[0].address
        return configgen.generate_machine_config(
            self.secrets, role, self.name, endpoint, talos_version=self.talos_version, hostname=hostname,
            cert_sans=[node.address for node in self.nodes],
        )

    def write_state_files(self):
        os.makedirs(self.state_dir, exist_ok=True)
        files = {
            "secrets.yaml": self.secrets.to_yaml(),
            "controlplane.yaml": self.machine_config("controlplane"),
            "worker.yaml": self.machine_config("worker"),
            "inventory.yml": yaml.safe_dump(self.inventory(), sort_keys=False),
            "state.json": json.dumps(self.state(), indent=2, sort_keys=True) + "\n",
        }
        for role in ROLES:
            files[os.path.basename(self.talosconfig_path(role))] = self.talosconfig(role)
        for name, content in files.items():
            path = os.path.join(self.state_dir, name)
            with open(path, "w") as output:
                output.write(content)
            os.chmod(path, 0o600)

    def inventory(self):
        def hosts(nodes):
            return {node.name: {"ansible_host": node.address} for node in nodes}
        return {"all": {
            "vars": {
                # Talos tasks run in the controller (the controller door) and need no connection; through
                # the module door they run with the Python that runs ansible-playbook.
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "talosconfig": self.talosconfig_path("admin"),
                "talos_port": self.port,
                "talos_endpoint": self.endpoint,
                "talos_cluster_name": self.name,
                "talos_state_dir": self.state_dir,
                # The nodes listen on talos_port, not on Talos's 50000: where the cluster role reaches a node in
                # maintenance mode and the endpoints of the talosconfig it writes, so that its documented
                # variables (docs/provisioning.md) work here as written.
                "cluster_maintenance_endpoint": "{{ ansible_host }}:{{ talos_port }}",
                "cluster_talosconfig_endpoints": [node.endpoint for node in self.controlplanes],
            },
            "children": {
                "controlplane": {"hosts": hosts(self.controlplanes)},
                "workers": {"hosts": hosts(self.workers)},
            },
        }}

    def state(self):
        return {
            "name": self.name,
            "pid": os.getpid(),
            "port": self.port,
            "endpoint": self.endpoint,
            "maintenance": self.maintenance,
            "talos_version": self.talos_version,
            "state_dir": self.state_dir,
            "nodes": [
                {"name": node.name, "address": node.address, "port": node.port, "endpoint": node.endpoint, "role": node.role}
                for node in self.nodes
            ],
        }

    # Audit.

    def audit(self, method=None, node=None, include_dry_run=True, include_failed=True):
        """Mutating calls the nodes processed, oldest first (dicts; see docs/emulator.md)."""
        return self.audit_log.entries(method=method, node=node, include_dry_run=include_dry_run, include_failed=include_failed)

    # Cluster-wide state the nodes share (called on the loop).

    def issuing_authority(self, crt_pem, key_pem):
        """The OS CA that signs a node's API certificate; workers get theirs through trustd."""
        if key_pem is not None:
            authority = CertificateAuthority.from_pem(crt_pem, key_pem)
            self._authorities.setdefault(crt_pem, authority)
            return authority
        return self._authorities[crt_pem]

    async def wait_for_authority(self, crt_pem):
        """A worker's apid waits for trustd: until a control plane holding this OS CA's key has booted."""
        while crt_pem not in self._authorities:
            await asyncio.sleep(0.05)

    def registry_has(self, image_ref):
        return bool(image_ref) and image_ref not in self.unavailable_images

    def bootstrap_etcd(self, node, recover=False, skip_hash_check=False):
        keyspace = None
        if recover:
            snapshot, node.etcd_snapshot = node.etcd_snapshot, None
            if snapshot is None:
                node.set_service("etcd", "Failed", "failed to recover etcd: open /var/lib/etcd.snapshot: no such file or directory", False)
                return
            try:
                keyspace = EtcdCluster.keyspace_from_snapshot(snapshot, skip_hash_check)
            except SnapshotError as error:
                node.set_service("etcd", "Failed", "failed to recover etcd: %s" % error, False)
                return
        self.etcd.bootstrap(node, keyspace)
        node.join_etcd()
        for other in self.controlplanes:
            if other is not node and other.powered and other.is_control_plane and not other.etcd_data:
                other.join_etcd()

    def remove_etcd_member(self, member):
        self.etcd.remove(member)
        if member.node.powered and "etcd" in member.node.services:
            member.node.set_service("etcd", "Failed", "etcd member was removed from the cluster", False)

    def validate_etcd_for_upgrade(self, node):
        """Talos ``ValidateForUpgrade`` plus the cluster-wide upgrade mutex."""
        if self.upgrade_lock not in (None, node):
            raise GRPCError(Status.UNKNOWN, "error trying to lock etcd upgrade mutex: held by %s" % self.upgrade_lock.hostname)
        members = self.etcd.members
        if len(members) == 2:
            raise GRPCError(Status.UNKNOWN, "etcd member count(%d) is insufficient to maintain quorum if upgrade commences" % len(members))
        for member in members:
            if not member.node.etcd_running:
                raise GRPCError(
                    Status.UNKNOWN,
                    "etcd member %d is not healthy; all members must be healthy to perform an upgrade" % member.id,
                )
