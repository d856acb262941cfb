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
from fake_talos import FakeTalos, cosi_state, fails_with, resource as fake_resource


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
    ("all", [], [], False, {"system_disk": True, "labels": [], "user_disks": [], "partitions": [], "ends": "off"}),
    ("all", [], [], True, {"system_disk": True, "labels": [], "user_disks": [], "partitions": [], "ends": "maintenance"}),
    ("all", ["state", "EPHEMERAL", "state"], ["/dev/sdb"], True,
     {"system_disk": False, "labels": ["EPHEMERAL", "state"], "user_disks": ["/dev/sdb"], "partitions": ["state", "EPHEMERAL"],
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
])
def test_reset_plan_refusals(mode, labels, disks, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        lifecycle.reset_plan(mode, labels, disks, False)


VOLUMES_V114 = [
    ("META", {"type": "partition", "location": "/dev/sda2"}),
    ("STATE", {"type": "partition", "location": "/dev/sda3"}),
    ("EPHEMERAL", {"type": "partition", "location": "/dev/sda4"}),
    ("u-data", {"type": "partition", "location": "/dev/sdb1"}),
    ("ETCD", {"type": "directory", "mountSpec": {"targetPath": "/var/lib/etcd", "parentId": "EPHEMERAL"}}),
    ("/var/run", {"type": "overlay", "parentID": "/var/lib"}),
    ("/var/lib", {"type": "directory", "mountSpec": {"targetPath": "/var/lib", "parentId": "EPHEMERAL"}}),
    ("orphan", {"type": "directory"}),
]


def volume_client(volumes=VOLUMES_V114, answer=None):
    fake = FakeTalos(nodes=["10.5.0.9"])
    fake.answer("cosi.resource.State/List", answer or cosi_state(*[
        fake_resource("runtime", "VolumeStatuses.block.talos.dev", volume_id, spec) for volume_id, spec in volumes]))
    return fake


def test_wipeable_volumes_follow_talos_volume_statuses():
    assert lifecycle.wipeable_volumes(volume_client(), "10.5.0.9") == {
        "META": None, "STATE": None, "EPHEMERAL": None, "u-data": None, "ETCD": "EPHEMERAL", "/var/run": "EPHEMERAL",
        "/var/lib": "EPHEMERAL"}
    refused = volume_client(answer=fails_with("PermissionDenied", 'resource type "VolumeStatuses.block.talos.dev" is not supported'))
    assert lifecycle.wipeable_volumes(refused, "10.5.0.9") is None
    assert lifecycle.wipeable_volumes(volume_client(volumes=[]), "10.5.0.9") is None


def test_labels_are_resolved_against_the_nodes_volumes():
    volumes = lifecycle.wipeable_volumes(volume_client(), "10.5.0.9")
    plan = lifecycle.resolve_labels(lifecycle.reset_plan("all", ["state", "U-DATA", "etcd", "ephemeral"], [], True),
                                    volumes, "10.5.0.9")
    assert plan["partitions"] == ["STATE", "u-data", "ETCD", "EPHEMERAL"]
    assert plan["labels"] == ["EPHEMERAL", "ETCD", "STATE", "u-data"] and plan["ends"] == "maintenance"
    with pytest.raises(ValueError) as unknown:
        lifecycle.resolve_labels(lifecycle.reset_plan("all", ["EFI", "STATE"], [], False), volumes, "10.5.0.9")
    assert str(unknown.value) == (
        "system_labels_to_wipe names EFI, which node 10.5.0.9 does not have; its volumes are EPHEMERAL, META, STATE, "
        "u-data (and, together with EPHEMERAL: /var/lib, /var/run, ETCD).")
    with pytest.raises(ValueError, match="names ETCD, which resides on EPHEMERAL of node 10.5.0.9 and is wiped only together"):
        lifecycle.resolve_labels(lifecycle.reset_plan("all", ["ETCD"], [], False), volumes, "10.5.0.9")


def test_reset_request_is_what_talosctl_sends():
    request = lifecycle.reset_request(lifecycle.reset_plan("system_disk", ["STATE"], [], True), "system_disk", True)
    assert request.graceful and request.reboot and request.mode == machine_pb2.ResetRequest.SYSTEM_DISK
    assert [(spec.label, spec.wipe) for spec in request.system_partitions_to_wipe] == [("STATE", True)]
    whole_disk = lifecycle.reset_request(lifecycle.reset_plan("all", [], ["/dev/sdb"], False), "all", False)
    assert not whole_disk.graceful and not whole_disk.reboot
    assert whole_disk.system_partitions_to_wipe == [] and whole_disk.user_disks_to_wipe == ["/dev/sdb"]
