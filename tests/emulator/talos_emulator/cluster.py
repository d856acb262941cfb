# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The emulated cluster's model: its nodes, the state they share and the Talos rules that span nodes.

This is what a node reaches as ``node.cluster``: etcd membership and its rules
(bootstrap, member removal, upgrade validation), the OS CAs that issue node
certificates, the image registry. It runs no event loop and writes no file:
``runtime.py`` serves the nodes, ``control.py`` is what tests and the command
line drive.
"""

import asyncio
import re

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from . import configgen
from .membership import EtcdCluster, SnapshotError
from .node import EmulatedNode
from .pki import CertificateAuthority
from .services.image import normalized, parse_reference
from .versions import released

# An installer's repository: <registry>/siderolabs/installer[-secureboot], the Image Factory's
# <registry>/[<platform>-]installer[-secureboot]/<schematic>, or a mirror's .../installer.
_INSTALLER_REPOSITORY = re.compile(r"(?:^|/)(?:[a-z0-9-]+-)?installer(?:-secureboot)?(?:/[0-9a-f]{64})?$")


def _image_name(image_ref):
    try:
        return normalized(image_ref)
    except ValueError:
        return image_ref


def _unreleased_installer(image_ref):
    """True for an installer image tagged with no Talos release there is: its tag is the version it installs, so no
    registry can hold it (an image pinned by digest alone says no version and is taken as it is)."""
    try:
        name, tag, digest = parse_reference(image_ref)
    except ValueError:
        return False
    return digest is None and _INSTALLER_REPOSITORY.search(name) is not None and not released(tag)


class ClusterModel:
    """The nodes of one cluster and their shared state (mutated on the runtime's loop only).

    ``addresses`` are the loopback addresses its nodes take, in order; ``spawn``
    starts background work (reboots, rollbacks) on the runtime's loop.
    ``faults`` and ``audit_log`` are the test surface's, consulted by every call.
    """

    def __init__(self, name, talos_version, maintenance, reboot_seconds, addresses, spawn, audit_log):
        self.name = name
        self.talos_version = talos_version
        self.maintenance = maintenance
        self.reboot_seconds = reboot_seconds
        self.spawn = spawn
        self.audit_log = audit_log
        self.faults = None
        self.secrets = configgen.SecretsBundle.generate()
        self.etcd = EtcdCluster()
        self.unavailable_images = set()
        self.upgrade_lock = None
        # Whether a Kubernetes API runs with the nodes as its kubelets (kubelets.py).
        self.kubernetes_api_serving = False
        # Whether the real kube-apiserver (when one runs, control.run_kubernetes) has restarted with the Kubernetes CAs
        # of the control planes' configs: until then no kube-apiserver static pod that runs them is ready.
        self.kube_apiserver_restarted = lambda: True
        # Where the configs' control-plane endpoint points on the first control plane (the runtime's choice).
        self.kubernetes_port = 6443
        # Every call a node served (reads included): tests wait on it to act while a client is polling.
        self.calls_served = 0
        self._authorities = {self.secrets.os_ca.crt_pem: self.secrets.os_ca}
        self._addresses = addresses
        self.nodes = []
        self._nodes_by_address = {}

    # Nodes.

    def new_node(self, role, port, node_versions=None):
        """A node named after its role (``worker-3``) on the next of the cluster's addresses.

        ``node_versions`` maps node names to the Talos version they run when it differs from the cluster's.
        """
        if len(self.nodes) >= len(self._addresses):
            raise ValueError("this emulated cluster has room for %d nodes; start it with more" % len(self._addresses))
        name = "%s-%d" % (role, sum(1 for node in self.nodes if node.role == role) + 1)
        address = self._addresses[len(self.nodes)]
        node = EmulatedNode(self, name, address, port, role, (node_versions or {}).get(name, self.talos_version))
        self.nodes.append(node)
        self._nodes_by_address[address] = node
        return node

    def install(self, node):
        """Give a node its own installed config (hostname = node name, certSANs = its address)."""
        node.load_installed_config(configgen.generate_machine_config(
            self.secrets, node.role, self.name, self.kubernetes_endpoint(), talos_version=node.talos_version,
            hostname=node.name, cert_sans=[node.address],
        ).encode())

    def kubernetes_endpoint(self):
        return "https://%s:%d" % (self.controlplanes[0].address, self.kubernetes_port)

    @property
    def controlplanes(self):
        return [node for node in self.nodes if node.role == "controlplane"]

    @property
    def workers(self):
        return [node for node in self.nodes if node.role == "worker"]

    def dns_name(self, node):
        """The name the network's DNS resolves to the node's address (``controlplane-1.<cluster>.test``): the
        emulated network registers every node, as DHCP with dynamic DNS would; bare node names do not resolve."""
        return "%s.%s.test" % (node.name, self.name)

    def resolve(self, name):
        """The node the network's DNS resolves ``name`` to, or None."""
        for node in self.nodes:
            if name == self.dns_name(node):
                return node
        return None

    def add_address(self, node, address):
        """Give ``node`` one more address (a second interface, a NAT address) that apid reaches it at."""
        node.extra_addresses.append(address)
        self._nodes_by_address[address] = node

    def find_node(self, target):
        """The node a target string names (address, hostname, node name, DNS name or extra address), or None."""
        for node in self.nodes:
            if target in (node.address, node.name, node.hostname, node.endpoint, self.dns_name(node)) or (
                    target in node.extra_addresses):
                return node
        return None

    def node_at(self, address):
        """The node listening on ``address`` (or reached there: an extra address), or None."""
        return self._nodes_by_address.get(address)

    def node(self, node):
        """A node given as an EmulatedNode, its name or its address."""
        if isinstance(node, EmulatedNode):
            return node
        found = self.find_node(node)
        if found is None:
            raise KeyError("no emulated node %r" % (node,))
        return found

    # Cluster-wide Talos rules (called on the loop).

    def issuing_authority(self, crt_pem, key_pem):
        """The OS CA that signs a node's API certificate; workers get theirs through trustd."""
        if key_pem is not None:
            authority = CertificateAuthority.from_pem(crt_pem, key_pem)
            self._authorities.setdefault(crt_pem, authority)
            return authority
        self._trustd_signs(crt_pem)
        return self._authorities[crt_pem]

    def _trustd_signs(self, crt_pem):
        """Whether trustd can sign with this OS CA: a control plane booted with it, or a running one whose config
        (applied without a reboot, as a CA rotation does) made it its issuing CA."""
        if crt_pem in self._authorities:
            return True
        for node in self.controlplanes:
            if node.powered and node.config is not None:
                node_crt, node_key = configgen.machine_os_ca(node.config)
                if node_crt == crt_pem and node_key is not None:
                    self.issuing_authority(node_crt, node_key)
                    return True
        return False

    async def wait_for_authority(self, crt_pem):
        """A worker's apid waits for trustd: until a control plane holding this OS CA's key runs."""
        while not self._trustd_signs(crt_pem):
            await asyncio.sleep(0.05)

    def registry_has(self, image_ref):
        """Whether the registry serves ``image_ref``: every reference but those marked unavailable, compared as
        containerd names them (``nginx`` is ``docker.io/library/nginx:latest``), and installers of Talos releases
        that never were (``installer:v1.99.0``, ``installer:latest``)."""
        if not image_ref or _unreleased_installer(image_ref):
            return False
        return _image_name(image_ref) not in {_image_name(ref) for ref in self.unavailable_images}

    def bootstrap_etcd(self, node, recover=False, skip_hash_check=False):
        """etcd starts in bootstrap mode on ``node`` (from the snapshot EtcdRecover uploaded with ``recover``); the
        other control planes, waiting to join, join it."""
        snapshot = None
        if recover:
            snapshot, node.etcd_snapshot = node.etcd_snapshot, None
            if snapshot is None:
                node.set_service("etcd", "Failed", "failed to recover etcd: open /var/lib/etcd.snapshot: no such file or directory", False)
                return
        try:
            self.etcd.bootstrap(node, snapshot, skip_hash_check)
        except SnapshotError as error:
            node.set_service("etcd", "Failed", "failed to recover etcd: %s" % error, False)
            return
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
