# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd/quorum.py: quorum arithmetic and the quorum guard."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from etcd_fakes import ALARM_OF_TWO, FIVE, FOUR, ONE, THREE, TWO, etcd_client, member, status, status_reply
from fake_talos import fails_with


@pytest.mark.parametrize("voters, needed", [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_quorum(voters, needed):
    assert etcd_quorum.quorum(voters) == needed


def test_removal_from_three_healthy_members_is_safe():
    members = [member("cp-1", ONE), member("cp-2", TWO), member("cp-3", THREE)]
    statuses = dict((m["id"], status(m["id"], ONE)) for m in members)
    check = etcd_quorum.removal_check(members, statuses, members[2])
    assert check == {"safe": True, "voters_after": 2, "quorum_after": 2, "healthy_after": 2, "unhealthy": []}


def test_removing_a_healthy_member_next_to_an_unhealthy_one_is_refused():
    members = [member("cp-1", ONE), member("cp-2", TWO), member("cp-3", THREE)]
    statuses = {ONE: status(ONE, ONE), TWO: status(TWO, ONE), THREE: TalosError("unreachable")}
    check = etcd_quorum.removal_check(members, statuses, members[0])
    assert check["safe"] is False
    assert (check["voters_after"], check["quorum_after"], check["healthy_after"]) == (2, 2, 1)
    assert check["unhealthy"] == ["cp-3"]
    # Removing the unhealthy member itself leaves two healthy members: safe.
    assert etcd_quorum.removal_check(members, statuses, members[2])["safe"] is True


@pytest.mark.parametrize("voters, unhealthy, safe", [
    (1, 0, False),  # a one-member cluster has no quorum while its member is down
    (2, 0, False),  # two members need both
    (3, 0, True),
    (3, 1, False),  # the other unhealthy member plus the one going down: one of three left
    (4, 0, True),
    (4, 1, False),  # quorum of four is three
    (5, 1, True),
    (5, 2, False),
])
def test_outage_keeps_the_member_but_not_its_vote(voters, unhealthy, safe):
    members = [member("cp-%d" % i, "%016x" % i) for i in range(1, voters + 1)]
    statuses = dict((m["id"], status(m["id"], ONE)) for m in members)
    for m in members[voters - unhealthy:]:
        statuses[m["id"]] = TalosError("unreachable")
    check = etcd_quorum.outage_check(members, statuses, members[0])
    assert check["safe"] is safe
    assert check["voters_after"] == voters and check["quorum_after"] == etcd_quorum.quorum(voters)
    assert check["healthy_after"] == voters - 1 - unhealthy
    assert check["unhealthy"] == sorted(m["hostname"] for m in members[voters - unhealthy:])


def test_outage_of_a_learner_is_always_safe():
    members = [member("cp-1", ONE), member("cp-2", TWO, learner=True)]
    statuses = {ONE: status(ONE, ONE), TWO: TalosError("unreachable")}
    assert etcd_quorum.outage_check(members, statuses, members[1])["safe"] is True
    assert etcd_quorum.outage_check(members, statuses, members[0])["safe"] is False


def test_member_with_etcd_errors_counts_as_unhealthy():
    members = [member("cp-%d" % i, "%016x" % i) for i in range(1, 6)]
    statuses = dict((m["id"], status(m["id"], ONE)) for m in members)
    statuses[FOUR] = status(FOUR, ONE, errors=["memberID:4 alarm:NOSPACE"])
    statuses[FIVE] = status(FIVE, ONE, errors=["etcdserver: no leader"])
    # Five members, two unhealthy: removing a healthy one leaves 4 voters needing 3, only 2 healthy.
    assert etcd_quorum.removal_check(members, statuses, members[0])["safe"] is False
    # Removing an unhealthy one leaves 4 voters needing 3 with 3 healthy.
    assert etcd_quorum.removal_check(members, statuses, members[4])["safe"] is True


def test_learners_neither_vote_nor_block_their_removal():
    members = [member("cp-1", ONE), member("cp-2", TWO, learner=True)]
    statuses = {ONE: status(ONE, ONE), TWO: TalosError("not started")}
    assert etcd_quorum.removal_check(members, statuses, members[1])["safe"] is True
    # The last voting member cannot go without losing etcd.
    check = etcd_quorum.removal_check(members, statuses, members[0])
    assert check["safe"] is False and check["voters_after"] == 0 and check["quorum_after"] == 1


def let_go(client, node="10.5.0.1", removal=False, force=False):
    guard = etcd_quorum.QuorumGuard(client, force_quorum_loss=force)
    return guard.let_node_go(node, "reboot control-plane node %s" % node, removal=removal)


def refusal(client, **kwargs):
    with pytest.raises(etcd_quorum.QuorumLossRefused) as raised:
        let_go(client, **kwargs)
    return raised.value


def test_a_worker_has_nothing_to_guard():
    client = etcd_client({}, member_list_error=fails_with("Unimplemented", "member list is only available on control plane nodes"))
    assert let_go(client, "10.5.0.9") == {"controlplane": False, "etcd_gate_open": True, "quorum": None}


def test_an_unreadable_member_list_closes_the_guard():
    client = etcd_client({}, member_list_error=fails_with("Unknown", "etcdserver: no leader"))
    refused = refusal(client)
    assert refused.message == ("Refusing to reboot control-plane node 10.5.0.1: its etcd member list cannot be read "
                               "(machine.MachineService/EtcdMemberList failed on node 10.5.0.1 with Unknown: etcdserver: "
                               "no leader), so etcd may have lost quorum already; fix the unhealthy members first, or set "
                               "force_quorum_loss: true to go ahead anyway.")
    assert refused.to_result() == {"controlplane": True, "etcd_gate_open": False, "quorum": None}
    assert let_go(client, force=True)["etcd_gate_open"] is False


def test_an_outage_of_a_healthy_three_member_cluster_is_safe():
    client = etcd_client({"cp-1": True, "cp-2": True, "cp-3": True})
    assert let_go(client) == {"controlplane": True, "etcd_gate_open": True, "quorum": {
        "safe": True, "voters_after": 3, "quorum_after": 2, "healthy_after": 2, "unhealthy": []}}
    assert [(call.via, call.node, call.kwargs["deadline"]) for call in client.calls_to(rpc.ETCD_STATUS)] == [
        ("call_many", "10.5.0.%d" % index, etcd.HEALTH_PROBE_SECONDS) for index in (1, 2, 3)]


def test_an_outage_next_to_an_unhealthy_member_is_refused_unless_forced():
    client = etcd_client({"cp-1": True, "cp-2": True, "cp-3": False})
    refused = refusal(client)
    assert refused.message == (
        "Refusing to reboot control-plane node 10.5.0.1: etcd would keep 3 voting members and need 2 of them healthy "
        "for quorum, but only 1 member other than cp-1 is healthy (not healthy: cp-3 - unreachable); fix the unhealthy members "
        "first, or set force_quorum_loss: true to go ahead anyway.")
    assert refused.to_result()["etcd_gate_open"] is False and refused.to_result()["quorum"]["unhealthy"] == ["cp-3"]
    forced = let_go(client, force=True)
    assert forced["etcd_gate_open"] is False and forced["quorum"]["safe"] is False


@pytest.mark.parametrize("count", [1, 2])
def test_one_and_two_member_clusters_cannot_spare_a_member(count):
    client = etcd_client(dict(("cp-%d" % i, True) for i in range(1, count + 1)))
    members = "1 voting member" if count == 1 else "%d voting members" % count
    assert "etcd would keep %s and need %d of them healthy" % (members, count) in refusal(client).message


def test_the_guard_names_the_member_an_alarm_names_not_every_member_listing_it():
    client = etcd_client({"cp-1": True, "cp-2": True, "cp-3": True})
    for index in (1, 2, 3):
        client.answer(rpc.ETCD_STATUS, status_reply(index, 1, errors=[ALARM_OF_TWO[index % 2]]), node="10.5.0.%d" % index)
    refused = refusal(client)
    assert refused.message == (
        "Refusing to reboot control-plane node 10.5.0.1: etcd would keep 3 voting members and need 2 of them healthy "
        "for quorum, but only 1 member other than cp-1 is healthy (not healthy: cp-2 - memberID:2 alarm:NOSPACE); fix the "
        "unhealthy members first, or set force_quorum_loss: true to go ahead anyway.")
    assert refused.result["quorum"]["unhealthy"] == ["cp-2"]
    # cp-2 itself may go: cp-1 and cp-3 are healthy although their statuses list its alarm.
    client.answer(rpc.HOSTNAME, [machine_pb2.Hostname(hostname="cp-2")])
    assert let_go(client, "10.5.0.2")["etcd_gate_open"] is True


def test_a_removal_uses_the_removal_arithmetic():
    # Removing cp-1 from three leaves two voters that both must be healthy.
    client = etcd_client({"cp-1": True, "cp-2": True, "cp-3": False})
    assert refusal(client, removal=True).result["quorum"]["voters_after"] == 2
    # Removing the unhealthy member itself is safe.
    client.answer(rpc.HOSTNAME, [machine_pb2.Hostname(hostname="cp-3")])
    assert let_go(client, "10.5.0.3", removal=True)["etcd_gate_open"] is True


def test_the_last_member_never_leaves_even_when_forced():
    refused = refusal(etcd_client({"cp-1": True}), removal=True, force=True)
    assert refused.message.startswith("Refusing to reboot control-plane node 10.5.0.1: cp-1 is the last voting etcd "
                                      "member, and etcd cannot lose its last member whatever force_quorum_loss says;")
    # Its outage can be forced: the member stays.
    assert let_go(etcd_client({"cp-1": True}), force=True)["etcd_gate_open"] is False


def test_a_learner_may_always_go():
    client = etcd_client({"cp-1": True, "cp-2": False}, hostname="cp-2", learners=("cp-2",))
    assert let_go(client, "10.5.0.2", removal=True)["etcd_gate_open"] is True


def test_a_node_that_is_no_member_is_not_guarded():
    assert let_go(etcd_client({"cp-1": True}, hostname="cp-9"), "10.5.0.9") == {
        "controlplane": True, "etcd_gate_open": True, "quorum": None}
