# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd/membership.py: the wait for a member that joins etcd."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common import waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership

from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import WaitTimedOut
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from etcd_fakes import CP1, CP2
from fake_talos import FakeTalos, fails_with, in_turn


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
    fake.answer(rpc.ETCD_MEMBER_LIST, members_reply(None, True, True, True, True, True, False))
    fake.answer(rpc.ETCD_STATUS, in_turn(*[raft_status(1, index, index) for index in (100, 110, 120, 130, 140)]), node=CP1)
    fake.answer(rpc.ETCD_STATUS, fails_with("Unavailable", "connection refused"), node=CP2)
    fake.answer(rpc.ETCD_STATUS, in_turn(fails_with("Unknown", "etcd is not running on this node"), raft_status(3, 60, 60),
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
    fake.answer(rpc.ETCD_MEMBER_LIST, members_reply(True))
    fake.answer(rpc.ETCD_STATUS, raft_status(1, 500, 500), node=CP1)
    fake.answer(rpc.ETCD_STATUS, raft_status(2, 490, 490), node=CP2)
    # The learner catches up by 20 entries a look until it reaches the cluster, then waits in vain for its promotion.
    fake.answer(rpc.ETCD_STATUS, lambda _request, _node: raft_status(3, 500, min(500, 20 * int(now["t"]))), node="10.5.0.3")
    with pytest.raises(WaitTimedOut) as err:
        etcd_membership.await_voter(fake, CP1, "cp-3", 30, check_mode=False, warn=None, progress=None)
    assert err.value.message == (
        "Timed out waiting for cp-3 to be a voting etcd member: no progress in 30 seconds (56 seconds in all); last "
        "observed: cp-3 is a learner that caught up with the cluster and has not been promoted by its node's etcd service.")
