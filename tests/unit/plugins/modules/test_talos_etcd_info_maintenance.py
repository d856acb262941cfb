# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the run() of talos_etcd_info and talos_etcd_maintenance."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_etcd_info, talos_etcd_maintenance
from fake_talos import FakeTalos
from module_fakes import run_task

NODE = "10.5.0.2"


def one_control_plane(db_size=2000, in_use=500):
    fake = FakeTalos(nodes=[NODE])
    fake.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=1, leader=1, db_size=db_size, db_size_in_use=in_use))])
    fake.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[machine_pb2.EtcdMember(id=1, hostname="cp-1")])])
    fake.answer(rpc.ETCD_ALARM_LIST, [machine_pb2.EtcdAlarm()])
    fake.answer(rpc.ETCD_DEFRAGMENT, [machine_pb2.EtcdDefragment()])
    return fake


def test_info_reads_and_changes_nothing():
    fake = one_control_plane()
    ok, result, _task = run_task(talos_etcd_info, fake)
    assert ok and result["changed"] is False
    assert result["members"][0]["hostname"] == "cp-1" and result["status"][0]["db_size"] == 2000 and result["alarms"] == []
    assert fake.names() == ["EtcdStatus", "EtcdMemberList", "EtcdAlarmList"]


def test_maintenance_defragments_and_warns_when_asked_nothing():
    fake = one_control_plane()
    ok, result, task = run_task(talos_etcd_maintenance, fake, defragment=True)
    assert ok and result["changed"] is True and result["defragmented"] == [NODE]
    ok, result, task = run_task(talos_etcd_maintenance, fake)
    assert ok and result["changed"] is False and task.warnings == ["Neither defragment nor disarm_alarms is set: nothing to do."]
    ok, result, task = run_task(talos_etcd_maintenance, fake, defragment=True, check_mode=True, defragment_min_free_ratio=0.8)
    assert ok and result["changed"] is False and len(fake.calls_to(rpc.ETCD_DEFRAGMENT)) == 1
