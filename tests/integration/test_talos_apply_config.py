# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_apply_config through ansible-playbook against the emulator, proven by the node state and the audit log."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import load_config

APPLY = "machine.MachineService/ApplyConfiguration"


def play(tasks, talosconfig):
    return [{
        "name": "talos_apply_config",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}},
        "tasks": tasks,
    }]


def apply_task(name, node, **options):
    options.setdefault("node", node.address)
    return {"name": name, "talos_linux.talos.talos_apply_config": options, "register": "applied"}


def applied(cluster, node):
    """Real (not dry-run) ApplyConfiguration calls the node accepted."""
    return cluster.audit(APPLY, node=node.name, include_dry_run=False, include_failed=False)


def with_hostname(config_text, hostname):
    document = yaml.safe_load(config_text)
    document["machine"]["network"]["hostname"] = hostname
    return yaml.safe_dump(document, sort_keys=False)


def test_maintenance_apply_brings_up_the_secure_api(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True)
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    assert controlplane.maintenance and worker.maintenance
    tasks = [
        apply_task("install control plane", controlplane, endpoints=[controlplane.endpoint], insecure=True,
                   config_file="%s/controlplane.yaml" % cluster.state_dir),
        apply_task("install worker", worker, endpoints=[worker.endpoint], insecure=True,
                   config_file="%s/worker.yaml" % cluster.state_dir,
                   config_patches=[{"machine": {"network": {"hostname": "patched-worker"}}}]),
        {"name": "facts over mutual TLS", "talos_linux.talos.talos_facts": {"nodes": [controlplane.address, worker.address],
                                                                            "gather_subset": ["min", "config"]}},
    ]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    for name, node in (("install control plane", controlplane), ("install worker", worker)):
        result = run.task(name)["result"]
        assert result["changed"] is True and result["rebooted"] is True and result["mode"] == "no_reboot"
        assert not node.maintenance and node.stage == "running"
        assert len(applied(cluster, node)) == 1
    assert worker.hostname == "patched-worker"

    facts = run.task("facts over mutual TLS")["result"]["nodes"]
    assert facts[controlplane.address]["maintenance"] is False
    assert facts[controlplane.address]["machine"]["type"] == "controlplane"
    assert facts[worker.address]["machine"]["type"] == "worker" and facts[worker.address]["hostname"] == "patched-worker"
    expected = load_config(config_file="%s/controlplane.yaml" % cluster.state_dir).hash()
    assert facts[controlplane.address]["config"]["hash"] == expected


def test_identical_reapply_changes_nothing(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    config_file = tmp_path / "current.yaml"
    config_file.write_text(node.config_text())
    run = run_playbook(play([apply_task("reapply", node, config_file=str(config_file))], cluster.talosconfig_path()))

    result = run.task("reapply")["result"]
    assert result["changed"] is False and result["rebooted"] is False
    entries = cluster.audit(APPLY, node=node.name)
    assert [entry["dry_run"] for entry in entries] == [True]
    assert node.reboots == 0


def test_changed_config_in_check_mode_applies_nothing(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    before = node.config_text()
    tasks = [apply_task("preview", node, config=with_hostname(before, "renamed"))]
    run = run_playbook(play(tasks, cluster.talosconfig_path()), check=True)

    result = run.task("preview")["result"]
    assert result["changed"] is True
    assert applied(cluster, node) == []
    assert [entry["dry_run"] for entry in cluster.audit(APPLY, node=node.name)] == [True]
    assert node.config_text() == before and node.hostname == node.name


def test_diff_shows_the_change_without_secrets(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    old_secrets = load_config(config=node.config_text()).secret_values()
    document = yaml.safe_load(with_hostname(node.config_text(), "renamed"))
    document["cluster"]["secret"] = "cm90YXRlZC1jbHVzdGVyLXNlY3JldC12YWx1ZQ=="
    new_config = yaml.safe_dump(document, sort_keys=False)
    secrets = old_secrets | load_config(config=new_config).secret_values()
    run = run_playbook(play([apply_task("apply with diff", node, config=new_config)], cluster.talosconfig_path()), diff=True)

    result = run.task("apply with diff")["result"]
    assert result["changed"] is True and node.hostname == "renamed"
    assert "+    hostname: renamed" in run.stdout
    assert "-  secret: <redacted>" in run.stdout and "+  secret: <redacted, changed>" in run.stdout
    everything = run.stdout + run.stderr + json.dumps(run.results)
    leaked = [secret for secret in secrets if secret in everything]
    assert leaked == []


def test_reboot_mode_reboots_once_and_waits(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    boot_id = worker.boot_id
    tasks = [apply_task("apply and reboot", worker, config=with_hostname(worker.config_text(), "rebooted-worker"), mode="reboot")]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    result = run.task("apply and reboot")["result"]
    assert result["changed"] is True and result["rebooted"] is True and result["mode"] == "no_reboot"
    # The module waited: the node is back, running, with a new boot ID and the new config.
    assert worker.stage == "running" and worker.reachable and worker.boot_id != boot_id
    assert worker.hostname == "rebooted-worker"
    assert worker.reboots == 1
    assert len(cluster.audit("Reboot", node=worker.name, include_failed=False)) == 1
    assert [entry["mode"] for entry in applied(cluster, worker)] == ["NO_REBOOT"]


def test_reboot_mode_on_talos_before_v1_14_reboots_in_the_apply(emulator, run_playbook):
    cluster = emulator(controlplanes=1, talos_version="v1.12.0")
    node = cluster.controlplanes[0]
    boot_id = node.boot_id
    # The only control plane: the etcd quorum guard cannot let it go without force_quorum_loss (below).
    tasks = [apply_task("apply and reboot", node, config=with_hostname(node.config_text(), "renamed"), mode="reboot",
                        force_quorum_loss=True)]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    result = run.task("apply and reboot")["result"]
    assert result["changed"] is True and result["rebooted"] is True and result["mode"] == "reboot"
    assert node.reboots == 1 and node.boot_id != boot_id and node.hostname == "renamed"
    assert cluster.audit("Reboot") == []
    assert [entry["mode"] for entry in applied(cluster, node)] == ["REBOOT"]


def test_reader_certificate_is_refused_and_nothing_applied(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    before = node.config_text()
    tasks = [apply_task("apply as reader", node, config=with_hostname(before, "renamed"))]
    run = run_playbook(play(tasks, cluster.talosconfig_path("reader")), expect_rc=2)

    result = run.task("apply as reader")
    assert result["status"] == "failed"
    assert "os:admin" in result["result"]["msg"] and "os:reader" in result["result"]["msg"]
    assert result["result"]["code"] == "PermissionDenied"
    assert applied(cluster, node) == []
    assert node.config_text() == before


def test_invalid_patch_fails_before_any_call(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    tasks = [apply_task("bad patch", node, config=node.config_text(), config_patches=[{"machine": {}}, "machine: [unclosed"])]
    run = run_playbook(play(tasks, cluster.talosconfig_path()), expect_rc=2)

    assert run.task("bad patch")["result"]["msg"].startswith("config_patches[1] is not valid YAML")
    assert cluster.audit(APPLY) == []


def test_json_patch_on_a_multi_document_config_is_refused_and_merge_patches_apply(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    before = node.config_bytes
    multi_document = node.config_text() + "---\n" + yaml.safe_dump(
        {"apiVersion": "v1alpha1", "kind": "KubeNodeConfig", "labels": {"example.com/rack": "r1"}})
    json_patch = apply_task("json patch", node, config=multi_document, config_patches=[
        [{"op": "replace", "path": "/machine/network/hostname", "value": "renamed"}]])
    json_patch["ignore_errors"] = True
    merge_patches = apply_task("merge patches", node, config=multi_document, config_patches=[
        {"machine": {"network": {"hostname": "renamed"}}},
        {"apiVersion": "v1alpha1", "kind": "KubeNodeConfig", "labels": {"example.com/rack": "r2"}}])
    run = run_playbook(play([json_patch], cluster.talosconfig_path()))

    refused = run.task("json patch")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"] == (
        "config_patches[0] is a JSON patch (RFC 6902), which cannot be applied to a multi-document machine config "
        "(v1alpha1, KubeNodeConfig): use a strategic merge patch instead, a mapping (with kind to patch a document "
        "other than v1alpha1).")
    assert cluster.audit() == []
    assert node.config_bytes == before and node.hostname == node.name

    run = run_playbook(play([merge_patches], cluster.talosconfig_path()))
    assert run.task("merge patches")["result"]["changed"] is True
    assert node.hostname == "renamed"
    documents = list(yaml.safe_load_all(node.config_bytes))
    assert [document.get("kind") for document in documents] == [None, "KubeNodeConfig"]
    assert documents[1]["labels"] == {"example.com/rack": "r2"}


def test_concurrent_apply_is_retried_within_the_timeout(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    cluster.faults.fail("ApplyConfiguration", "FailedPrecondition", "another apply configuration is already in progress", times=2)
    tasks = [apply_task("apply while another is running", node, config=with_hostname(node.config_text(), "renamed"), timeout=30)]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    assert run.task("apply while another is running")["result"]["changed"] is True
    assert node.hostname == "renamed"
    assert len(applied(cluster, node)) == 1


def test_several_nodes_in_one_task_each_get_the_config_and_a_rerun_changes_nothing(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2)
    workers = cluster.workers
    patch = {"machine": {"sysctls": {"vm.max_map_count": "262144"}}}
    tasks = [{"name": "both workers", "talos_linux.talos.talos_apply_config": {
        "nodes": [worker.address for worker in workers], "config_file": "%s/worker.yaml" % cluster.state_dir,
        "config_patches": [patch], "max_concurrency": 2}, "register": "applied"}]
    secrets = load_config(config_file="%s/worker.yaml" % cluster.state_dir).secret_values()
    preview = run_playbook(play(tasks, cluster.talosconfig_path()), check=True, diff=True, verbosity=3)
    assert preview.task("both workers")["result"]["changed"] is True and all(applied(cluster, w) == [] for w in workers)
    run = run_playbook(play(tasks, cluster.talosconfig_path()), diff=True, verbosity=3)
    # Neither the preview nor the apply, at -vvv with diffs, shows a secret of the config.
    everything = preview.stdout + preview.stderr + run.stdout + run.stderr + json.dumps(run.results)
    assert secrets and [secret for secret in secrets if secret in everything] == []

    result = run.task("both workers")["result"]
    assert result["changed"] is True and sorted(result["nodes"]) == sorted(worker.address for worker in workers)
    assert all(result["nodes"][worker.address]["changed"] for worker in workers)
    for worker in workers:
        assert yaml.safe_load(worker.config_text())["machine"]["sysctls"] == {"vm.max_map_count": "262144"}
        assert [entry["mode"] for entry in applied(cluster, worker)] == ["AUTO"]
    # Each node's diff is shown under its own header.
    assert all("node %s: machine configuration to apply" % worker.address in run.stdout for worker in workers)
    assert len([line for line in run.stdout.splitlines() if line.startswith("+") and "vm.max_map_count" in line]) == 2

    rerun = run_playbook(play(tasks, cluster.talosconfig_path()))
    result = rerun.task("both workers")["result"]
    assert result["changed"] is False and all(not node["changed"] for node in result["nodes"].values())
    assert all(len(applied(cluster, worker)) == 1 for worker in workers)


def test_a_reboot_of_a_control_plane_etcd_cannot_spare_is_refused_before_anything_is_applied(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, reboot_seconds=0.1)
    target, down = cluster.controlplanes[0], cluster.controlplanes[2]
    cluster.power_off(down.name)
    tasks = [apply_task("apply and reboot", target, config=with_hostname(target.config_text(), "renamed"), mode="reboot")]

    for check in (True, False):
        refused = run_playbook(play(tasks, cluster.talosconfig_path()), check=check, expect_rc=2).task("apply and reboot")
        assert refused["result"]["msg"].startswith(
            "Refusing to reboot control-plane node %s: etcd would keep 3 voting members and need 2 of them healthy for "
            "quorum, but only 1 member other than %s is healthy (not healthy: %s - " % (target.address, target.name, down.name))
        assert refused["result"]["etcd_gate_open"] is False
        assert applied(cluster, target) == [] and cluster.audit("Reboot") == [] and target.hostname == target.name

    # Once the member is back, the same task passes the guard, applies and reboots.
    cluster.power_on(down.name)
    cluster.wait_ready(down, timeout=30)
    result = run_playbook(play([dict(tasks[0], **{"talos_linux.talos.talos_apply_config": dict(
        tasks[0]["talos_linux.talos.talos_apply_config"], quorum_wait_timeout=60)})], cluster.talosconfig_path())
    ).task("apply and reboot")["result"]
    assert result["rebooted"] is True and result["etcd_gate_open"] is True and result["quorum"]["safe"] is True
    assert target.hostname == "renamed" and target.reboots == 1


def test_keep_newer_installer_never_moves_the_installer_reference_back(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    given = yaml.safe_load(worker.config_text())
    older = given["machine"]["install"]["image"]
    newer = older.rsplit(":", 1)[0] + ":v1.14.7"
    given["machine"]["install"]["image"] = newer
    run_playbook(play([apply_task("point at a newer release", worker, config=yaml.safe_dump(given))],
                      cluster.talosconfig_path()))
    assert worker.config["machine"]["install"]["image"] == newer

    task = apply_task("apply the older config", worker, config=worker.config_text().replace(newer, older),
                      keep_newer_installer=True)
    secrets = load_config(config=worker.config_text()).secret_values()
    for check in (True, False):
        run = run_playbook(play([task], cluster.talosconfig_path()), check=check, diff=True, verbosity=3)
        result = run.task("apply the older config")["result"]
        assert result["changed"] is False and result["installer_kept"] == {"given": older, "applied": newer}
        # The node's active config, read to find its installer, shows nowhere, nor does any secret of it.
        everything = run.stdout + run.stderr + json.dumps(run.results)
        assert secrets and [secret for secret in secrets if secret in everything] == []
    assert worker.config["machine"]["install"]["image"] == newer and len(applied(cluster, worker)) == 1

    # Without the option the config is applied as given, the reference going back.
    del task["talos_linux.talos.talos_apply_config"]["keep_newer_installer"]
    assert run_playbook(play([task], cluster.talosconfig_path())).task("apply the older config")["result"]["changed"] is True
    assert worker.config["machine"]["install"]["image"] == older
