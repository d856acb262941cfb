# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the lifecycle helpers: the etcd guard, reset plans and requests."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosUnimplementedError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


class EtcdClient:
    """Answers EtcdMemberList, Hostname and EtcdStatus for a cluster of ``members`` ({name: healthy})."""

    def __init__(self, members, hostname="cp-1", member_list_error=None, learners=()):
        self.members = members
        self.hostname = hostname
        self.member_list_error = member_list_error
        self.learners = learners

    def _member(self, index, name):
        return machine_pb2.EtcdMember(id=index, hostname=name, is_learner=name in self.learners,
                                      client_urls=["https://10.5.0.%d:2379" % index])

    def call(self, method, request=None, node=None, deadline=None):
        if method.endswith("/EtcdMemberList"):
            if self.member_list_error:
                raise self.member_list_error
            members = [self._member(i, name) for i, name in enumerate(self.members, 1)]
            return [machine_pb2.EtcdMembers(members=members)]
        if method.endswith("/Hostname"):
            return [machine_pb2.Hostname(hostname=self.hostname)]
        raise AssertionError("unexpected call %s" % method)

    def call_many(self, method, request=None, nodes=None, deadline=None):
        answers = {}
        for index, (name, healthy) in enumerate(self.members.items(), 1):
            address = "10.5.0.%d" % index
            if healthy:
                answers[address] = [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(member_id=index, leader=1))]
            else:
                answers[address] = TalosConnectionError("unreachable", code="Unavailable")
        return answers


def test_worker_has_no_guard():
    client = EtcdClient({}, member_list_error=TalosUnimplementedError("member list is only available on control plane nodes",
                                                                      code="Unimplemented"))
    guard = lifecycle.etcd_guard(client, "10.5.0.9")
    assert guard == {"controlplane": False, "member": None, "safe": True, "problem": None, "quorum": None,
                     "last_member": False}


def test_unreadable_member_list_closes_the_guard():
    client = EtcdClient({}, member_list_error=TalosApiError("etcdserver: no leader.", code="Unknown"))
    guard = lifecycle.etcd_guard(client, "10.5.0.1")
    assert guard["controlplane"] is True and guard["safe"] is False
    assert guard["problem"] == ("its etcd member list cannot be read (etcdserver: no leader), so etcd may have lost "
                                "quorum already")


def test_reboot_of_a_healthy_three_member_cluster_is_safe():
    guard = lifecycle.etcd_guard(EtcdClient({"cp-1": True, "cp-2": True, "cp-3": True}), "10.5.0.1")
    assert guard["safe"] is True and guard["member"] == "cp-1"
    assert guard["quorum"] == {"safe": True, "voters_after": 3, "quorum_after": 2, "healthy_after": 2, "unhealthy": []}


def test_reboot_next_to_an_unhealthy_member_is_refused():
    guard = lifecycle.etcd_guard(EtcdClient({"cp-1": True, "cp-2": True, "cp-3": False}), "10.5.0.1")
    assert guard["safe"] is False
    assert guard["problem"] == ("etcd would keep 3 voting member(s) and need 2 of them healthy for quorum, but only 1 "
                                "other than this node are healthy (not healthy: cp-3)")


def test_graceful_reset_uses_the_removal_arithmetic():
    # Removing cp-1 from three leaves two voters that both must be healthy.
    client = EtcdClient({"cp-1": True, "cp-2": True, "cp-3": False})
    guard = lifecycle.etcd_guard(client, "10.5.0.1", leaves_etcd=True)
    assert guard["safe"] is False and guard["quorum"]["voters_after"] == 2
    # Removing the unhealthy member itself is safe.
    client.hostname = "cp-3"
    assert lifecycle.etcd_guard(client, "10.5.0.3", leaves_etcd=True)["safe"] is True


def test_last_member_cannot_leave():
    guard = lifecycle.etcd_guard(EtcdClient({"cp-1": True}), "10.5.0.1", leaves_etcd=True)
    assert guard["safe"] is False and guard["last_member"] is True


def test_node_that_is_no_member_is_not_guarded():
    guard = lifecycle.etcd_guard(EtcdClient({"cp-1": True}, hostname="cp-9"), "10.5.0.9")
    assert guard["controlplane"] is True and guard["member"] is None and guard["safe"] is True


class Refusals:
    def __init__(self, force_quorum_loss):
        self.params = {"force_quorum_loss": force_quorum_loss}

    def fail_json(self, **result):
        raise AssertionError(result["msg"])


def test_force_quorum_loss_opens_the_guard_but_not_for_the_last_member():
    closed = {"safe": False, "problem": "etcd would lose quorum", "last_member": False}
    lifecycle.refuse_unless_forced(Refusals(True), closed, "reboot", "10.5.0.1")
    with pytest.raises(AssertionError, match="^Refusing to reboot control-plane node 10.5.0.1: etcd would lose quorum; "
                                             "fix the unhealthy members first, or set force_quorum_loss: true"):
        lifecycle.refuse_unless_forced(Refusals(False), closed, "reboot", "10.5.0.1")
    last = {"safe": False, "problem": "it is the last etcd member", "last_member": True}
    with pytest.raises(AssertionError, match="a graceful reset cannot remove it"):
        lifecycle.refuse_unless_forced(Refusals(True), last, "gracefully reset", "10.5.0.1")


@pytest.mark.parametrize("mode, labels, disks, reboot, expected", [
    ("all", [], [], False, {"system_disk": True, "labels": list(lifecycle.SYSTEM_LABELS), "user_disks": [], "ends": "off"}),
    ("all", ["state", "EPHEMERAL"], ["/dev/sdb"], True,
     {"system_disk": False, "labels": ["EPHEMERAL", "STATE"], "user_disks": ["/dev/sdb"], "ends": "maintenance"}),
    ("system_disk", ["EPHEMERAL"], [], True, {"system_disk": False, "labels": ["EPHEMERAL"], "user_disks": [], "ends": "configured"}),
    ("user_disks", [], ["/dev/sdb"], True, {"system_disk": False, "labels": [], "user_disks": ["/dev/sdb"], "ends": "configured"}),
])
def test_reset_plan(mode, labels, disks, reboot, expected):
    assert lifecycle.reset_plan(mode, labels, disks, reboot) == expected


@pytest.mark.parametrize("mode, labels, disks, message", [
    ("system_disk", [], ["/dev/sdb"], "user_disks_to_wipe cannot be used with wipe_mode: system_disk"),
    ("user_disks", ["STATE"], ["/dev/sdb"], "system_labels_to_wipe cannot be used with wipe_mode: user_disks"),
    ("user_disks", [], [], "wipe_mode: user_disks needs the devices to wipe"),
    ("all", ["STATE", "DATA", "u-x"], [], "system_labels_to_wipe has unknown volume label(s) DATA, U-X"),
])
def test_reset_plan_refusals(mode, labels, disks, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        lifecycle.reset_plan(mode, labels, disks, False)


def test_reset_request_is_what_talosctl_sends():
    request = lifecycle.reset_request(True, True, "system_disk", ["state"], [])
    assert request.graceful and request.reboot and request.mode == machine_pb2.ResetRequest.SYSTEM_DISK
    assert [(spec.label, spec.wipe) for spec in request.system_partitions_to_wipe] == [("STATE", True)]
    assert lifecycle.reset_request(False, False, "all", [], []).system_partitions_to_wipe == []
