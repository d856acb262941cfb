# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the lifecycle actions: guard before any change, failures after the request, reset plans."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import etcd, lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosError,
    TalosTimeoutError,
    TalosUnimplementedError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


class NodeClient:
    """One node: answers by RPC name (an Exception is raised), records the calls; ``members`` makes it a control plane."""

    def __init__(self, members=None, **answers):
        self.members = members
        self.answers = dict({"Version": [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))],
                             "Hostname": [machine_pb2.Hostname(hostname="cp-1")]}, **answers)
        self.calls = []

    def call(self, method, request=None, node=None, deadline=None, retry_codes=None):
        name = method.rsplit("/", 1)[-1]
        self.calls.append(name)
        if name == "EtcdMemberList" and self.members is None:
            raise TalosUnimplementedError("member list is only available on control plane nodes", code="Unimplemented")
        if name == "EtcdMemberList":
            return [machine_pb2.EtcdMembers(members=[
                machine_pb2.EtcdMember(id=i, hostname=n, client_urls=["https://10.5.0.%d:2379" % i])
                for i, n in enumerate(self.members, 1)])]
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def call_many(self, method, request=None, nodes=None, deadline=None):
        return dict(("10.5.0.%d" % i, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(member_id=i, leader=1))]
                     if healthy else TalosConnectionError("unreachable", code="Unavailable"))
                    for i, healthy in enumerate(self.members.values(), 1))

    def read_bytes(self, method, request=None, node=None, deadline=None):
        self.calls.append("Read")
        return b"boot-1\n"

    def mutations(self):
        return [name for name in self.calls if name in ("Reboot", "Shutdown", "Reset", "Rollback")]


def test_check_mode_reboot_of_a_worker_reads_and_sends_nothing():
    client = NodeClient()
    result = lifecycle.reboot(client, "10.5.0.9", check_mode=True)
    assert result == {"changed": True, "mode": "default", "boot_id_before": "boot-1", "boot_id_after": None,
                      "elapsed": None, "actor_id": None, "controlplane": False, "etcd_gate_open": True, "quorum": None}
    assert client.mutations() == []


def test_the_guard_refuses_before_anything_is_sent():
    client = NodeClient(members={"cp-1": True, "cp-2": True, "cp-3": False})
    with pytest.raises(etcd.QuorumLossRefused, match="^Refusing to shut down control-plane node 10.5.0.1: etcd would "
                                                     "keep 3 voting member"):
        lifecycle.shutdown(client, "10.5.0.1")
    assert client.mutations() == []


def test_a_wait_that_fails_after_the_request_keeps_the_result(monkeypatch):
    client = NodeClient(Reboot=[machine_pb2.Reboot(actor_id="a1")])

    def never_back(client, node, boot_id, waiter):
        raise TalosTimeoutError("Timed out after 5 seconds waiting for node 10.5.0.9 to reboot.", code="DeadlineExceeded")

    monkeypatch.setattr(lifecycle.waits, "wait_for_reboot", never_back)
    with pytest.raises(lifecycle.ActionFailed) as raised:
        lifecycle.reboot(client, "10.5.0.9", wait_timeout=5)
    assert raised.value.message == ("The reboot of node 10.5.0.9 was requested but the node is not back as expected: "
                                    "Timed out after 5 seconds waiting for node 10.5.0.9 to reboot.")
    result = raised.value.to_result()
    assert result["actor_id"] == "a1" and result["code"] == "DeadlineExceeded" and result["changed"] is True


def test_force_mode_needs_talos_v1_12():
    client = NodeClient(Version=[machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.11.3"))])
    with pytest.raises(TalosError, match="^mode: force needs Talos v1.12 or newer, but node 10.5.0.9 runs v1.11.3"):
        lifecycle.reboot(client, "10.5.0.9", mode="force")
    assert client.calls == ["Version"]


def test_a_refused_rollback_changed_nothing():
    client = NodeClient(Rollback=TalosApiError("cannot rollback to \"B\", label does not exist", code="Unknown"))
    with pytest.raises(lifecycle.ActionFailed) as raised:
        lifecycle.rollback(client, "10.5.0.9")
    assert raised.value.message.startswith("Node 10.5.0.9 cannot roll back from v1.14.0: cannot rollback")
    assert raised.value.to_result()["changed"] is False and raised.value.code == "Unknown"


@pytest.mark.parametrize("mode, labels, disks, reboot, expected", [
    ("all", [], [], False, {"system_disk": True, "labels": list(lifecycle.SYSTEM_LABELS), "user_disks": [],
                            "partitions": [], "ends": "off"}),
    ("all", ["state", "EPHEMERAL"], ["/dev/sdb"], True,
     {"system_disk": False, "labels": ["EPHEMERAL", "STATE"], "user_disks": ["/dev/sdb"], "partitions": ["STATE", "EPHEMERAL"],
      "ends": "maintenance"}),
    ("system_disk", ["EPHEMERAL"], [], True, {"system_disk": False, "labels": ["EPHEMERAL"], "user_disks": [],
                                              "partitions": ["EPHEMERAL"], "ends": "configured"}),
    ("user_disks", [], ["/dev/sdb"], True, {"system_disk": False, "labels": [], "user_disks": ["/dev/sdb"],
                                            "partitions": [], "ends": "configured"}),
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
    request = lifecycle.reset_request(lifecycle.reset_plan("system_disk", ["state"], [], True), "system_disk", True)
    assert request.graceful and request.reboot and request.mode == machine_pb2.ResetRequest.SYSTEM_DISK
    assert [(spec.label, spec.wipe) for spec in request.system_partitions_to_wipe] == [("STATE", True)]
    whole_disk = lifecycle.reset_request(lifecycle.reset_plan("all", [], ["/dev/sdb"], False), "all", False)
    assert not whole_disk.graceful and not whole_disk.reboot
    assert whole_disk.system_partitions_to_wipe == [] and whole_disk.user_disks_to_wipe == ["/dev/sdb"]
