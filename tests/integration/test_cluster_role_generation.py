# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster role's path from nothing: it makes the bundle, configs and talosconfig, then provisions."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import yaml


def role_play(cluster, workdir):
    return {
        "hosts": "controlplane:workers",
        "gather_facts": False,
        "roles": [{"role": "talos_linux.talos.cluster", "vars": {
            "cluster_secrets_path": "%s/secrets.yaml" % workdir,
            "cluster_generated_dir": str(workdir),
            "cluster_name": "generated",
            "cluster_endpoint": "https://%s:6443" % cluster.controlplanes[0].address,
            "cluster_talos_version": "v1.14.0",
            # Not the v1.14 default (the UnattendedInstallConfig document): the role passes it on.
            "cluster_install_home": "machine",
            "cluster_talosconfig_endpoints": [node.endpoint for node in cluster.controlplanes],
            "cluster_host_patches": [{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None,
                                      "hostname": "{{ inventory_hostname }}-gen"}],
            "cluster_maintenance_endpoint": "{{ ansible_host }}:{{ talos_port }}",
            "cluster_kubeconfig_path": "%s/kubeconfig" % workdir,
            "cluster_wait_timeout": 60,
        }}],
    }


def role_task(run, name):
    found = [result for result in run.results if result["task"].endswith(" : " + name) or result["task"] == name]
    assert len(found) == 1, [result["task"] for result in run.results]
    return found[0]


def test_role_generates_everything_then_provisions(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, reboot_seconds=0.1)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(cluster.inventory()))
    workdir = tmp_path / "generated"
    play = role_play(cluster, workdir)

    checked = run_playbook(play, inventory=str(inventory), check=True)
    assert role_task(checked, "Create or validate the secrets bundle")["status"] == "changed"
    assert not workdir.exists() or os.listdir(str(workdir)) == []
    assert all(node.maintenance for node in cluster.nodes)

    first = run_playbook(play, inventory=str(inventory))
    assert sorted(os.listdir(str(workdir))) == ["controlplane.yaml", "kubeconfig", "secrets.yaml", "talosconfig", "worker.yaml"]
    assert cluster.etcd.bootstrapped
    for node in cluster.nodes:
        assert not node.maintenance and node.hostname == node.name + "-gen"
    assert first.changed_count > 0
    contents = dict((name, (workdir / name).read_bytes()) for name in ("controlplane.yaml", "worker.yaml", "secrets.yaml", "talosconfig"))
    for name in ("controlplane.yaml", "worker.yaml"):
        documents = list(yaml.safe_load_all(contents[name]))
        assert "UnattendedInstallConfig" not in [document.get("kind") for document in documents], name
        assert documents[0]["machine"]["install"]["image"].endswith(":v1.14.0"), name

    second = run_playbook(play, inventory=str(inventory))
    assert second.changed_count == 0, [r["task"] for r in second.results if r["status"] == "changed"]
    assert contents == dict((name, (workdir / name).read_bytes()) for name in contents)


def test_an_unreachable_node_in_maintenance_mode_fails_once_naming_the_variable_that_fixes_it(
        emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True)
    worker = cluster.workers[0]
    cluster.faults.make_unreachable(worker)
    run = run_playbook(role_play(cluster, tmp_path), inventory="%s/inventory.yml" % cluster.state_dir, expect_rc=2)

    failure = run.task("talos_linux.talos.cluster : Stop at a node that could not be configured", worker.name)
    message = failure["result"]["msg"]
    assert failure["status"] == "failed"
    assert message.startswith("Node %s in maintenance mode is unreachable at %s, the address that "
                              "cluster_maintenance_endpoint sets: " % (worker.address, worker.endpoint)), message
    assert "connection refused" in message and "control-plane nodes" not in message
    # One message, once: the apply itself is not reported as a second failure.
    assert run.task("talos_linux.talos.cluster : Apply the machine configuration", worker.name)["status"] == "ok"
    assert run.stdout.count("fatal: [%s]" % worker.name) == 1, run.stdout
    assert worker.maintenance and worker.config is None
