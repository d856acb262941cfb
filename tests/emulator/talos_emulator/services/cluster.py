# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cluster.ClusterService/HealthCheck: the server-side cluster health check (Talos ``v1alpha1_cluster.go`` and
``pkg/cluster/check`` of v1.14).

Control planes only. The nodes are those of ``cluster_info``; without any, the node's discovery ``Members`` (each
member's first address, by machine type), as Talos falls back to discovery before the Kubernetes API. The first
message names them (``discovered nodes: ["10.5.0.2" ...]``, Go's ``%q``); then the checks run one after the other,
each until it passes or ``wait_timeout`` ends (then ``DeadlineExceeded`` "context deadline exceeded"), and every
change of a check's status line is streamed as "waiting for <check>: <status>" ("..." while it runs without an
error yet, its error, "OK", or "SKIP"). Each check asks the nodes as upstream's does, through this node's apid, and
words its errors as upstream (Go's formatting: ``%q``, ``%v`` of lists, multierror and errors.Join). The emulator
does not ask the Kubernetes API its questions: its Kubernetes checks pass once the Talos ones have while a Kubernetes
API runs with the nodes as its kubelets (``run_kubelets``), and fail as Talos's do where the endpoint does not answer
otherwise.
"""

import asyncio
import urllib.parse

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_grpc, cluster_pb2

from .. import kubernetes, routing
from .common import MEMTOTAL_KIB, require_control_plane
from .cosi import discovery_members
from .storage import SYSTEM_DISK
from .volumes import PARTITIONS

# Talos's report interval (check.Wait's updateInterval) is 100 ms; the emulator polls as often.
_POLL_SECONDS = 0.1
_KUBERNETES_CHECKS = (
    "all k8s nodes to report", "all control plane static pods to be running", "all control plane components to be ready",
    "all k8s nodes to report ready", "kube-proxy to report ready", "coredns to report ready",
    "all k8s nodes to report schedulable",
)
# pkg/minimal: the memory a machine type needs (MiB), and the EPHEMERAL partition the smallest system disk (6 GiB)
# leaves beside the UKI EFI (2101 MiB), STATE and META partitions and the GPT's 10 MiB.
_MINIMUM_MEMORY_MIB = {"controlplane": 1848 - 150, "worker": 1024 - 150}
_MINIMUM_EPHEMERAL_BYTES = (6144 - (2101 + 100 + 1 + 10)) * 1048576


def go_quoted(values):
    """Go's ``%q`` of a []string: ``["a" "b"]``."""
    return "[%s]" % " ".join('"%s"' % value for value in values)


def go_list(values):
    """Go's ``%v`` of a []string: ``[a b]``."""
    return "[%s]" % " ".join(values)


def multierror(errors):
    """hashicorp/go-multierror's text of several errors (None for none)."""
    if not errors:
        return None
    if len(errors) == 1:
        return "1 error occurred:\n\t* %s\n\n" % errors[0]
    return "%d errors occurred:\n%s\n\n" % (len(errors), "\n".join("\t* %s" % error for error in errors))


def _i_bytes(size):
    """go-humanize's IBytes: 3.8 GiB, 0 B."""
    if size < 10:
        return "%d B" % size
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    exponent = 0
    while size >= 1024 ** (exponent + 1) and exponent < len(units) - 1:
        exponent += 1
    value = int(size / 1024 ** exponent * 10 + 0.5) / 10
    return ("%.0f %s" if value >= 10 else "%.1f %s") % (value, units[exponent])


class _Checker:
    """The checks of ``check.DefaultClusterChecks`` on ``nodes`` (machine type -> addresses), asked through ``apid``."""

    def __init__(self, apid, nodes):
        self.apid = apid
        self.nodes = nodes
        self.control_planes = nodes.get("controlplane", [])
        self.all = [address for addresses in nodes.values() for address in addresses]

    def _reach(self, target):
        """(node, None) for a node that answers through apid, else (None, Go's error string)."""
        try:
            return self.apid.resolve_target(target), None
        except GRPCError as error:
            return None, routing.go_error_string(error)

    def _service(self, service_id):
        errors = []
        for target in sorted(self.control_planes):
            node, failure = self._reach(target)
            if failure is not None:
                return 'error getting service info for service "%s" from node "%s": %s' % (service_id, target, failure)
            service = node.services.get(service_id)
            if service is None or not service.events:
                errors.append('%s: no events recorded yet for service "%s"' % (target, service_id))
            elif service.state != "Running":
                message = service.events[-1][0]
                errors.append('%s: service "%s" not in expected state "Running": current state [%s] %s'
                              % (target, service_id, service.state, message))
            elif not service.healthy:
                errors.append("%s: service is not healthy: %s" % (target, service_id))
        return multierror(errors)

    def etcd_healthy(self):
        return self._service("etcd")

    def etcd_consistent(self):
        known = None
        for target in sorted(self.control_planes):
            node, failure = self._reach(target)
            if failure is None and not node.etcd_running:
                failure = "rpc error: code = Unknown desc = etcd is not running on this node"
            if failure is not None:
                return 'error getting etcd member list from node "%s": %s' % (target, failure)
            members = {(member.node.hostname, member.id) for member in node.cluster.etcd.members}
            if known is None:
                known = members
            elif len(members) != len(known):
                return "%s: expected to have %s members, got %s" % (
                    target, go_list(sorted(name for name, _id in known)), go_list(sorted(name for name, _id in members)))
            else:
                unexpected = sorted(members - known)
                if unexpected:
                    return "%s: found unexpected etcd member %s" % (target, unexpected[0][0])
        return None

    def etcd_control_planes(self):
        node = self.apid.node
        if not node.etcd_running:
            return "rpc error: code = Unknown desc = etcd is not running on this node"
        member_ips = [member.node.address for member in node.cluster.etcd.members]
        if not set(member_ips) <= set(self.control_planes):
            return "etcd member ips %s are not subset of control plane node ips %s" % (go_quoted(member_ips), go_quoted(self.control_planes))
        return None

    def apid_ready(self):
        errors = []
        for target in self.all:
            _node, failure = self._reach(target)
            if failure is not None:
                errors.append('error getting version from node "%s": %s' % (target, failure))
        return "\n".join(errors) or None

    def memory_sizes(self):
        reachable, failures = self._non_container_nodes()
        if failures:
            return failures
        errors = []
        for target in reachable:
            machine_type = next(kind for kind, addresses in self.nodes.items() if target in addresses)
            minimum = _MINIMUM_MEMORY_MIB.get(machine_type, 1024)
            if MEMTOTAL_KIB // 1024 < minimum:
                errors.append('node "%s" does not meet memory requirements: expected at least %d MiB, actual %d MiB'
                              % (target, minimum, MEMTOTAL_KIB // 1024))
        return multierror(errors)

    def disk_sizes(self):
        reachable, failures = self._non_container_nodes()
        if failures:
            return failures
        errors = []
        for target in sorted(reachable):
            node, _failure = self._reach(target)
            if not node.installed:
                errors.append('error getting volume status for node "%s": rpc error: code = NotFound desc = resource '
                              "VolumeStatuses.block.talos.dev(runtime/EPHEMERAL@undefined) doesn't exist" % target)
                continue
            index, _mount_point, _filesystem, size = PARTITIONS["EPHEMERAL"]
            if size < _MINIMUM_EPHEMERAL_BYTES:
                errors.append('ephemeral partition "%s%d" for node "%s" is too small, expected at least %s, actual %s'
                              % (SYSTEM_DISK, index, target, _i_bytes(_MINIMUM_EPHEMERAL_BYTES), _i_bytes(size)))
        return multierror(errors)

    def _non_container_nodes(self):
        reachable, errors = [], []
        for target in self.all:
            _node, failure = self._reach(target)
            if failure is not None:
                errors.append('error getting version from node "%s": %s' % (target, failure))
            else:
                reachable.append(target)
        return reachable, "\n".join(errors) or None

    def no_diagnostics(self):
        warnings = {}
        for target in self.all:
            node, failure = self._reach(target)
            if failure is not None:
                return failure
            if node.diagnostics:
                warnings[target] = [spec["message"] for _id, spec in sorted(node.diagnostics.items())]
        if not warnings:
            return None
        return "active diagnostics: %s" % "; ".join("%s: %s" % (target, ", ".join(messages))
                                                    for target, messages in sorted(warnings.items()))

    def kubelet_healthy(self):
        return self._service("kubelet")

    def booted(self):
        stages = {}
        for target in self.all:
            node, failure = self._reach(target)
            if failure is not None:
                return "error watching machine %s status: %s" % (target, failure)
            stages.setdefault(node.stage, []).append(target)
        stages.pop("running", None)
        if not stages:
            return None
        return "nodes are not running: %s" % ", ".join("%s: %s" % (stage, go_list(sorted(targets)))
                                                       for stage, targets in sorted(stages.items(), key=_stage_order))

    def checks(self):
        talos = [
            ("etcd to be healthy", self.etcd_healthy),
            ("etcd members to be consistent across nodes", self.etcd_consistent),
            ("etcd members to be control plane nodes", self.etcd_control_planes),
            ("apid to be ready", self.apid_ready),
            ("all nodes memory sizes", self.memory_sizes),
            ("all nodes disk sizes", self.disk_sizes),
            ("no diagnostics", self.no_diagnostics),
            ("kubelet to be healthy", self.kubelet_healthy),
            ("all nodes to finish boot sequence", self.booted),
        ]
        return talos + [(name, self.kubernetes_api) for name in _KUBERNETES_CHECKS]

    def kubernetes_api(self):
        """The Kubernetes checks as far as the emulator sees them: a Kubernetes API runs with the nodes as its kubelets
        (``run_kubelets``); their own questions (nodes, pods) are not asked. Without one, they fail as Talos's do where
        the cluster's endpoint does not answer."""
        if self.apid.node.cluster.kubernetes_api_serving:
            return None
        endpoint = kubernetes.settings(self.apid.node.config_bytes)["endpoint"]
        address = urllib.parse.urlsplit(endpoint)
        return 'Get "%s/api/v1/nodes": dial tcp %s:%d: connect: connection refused' % (endpoint, address.hostname, address.port or 443)


# runtime.MachineStage order (the enum's numbers), by which upstream sorts the stages it names.
_STAGES = ("unknown", "booting", "installing", "maintenance", "running", "rebooting", "shutting down", "resetting", "upgrading")


def _stage_order(item):
    return _STAGES.index(item[0]) if item[0] in _STAGES else len(_STAGES)


class ClusterService(cluster_grpc.ClusterServiceBase):
    def __init__(self, node):
        self.node = node

    def _cluster_nodes(self, info):
        """Machine type -> addresses: those of ``cluster_info``, else the discovered members."""
        if info.control_plane_nodes or info.worker_nodes:
            return {"controlplane": list(info.control_plane_nodes), "worker": list(info.worker_nodes)}
        nodes = {}
        for _member_id, spec in discovery_members(self.node):
            nodes.setdefault(spec["machineType"], []).append(spec["addresses"][0])
        if not nodes:
            # Talos asks the Kubernetes API next, which the emulated node cannot reach.
            raise GRPCError(Status.UNKNOWN, 'failed to create kubernetes client: Get "%s/api/v1/nodes": dial tcp: connect: '
                                            "connection refused" % self.node.cluster.kubernetes_endpoint())
        return nodes

    async def HealthCheck(self, stream):
        request = await stream.recv_message()
        require_control_plane(self.node, "cluster health check")
        loop = asyncio.get_running_loop()
        timeout = request.wait_timeout.ToTimedelta().total_seconds() if request.HasField("wait_timeout") else 20 * 60
        deadline = loop.time() + timeout
        nodes = self._cluster_nodes(request.cluster_info)
        checker = _Checker(routing.Apid(self.node), nodes)
        await stream.send_message(cluster_pb2.HealthCheckProgress(message="discovered nodes: %s" % go_quoted(checker.all)))
        for description, check in checker.checks():
            await self._progress(stream, description, "...")
            last = None
            while True:
                outcome = check()
                if outcome is None:
                    await self._progress(stream, description, "OK")
                    break
                if outcome != last:
                    await self._progress(stream, description, outcome)
                    last = outcome
                if loop.time() >= deadline:
                    raise GRPCError(Status.DEADLINE_EXCEEDED, "context deadline exceeded")
                await asyncio.sleep(_POLL_SECONDS)

    async def _progress(self, stream, description, state):
        # Talos trims the line (a multierror ends in blank lines).
        await stream.send_message(cluster_pb2.HealthCheckProgress(message=("waiting for %s: %s" % (description, state)).strip()))
