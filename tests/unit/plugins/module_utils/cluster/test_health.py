# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for module_utils/cluster/health.py: node lists, the Talos checks, rounds and the server progress stream."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import health
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosUnreachableError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_pb2
from fake_talos import FakeTalos, cosi_state, fails_with, resource

CP1, CP2, W1 = "10.5.0.2", "10.5.0.3", "10.5.0.5"
MEMBERS = [
    resource("cluster", "Members.cluster.talos.dev", "cp-1", {"hostname": "cp-1", "addresses": [CP1], "machineType": "controlplane"}),
    resource("cluster", "Members.cluster.talos.dev", "w-1", {"hostname": "w-1", "addresses": [W1], "machineType": "worker"}),
]


class ClusterState:
    """Every node healthy unless told: ``down``, ``services`` overrides, etcd ``members`` (addresses), ``diagnostics``,
    ``stage``; the answers of ``talos(state)`` read it at every call."""

    def __init__(self):
        self.down = set()
        # Machines that are off: nothing answers for them (the endpoint cannot dial them).
        self.off = set()
        self.services = {}
        self.members = [CP1, CP2]
        self.diagnostics = {}
        self.stage = {}


def talos(cluster):
    """A client of the cluster in ``cluster`` (a ClusterState)."""
    def service_list(_request, node):
        services = []
        for service_id in ("etcd", "kubelet"):
            state, healthy = cluster.services.get((node, service_id), ("Running", True))
            services.append(machine_pb2.ServiceInfo(id=service_id, state=state, health=machine_pb2.ServiceHealth(healthy=healthy)))
        return [machine_pb2.ServiceList(services=services)]

    def etcd_members(_request, _node):
        members = [machine_pb2.EtcdMember(id=index + 1, hostname="cp-%d" % index, client_urls=["https://%s:2379" % address])
                   for index, address in enumerate(cluster.members)]
        return [machine_pb2.EtcdMembers(members=members)]

    def machine_status(request, node):
        status = resource("runtime", "MachineStatuses.runtime.talos.dev", "machine",
                          "stage: %s\nstatus:\n  ready: true\n" % cluster.stage.get(node, "running"))
        return cosi_state(status)(request, node)

    def listed(request, node):
        diagnostics = [resource("runtime", health.DIAGNOSTICS_TYPE, key, {"message": text, "details": []})
                       for key, text in cluster.diagnostics.get(node, {}).items()]
        return cosi_state(*MEMBERS + diagnostics)(request, node)

    def unless_down(answer):
        def on_node(request, node):
            if node in cluster.off:
                return TalosUnreachableError("Node %s is unreachable: connection refused." % node, code="Unavailable", node=node)
            return fails_with("Unavailable", "connection refused") if node in cluster.down else answer(request, node)
        return on_node

    def always(replies):
        return lambda _request, _node: replies

    answers = {
        rpc.SERVICE_LIST: service_list,
        rpc.ETCD_MEMBER_LIST: etcd_members,
        rpc.VERSION: always([machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))]),
        rpc.MEMORY: always([machine_pb2.Memory(meminfo=machine_pb2.MemInfo(memtotal=4000))]),
        rpc.STORAGE_DISKS: always([storage_pb2.Disks(disks=[storage_pb2.Disk(device_name="/dev/sda")])]),
        rpc.COSI_GET: machine_status,
        rpc.COSI_LIST: listed,
        # Nodes without an event stream: the rounds pause the whole interval (the emulator tests follow events).
        rpc.EVENTS: always(fails_with("Unimplemented", "unknown method Events")),
    }
    return FakeTalos(answers={method: unless_down(answer) for method, answer in answers.items()})


NODES = health.ClusterNodes([CP1, CP2], [W1], "options")


def states(checks):
    return [(check["name"], check["state"]) for check in checks]


def test_node_lists_from_options_or_discovery():
    nodes = health.nodes_to_check(talos(ClusterState()), [CP1], None, None)
    assert (nodes.control_planes, nodes.workers, nodes.source) == ([CP1], [], "options")
    nodes = health.nodes_to_check(talos(ClusterState()), None, None, CP1)
    assert (nodes.control_planes, nodes.workers, nodes.source) == ([CP1], [W1], "discovery")
    with pytest.raises(TalosConfigError, match="worker_nodes needs controlplane_nodes"):
        health.nodes_to_check(talos(ClusterState()), None, [W1], None)


def test_healthy_cluster_passes_every_check():
    checks, elapsed = health.run_talos_checks(talos(ClusterState()), NODES, timeout=0)
    assert states(checks) == [(name, "passed") for name, _description in health.TALOS_CHECKS]


@pytest.mark.parametrize("breaks, check, node, text", [
    (lambda c: c.services.update({(CP2, "etcd"): ("Preparing", False)}), "etcd_healthy", CP2, 'service "etcd" is Preparing'),
    (lambda c: c.members.remove(CP2), "etcd_members_are_control_planes", CP2, "not an etcd member"),
    (lambda c: c.members.append("10.5.0.9"), "etcd_members_are_control_planes", "10.5.0.9", "is not one of the control-plane nodes"),
    (lambda c: c.down.add(W1), "apid_ready", W1, "connection refused"),
    (lambda c: c.diagnostics.update({W1: {"address-overlap": "overlap"}}), "no_diagnostics", W1, "diagnostic address-overlap: overlap"),
    (lambda c: c.services.update({(CP1, "kubelet"): ("Running", False)}), "kubelet_healthy", CP1, 'service "kubelet" is Running, not healthy'),
    (lambda c: c.stage.update({W1: "booting"}), "boot_sequence_done", W1, "stage booting"),
])
def test_a_failing_check_is_named_and_later_ones_pend(breaks, check, node, text):
    cluster = ClusterState()
    breaks(cluster)
    with pytest.raises(ActionFailed) as raised:
        health.run_talos_checks(talos(cluster), NODES, timeout=0)
    failure = raised.value
    checks = failure.result["checks"]
    names = [name for name, _description in health.TALOS_CHECKS]
    position = names.index(check)
    assert states(checks) == ([(name, "passed") for name in names[:position]] + [(check, "failed")]
                              + [(name, "pending") for name in names[position + 1:]])
    assert checks[position]["nodes"] == [node] and text in checks[position]["message"]
    assert failure.message.startswith("Cluster health check %s (" % check) and node in failure.message
    assert (failure.result["failed_check"], failure.result["failed_nodes"], failure.code) == (check, [node], "DeadlineExceeded")


def test_rounds_repeat_until_the_fault_is_gone(monkeypatch):
    cluster = ClusterState()
    cluster.down.add(W1)
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        cluster.down.clear()
    monkeypatch.setattr(waits.time, "sleep", sleep)
    checks, _elapsed = health.run_talos_checks(talos(cluster), NODES, timeout=60, interval=2)
    # The node the failing check names does not answer: it is looked at again soon, not after the whole interval.
    assert sleeps == [waits.UNREACHABLE_RECHECK_SECONDS] and {check["state"] for check in checks} == {"passed"}


def test_a_long_wait_shows_which_check_holds_it_up(monkeypatch):
    cluster = ClusterState()
    cluster.services[(CP2, "etcd")] = ("Preparing", False)
    clock = {"now": 1000.0}

    def sleep(seconds):
        clock["now"] += seconds
        if clock["now"] >= 1008:
            cluster.services.clear()
    monkeypatch.setattr(waits.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(waits.time, "sleep", sleep)
    lines = []
    health.run_talos_checks(talos(cluster), NODES, timeout=60, interval=2, progress=lines.append)
    assert lines == ["cluster: waiting for etcd_healthy on 10.5.0.3 (6 s)",
                     "cluster: waiting for etcd_healthy on 10.5.0.3 → all checks passed (8 s)"]


# -- the survey before a rolling upgrade, and nodes left out ----------------------------------------------------


def test_a_survey_of_a_healthy_cluster_passes_every_check():
    survey = health.survey(talos(ClusterState()), NODES)
    assert survey.healthy and states(survey.checks) == [(name, "passed") for name, _description in health.TALOS_CHECKS]
    assert (survey.unhealthy, survey.unreachable) == ({}, [])


def test_a_survey_runs_every_check_and_names_every_unhealthy_node():
    cluster = ClusterState()
    cluster.services[(CP2, "etcd")] = ("Preparing", False)
    cluster.diagnostics[W1] = {"address-overlap": "host and pod addresses overlap"}
    survey = health.survey(talos(cluster), NODES)
    failed = [(check["name"], check["nodes"]) for check in survey.checks if check["state"] == "failed"]
    assert failed == [("etcd_healthy", [CP2]), ("no_diagnostics", [W1])]
    assert survey.unhealthy == {CP2: ['etcd_healthy: service "etcd" is Preparing'],
                                W1: ["no_diagnostics: diagnostic address-overlap: host and pod addresses overlap"]}
    assert survey.unreachable == [] and not survey.healthy
    assert survey.message() == (
        'The cluster is not healthy: etcd_healthy (etcd to be healthy) failed - 10.5.0.3: service "etcd" is Preparing; '
        "no_diagnostics (no diagnostics) failed - 10.5.0.5: diagnostic address-overlap: host and pod addresses overlap.")


@pytest.mark.parametrize("off, first_check", [(W1, "apid_ready"), (CP2, "etcd_healthy")])
def test_a_node_that_does_not_answer_is_asked_once(off, first_check):
    cluster = ClusterState()
    cluster.off.add(off)
    client = talos(cluster)
    survey = health.survey(client, NODES)
    assert survey.unreachable == [off]
    assert survey.unhealthy == {off: ["%s: Node %s is unreachable: connection refused." % (first_check, off)]}
    assert [call.node for call in client.calls].count(off) == 1
    # The etcd member of a control plane that is off is still one of the control planes'.
    assert [check["name"] for check in survey.checks if check["state"] == "failed"] == [first_check]


def test_ignored_nodes_are_neither_asked_nor_held_against_the_cluster():
    cluster = ClusterState()
    cluster.off.update([W1, CP2])
    client = talos(cluster)
    checks, _elapsed = health.run_talos_checks(client, NODES, timeout=0, ignored=[W1, CP2])
    assert {check["state"] for check in checks} == {"passed"}
    assert health.survey(client, NODES, ignored=[W1, CP2]).healthy
    assert {call.node for call in client.calls} == {CP1}


def test_a_node_ignored_is_left_out_but_the_others_still_count():
    cluster = ClusterState()
    cluster.off.add(W1)
    cluster.services[(CP2, "kubelet")] = ("Running", False)
    with pytest.raises(ActionFailed) as raised:
        health.run_talos_checks(talos(cluster), NODES, timeout=0, ignored=[W1])
    checks = raised.value.result["checks"]
    assert checks[-2]["name"] == "kubelet_healthy" and checks[-2]["nodes"] == [CP2]


def progress(*messages):
    return [cluster_pb2.HealthCheckProgress(message=message) for message in messages]


def test_server_progress_becomes_checks():
    server = FakeTalos(answers={rpc.CLUSTER_HEALTH_CHECK: progress(
        "waiting for etcd to be healthy: ...", "waiting for etcd to be healthy: OK",
        "waiting for coredns to report ready: ...", "waiting for coredns to report ready: OK")})
    checks, _elapsed = health.server_health_check(server, NODES, None, 300)
    assert states(checks) == [("etcd_healthy", "passed"), ("coredns_to_report_ready", "passed")]
    request = server.requests(rpc.CLUSTER_HEALTH_CHECK)[0]
    assert list(request.cluster_info.control_plane_nodes) == [CP1, CP2] and request.wait_timeout.seconds == 300


def test_server_failure_names_the_unfinished_check():
    server = FakeTalos(answers={rpc.CLUSTER_HEALTH_CHECK: progress(
        "waiting for etcd to be healthy: OK", "waiting for apid to be ready: ...",
        "waiting for apid to be ready: 1 error occurred:\n\t* 10.5.0.5: connection refused\n\n",
    ) + [fails_with("DeadlineExceeded", "context deadline exceeded")]})
    with pytest.raises(ActionFailed) as raised:
        health.server_health_check(server, NODES, None, 5)
    assert states(raised.value.result["checks"]) == [("etcd_healthy", "passed"), ("apid_ready", "failed")]
    assert raised.value.result["failed_check"] == "apid_ready" and raised.value.code == "DeadlineExceeded"
    assert "Cluster health check apid_ready" in raised.value.message and "10.5.0.5: connection refused" in raised.value.message
