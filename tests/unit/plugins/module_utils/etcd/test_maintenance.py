# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd/maintenance.py: defragmentation (one member at a time, the leader last) and alarm disarm."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import maintenance as etcd_maintenance

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from etcd_fakes import ALARM_OF_TWO, CP1, CP2, CP3, TWO, etcd_cluster, status_reply
from fake_talos import fails_with


def test_defragment_finds_the_leader_although_every_status_lists_an_alarm():
    fake = etcd_cluster(**dict((node, status_reply(index, 2, errors=[ALARM_OF_TWO[0]]))
                               for index, node in enumerate((CP1, CP2, CP3), 1)))
    etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True)
    assert [call.node for call in fake.calls_to(rpc.ETCD_DEFRAGMENT)] == [CP1, CP3, CP2]


def test_defragment_runs_one_member_at_a_time_the_leader_last():
    fake = etcd_cluster(leader=2)
    lines = []
    result = etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True, progress=lines.append)
    assert [call.node for call in fake.calls_to(rpc.ETCD_DEFRAGMENT)] == [CP1, CP3, CP2]
    assert all(call.via == "call" for call in fake.calls_to(rpc.ETCD_DEFRAGMENT))
    assert result["changed"] is True and result["defragmented"] == [CP1, CP3, CP2]
    assert [(m["node"], m["leader"], m["free_ratio"], m["defragmented"]) for m in result["members"]] == [
        (CP1, False, 0.6, True), (CP3, False, 0.6, True), (CP2, True, 0.6, True)]
    assert lines[-1] == "%s: defragmenting etcd member %s, the leader (600 of 1000 bytes free)" % (CP2, TWO)


def test_defragment_only_members_with_enough_free_space_and_nothing_in_check_mode():
    fake = etcd_cluster(sizes={CP1: (1000, 900), CP2: (1000, 500), CP3: (0, 0)})
    result = etcd_maintenance.maintain(fake, [CP1, CP2, CP3], defragment=True, min_free_ratio=0.5, check_mode=True)
    assert [(m["node"], m["selected"]) for m in result["members"]] == [(CP2, True), (CP3, False), (CP1, False)]
    assert result["changed"] is True and result["defragmented"] == [] and fake.calls_to(rpc.ETCD_DEFRAGMENT) == []

    nothing = etcd_maintenance.maintain(fake, [CP1, CP3], defragment=True, min_free_ratio=0.5)
    assert nothing["changed"] is False and fake.calls_to(rpc.ETCD_DEFRAGMENT) == []


def test_defragment_stops_at_a_failure_and_needs_every_status_first():
    fake = etcd_cluster()
    fake.answer(rpc.ETCD_DEFRAGMENT, fails_with("DeadlineExceeded", "context deadline exceeded"), node=CP2)
    with pytest.raises(ActionFailed) as raised:
        etcd_maintenance.maintain(fake, [CP2, CP3, CP1], defragment=True)
    assert raised.value.message.startswith("Defragmenting etcd on node %s failed: " % CP2)
    assert raised.value.message.endswith("The members after it were not defragmented.")
    assert raised.value.to_result()["defragmented"] == [] and raised.value.code == "DeadlineExceeded"
    assert [call.node for call in fake.calls_to(rpc.ETCD_DEFRAGMENT)] == [CP2]

    down = etcd_cluster(**{CP3: fails_with("Unavailable", "connection refused")})
    with pytest.raises(ActionFailed, match="^Cannot defragment etcd: node 10.5.0.3 did not answer EtcdStatus"):
        etcd_maintenance.maintain(down, [CP1, CP2, CP3], defragment=True)
    assert down.calls_to(rpc.ETCD_DEFRAGMENT) == []


def test_alarms_are_disarmed_only_when_there_are_some():
    fake = etcd_cluster()
    result = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True, check_mode=True)
    assert result["changed"] is True and result["alarms"] == [{"member_id": TWO, "alarm": "NOSPACE"}]
    assert fake.calls_to(rpc.ETCD_ALARM_DISARM) == []
    result = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True)
    assert result["alarms_disarmed"] == [{"member_id": TWO, "alarm": "NOSPACE"}]
    fake.answer(rpc.ETCD_ALARM_LIST, [machine_pb2.EtcdAlarm()])
    again = etcd_maintenance.maintain(fake, [CP1], disarm_alarms=True)
    assert again["changed"] is False and len(fake.calls_to(rpc.ETCD_ALARM_DISARM)) == 1
