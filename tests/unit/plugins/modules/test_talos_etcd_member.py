# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_etcd_member: removal methods, the quorum guard, leadership and membership waits."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosConnectionError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_etcd_member
from fake_talos import FakeTalos
from module_fakes import run_task


class Cluster:
    """Control planes cp-1..cp-N at 10.5.0.1..N with member IDs 1..N; cp-1 leads. ``down`` nodes do not answer.

    ``client`` is a FakeTalos targeting ``nodes`` whose etcd answers read and change this state.
    """

    def __init__(self, count=3, down=(), learners=(), nodes=("10.5.0.1",)):
        self.members = [dict(id=i, hostname="cp-%d" % i, address="10.5.0.%d" % i, learner=i in learners)
                        for i in range(1, count + 1)]
        self.down = set(down)
        self.leader = 1
        self.client = FakeTalos(nodes=list(nodes))
        for method, answer in ((rpc.HOSTNAME, self._hostname), (rpc.ETCD_MEMBER_LIST, self._member_list), (rpc.ETCD_STATUS, self._status),
                               (rpc.ETCD_LEAVE_CLUSTER, self._leave), (rpc.ETCD_REMOVE_MEMBER_BY_ID, self._remove),
                               (rpc.ETCD_FORFEIT_LEADERSHIP, self._forfeit)):
            self.client.answer(method, self._if_up(answer))

    def _member_at(self, node):
        return next(m for m in self.members if m["address"] == node)

    def _if_up(self, answer):
        def answer_if_up(request, node):
            if node in self.down:
                return TalosConnectionError("node %s is unavailable" % node, code="Unavailable", node=node)
            return answer(request, node)
        return answer_if_up

    def _hostname(self, _request, node):
        return [machine_pb2.Hostname(hostname=self._member_at(node)["hostname"])]

    def _member_list(self, _request, _node):
        return [machine_pb2.EtcdMembers(members=[
            machine_pb2.EtcdMember(id=m["id"], hostname=m["hostname"], is_learner=m["learner"],
                                   client_urls=["https://%s:2379" % m["address"]],
                                   peer_urls=["https://%s:2380" % m["address"]]) for m in self.members])]

    def _status(self, _request, node):
        member = self._member_at(node)
        return [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
            member_id=member["id"], leader=self.leader, is_learner=member["learner"]))]

    def _leave(self, _request, node):
        self.members.remove(self._member_at(node))
        return [machine_pb2.EtcdLeaveCluster()]

    def _remove(self, request, _node):
        self.members = [m for m in self.members if m["id"] != request.member_id]
        return [machine_pb2.EtcdRemoveMemberByID()]

    def _forfeit(self, _request, node):
        if self._member_at(node)["id"] != self.leader:
            return [machine_pb2.EtcdForfeitLeadership()]
        successor = next(m for m in self.members if m["id"] != self.leader and not m["learner"])
        self.leader = successor["id"]
        return [machine_pb2.EtcdForfeitLeadership(member=successor["hostname"])]

    def mutations(self):
        return [(call.method.rsplit("/", 1)[-1], call.node) for call in self.client.calls
                if call.method in (rpc.ETCD_LEAVE_CLUSTER, rpc.ETCD_REMOVE_MEMBER_BY_ID, rpc.ETCD_FORFEIT_LEADERSHIP)]

    def names(self):
        return [m["hostname"] for m in self.members]


def run(cluster, **params):
    try:
        options = dict(wait=False, wait_timeout=5, timeout=5)
        options.update(params)
        succeeded, result, module = run_task(talos_etcd_member, cluster.client, **options)
    finally:
        # The health probes ask every member at once, bounded by the timeout option.
        assert all((call.via, call.kwargs["deadline"]) == ("call_many", 5) for call in cluster.client.calls_to(rpc.ETCD_STATUS))
    result["warnings"] = module.warnings
    return succeeded, result


def test_absent_leaves_through_the_members_own_node_then_is_idempotent():
    cluster = Cluster()
    ok, result = run(cluster, member="cp-3", state="absent")
    assert ok and result["changed"] is True and result["method"] == "leave"
    assert cluster.mutations() == [("EtcdLeaveCluster", "10.5.0.3")]
    assert [m["hostname"] for m in result["members_before"]] == ["cp-1", "cp-2", "cp-3"]
    assert [m["hostname"] for m in result["members_after"]] == ["cp-1", "cp-2"]
    assert result["leader"] == {"id": "0000000000000001", "hostname": "cp-1"}
    assert result["diff"]["after"] == {"members": ["cp-1", "cp-2"]}

    cluster.client.calls = []
    ok, result = run(cluster, member="cp-3", state="absent")
    assert ok and result["changed"] is False and result["member"] is None and cluster.mutations() == []


def test_auto_removes_by_id_through_a_healthy_member_when_the_node_is_gone():
    cluster = Cluster(count=5, down=["10.5.0.5"])
    ok, result = run(cluster, member="0000000000000005", state="absent")
    assert ok and result["changed"] is True and result["method"] == "remove"
    assert cluster.mutations() == [("EtcdRemoveMemberByID", "10.5.0.1")]
    assert cluster.names() == ["cp-1", "cp-2", "cp-3", "cp-4"]
    assert result["members_before"][4]["healthy"] is False


def test_leave_of_an_unreachable_node_says_to_use_remove():
    cluster = Cluster(down=["10.5.0.3"])
    with pytest.raises(TalosError, match="does not answer .*use method=remove"):
        run(cluster, member="cp-3", state="absent", method="leave")
    assert cluster.mutations() == []


def test_removal_that_loses_quorum_is_refused_unless_forced():
    cluster = Cluster(down=["10.5.0.3"])
    with pytest.raises(etcd_quorum.QuorumLossRefused) as raised:
        run(cluster, member="cp-2", state="absent")
    assert raised.value.message == (
        "Refusing to remove etcd member cp-2: etcd would keep 2 voting members and need 2 of them healthy for quorum, "
        "but only 1 member other than cp-2 is healthy (not healthy: cp-3 - node 10.5.0.3 is unavailable); fix the unhealthy "
        "members first, or set force_quorum_loss: true to go ahead anyway.")
    assert raised.value.to_result()["quorum"]["safe"] is False
    assert cluster.mutations() == []

    ok, result = run(cluster, member="cp-2", state="absent", force_quorum_loss=True)
    assert ok and result["changed"] is True and result["quorum"]["safe"] is False
    assert cluster.names() == ["cp-1", "cp-3"]


@pytest.mark.parametrize("force_quorum_loss", [False, True])
def test_the_last_member_is_never_removed(force_quorum_loss):
    cluster = Cluster(count=1)
    with pytest.raises(etcd_quorum.QuorumLossRefused, match="cp-1 is the last voting etcd member"):
        run(cluster, state="absent", force_quorum_loss=force_quorum_loss)
    assert cluster.mutations() == []


def test_check_mode_predicts_the_removal_without_calling_it():
    cluster = Cluster()
    ok, result = run(cluster, check_mode=True, member="cp-2", state="absent")
    assert ok and result["changed"] is True and result["method"] == "leave"
    assert [m["hostname"] for m in result["members_after"]] == ["cp-1", "cp-3"]
    assert cluster.mutations() == [] and cluster.names() == ["cp-1", "cp-2", "cp-3"]


def test_forfeit_moves_leadership_once():
    cluster = Cluster()
    ok, result = run(cluster, forfeit_leadership=True)
    assert ok and result["changed"] is True and result["new_leader"] == "cp-2"
    assert result["leader"] == {"id": "0000000000000002", "hostname": "cp-2"}
    assert cluster.mutations() == [("EtcdForfeitLeadership", "10.5.0.1")]

    cluster.client.calls = []
    ok, result = run(cluster, forfeit_leadership=True)
    assert ok and result["changed"] is False and cluster.mutations() == []


def test_forfeit_with_a_single_member_fails_clearly():
    cluster = Cluster(count=1)
    with pytest.raises(TalosError, match="only voting member"):
        run(cluster, forfeit_leadership=True)


def test_present_reports_without_changing():
    cluster = Cluster()
    ok, result = run(cluster, member="cp-2")
    assert ok and result["changed"] is False and result["member"]["hostname"] == "cp-2"
    assert cluster.mutations() == []


def test_present_without_wait_fails_for_a_learner_or_a_stranger():
    with pytest.raises(TalosError, match="cp-3 is a learner that caught up with the cluster and has not been promoted"):
        run(Cluster(learners=[3]), member="cp-3")
    with pytest.raises(TalosError, match="cp-9 is not a member"):
        run(Cluster(), member="cp-9")


def test_present_waits_until_the_member_joins(monkeypatch):
    cluster = Cluster(learners=[3])
    polls = []

    class Waiter:
        """Polls at once, making cp-3 a voter after the first poll."""

        def __init__(self, timeout, interval=2.0, progress=None):
            assert timeout == 5 and progress is not None

        def until(self, poll, what, subject, tolerate=None):
            assert what == "cp-3 to be a voting etcd member"
            while True:
                seen = poll()
                polls.append(seen.done)
                if seen.done:
                    return seen.value
                cluster.members[2]["learner"] = False

    monkeypatch.setattr(etcd_membership, "Waiter", Waiter)
    ok, result = run(cluster, member="cp-3", wait=True)
    assert ok and result["changed"] is False and polls == [False, True]
    assert result["members_before"][2]["is_learner"] is True and result["members_after"][2]["is_learner"] is False


def test_present_in_check_mode_only_warns_about_a_missing_member(monkeypatch):
    cluster = Cluster()
    monkeypatch.setattr(etcd_membership, "Waiter", lambda *args, **kwargs: pytest.fail("check mode must not wait"))
    ok, result = run(cluster, check_mode=True, member="cp-9", wait=True)
    assert ok and result["changed"] is False and result["member"] is None
    assert result["warnings"] == ["etcd member cp-9 is not a voting member yet (cp-9 is not a member (members: cp-1, cp-2, "
                                  "cp-3)); check mode does not wait for it."]


def test_forced_removal_needs_a_healthy_member_to_go_through():
    cluster = Cluster(down=["10.5.0.2", "10.5.0.3"])
    with pytest.raises(TalosError, match="Cannot remove etcd member cp-1: no other member is healthy to remove it through."):
        run(cluster, member="cp-1", state="absent", method="remove", force_quorum_loss=True)
    assert cluster.mutations() == []


def test_several_nodes_are_refused():
    cluster = Cluster(nodes=["10.5.0.1", "10.5.0.2"])
    with pytest.raises(TalosConfigError, match="talks to one control-plane node but 2 nodes are targeted"):
        run(cluster, member="cp-2", state="absent")
    assert cluster.client.calls == []


@pytest.mark.parametrize("member_id", ["0000000000000003", "0x3", "3", 3])
def test_member_id_removes_through_the_tasks_node_even_while_the_member_answers(member_id):
    cluster = Cluster(nodes=["10.5.0.2"])
    ok, result = run(cluster, member_id=member_id, state="absent")
    assert ok and result["changed"] is True and result["method"] == "remove"
    assert result["member"]["hostname"] == "cp-3"
    assert cluster.mutations() == [("EtcdRemoveMemberByID", "10.5.0.2")]

    cluster.client.calls = []
    ok, result = run(cluster, member_id=member_id, state="absent")
    assert ok and result["changed"] is False and cluster.mutations() == []


def test_member_id_in_check_mode_removes_nothing():
    cluster = Cluster(down=["10.5.0.3"])
    ok, result = run(cluster, check_mode=True, member_id=3, state="absent")
    assert ok and result["changed"] is True and result["method"] == "remove"
    assert cluster.mutations() == [] and cluster.names() == ["cp-1", "cp-2", "cp-3"]


def test_member_by_address_of_a_node_that_is_off():
    cluster = Cluster(down=["10.5.0.3"])
    ok, result = run(cluster, member="10.5.0.3", state="absent", method="remove")
    assert ok and result["member"]["hostname"] == "cp-3"
    assert cluster.mutations() == [("EtcdRemoveMemberByID", "10.5.0.1")]


@pytest.mark.parametrize("member_id", ["cp-3", "", 0, -1, 2 ** 64, True, "0x"])
def test_a_member_id_that_is_no_id_is_refused_before_any_call(member_id):
    cluster = Cluster()
    with pytest.raises(TalosError, match="is not an etcd member ID"):
        run(cluster, member_id=member_id, state="absent")
    assert cluster.client.calls == []
