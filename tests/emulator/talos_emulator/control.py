# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What tests and ``tests/talos-emulator`` drive: an emulated cluster, its test knobs and the files clients need.

``EmulatedCluster`` composes the cluster model (``cluster.py``: nodes and
Talos rules) with its server runtime (``runtime.py``: loop, port, control
channel). It writes the client files (talosconfigs, machine configs,
inventory, ``state.json``) and offers the knobs a test turns, each applied on
the runtime's loop.
"""

import base64
import json
import os
import sys
import time
from urllib.parse import urlsplit

import yaml

from . import configgen, kubernetes
from .audit import AuditLog
from .cluster import ClusterModel
from .faults import Faults
from .pki import to_standard_pem
from .runtime import ClusterRuntime

DEFAULT_TALOS_VERSION = "v1.14.0"
ROLES = {"admin": ("os:admin",), "operator": ("os:operator",), "reader": ("os:reader",)}
# Room every cluster keeps for add_node beyond the nodes it starts with (and the
# smallest cluster's capacity, 19 nodes, as before).
SPARE_ADDRESSES = 16
MIN_CAPACITY = 19
MAX_NODES = 1000


class EmulatedCluster:
    def __init__(self, state_dir, controlplanes=1, workers=0, maintenance=False, talos_version=DEFAULT_TALOS_VERSION,
                 reboot_seconds=0.3, name="emulated", node_versions=None, etcd="model", etcd_quota_bytes=0):
        if controlplanes < 1:
            raise ValueError("an emulated cluster needs at least one control plane")
        if workers < 0 or controlplanes + workers > MAX_NODES:
            raise ValueError("an emulated cluster has 1 to %d nodes, got %d control planes and %d workers"
                             % (MAX_NODES, controlplanes, workers))
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        # A new cluster starts a new audit log, also when a state directory is reused.
        audit_path = os.path.join(self.state_dir, "audit.jsonl")
        open(audit_path, "w").close()
        self.runtime = ClusterRuntime(name, max(MIN_CAPACITY, controlplanes + workers + SPARE_ADDRESSES))
        self.model = ClusterModel(name, talos_version, maintenance, reboot_seconds, self.runtime.addresses,
                                  self.runtime.spawn, AuditLog(audit_path))
        self.model.faults = Faults(self)
        self.model.kubernetes_port = self.runtime.kubernetes_port
        if etcd == "real":
            # Imported here: only a cluster of real etcd members needs the Go harness (built now, off the loop).
            from .real_etcd import RealEtcdCluster, build_member
            build_member()
            self.model.etcd = RealEtcdCluster(os.path.join(self.state_dir, "etcd"), self.runtime.spawn, self.model.secrets.etcd_ca,
                                              etcd_quota_bytes)
        elif etcd != "model":
            raise ValueError("etcd is 'model' or 'real', got %r" % (etcd,))
        for role in ["controlplane"] * controlplanes + ["worker"] * workers:
            self.model.new_node(role, None, node_versions)
        self.endpoint = None
        self.kubelets = None
        self.kube_apiserver = None

    # Starting and stopping.

    @classmethod
    def start(cls, state_dir, controlplanes=1, workers=0, maintenance=False, talos_version=DEFAULT_TALOS_VERSION,
              reboot_seconds=0.3, bootstrapped=False, name="emulated", node_versions=None, etcd="model", etcd_quota_bytes=0):
        """Start a cluster on a private event loop thread and return it once every node answers.

        ``node_versions`` maps node names to the Talos version they run when it
        differs from ``talos_version`` (a cluster in the middle of an upgrade).
        ``etcd="real"`` runs a real etcd member on every control plane
        (``real_etcd.py``) instead of the model of etcd (``membership.py``);
        ``etcd_quota_bytes`` is then their database quota (etcd's
        ``--quota-backend-bytes``; 0: etcd's default), small to raise NOSPACE.
        """
        if bootstrapped and maintenance:
            raise ValueError("a cluster in maintenance mode cannot start bootstrapped")
        cluster = cls(state_dir, controlplanes, workers, maintenance, talos_version, reboot_seconds, name, node_versions, etcd,
                      etcd_quota_bytes)
        cluster.runtime.start_loop()
        try:
            if not maintenance:
                for node in cluster.nodes:
                    cluster.model.install(node)
            cluster.run(cluster.runtime.boot(cluster.nodes))
            cluster.endpoint = cluster.controlplanes[0].endpoint
            if bootstrapped:
                cluster.bootstrap()
        except BaseException:
            cluster.stop()
            raise
        cluster.write_state_files()
        return cluster

    def stop(self):
        """Stop the kubelet shim, the Kubernetes API server, every node and the event loop. Safe to call twice."""
        if self.kubelets is not None:
            self.kubelets.stop()
        # The API server before the nodes: with its etcd gone it would wait for it until killed.
        if self.kube_apiserver is not None:
            self.kube_apiserver.stop()
        self.runtime.stop(self.nodes)

    def serve_forever(self):
        """Block until SIGTERM or SIGINT, applying ``talos-emulator fault`` requests, then stop."""
        self.runtime.serve_forever(self)

    def add_node(self, role="worker"):
        """Boot one more node, installed and configured, into the running cluster; returns it.

        A new control plane joins etcd when the cluster is bootstrapped. The
        state files (inventory, state.json) list it afterwards.
        """
        if role not in ("controlplane", "worker"):
            raise ValueError("role must be controlplane or worker, got %r" % (role,))
        node = self.call(self.model.new_node, role, self.port)
        if not self.maintenance:
            self.model.install(node)
        self.run(node.boot())
        self.write_state_files()
        return node

    # The model and the runtime, as tests read them.

    name = property(lambda self: self.model.name)
    talos_version = property(lambda self: self.model.talos_version)
    maintenance = property(lambda self: self.model.maintenance)
    secrets = property(lambda self: self.model.secrets)
    etcd = property(lambda self: self.model.etcd)
    faults = property(lambda self: self.model.faults)
    audit_log = property(lambda self: self.model.audit_log)
    calls_served = property(lambda self: self.model.calls_served)
    unavailable_images = property(lambda self: self.model.unavailable_images)
    nodes = property(lambda self: self.model.nodes)
    controlplanes = property(lambda self: self.model.controlplanes)
    workers = property(lambda self: self.model.workers)
    port = property(lambda self: self.runtime.port)
    loop = property(lambda self: self.runtime.loop)

    def find_node(self, target):
        return self.model.find_node(target)

    def dns_name(self, node):
        return self.model.dns_name(self.node(node))

    def add_address(self, node, address):
        """Give a node one more address that apid reaches it at (Kubernetes does not report it)."""
        self.call(self.model.add_address, self.node(node), address)

    def node(self, node):
        return self.model.node(node)

    def run(self, coroutine, timeout=30):
        return self.runtime.run(coroutine, timeout)

    def call(self, function, *args, **kwargs):
        return self.runtime.call(function, *args, **kwargs)

    # Knobs.

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

    def wipe_etcd(self, node):
        """Lose etcd on ``node`` for good, as a Reset of its EPHEMERAL volume that does not leave etcd does: the
        machine reboots with an empty etcd data directory, and its etcd waits to join a cluster."""
        node = self.node(node)
        self.run(node.reset("", graceful=False, reboot=True, wiped_volumes=["EPHEMERAL"]))

    def bootstrap(self, node=None, timeout=120):
        """Bootstrap etcd directly, as if Bootstrap had been called on ``node`` (the first control plane by default)
        and the other control planes that are on had joined (a fixture shortcut), and wait until etcd runs on them
        with ``node``'s member leading, as the member that bootstrapped a cluster does until something moves it."""
        first = self.node(node) if node is not None else self.controlplanes[0]
        joining = [other for other in self.controlplanes
                   if other is not first and other.powered and other.is_control_plane and not other.etcd_data]
        self.call(self.etcd.bootstrap_together, [first] + joining)
        self.wait_etcd_running(timeout)
        self.run(self.etcd.make_leader(first))

    def etcd_leader(self):
        """The control plane whose etcd member leads, or None."""
        return self.run(self.etcd.leader_node())

    def wait_etcd_running(self, timeout=120):
        """Wait until etcd runs and answers on every configured control plane that is on."""
        self.wait_until(lambda: all(self.etcd.serves(node) for node in self.controlplanes
                                    if node.powered and node.is_control_plane), timeout)

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
        self.run(self.etcd.raise_alarm(self.node(node), alarm))

    def fragment_etcd(self, node, free_bytes):
        """Give the node's etcd database ``free_bytes`` of free pages: EtcdStatus db_size exceeds db_size_in_use by
        that much until a defragmentation."""
        self.call(self.etcd.fragment, self.node(node), int(free_bytes))

    def run_kubelets(self, api_url=None, interval=0.2):
        """Make the nodes the kubelets of a real Kubernetes API server (``kubelets.py``): from the etcd bootstrap on,
        Nodes, mirror pods, the bootstrap manifests and rollout statuses appear there. The server is the
        control-plane endpoint of the configs, or ``api_url``. Returns the shim (``.errors``, ``.sync()``); ``stop()``
        stops it."""
        if self.kubelets is None:
            # Imported here: the kubernetes client is a test dependency, not one of the demo's (requirements.txt).
            from .kubelets import Kubelets
            self.kubelets = Kubelets(self, api_url, interval).start()
        return self.kubelets

    def kubernetes_cas(self):
        """What the kube-apiserver of the control planes runs with: ``(issuing CA certificate PEM, its key PEM, client
        CA bundle PEM)``, the first control plane's issuing CA serving and client certificates of the issuing and
        accepted CAs of any of them trusted (one server plays all three)."""
        issuing, bundle = None, []
        for node in self.controlplanes:
            settings = kubernetes.settings(node.config_bytes)  # cached: the kube-apiserver pods' readiness asks often
            if issuing is None:
                issuing = (settings["ca_crt"], settings["ca_key"])
            for pem in [settings["ca_crt"]] + settings["accepted_crts"]:
                if pem.strip() not in [known.strip() for known in bundle]:
                    bundle.append(pem)
        return issuing[0], issuing[1], b"".join(bundle)

    def run_kubernetes(self, secrets, timeout=90):
        """Run Kubernetes as the control planes of a provisioned cluster of real etcd members run it: a real
        kube-apiserver (tests/kube_apiserver) storing its objects in their etcd, with the CAs and service-account key
        of the secrets bundle ``secrets`` (the path of the bundle the configs were made from), listening where the
        configs' control-plane endpoint points (an address of this machine), restarted whenever the control planes'
        Kubernetes CAs change (as Talos restarts the static pod), and the nodes as its kubelets (``run_kubelets``).
        Returns the server (``url``, ``kubeconfig_path``); ``stop()`` stops it."""
        if self.kube_apiserver is not None:
            return self.kube_apiserver
        if not hasattr(self.etcd, "client_urls"):
            raise ValueError("Kubernetes needs the cluster's real etcd members (etcd='real'), not the emulator's model")
        if not all(node.config_bytes for node in self.controlplanes):
            raise ValueError("Kubernetes runs on configured control planes: apply their configs and bootstrap first")
        endpoint = urlsplit(configgen.kubernetes_settings(self.controlplanes[0].config_bytes)["endpoint"])
        # Imported here: only a cluster that runs Kubernetes needs the Go harness (tests/kube_apiserver, beside the
        # emulator as real_etcd.py finds tests/etcd_member).
        tests = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if tests not in sys.path:
            sys.path.append(tests)
        import kube_apiserver
        with open(secrets) as bundle_file:
            certs = yaml.safe_load(bundle_file)["certs"]
        etcd_ca = certs["etcd"]
        self.runtime.release_kubernetes_port()
        server = kube_apiserver.KubeAPIServer.start(
            os.path.join(self.state_dir, "kube-apiserver"), base64.b64decode(certs["k8s"]["crt"]),
            base64.b64decode(certs["k8s"]["key"]), base64.b64decode(certs["k8sserviceaccount"]["key"]),
            port=endpoint.port or 443, address=endpoint.hostname, timeout=timeout,
            etcd=(self.etcd.client_urls(), base64.b64decode(etcd_ca["crt"]), to_standard_pem(base64.b64decode(etcd_ca["key"]))))
        self.kube_apiserver = server
        server.follow_cas(self.kubernetes_cas)

        def restarted():
            try:
                return server.settled(self.kubernetes_cas())
            except Exception:  # the follower stopped: the server does not run the configs' CAs
                return False
        self.model.kube_apiserver_restarted = restarted
        self.run_kubelets()
        return server

    # Files for clients.

    def talosconfig_path(self, role="admin"):
        return os.path.join(self.state_dir, "talosconfig" if role == "admin" else "talosconfig-%s" % role)

    def talosconfig(self, role="admin", roles=None):
        """A talosconfig for this cluster whose certificate carries ``roles`` (default: the role's)."""
        endpoints = [node.endpoint for node in self.controlplanes]
        return configgen.generate_talosconfig(self.secrets, self.name, endpoints, roles=roles or ROLES[role])

    def machine_config(self, role, hostname=None):
        return configgen.generate_machine_config(
            self.secrets, role, self.name, self.model.kubernetes_endpoint(), talos_version=self.talos_version,
            hostname=hostname, cert_sans=[node.address for node in self.nodes],
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
                # Where the cluster role's generated configs point Kubernetes (a variable of the role): the first
                # control plane's address, where run_kubernetes serves the API.
                "cluster_endpoint": self.model.kubernetes_endpoint(),
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
