# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the lifecycle actions: guard before any change, failures after the request, reset plans."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosApiError,
    TalosConnectionError,
    TalosError,
    TalosTimeoutError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import ActionRecorder, FakeTalos, cosi_state, fails_with, in_turn, resource as fake_resource

MACHINE_SERVICE = "machine.MachineService/"
UNREACHABLE = TalosConnectionError("unreachable", code="Unavailable")


def healthy_status(member_id):
    return [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(member_id=member_id, leader=1))]


def node_client(members=None, **answers):
    """A FakeTalos of one node running v1.14.0 as cp-1, boot boot-1; ``answers`` by MachineService method name.

    ``members`` ({name: healthy}, member i at 10.5.0.i) makes it a control plane; else it runs no etcd.
    """
    client = FakeTalos(answers={rpc.ETCD_MEMBER_LIST: fails_with("Unimplemented", "member list is only available on control plane nodes"),
                                rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))],
                                MACHINE_SERVICE + "Hostname": [machine_pb2.Hostname(hostname="cp-1")],
                                MACHINE_SERVICE + "Read": b"boot-1\n"})
    for name, answer in answers.items():
        client.answer(MACHINE_SERVICE + name, answer)
    if members is not None:
        client.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
            machine_pb2.EtcdMember(id=i, hostname=n, client_urls=["https://10.5.0.%d:2379" % i]) for i, n in enumerate(members, 1)])])
        for i, healthy in enumerate(members.values(), 1):
            client.answer(rpc.ETCD_STATUS, healthy_status(i) if healthy else UNREACHABLE, node="10.5.0.%d" % i)
    return client


def mutations(client):
    return [name for name in client.names() if name in ("Reboot", "Shutdown", "Reset", "Rollback")]


def test_check_mode_reboot_of_a_worker_reads_and_sends_nothing():
    client = node_client()
    result = lifecycle.reboot(client, "10.5.0.9", check_mode=True)
    assert result == {"changed": True, "mode": "default", "boot_id_before": "boot-1", "boot_id_after": None,
                      "elapsed": None, "actor_id": None, "controlplane": False, "etcd_gate_open": True, "quorum": None}
    assert mutations(client) == []


def test_the_guard_refuses_before_anything_is_sent():
    client = node_client(members={"cp-1": True, "cp-2": True, "cp-3": False})
    with pytest.raises(etcd_quorum.QuorumLossRefused, match="^Refusing to shut down control-plane node 10.5.0.1: etcd would "
                       "keep 3 voting member"):
        lifecycle.shutdown(client, "10.5.0.1")
    assert mutations(client) == []


def test_a_wait_that_fails_after_the_request_keeps_the_result(monkeypatch):
    client = node_client(Reboot=[machine_pb2.Reboot(actor_id="a1")])

    def never_back(client, node, boot_id, waiter):
        raise TalosTimeoutError("Timed out after 5 seconds waiting for node 10.5.0.9 to reboot.", code="DeadlineExceeded")

    monkeypatch.setattr(lifecycle.waits, "wait_for_reboot", never_back)
    with pytest.raises(ActionFailed) as raised:
        lifecycle.reboot(client, "10.5.0.9", wait_timeout=5)
    assert raised.value.message == ("The reboot of node 10.5.0.9 was requested but the node is not back as expected: "
                                    "Timed out after 5 seconds waiting for node 10.5.0.9 to reboot.")
    result = raised.value.to_result()
    assert result["actor_id"] == "a1" and result["code"] == "DeadlineExceeded" and result["changed"] is True


def test_force_mode_needs_talos_v1_12():
    client = node_client(Version=[machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.11.3"))])
    with pytest.raises(TalosError, match="^mode: force needs Talos v1.12 or newer, but node 10.5.0.9 runs v1.11.3"):
        lifecycle.reboot(client, "10.5.0.9", mode="force")
    assert client.names() == ["Version"]


def test_a_refused_rollback_changed_nothing():
    client = node_client(Rollback=TalosApiError("cannot rollback to \"B\", label does not exist", code="Unknown"))
    with pytest.raises(ActionFailed) as raised:
        lifecycle.rollback(client, "10.5.0.9")
    assert raised.value.message.startswith("Node 10.5.0.9 cannot roll back from v1.14.0: cannot rollback")
    assert raised.value.to_result()["changed"] is False and raised.value.code == "Unknown"


# -- the quorum wait -------------------------------------------------------------


def recovering_client(unhealthy_asks):
    """A control plane of three whose cp-3 is unhealthy for the first ``unhealthy_asks`` status reads."""
    client = node_client(members={"cp-1": True, "cp-2": True, "cp-3": False}, Reboot=[machine_pb2.Reboot(actor_id="a1")])
    client.answer(rpc.ETCD_STATUS, in_turn(*[UNREACHABLE] * unhealthy_asks + [healthy_status(3)]), node="10.5.0.3")
    return client


def test_the_quorum_wait_asks_again_until_etcd_spares_the_node(clock):
    client = recovering_client(unhealthy_asks=4)
    lines = []
    result = lifecycle.reboot(client, "10.5.0.1", quorum_wait_timeout=30, progress=lines.append)
    assert result["etcd_gate_open"] is True and result["actor_id"] == "a1"
    assert client.names().count("EtcdMemberList") == 5 and mutations(client) == ["Reboot"]
    # Once the wait lasts a few seconds, progress says why etcd cannot spare the node, then that it does.
    why = ("waiting for etcd to spare 10.5.0.1: etcd would keep 3 voting members and need 2 of them healthy for quorum, "
           "but only 1 member other than cp-1 is healthy (not healthy: cp-3 - unreachable)")
    assert lines == [why + " (6 s)", why + " → spared (8 s)"]


def test_the_quorum_wait_ends_in_the_last_refusal(clock):
    client = recovering_client(unhealthy_asks=100)
    with pytest.raises(etcd_quorum.QuorumLossRefused) as refused:
        lifecycle.reboot(client, "10.5.0.1", quorum_wait_timeout=5)
    assert refused.value.message.startswith("Refusing to reboot control-plane node 10.5.0.1: etcd would keep 3 voting")
    assert refused.value.message.endswith("to go ahead anyway. The guard still refused after 5 seconds of waiting "
                                          "(quorum_wait_timeout).")
    assert refused.value.to_result()["etcd_gate_open"] is False and mutations(client) == []


def test_without_a_quorum_wait_the_guard_refuses_at_once(clock):
    client = recovering_client(unhealthy_asks=1)
    with pytest.raises(etcd_quorum.QuorumLossRefused, match="force_quorum_loss: true to go ahead anyway.$"):
        lifecycle.reboot(client, "10.5.0.1")
    assert client.names().count("EtcdMemberList") == 1


def test_a_refusal_no_wait_changes_is_not_waited_for(clock):
    client = node_client(members={"cp-1": True})
    with pytest.raises(etcd_quorum.QuorumLossRefused, match="is the last voting etcd member"):
        etcd_quorum.guard(client, "10.5.0.1", "gracefully reset", removal=True, quorum_wait_timeout=60)
    assert client.names().count("EtcdMemberList") == 1 and clock["t"] == 1000.0


# -- several nodes in one task ---------------------------------------------------------

MACHINE_TYPES = "MachineTypes.config.talos.dev"


def typed_nodes(**types):
    """A FakeTalos targeting nodes whose machine types are ``types`` (node address with _ for .: type)."""
    fake = FakeTalos(nodes=[name.replace("_", ".") for name in types])
    for name, machine_type in types.items():
        fake.answer(rpc.COSI_GET, cosi_state(fake_resource("config", MACHINE_TYPES, "machine-type", machine_type)),
                    node=name.replace("_", "."))
    return fake


def test_control_planes_go_one_at_a_time_and_workers_beside_them():
    client = typed_nodes(**{"10_5_0_2": "controlplane", "10_5_0_3": "controlplane", "10_5_0_4": "init",
                            "10_5_0_5": "worker", "10_5_0_6": "worker"})
    act = ActionRecorder(changed=client.nodes)
    lines = []
    lifecycle.on_nodes(client, client.nodes, act, max_concurrency=5, progress=lines.append)
    control_planes = {"10.5.0.2", "10.5.0.3", "10.5.0.4"}
    assert all(len(control_planes.intersection(acting)) <= 1 for acting in act.overlaps)
    assert max(len(acting) for acting in act.overlaps) > 1
    assert len(lines) == 2 and all("control planes go one at a time" in line for line in lines)


def test_without_wait_a_second_control_plane_is_refused():
    client = typed_nodes(**{"10_5_0_2": "controlplane", "10_5_0_3": "controlplane", "10_5_0_5": "worker"})
    act = ActionRecorder(changed=client.nodes)
    with pytest.raises(ActionFailed) as failed:
        lifecycle.on_nodes(client, client.nodes, act, max_concurrency=3, waited=False)
    nodes = failed.value.to_result()["nodes"]
    (refused,) = [node for node, result in nodes.items() if result.get("failed")]
    assert refused in ("10.5.0.2", "10.5.0.3") and nodes["10.5.0.5"]["changed"] is True
    assert "without wait: the etcd quorum guard cannot see" in nodes[refused]["msg"]
    assert sorted(set(node for acting in act.overlaps for node in acting)) == sorted(set(client.nodes) - {refused})


def test_without_wait_control_planes_that_did_not_reboot_go_in_turn():
    client = typed_nodes(**{"10_5_0_2": "controlplane", "10_5_0_3": "controlplane"})
    acted = []

    def apply_without_reboot(node_client, node):
        acted.append(node)
        return {"changed": True, "rebooted": False}

    result = lifecycle.on_nodes(client, client.nodes, apply_without_reboot, max_concurrency=2, waited=False)
    assert sorted(acted) == ["10.5.0.2", "10.5.0.3"] and not any(r.get("failed") for r in result["nodes"].values())
    # One that did reboot still stops the next.
    with pytest.raises(ActionFailed, match="without wait"):
        lifecycle.on_nodes(client, client.nodes, lambda c, n: {"changed": True, "rebooted": True}, max_concurrency=2,
                           waited=False)


def test_one_node_acted_on_is_at_the_top_and_a_list_of_one_under_nodes_only():
    client = FakeTalos(nodes=["10.5.0.5"])
    assert lifecycle.on_nodes(client, ["10.5.0.5"], ActionRecorder(changed=["10.5.0.5"]), max_concurrency=32) == {
        "changed": True, "node_was": "10.5.0.5"}
    listed = FakeTalos(nodes=["10.5.0.5"], nodes_listed=True)
    assert lifecycle.on_nodes(listed, ["10.5.0.5"], ActionRecorder(changed=["10.5.0.5"]), max_concurrency=32) == {
        "changed": True, "nodes": {"10.5.0.5": {"changed": True, "node_was": "10.5.0.5"}}}
