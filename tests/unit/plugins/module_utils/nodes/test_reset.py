# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The reset primitive: plans from the options, the volumes a node can wipe, the request talosctl sends."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.reset import (
    reset_plan,
    reset_request,
    resolve_labels,
    wipeable_volumes,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, cosi_state, fails_with, resource as fake_resource


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
    assert reset_plan(mode, labels, disks, reboot) == expected


@pytest.mark.parametrize("mode, labels, disks, message", [
    ("system_disk", [], ["/dev/sdb"], "user_disks_to_wipe cannot be used with wipe_mode: system_disk"),
    ("user_disks", ["STATE"], ["/dev/sdb"], "system_labels_to_wipe cannot be used with wipe_mode: user_disks"),
    ("user_disks", [], [], "wipe_mode: user_disks needs the devices to wipe"),
])
def test_reset_plan_refusals(mode, labels, disks, message):
    with pytest.raises(TalosConfigError, match="^" + re.escape(message)):
        reset_plan(mode, labels, disks, False)


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


def volume_client(volumes=None, answer=None):
    fake = FakeTalos(nodes=["10.5.0.9"])
    fake.answer(rpc.COSI_LIST, answer or cosi_state(*[
        fake_resource("runtime", "VolumeStatuses.block.talos.dev", volume_id, spec)
        for volume_id, spec in (VOLUMES_V114 if volumes is None else volumes)]))
    return fake


def test_wipeable_volumes_follow_talos_volume_statuses():
    assert wipeable_volumes(volume_client(), "10.5.0.9") == {
        "META": None, "STATE": None, "EPHEMERAL": None, "u-data": None, "ETCD": "EPHEMERAL", "/var/run": "EPHEMERAL",
        "/var/lib": "EPHEMERAL"}
    refused = volume_client(answer=fails_with("PermissionDenied", 'resource type "VolumeStatuses.block.talos.dev" is not supported'))
    assert wipeable_volumes(refused, "10.5.0.9") is None
    assert wipeable_volumes(volume_client(volumes=[]), "10.5.0.9") is None


def test_labels_are_resolved_against_the_nodes_volumes():
    volumes = wipeable_volumes(volume_client(), "10.5.0.9")
    plan = resolve_labels(reset_plan("all", ["state", "U-DATA", "etcd", "ephemeral"], [], True),
                          volumes, "10.5.0.9")
    assert plan["partitions"] == ["STATE", "u-data", "ETCD", "EPHEMERAL"]
    assert plan["labels"] == ["EPHEMERAL", "ETCD", "STATE", "u-data"] and plan["ends"] == "maintenance"
    with pytest.raises(TalosConfigError) as unknown:
        resolve_labels(reset_plan("all", ["EFI", "STATE"], [], False), volumes, "10.5.0.9")
    assert str(unknown.value) == (
        "system_labels_to_wipe names EFI, which node 10.5.0.9 does not have; its volumes are EPHEMERAL, META, STATE, "
        "u-data (and, together with EPHEMERAL: /var/lib, /var/run, ETCD).")
    with pytest.raises(TalosConfigError, match="names ETCD, which resides on EPHEMERAL of node 10.5.0.9 and is wiped only together"):
        resolve_labels(reset_plan("all", ["ETCD"], [], False), volumes, "10.5.0.9")


def test_reset_request_is_what_talosctl_sends():
    request = reset_request(reset_plan("system_disk", ["STATE"], [], True), "system_disk", True)
    assert request.graceful and request.reboot and request.mode == machine_pb2.ResetRequest.SYSTEM_DISK
    assert [(spec.label, spec.wipe) for spec in request.system_partitions_to_wipe] == [("STATE", True)]
    whole_disk = reset_request(reset_plan("all", [], ["/dev/sdb"], False), "all", False)
    assert not whole_disk.graceful and not whole_disk.reboot
    assert whole_disk.system_partitions_to_wipe == [] and whole_disk.user_disks_to_wipe == ["/dev/sdb"]
