# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""lifecycle/upgrade.py: one node's Talos upgrade with the installer it gets and its config's installer reference,
against the emulator (the steps of the upgrade itself are tested with talos_upgrade)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle.upgrade import upgrade_node
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, cosi_state, resource

# Talos v1.14 installers come from the Image Factory: the empty schematic for a node without one.
FACTORY_INSTALLER = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
OLD_INSTALLER = "ghcr.io/siderolabs/installer:v1.14.0"
UPGRADE_CALLS = ["machine.ImageService/Pull", "machine.LifecycleService/Upgrade", "machine.MachineService/Reboot",
                 "machine.MachineService/ApplyConfiguration", "machine.MachineService/ApplyConfiguration"]


@pytest.fixture
def cluster(emulator):
    return emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0", reboot_seconds=0.1)


def _client(cluster):
    return TalosClient(ConnectionSettings.from_params({"talosconfig": cluster.talosconfig_path()}))


def _calls(cluster, node):
    return [entry["method"] for entry in cluster.audit(node=node.name)]


def test_a_node_gets_its_own_installer_and_its_config_names_it_once_it_runs_the_target(cluster):
    worker = cluster.workers[0]
    with _client(cluster) as client:
        planned = upgrade_node(client, worker.address, "v1.14.1", "lifecycle", wait_timeout=60, check_mode=True, diff=True)
        assert _calls(cluster, worker) == []
        upgraded = upgrade_node(client, worker.address, "v1.14.1", "lifecycle", wait_timeout=60)
    installer = FACTORY_INSTALLER + ":v1.14.1"
    reference = {"home": ".machine.install.image", "before": OLD_INSTALLER, "after": installer, "changed": True}
    assert (planned["changed"], planned["upgraded"], planned["api_used"], planned["image"]) == (True, True, "lifecycle", installer)
    assert "the node has no schematic" in planned["image_reason"]
    assert planned["installer_reference"] == reference
    assert planned["diff"] == {"before": {"version": "v1.14.0", "installer": OLD_INSTALLER},
                               "after": {"version": "v1.14.1", "installer": installer}}
    assert (upgraded["current_version"], upgraded["rebooted"], upgraded["image"]) == ("v1.14.1", True, installer)
    assert upgraded["image_reason"] == planned["image_reason"] and upgraded["installer_reference"] == reference
    assert "diff" not in upgraded
    assert cluster.node(worker.name).talos_version == "v1.14.1"
    assert cluster.node(worker.name).config["machine"]["install"]["image"] == installer
    assert _calls(cluster, worker) == UPGRADE_CALLS


def test_without_a_wait_the_reference_is_left_and_the_task_warned(cluster):
    worker = cluster.workers[0]
    warnings = []
    with _client(cluster) as client:
        result = upgrade_node(client, worker.address, "v1.14.1", "lifecycle", repository="registry.local/installer",
                              warn=warnings.append)
    assert (result["changed"], result["image"]) == (True, "registry.local/installer:v1.14.1")
    assert result["image_reason"] == "the installer_repository option tagged with the target version"
    assert result["installer_reference"] == {"home": ".machine.install.image", "before": OLD_INSTALLER,
                                             "after": OLD_INSTALLER, "changed": False}
    assert warnings == ["Node %s still names installer %s in .machine.install.image: without wait the module cannot tell "
                        "when the node runs v1.14.1; run the task again once it does." % (worker.address, OLD_INSTALLER)]
    assert cluster.node(worker.name).config["machine"]["install"]["image"] == OLD_INSTALLER
    assert "machine.MachineService/ApplyConfiguration" not in _calls(cluster, worker)


def test_a_config_naming_two_installers_is_refused_before_the_node_is_asked_anything_else():
    config = ("version: v1alpha1\nmachine:\n    type: worker\n    install:\n        image: a:v1.13.0\n---\n"
              "apiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n    image: b:v1.13.0\n")
    client = FakeTalos(nodes=["10.5.0.9"], answers={
        rpc.COSI_GET: cosi_state(resource("config", "MachineConfigs.config.talos.dev", "v1alpha1", config)),
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.13.0"))]})
    with pytest.raises(TalosConfigError, match=r"sets the installer image in both .machine.install.image \(a:v1.13.0\)"):
        upgrade_node(client, "10.5.0.9", "v1.14.0", "lifecycle", image="registry.local/installer:v1.14.0")
    assert [call.method for call in client.calls] == [rpc.COSI_GET]
