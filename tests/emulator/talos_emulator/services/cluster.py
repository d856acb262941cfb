# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cluster.ClusterService/HealthCheck: the server-side cluster health check (Talos ``pkg/cluster/check``).

The checks run one after the other, each until it passes or ``wait_timeout``
ends; every change of a check's outcome is streamed as
"waiting for <check>: <state>" ("..." while unknown, "OK" once it passes, the
error otherwise). Time out = DeadlineExceeded. The emulator has no Kubernetes:
its Kubernetes checks pass as soon as the Talos ones have.
"""

import asyncio

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_grpc, cluster_pb2

_POLL_SECONDS = 0.1
_KUBERNETES_CHECKS = (
    "all k8s nodes to report", "all control plane static pods to be running", "all control plane components to be ready",
    "all k8s nodes to report ready", "kube-proxy to report ready", "coredns to report ready",
    "all k8s nodes to report schedulable",
)


def _errors(errors):
    if not errors:
        return None
    if len(errors) == 1:
        return "1 error occurred:\n\t* %s\n\n" % errors[0]
    return "%d errors occurred:\n%s\n\n" % (len(errors), "\n".join("\t* %s" % error for error in errors))


def _service_errors(nodes, service_id):
    errors = []
    for node in nodes:
        service = node.services.get(service_id)
        if service is None:
            errors.append('%s: service "%s" not found' % (node.address, service_id))
        elif not (service.running and service.healthy):
            message = service.events[-1][0] if service.events else ""
            errors.append('%s: service "%s" not in expected state "Running": current state [%s] %s'
                          % (node.address, service_id, service.state, message))
    return errors


class _Checker:
    def __init__(self, cluster, control_planes, workers):
        self.cluster = cluster
        self.control_plane_targets = list(control_planes)
        self.targets = list(control_planes) + list(workers)

    def _nodes(self, targets):
        return [self.cluster.find_node(target) for target in targets]

    def _unreachable(self, targets):
        errors = []
        for target, node in zip(targets, self._nodes(targets)):
            if node is None or not node.reachable:
                errors.append("%s: rpc error: code = Unavailable desc = connection refused" % target)
        return errors

    def _reachable(self, targets):
        return [node for node in self._nodes(targets) if node is not None and node.reachable]

    def etcd_healthy(self):
        return self._unreachable(self.control_plane_targets) + _service_errors(self._reachable(self.control_plane_targets), "etcd")

    def etcd_consistent(self):
        errors = self._unreachable(self.control_plane_targets)
        for node in self._reachable(self.control_plane_targets):
            if not node.etcd_running:
                errors.append("%s: etcd is not running on this node" % node.address)
        return errors

    def etcd_control_planes(self):
        expected = sorted(node.address if node is not None else target
                          for target, node in zip(self.control_plane_targets, self._nodes(self.control_plane_targets)))
        members = sorted(member.node.address for member in self.cluster.etcd.members)
        if members != expected:
            return ["etcd member ips %s are not equal to expected %s" % (members, expected)]
        return []

    def apid_ready(self):
        return self._unreachable(self.targets)

    def reachable_only(self):
        return self._unreachable(self.targets)

    def no_diagnostics(self):
        errors = []
        for node in self._reachable(self.targets):
            for diagnostic_id, spec in sorted(node.diagnostics.items()):
                errors.append("%s: %s: %s" % (node.address, diagnostic_id, spec["message"]))
        return self._unreachable(self.targets) + errors

    def kubelet_healthy(self):
        return self._unreachable(self.control_plane_targets) + _service_errors(self._reachable(self.control_plane_targets), "kubelet")

    def booted(self):
        errors = self._unreachable(self.targets)
        for node in self._reachable(self.targets):
            if node.stage != "running":
                errors.append("%s: node is not booted: stage %s" % (node.address, node.stage))
        return errors

    def checks(self):
        talos = [
            ("etcd to be healthy", self.etcd_healthy),
            ("etcd members to be consistent across nodes", self.etcd_consistent),
            ("etcd members to be control plane nodes", self.etcd_control_planes),
            ("apid to be ready", self.apid_ready),
            ("all nodes memory sizes", self.reachable_only),
            ("all nodes disk sizes", self.reachable_only),
            ("no diagnostics", self.no_diagnostics),
            ("kubelet to be healthy", self.kubelet_healthy),
            ("all nodes to finish boot sequence", self.booted),
        ]
        return talos + [(name, lambda: []) for name in _KUBERNETES_CHECKS]


class ClusterService(cluster_grpc.ClusterServiceBase):
    def __init__(self, node):
        self.node = node

    async def HealthCheck(self, stream):
        request = await stream.recv_message()
        info = request.cluster_info
        loop = asyncio.get_running_loop()
        timeout = request.wait_timeout.ToTimedelta().total_seconds() if request.HasField("wait_timeout") else 20 * 60
        deadline = loop.time() + timeout
        checker = _Checker(self.node.cluster, info.control_plane_nodes, info.worker_nodes)
        for description, check in checker.checks():
            await self._progress(stream, description, "...")
            last = None
            while True:
                outcome = _errors(check())
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
        await stream.send_message(cluster_pb2.HealthCheckProgress(message="waiting for %s: %s" % (description, state)))
