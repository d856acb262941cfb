# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the etcd helpers: member lookup, quorum arithmetic, the quorum guard, leader detection."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common import waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import status as etcd_status
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import maintenance as etcd_maintenance
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConnectionError,
    TalosError,
    TalosUnimplementedError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import WaitTimedOut
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with, in_turn


def member(name, member_id, address=None, learner=False):
    address = address or "10.5.0.%d" % int(member_id, 16)
    return {"id": member_id, "hostname": name, "is_learner": learner,
            "peer_urls": ["https://%s:2380" % address], "client_urls": ["https://%s:2379" % address]}


def status(member_id, leader, errors=()):
    return {"member_id": member_id, "leader": leader, "is_learner": False, "errors": list(errors)}


ONE, TWO, THREE, FOUR, FIVE = ("%016x" % i for i in range(1, 6))


# Member IDs and lookup

def test_member_ids_round_trip_as_talosctl_prints_them():
    assert etcd.format_member_id(0x8e9e05c52164694d) == "8e9e05c52164694d"
    assert etcd.format_member_id(1) == "0000000000000001"
    assert etcd.parse_member_id("8E9E05C52164694D") == 0x8e9e05c52164694d
    assert etcd.parse_member_id("0x1") == 1
    assert etcd.parse_member_id("cp-1") is None
    assert etcd.parse_member_id("1" * 17) is None


def test_find_member_by_hostname_first_then_by_id():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    assert etcd.find_member(members, "cp-2")["id"] == TWO
    assert etcd.find_member(members, "1")["hostname"] == "cp-1"
    assert etcd.find_member(members, ONE)["hostname"] == "cp-1"
    assert etcd.find_member(members, "cp-9") is None
    assert etcd.find_member(members, "ff") is None
    # A hostname that also reads as hex still names the member with that hostname.
    named_like_an_id = [member("cp-1", ONE), member("2", THREE)]
    assert etcd.find_member(named_like_an_id, "2")["id"] == THREE


def test_member_address_comes_from_client_then_peer_urls():
    assert etcd.member_address(member("cp-1", ONE, address="10.5.0.7")) == "10.5.0.7"
    peer_only = dict(member("cp-1", ONE, address="10.5.0.8"), client_urls=[])
    assert etcd.member_address(peer_only) == "10.5.0.8"
    assert etcd.member_address(dict(peer_only, peer_urls=[])) is None


def test_list_members_converts_the_reply():
    client = FakeTalos(answers={etcd.MEMBER_LIST: [machine_pb2.EtcdMembers(members=[machine_pb2.EtcdMember(
        id=0x8e9e05c52164694d, hostname="cp-1", peer_urls=["https://10.5.0.2:2380"],
        client_urls=["https://10.5.0.2:2379"], is_learner=True)])]})
    assert etcd.list_members(client, "10.5.0.2") == [{
        "id": "8e9e05c52164694d", "hostname": "cp-1", "peer_urls": ["https://10.5.0.2:2380"],
        "client_urls": ["https://10.5.0.2:2379"], "is_learner": True}]
    (asked,) = client.calls
    assert (asked.via, asked.method, asked.node, asked.request.query_local) == ("call", etcd.MEMBER_LIST, "10.5.0.2", False)


def test_member_statuses_asks_each_members_node_and_keeps_errors():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    unreachable = TalosConnectionError("node 10.5.0.2 is unreachable", code="Unavailable")
    client = FakeTalos(answers={etcd_status.STATUS: [machine_pb2.EtcdStatus(
        member_status=machine_pb2.EtcdMemberStatus(member_id=1, leader=1, db_size=4096))]})
    client.answer(etcd_status.STATUS, unreachable, node="10.5.0.2")

    statuses = etcd_status.member_statuses(client, members, deadline=3)
    assert [(call.via, call.method, call.node, call.kwargs["deadline"]) for call in client.calls] == [
        ("call_many", etcd_status.STATUS, "10.5.0.1", 3), ("call_many", etcd_status.STATUS, "10.5.0.2", 3)]
    assert statuses[ONE]["leader"] == ONE and statuses[ONE]["db_size"] == 4096
    assert statuses[TWO] is unreachable
    assert etcd_status.healthy_ids(statuses) == {ONE}


# Quorum and leader

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


# etcd lists every alarm of the cluster in every member's status, spaced as its build of Go's text encoder writes it.
ALARM_OF_TWO = ("memberID:2 alarm:NOSPACE", "memberID: 2  alarm: NOSPACE ")


def test_alarms_are_read_whatever_their_spacing_and_other_errors_are_not_alarms():
    assert [etcd_status.parse_alarm(text) for text in ALARM_OF_TWO] == [(TWO, "NOSPACE")] * 2
    assert etcd_status.parse_alarm("memberID:10 alarm:CORRUPT") == ("%016x" % 10, "CORRUPT")
    assert etcd_status.parse_alarm("etcdserver: no leader") is None
    assert etcd_status.own_errors(status(ONE, ONE, errors=["etcdserver: no leader", ALARM_OF_TWO[1]])) == ["etcdserver: no leader"]


def test_an_alarm_every_status_lists_makes_only_the_member_it_names_unhealthy():
    members = [member("cp-%d" % i, "%016x" % i) for i in range(1, 6)]
    statuses = dict((m["id"], status(m["id"], ONE, errors=[ALARM_OF_TWO[i % 2]])) for i, m in enumerate(members))
    statuses[FIVE]["errors"].append("etcdserver: no leader")
    assert etcd_status.health_problems(statuses) == {ONE: [], TWO: ["memberID:2 alarm:NOSPACE"], THREE: [], FOUR: [],
                                                     FIVE: ["etcdserver: no leader"]}
    # cp-5 down: cp-1, cp-3 and cp-4 are healthy, the quorum of five.
    check = etcd_quorum.outage_check(members, statuses, members[4])
    assert (check["safe"], check["healthy_after"], check["unhealthy"]) == (True, 3, ["cp-2"])
    assert etcd_status.leader_id(statuses) == ONE
    view = etcd_membership.ClusterView(members, statuses)
    assert [m["healthy"] for m in view.with_health()] == [True, False, True, True, False]


def test_an_alarm_names_its_member_even_when_that_members_node_does_not_answer():
    members = [member("cp-1", ONE), member("cp-2", TWO), member("cp-3", THREE)]
    statuses = {ONE: status(ONE, ONE, errors=[ALARM_OF_TWO[0]]), TWO: TalosError("unreachable"),
                THREE: status(THREE, ONE, errors=[ALARM_OF_TWO[1]])}
    assert etcd_status.health_problems(statuses)[TWO] == ["unreachable", "memberID:2 alarm:NOSPACE"]


def test_learners_neither_vote_nor_block_their_removal():
    members = [member("cp-1", ONE), member("cp-2", TWO, learner=True)]
    statuses = {ONE: status(ONE, ONE), TWO: TalosError("not started")}
    assert etcd_quorum.removal_check(members, statuses, members[1])["safe"] is True
    # The last voting member cannot go without losing etcd.
    check = etcd_quorum.removal_check(members, statuses, members[0])
    assert check["safe"] is False and check["voters_after"] == 0 and check["quorum_after"] == 1


def test_leader_is_what_most_healthy_members_report():
    statuses = {ONE: status(ONE, TWO), TWO: status(TWO, TWO), THREE: status(THREE, ONE),
                FOUR: status(FOUR, ONE, errors=["stale"]), FIVE: TalosError("down")}
    assert etcd_status.leader_id(statuses) == TWO
    assert etcd_status.leader_id({ONE: status(ONE, None)}) is None


# The quorum guard

HOSTNAME = "machine.MachineService/Hostname"


def etcd_client(members, hostname="cp-1", member_list_error=None, learners=()):
    """A FakeTalos of a cluster of ``members`` ({name: healthy}, member i at 10.5.0.i, cp-1 leading) whose nodes
    all call themselves ``hostname``; ``member_list_error`` answers EtcdMemberList instead."""
    client = FakeTalos(answers={HOSTNAME: [machine_pb2.Hostname(hostname=hostname)]})
    client.answer(etcd.MEMBER_LIST, member_list_error or [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=index, hostname=name, is_learner=name in learners,
                               client_urls=["https://10.5.0.%d:2379" % index])
        for index, name in enumerate(members, 1)])])
    for index, healthy in enumerate(members.values(), 1):
        client.answer(etcd_status.STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(member_id=index, leader=1))]
                      if healthy else TalosConnectionError("unreachable", code="Unavailable"), node="10.5.0.%d" % index)
    return client


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
    assert [(call.via, call.node, call.kwargs["deadline"]) for call in client.calls_to(etcd_status.STATUS)] == [
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
        client.answer(etcd_status.STATUS, status_reply(index, 1, errors=[ALARM_OF_TWO[index % 2]]), node="10.5.0.%d" % index)
    refused = refusal(client)
    assert refused.message == (
        "Refusing to reboot control-plane node 10.5.0.1: etcd would keep 3 voting members and need 2 of them healthy "
        "for quorum, but only 1 member other than cp-1 is healthy (not healthy: cp-2 - memberID:2 alarm:NOSPACE); fix the "
        "unhealthy members first, or set force_quorum_loss: true to go ahead anyway.")
    assert refused.result["quorum"]["unhealthy"] == ["cp-2"]
    # cp-2 itself may go: cp-1 and cp-3 are healthy although their statuses list its alarm.
    client.answer(HOSTNAME, [machine_pb2.Hostname(hostname="cp-2")])
    assert let_go(client, "10.5.0.2")["etcd_gate_open"] is True


def test_a_removal_uses_the_removal_arithmetic():
    # Removing cp-1 from three leaves two voters that both must be healthy.
    client = etcd_client({"cp-1": True, "cp-2": True, "cp-3": False})
    assert refusal(client, removal=True).result["quorum"]["voters_after"] == 2
    # Removing the unhealthy member itself is safe.
    client.answer(HOSTNAME, [machine_pb2.Hostname(hostname="cp-3")])
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


# Member IDs from options, health and maintenance (talos_etcd_info, talos_etcd_maintenance)

def test_member_id_option_reads_hex_strings_and_decimal_integers():
    assert etcd.member_id_option("8e9e05c52164694d") == 0x8e9e05c52164694d
    assert etcd.member_id_option("0X1F") == 31
    assert etcd.member_id_option(31) == 31
    assert etcd.describe_ref(31) == "000000000000001f" and etcd.describe_ref("cp-1") == "cp-1"


def test_find_member_by_the_address_of_its_node():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    assert etcd.find_member(members, "10.5.0.2")["hostname"] == "cp-2"
    assert etcd.find_member(members, 2)["hostname"] == "cp-2"
    assert etcd.find_member(members, 9) is None


CP1, CP2, CP3 = "10.5.0.1", "10.5.0.2", "10.5.0.3"


def status_reply(member_id, leader, db_size=1000, in_use=400, errors=()):
    return [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=member_id, leader=leader, db_size=db_size, db_size_in_use=in_use, raft_index=7, raft_term=2,
        raft_applied_index=7, protocol_version="3.6.5", errors=list(errors)))]


def etcd_cluster(sizes=None, leader=1, **per_node):
    """A FakeTalos of three control planes (member IDs 1-3 at CP1-CP3); ``sizes`` maps a node to (db_size, in use)."""
    fake = FakeTalos(nodes=[CP1, CP2, CP3])
    for index, node in enumerate((CP1, CP2, CP3), 1):
        db_size, in_use = (sizes or {}).get(node, (1000, 400))
        fake.answer(etcd_status.STATUS, per_node.get(node) or status_reply(index, leader, db_size, in_use), node=node)
    fake.answer(etcd.MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=index, hostname="cp-%d" % index, client_urls=["https://%s:2379" % node])
        for index, node in enumerate((CP1, CP2, CP3), 1)])])
    fake.answer(etcd_status.ALARM_LIST, [machine_pb2.EtcdAlarm(member_alarms=[
        machine_pb2.EtcdMemberAlarm(member_id=2, alarm=machine_pb2.EtcdMemberAlarm.NOSPACE),
        machine_pb2.EtcdMemberAlarm(member_id=3, alarm=machine_pb2.EtcdMemberAlarm.NONE)])])
    fake.answer(etcd_maintenance.DEFRAGMENT, [machine_pb2.EtcdDefragment()])
    fake.answer(etcd_maintenance.ALARM_DISARM, [machine_pb2.EtcdAlarmDisarm(member_alarms=[
        machine_pb2.EtcdMemberAlarm(member_id=2, alarm=machine_pb2.EtcdMemberAlarm.NOSPACE)])])
    return fake


def test_info_has_a_status_per_node_and_keeps_the_one_that_did_not_answer():
    fake = etcd_cluster(**{CP2: fails_with("Unavailable", "connection refused")})
    warnings = []
    info = etcd_status.read_info(fake, [CP1, CP2, CP3], warn=warnings.append)
    assert [m["hostname"] for m in info["members"]] == ["cp-1", "cp-2", "cp-3"]
    assert info["alarms"] == [{"member_id": TWO, "alarm": "NOSPACE"}]
    first, second, third = info["status"]
    assert first == {"node": CP1, "member_id": ONE, "leader": ONE, "is_learner": False, "db_size": 1000, "db_size_in_use": 400,
                     "raft_term": 2, "raft_index": 7, "raft_applied_index": 7, "protocol_version": "3.6.5",
                     "storage_version": "", "errors": []}
    assert second["node"] == CP2 and second["member_id"] is None and second["db_size"] is None
    assert len(second["errors"]) == 1 and warnings == ["Node %s did not answer EtcdStatus: %s" % (CP2, second["errors"][0])]
    assert third["member_id"] == THREE


def test_info_shows_an_alarm_once_in_the_status_of_the_member_it_names():
    fake = etcd_cluster(**dict((node, status_reply(index, 1, errors=[ALARM_OF_TWO[index % 2]]))
                               for index, node in enumerate((CP1, CP2, CP3), 1)))
    fake.answer(etcd_status.STATUS, status_reply(3, 0, errors=["etcdserver: no leader", ALARM_OF_TWO[1]]), node=CP3)
    info = etcd_status.read_info(fake, [CP1, CP2, CP3])
    assert [entry["errors"] for entry in info["status"]] == [[], ["memberID:2 alarm:NOSPACE"], ["etcdserver: no leader"]]
    assert info["alarms"] == [{"member_id": TWO, "alarm": "NOSPACE"}]


def test_defragment_finds_the_leader_although_every_status_lists_an_alarm():
    fake = etcd_cluster(**dict((node, status_reply(index, 2, errors=[ALARM_OF_TWO[0]]))
                               for index, node in enumerate((CP1, CP2, CP3), 1)))
    etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True)
    assert [call.node for call in fake.calls_to(etcd_maintenance.DEFRAGMENT)] == [CP1, CP3, CP2]


def test_info_fails_with_the_error_when_no_node_answers():
    fake = etcd_cluster(**{CP1: fails_with("Unimplemented", "etcd status is only available on control plane nodes")})
    with pytest.raises(TalosUnimplementedError):
        etcd_status.read_info(fake, [CP1])


def test_defragment_runs_one_member_at_a_time_the_leader_last():
    fake = etcd_cluster(leader=2)
    lines = []
    result = etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True, progress=lines.append)
    assert [call.node for call in fake.calls_to(etcd_maintenance.DEFRAGMENT)] == [CP1, CP3, CP2]
    assert all(call.via == "call" for call in fake.calls_to(etcd_maintenance.DEFRAGMENT))
    assert result["changed"] is True and result["defragmented"] == [CP1, CP3, CP2]
    assert [(m["node"], m["leader"], m["free_ratio"], m["defragmented"]) for m in result["members"]] == [
        (CP1, False, 0.6, True), (CP3, False, 0.6, True), (CP2, True, 0.6, True)]
    assert lines[-1] == "%s: defragmenting etcd member %s, the leader (600 of 1000 bytes free)" % (CP2, TWO)


def test_defragment_only_members_with_enough_free_space_and_nothing_in_check_mode():
    fake = etcd_cluster(sizes={CP1: (1000, 900), CP2: (1000, 500), CP3: (0, 0)})
    result = etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True, min_free_ratio=0.5, check_mode=True)
    assert [(m["node"], m["selected"]) for m in result["members"]] == [(CP2, True), (CP3, False), (CP1, False)]
    assert result["changed"] is True and result["defragmented"] == [] and fake.calls_to(etcd_maintenance.DEFRAGMENT) == []

    nothing = etcd_maintenance.maintain(fake, [CP1, CP3], defragment=True, min_free_ratio=0.5)
    assert nothing["changed"] is False and fake.calls_to(etcd_maintenance.DEFRAGMENT) == []


def test_defragment_stops_at_a_failure_and_needs_every_status_first():
    fake = etcd_cluster()
    fake.answer(etcd_maintenance.DEFRAGMENT, fails_with("DeadlineExceeded", "context deadline exceeded"), node=CP2)
    with pytest.raises(ActionFailed) as raised:
        etcd_maintenance.maintain(fake, [CP2, CP3, CP1], defragment=True)
    assert raised.value.message.startswith("Defragmenting etcd on node %s failed: " % CP2)
    assert raised.value.message.endswith("The members after it were not defragmented.")
    assert raised.value.to_result()["defragmented"] == [] and raised.value.code == "DeadlineExceeded"
    assert [call.node for call in fake.calls_to(etcd_maintenance.DEFRAGMENT)] == [CP2]

    down = etcd_cluster(**{CP3: fails_with("Unavailable", "connection refused")})
    with pytest.raises(ActionFailed, match="^Cannot defragment etcd: node 10.5.0.3 did not answer EtcdStatus"):
        etcd_maintenance.maintain(down, [CP1, CP2, CP3], defragment=True)
    assert down.calls_to(etcd_maintenance.DEFRAGMENT) == []


def test_alarms_are_disarmed_only_when_there_are_some():
    fake = etcd_cluster()
    result = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True, check_mode=True)
    assert result["changed"] is True and result["alarms"] == [{"member_id": TWO, "alarm": "NOSPACE"}]
    assert fake.calls_to(etcd_maintenance.ALARM_DISARM) == []
    result = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True)
    assert result["alarms_disarmed"] == [{"member_id": TWO, "alarm": "NOSPACE"}]
    fake.answer(etcd_status.ALARM_LIST, [machine_pb2.EtcdAlarm()])
    again = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True)
    assert again["changed"] is False and len(fake.calls_to(etcd_maintenance.ALARM_DISARM)) == 1


# A member joining etcd (the waits of talos_etcd_member and talos_etcd_restore)

def members_reply(*learner_states):
    """The member list through CP1: cp-1 and cp-2 vote; cp-3 (10.5.0.3) is absent (None), a learner (True) or votes."""
    def reply(learner):
        listed = [machine_pb2.EtcdMember(id=index, hostname="cp-%d" % index, client_urls=["https://10.5.0.%d:2379" % index])
                  for index in (1, 2)]
        if learner is not None:
            listed.append(machine_pb2.EtcdMember(id=3, hostname="cp-3", is_learner=learner,
                                                 peer_urls=["https://10.5.0.3:2380"]))
        return [machine_pb2.EtcdMembers(members=listed)]
    return in_turn(*[reply(learner) for learner in learner_states])


def raft_status(member_id, raft_index, applied):
    return [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=member_id, leader=1, raft_index=raft_index, raft_applied_index=applied))]


def test_a_joining_member_advances_as_it_is_added_catches_up_and_is_promoted():
    fake = FakeTalos(nodes=[CP1])
    fake.answer(etcd.MEMBER_LIST, members_reply(None, True, True, True, True, True, False))
    fake.answer(etcd_status.STATUS, in_turn(*[raft_status(1, index, index) for index in (100, 110, 120, 130, 140)]), node=CP1)
    fake.answer(etcd_status.STATUS, fails_with("Unavailable", "connection refused"), node=CP2)
    fake.answer(etcd_status.STATUS, in_turn(fails_with("Unknown", "etcd is not running on this node"), raft_status(3, 60, 60),
                                            raft_status(3, 110, 100), raft_status(3, 130, 100), raft_status(3, 140, 140)),
                node="10.5.0.3")
    poll = etcd_membership.JoinProgress(fake, CP1, "cp-3")
    seen = [poll() for unused_look in range(7)]
    assert [(look.state, look.advanced) for look in seen[:6]] == [
        ("not a member", True), ("learner", True), ("learner catching up", True), ("learner catching up", True),
        ("learner catching up", False), ("learner caught up", True)]
    assert seen[2].detail == "cp-3 is a learner 50 raft entries behind the cluster"
    assert seen[5].detail == ("cp-3 is a learner that caught up with the cluster and has not been promoted by its node's "
                              "etcd service")
    assert seen[6].done and seen[6].value is True


def test_the_wait_for_a_learner_that_is_never_promoted_gives_up_once_it_stopped_moving(monkeypatch):
    now = {"t": 0.0}
    monkeypatch.setattr(waiter.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(waiter.time, "sleep", lambda seconds: now.update(t=now["t"] + seconds))
    fake = FakeTalos(nodes=[CP1])
    fake.answer(etcd.MEMBER_LIST, members_reply(True))
    fake.answer(etcd_status.STATUS, raft_status(1, 500, 500), node=CP1)
    fake.answer(etcd_status.STATUS, raft_status(2, 490, 490), node=CP2)
    # The learner catches up by 20 entries a look until it reaches the cluster, then waits in vain for its promotion.
    fake.answer(etcd_status.STATUS, lambda _request, _node: raft_status(3, 500, min(500, 20 * int(now["t"]))), node="10.5.0.3")
    with pytest.raises(WaitTimedOut) as err:
        etcd_membership.await_voter(fake, CP1, "cp-3", 30, check_mode=False, warn=None, progress=None)
    assert err.value.message == (
        "Timed out waiting for cp-3 to be a voting etcd member: no progress in 30 seconds (56 seconds in all); last "
        "observed: cp-3 is a learner that caught up with the cluster and has not been promoted by its node's etcd service.")
