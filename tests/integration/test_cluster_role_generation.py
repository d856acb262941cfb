# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster role's path from nothing: it makes the bundle, configs and talosconfig, then provisions."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml


def role_play(cluster, workdir):
    return {
        "hosts": "controlplane:workers",
        "gather_facts": False,
        "roles": [{"role": "talos_linux.talos.cluster", "vars": {
            "cluster_secrets": "%s/secrets.yaml" % workdir,
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
            "cluster_kubeconfig": "%s/kubeconfig" % workdir,
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


@pytest.mark.once
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


@pytest.mark.once
def test_configs_newer_than_the_nodes_are_refused_before_any_node_is_touched(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, talos_version="v1.13.4")
    run = run_playbook(role_play(cluster, tmp_path), inventory="%s/inventory.yml" % cluster.state_dir, expect_rc=2)

    for node in cluster.nodes:
        failure = run.task("talos_linux.talos.cluster : Stop at a node that could not be configured", node.name)
        assert failure["result"]["msg"] == (
            "The config's DiscoveryServiceConfig/default document needs Talos v1.14.0 or newer (as do %d more of its "
            "documents and fields); node %s runs v1.13.4." % (24 if node.role == "controlplane" else 10, node.address))
        assert node.maintenance and node.config is None
    assert cluster.audit("ApplyConfiguration") == []


def _recap_changes(run):
    lines = [line for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines() if " : ok=" in line]
    return dict((line.split()[0], int(line.split("changed=")[1].split()[0])) for line in lines)


@pytest.mark.once
def test_provisioning_again_after_an_upgrade_changes_nothing_and_the_upgrade_role_says_what_it_did(
        emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, reboot_seconds=0.1)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(cluster.inventory()))
    workdir = tmp_path / "generated"
    provision = role_play(cluster, workdir)
    upgrade = {"hosts": "controlplane:workers", "gather_facts": False, "roles": [{
        "role": "talos_linux.talos.upgrade", "vars": {
            "upgrade_version": "v1.14.1", "upgrade_talosconfig": "%s/talosconfig" % workdir,
            "upgrade_force_quorum_loss": True, "upgrade_wait_timeout": 60}}]}

    def report(run):
        (found,) = [r for r in run.results if r["task"].endswith("Report the rolling upgrade")]
        return found["result"]["msg"]

    run_playbook(provision, inventory=str(inventory))
    run_playbook(upgrade, inventory=str(inventory))
    newer = dict((node.name, node.config["machine"]["install"]["image"]) for node in cluster.nodes)
    assert all(image.endswith(":v1.14.1") for image in newer.values()) and cluster.nodes[0].talos_version == "v1.14.1"
    applies = len(cluster.audit("ApplyConfiguration", include_dry_run=False))

    # The configs rendered for Talos v1.14.0 name its installer: the nodes keep the one talos_upgrade moved them to.
    for check in (True, False):
        again = run_playbook(provision, inventory=str(inventory), check=check)
        assert again.changed_count == 0, [r["task"] for r in again.results if r["status"] == "changed"]
        for node in cluster.nodes:
            kept = again.task("talos_linux.talos.cluster : Apply the machine configuration", node.name)["result"]
            assert kept["installer_kept"]["applied"] == newer[node.name]
    assert len(cluster.audit("ApplyConfiguration", include_dry_run=False)) == applies
    assert dict((node.name, node.config["machine"]["install"]["image"]) for node in cluster.nodes) == newer
    unchanged = run_playbook(upgrade, inventory=str(inventory))
    assert unchanged.changed_count == 0
    assert report(unchanged) == "Every node runs Talos v1.14.1. Upgraded: none. Already there: controlplane-1, worker-1."

    # A reference moved back by other means: the upgrade role updates it alone, and says so.
    worker = cluster.workers[0]
    run_playbook({"hosts": "localhost", "gather_facts": False, "tasks": [{"talos_linux.talos.talos_apply_config": {
        "talosconfig": "%s/talosconfig" % workdir, "node": worker.address, "config_file": "%s/worker.yaml" % workdir,
        "config_patches": [{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None,
                            "hostname": worker.name + "-gen"}]}}]})
    assert worker.config["machine"]["install"]["image"].endswith(":v1.14.0")
    reboots = worker.reboots
    for check in (True, False):
        updated = run_playbook(upgrade, inventory=str(inventory), check=check)
        assert report(updated) == (
            "%s Talos v1.14.1. %s: none. Only the installer reference %s updated, the node running the target "
            "already: worker-1. Already there: controlplane-1." % (
                ("Check mode: every node would run", "Would be upgraded", "would be") if check
                else ("Every node runs", "Upgraded", "was")))
        assert _recap_changes(updated) == {"controlplane-1": 0, "worker-1": 1}
        assert "worker-1's installer reference %s updated." % ("would be" if check else "was") in updated.stdout
    assert worker.config["machine"]["install"]["image"] == newer[worker.name] and worker.reboots == reboots
