# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cluster.ClusterService/HealthCheck, Logs and Dmesg (§12), COSI label queries, Services and Diagnostics."""

import pytest
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

M = "machine.MachineService/"


def _health(client, cluster, seconds, node=None):
    request = cluster_pb2.HealthCheckRequest(cluster_info=cluster_pb2.ClusterInfo(
        control_plane_nodes=[n.address for n in cluster.controlplanes], worker_nodes=[n.address for n in cluster.workers]))
    request.wait_timeout.FromSeconds(seconds)
    return client.call("cluster.ClusterService/HealthCheck", request, node=node, timeout=seconds + 10)


def test_health_check_passes_then_names_the_failing_check(emulator, api):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    # As when a Kubernetes API runs with the nodes as its kubelets (run_kubelets): the Kubernetes checks pass.
    cluster.model.kubernetes_api_serving = True
    client = api(cluster)
    messages = [reply.message for reply in _health(client, cluster, 5)]
    assert messages[0] == 'discovered nodes: ["%s" "%s"]' % (cluster.controlplanes[0].address, cluster.workers[0].address)
    assert messages[1:3] == ["waiting for etcd to be healthy: ...", "waiting for etcd to be healthy: OK"]
    assert messages[-1] == "waiting for all k8s nodes to report schedulable: OK"

    cluster.set_service_state(cluster.controlplanes[0], "etcd", "Failed", healthy=False, message="etcd exited")
    replies = []
    with pytest.raises(GRPCError) as raised:
        client.loop.run_until_complete(_collect(client, cluster, replies))
    assert raised.value.status == Status.DEADLINE_EXCEEDED
    assert replies[-1].startswith("waiting for etcd to be healthy: 1 error occurred:")
    assert 'service "etcd" not in expected state "Running": current state [Failed] etcd exited' in replies[-1]


def test_health_check_without_nodes_asks_discovery_and_words_errors_as_go(emulator, api):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True)
    client = api(cluster)
    request = cluster_pb2.HealthCheckRequest()
    request.wait_timeout.FromSeconds(2)
    replies = []
    with pytest.raises(GRPCError):
        client.loop.run_until_complete(_collect(client, cluster, replies, request))
    # As Talos: the discovered members, control planes and worker, each by its first address.
    addresses = sorted('"%s"' % node.address for node in cluster.nodes)
    assert replies[0].startswith("discovered nodes: [") and sorted(replies[0][len("discovered nodes: ["):-1].split(" ")) == addresses
    # The Talos checks pass; without a Kubernetes API where the kubeconfig points, the first Kubernetes check cannot.
    assert "waiting for all nodes to finish boot sequence: OK" in replies
    endpoint = "https://%s:6443" % cluster.controlplanes[0].address
    assert replies[-1] == ('waiting for all k8s nodes to report: Get "%s/api/v1/nodes": dial tcp %s:6443: connect: connection '
                           "refused" % (endpoint, cluster.controlplanes[0].address))

    # A control plane left out of cluster_info: Go's %q of both lists, not Python's.
    request = cluster_pb2.HealthCheckRequest(cluster_info=cluster_pb2.ClusterInfo(control_plane_nodes=[cluster.controlplanes[0].address]))
    request.wait_timeout.FromSeconds(1)
    with pytest.raises(GRPCError) as raised:
        client.call("cluster.ClusterService/HealthCheck", request, timeout=10)
    assert raised.value.status == Status.DEADLINE_EXCEEDED
    with pytest.raises(GRPCError) as raised:
        client.call("cluster.ClusterService/HealthCheck", request, node=cluster.workers[0].address, timeout=10)
    assert (raised.value.status, raised.value.message) == (
        Status.UNIMPLEMENTED, "cluster health check is only available on control plane nodes")
    replies = []
    with pytest.raises(GRPCError):
        client.loop.run_until_complete(_collect(client, cluster, replies, request))
    members = " ".join('"%s"' % node.address for node in cluster.controlplanes)
    assert replies[-1] == ('waiting for etcd members to be control plane nodes: etcd member ips [%s] are not subset of control '
                           'plane node ips ["%s"]' % (members, cluster.controlplanes[0].address))


async def _collect(client, cluster, replies, request=None):
    """The progress messages, kept as they arrive (the call ends with an error)."""
    if request is None:
        request = cluster_pb2.HealthCheckRequest(cluster_info=cluster_pb2.ClusterInfo(
            control_plane_nodes=[n.address for n in cluster.controlplanes]))
        request.wait_timeout.FromSeconds(1)
    path = "/cluster.ClusterService/HealthCheck"
    async with client._channel(None).request(path, Cardinality.UNARY_STREAM, cluster_pb2.HealthCheckRequest,
                                             cluster_pb2.HealthCheckProgress, timeout=10) as stream:
        await stream.send_message(request, end=True)
        async for reply in stream:
            replies.append(reply.message)


def test_logs_tail_and_dmesg(emulator, api):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    node = cluster.controlplanes[0]
    client = api(cluster)
    whole = b"".join(frame.bytes for frame in client.call(M + "Logs", machine_pb2.LogsRequest(namespace="system", id="etcd", tail_lines=-1)))
    tail = b"".join(frame.bytes for frame in client.call(M + "Logs", machine_pb2.LogsRequest(namespace="system", id="etcd", tail_lines=2)))
    assert whole.decode().splitlines()[-2:] == tail.decode().splitlines()
    assert client.call(M + "Logs", machine_pb2.LogsRequest(namespace="system", id="etcd", tail_lines=0)) == []
    with pytest.raises(GRPCError) as raised:
        client.call(M + "Logs", machine_pb2.LogsRequest(namespace="", id="etcd"))
    assert (raised.value.status, raised.value.message) == (Status.INVALID_ARGUMENT, "namespace can't be empty")
    container = "kube-system/kube-apiserver-%s:kube-apiserver" % node.hostname
    frames = client.call(M + "Logs", machine_pb2.LogsRequest(namespace="k8s.io", id=container, driver=common_pb2.CRI, tail_lines=-1))
    assert b"kube-apiserver started" in b"".join(frame.bytes for frame in frames)
    dmesg = client.call(M + "Dmesg", machine_pb2.DmesgRequest())
    assert len(dmesg) > 10 and all(frame.bytes.startswith(b"kern:") for frame in dmesg)
    assert client.call(M + "Dmesg", machine_pb2.DmesgRequest(tail=True)) == []


def test_label_queries_services_and_diagnostics(emulator, api):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    node = cluster.controlplanes[0]
    client = api(cluster)
    cluster.set_resource_labels(node, "NodeAddresses.net.talos.dev", "current", {"kind": "current", "rank": "10"})
    cluster.set_resource_labels(node, "NodeAddresses.net.talos.dev", "routed", {"kind": "routed", "rank": "9"})
    op = resource_pb2.LabelTerm.Operation

    def listed(*terms):
        request = state_pb2.ListRequest(namespace="network", type="NodeAddresses.net.talos.dev")
        request.options.label_query.add(terms=[resource_pb2.LabelTerm(**term) for term in terms])
        return sorted(reply.resource.metadata.id for reply in client.call("cosi.resource.State/List", request))

    assert listed({"key": "kind", "op": op.EXISTS}) == ["current", "routed"]
    assert listed({"key": "kind", "op": op.EXISTS, "invert": True}) == ["accumulative", "default"]
    assert listed({"key": "kind", "op": op.EQUAL, "value": ["routed"]}) == ["routed"]
    assert listed({"key": "kind", "op": op.IN, "value": ["current", "x"]}) == ["current"]
    assert listed({"key": "rank", "op": op.LT_NUMERIC, "value": ["10"]}) == ["routed"]
    assert listed({"key": "rank", "op": op.LT, "value": ["10"]}) == []

    services = client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace="runtime", type="Services.v1alpha1.talos.dev"))
    assert {reply.resource.metadata.id for reply in services} == set(node.services)
    cluster.add_diagnostic(node, "address-overlap", "overlap", ["a", "b"])
    diagnostics = client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace="runtime", type="Diagnostics.runtime.talos.dev"))
    assert [(reply.resource.metadata.id, reply.resource.spec.yaml_spec) for reply in diagnostics] == [
        ("address-overlap", "message: overlap\ndetails:\n- a\n- b\n")]
