# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Configs that fit the Talos they go to: talos_apply_config and talos_machine_config refuse, through both doors and
before anything is sent or written, a document or field the target release does not know, and say which releases a
config is valid for."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

pytestmark = pytest.mark.once

APPLY = "machine.MachineService/ApplyConfiguration"
KUBELET_CONFIG = "---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: ghcr.io/siderolabs/kubelet:v1.37.0\n"
DOORS = ("controller", "module")


def play(tasks, talosconfig=None):
    return [{
        "name": "config version gates",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}} if talosconfig else {},
        "tasks": tasks,
    }]


def through_each_door(name, module, options):
    return [{"name": "%s (%s door)" % (name, door), module: options, "vars": {"talos_door": door}, "ignore_errors": True}
            for door in DOORS]


def test_a_v1_14_document_is_refused_on_a_v1_13_node_and_the_node_keeps_its_config(emulator, run_playbook):
    cluster = emulator(controlplanes=1, talos_version="v1.13.4")
    node = cluster.controlplanes[0]
    before = node.config_text()
    tasks = through_each_door("apply", "talos_linux.talos.talos_apply_config",
                              {"node": node.address, "config": before + KUBELET_CONFIG})
    tasks += through_each_door("preview", "talos_linux.talos.talos_apply_config",
                               {"node": node.address, "config": before + KUBELET_CONFIG, "mode": "reboot"})
    tasks[-2:] = [dict(task, check_mode=True, diff=True) for task in tasks[-2:]]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    for name in ("apply", "preview"):
        for door in DOORS:
            task = run.task("%s (%s door)" % (name, door))
            assert task["status"] == "failed", task
            assert task["result"]["msg"] == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; node %s "
                                             "runs v1.13.4." % node.address)
    # Not even a dry run reached the node.
    assert cluster.audit(APPLY, node=node.name) == []
    assert node.config_text() == before and node.reboots == 0


def test_the_config_the_node_takes_is_applied_and_says_where_it_fits(emulator, run_playbook):
    cluster = emulator(controlplanes=1, talos_version="v1.14.1")
    node = cluster.controlplanes[0]
    config = node.config_text() + KUBELET_CONFIG
    tasks = through_each_door("apply", "talos_linux.talos.talos_apply_config", {"node": node.address, "config": config})
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    first, second = (run.task("apply (%s door)" % door)["result"] for door in DOORS)
    assert first["changed"] is True and second["changed"] is False
    for result in (first, second):
        assert result["valid_for"] == {"min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}
    assert node.config_text() == config


def test_a_v1_12_node_in_maintenance_mode_refuses_unseen(emulator, run_playbook):
    """Up to v1.12 a node in maintenance mode answers no Version: what no v1.12 release knows is still refused."""
    cluster = emulator(controlplanes=1, maintenance=True, talos_version="v1.12.5")
    node = cluster.controlplanes[0]
    config_file = "%s/controlplane.yaml" % cluster.state_dir
    with open(config_file) as stream:
        config = stream.read() + KUBELET_CONFIG
    tasks = through_each_door("install", "talos_linux.talos.talos_apply_config",
                              {"node": node.address, "endpoints": [node.endpoint], "insecure": True, "config": config})
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    for door in DOORS:
        result = run.task("install (%s door)" % door)["result"]
        assert result["msg"] == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; node %s runs Talos "
                                 "v1.12 or older (in maintenance mode it does not tell which)." % node.address)
    assert cluster.audit(APPLY, node=node.name) == [] and node.maintenance


def test_talos_machine_config_refuses_a_patch_its_talos_version_does_not_know(run_playbook, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    kubelet = {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "image": "ghcr.io/siderolabs/kubelet:v1.36.3"}
    options = {"secrets": str(secrets), "machine_type": "worker", "cluster_name": "c",
               "cluster_endpoint": "https://10.5.0.2:6443", "talos_version": "v1.13"}
    tasks = [{"name": "bundle", "talos_linux.talos.talos_machine_secrets": {"path": str(secrets)}}]
    tasks += through_each_door("render", "talos_linux.talos.talos_machine_config",
                               dict(options, dest=str(tmp_path / "worker.yaml"), config_patches=[kubelet]))
    tasks += [{"name": "render as it is", "talos_linux.talos.talos_machine_config": options, "register": "rendered",
               "no_log": True},
              {"name": "say where it fits", "ansible.builtin.debug": {"var": "rendered.valid_for"}}]
    run = run_playbook(play(tasks))

    for door in DOORS:
        assert run.task("render (%s door)" % door)["result"]["msg"] == (
            "The config's KubeletConfig document needs Talos v1.14.0 or newer; talos_version v1.13 (v1.13.0) is the oldest "
            "Talos the config is for.")
    assert not (tmp_path / "worker.yaml").exists()
    assert run.task("say where it fits")["result"]["rendered.valid_for"] == {
        "min": "v1.12.0", "releases": {"v1.12": "v1.12.0", "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}
