# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd/status.py: statuses, alarms (each against the member it names), health, the leader, the info read."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import status as etcd_status
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConnectionError, TalosError, TalosUnimplementedError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from etcd_fakes import ALARM_OF_TWO, CP1, CP2, CP3, FIVE, FOUR, ONE, THREE, TWO, etcd_cluster, member, status, status_reply
from fake_talos import FakeTalos, fails_with


def test_member_statuses_asks_each_members_node_and_keeps_errors():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    unreachable = TalosConnectionError("node 10.5.0.2 is unreachable", code="Unavailable")
    client = FakeTalos(answers={rpc.ETCD_STATUS: [machine_pb2.EtcdStatus(
        member_status=machine_pb2.EtcdMemberStatus(member_id=1, leader=1, db_size=4096))]})
    client.answer(rpc.ETCD_STATUS, unreachable, node="10.5.0.2")

    statuses = etcd_status.member_statuses(client, members, deadline=3)
    assert [(call.via, call.method, call.node, call.kwargs["deadline"]) for call in client.calls] == [
        ("call_many", rpc.ETCD_STATUS, "10.5.0.1", 3), ("call_many", rpc.ETCD_STATUS, "10.5.0.2", 3)]
    assert statuses[ONE]["leader"] == ONE and statuses[ONE]["db_size"] == 4096
    assert statuses[TWO] is unreachable
    assert etcd_status.healthy_ids(statuses) == {ONE}


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


def test_leader_is_what_most_healthy_members_report():
    statuses = {ONE: status(ONE, TWO), TWO: status(TWO, TWO), THREE: status(THREE, ONE),
                FOUR: status(FOUR, ONE, errors=["stale"]), FIVE: TalosError("down")}
    assert etcd_status.leader_id(statuses) == TWO
    assert etcd_status.leader_id({ONE: status(ONE, None)}) is None


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
    fake.answer(rpc.ETCD_STATUS, status_reply(3, 0, errors=["etcdserver: no leader", ALARM_OF_TWO[1]]), node=CP3)
    info = etcd_status.read_info(fake, [CP1, CP2, CP3])
    assert [entry["errors"] for entry in info["status"]] == [[], ["memberID:2 alarm:NOSPACE"], ["etcdserver: no leader"]]
    assert info["alarms"] == [{"member_id": TWO, "alarm": "NOSPACE"}]


def test_info_fails_with_the_error_when_no_node_answers():
    fake = etcd_cluster(**{CP1: fails_with("Unimplemented", "etcd status is only available on control plane nodes")})
    with pytest.raises(TalosUnimplementedError):
        etcd_status.read_info(fake, [CP1])
