# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_config_migrate: a v1.14 node's v1alpha1 config (as the v1.13 contract writes it) moved to the v1.14 documents
through both doors, a second run changing nothing; configs on the controller; a v1.13 node refused by the version
check."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

APPLY = "machine.MachineService/ApplyConfiguration"
MIGRATE = "talos_linux.talos.talos_config_migrate"
DOORS = ("controller", "module")
USER_PATCH = {"machine": {"network": {"nameservers": ["10.5.0.53"]}, "time": {"servers": ["time.cluster.example"]},
                          "nodeLabels": {"rack": "r1"}, "sysctls": {"vm.max_map_count": "262144"}}}


def play(tasks, talosconfig=None):
    return [{
        "name": "config migration",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}} if talosconfig else {},
        "tasks": tasks,
    }]


def legacy_config_tasks(cluster, tmp_path, machine_type):
    """talos_machine_config with the v1.13 contract for the cluster's own bundle, with a user's patch."""
    root = yaml.safe_load(cluster.controlplanes[0].config_text())
    return [{"name": "render %s for v1.13" % machine_type, "talos_linux.talos.talos_machine_config": {
        "secrets": os.path.join(cluster.state_dir, "secrets.yaml"), "machine_type": machine_type,
        "cluster_name": root["cluster"]["clusterName"], "cluster_endpoint": root["cluster"]["controlPlane"]["endpoint"],
        "talos_version": "v1.13", "config_patches": [USER_PATCH], "dest": str(tmp_path / ("%s.yaml" % machine_type))}}]


def documents_of(node):
    return dict(((document.get("kind") or "v1alpha1", document.get("name")), document)
                for document in yaml.safe_load_all(node.config_text()) if document)


def test_a_v1_14_nodes_legacy_config_moves_to_the_documents_and_a_second_run_changes_nothing(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, talos_version="v1.14.1")
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    nodes = [controlplane.address, worker.address]
    tasks = legacy_config_tasks(cluster, tmp_path, "controlplane") + legacy_config_tasks(cluster, tmp_path, "worker")
    tasks += [{"name": "apply the v1.13-contract config to %s" % node.name, "talos_linux.talos.talos_apply_config": {
        "node": node.address, "config_file": str(tmp_path / ("%s.yaml" % kind))}} for node, kind in (
        (controlplane, "controlplane"), (worker, "worker"))]
    tasks += [
        {"name": "preview", MIGRATE: {"nodes": nodes}, "check_mode": True, "diff": True},
        {"name": "migrate (controller door)", MIGRATE: {"nodes": nodes}, "vars": {"talos_door": "controller"}},
        {"name": "migrate again (module door)", MIGRATE: {"nodes": nodes}, "vars": {"talos_door": "module"}},
        {"name": "migrate again (controller door)", MIGRATE: {"node": controlplane.address}},
    ]

    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    preview = run.task("preview")
    assert preview["status"] == "changed"
    for node in nodes:
        entry = preview["result"]["nodes"][node]
        assert entry["changed"] is True and entry["plan"]["conflicts"] == [] and entry["plan"]["homeless"] == []
        assert {"from": ".machine.network.nameservers", "to": "ResolverConfig", "field": "nameservers",
                "value": [{"address": "10.5.0.53"}]} in entry["plan"]["steps"]
        assert entry["valid_for"] == {"min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}
    diff = preview["result"]["diff"]
    assert any("kind: KubeletConfig" in side["after"] for side in diff)
    secretbox = next(yaml.safe_load_all((tmp_path / "controlplane.yaml").read_text()))["cluster"]["secretboxEncryptionSecret"]
    assert secretbox not in run.stdout and "BEGIN EC PRIVATE KEY" not in run.stdout
    assert run.task("migrate (controller door)")["status"] == "changed"
    for name in ("migrate again (module door)", "migrate again (controller door)"):
        again = run.task(name)
        assert again["status"] == "ok", again
    assert run.task("migrate again (module door)")["result"]["nodes"][controlplane.address]["plan"]["steps"] == []
    # Each node: the v1.13-contract config and the migration (a dry run and an apply each), the preview's dry run;
    # the reruns sent nothing at all.
    for node in (controlplane, worker):
        assert len(cluster.audit(APPLY, node=node.name, include_dry_run=False)) == 2
        assert len(cluster.audit(APPLY, node=node.name)) == 5

    documents = documents_of(controlplane)
    root = documents[("v1alpha1", None)]
    assert set(root["machine"]) == {"type", "token", "ca", "certSANs", "features"}
    assert set(root["cluster"]) == {"token", "etcd"}
    assert documents[("ResolverConfig", None)]["nameservers"] == [{"address": "10.5.0.53"}]
    assert documents[("TimeSyncConfig", None)] == {"apiVersion": "v1alpha1", "kind": "TimeSyncConfig", "enabled": True,
                                                   "ntp": {"servers": ["time.cluster.example"]}}
    assert documents[("KubeNodeConfig", None)]["labels"]["node-role.kubernetes.io/control-plane"] == ""
    assert documents[("KubeNodeConfig", None)]["taints"] == {"node-role.kubernetes.io/control-plane": "NoSchedule"}
    assert documents[("KubeEtcdEncryptionConfig", None)]["config"]["resources"][0]["providers"][0] == {
        "secretbox": {"keys": [{"name": "key2", "secret": secretbox}]}}
    assert documents[("UnattendedInstallConfig", None)]["provisioning"]["wipe"] is False
    worker_documents = documents_of(worker)
    assert "taints" not in worker_documents[("KubeNodeConfig", None)]
    assert ("KubeEtcdEncryptionConfig", None) not in worker_documents


def test_configs_on_the_controller_are_planned_and_written_through_both_doors(run_playbook, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    options = {"secrets": str(secrets), "machine_type": "controlplane", "cluster_name": "c",
               "cluster_endpoint": "https://10.5.0.2:6443", "talos_version": "v1.13"}
    volumes = {"cluster": {"apiServer": {"extraVolumes": [{"hostPath": "/var/lib/a", "mountPath": "/var/lib/a"}]}}}
    interfaces = {"machine": {"network": {"interfaces": [
        {"interface": "eth0", "addresses": ["10.5.0.2/24"], "dhcp": True},
        {"interface": "bond0", "bond": {"interfaces": ["eth1", "eth2"], "mode": "802.3ad"}},
        {"interface": "bond1", "bond": {"interfaces": ["eth3", "eth4"], "mode": "active-backup", "primary": "eth3"}}]}}}
    tasks = [
        {"name": "bundle", "talos_linux.talos.talos_machine_secrets": {"path": str(secrets)}},
        {"name": "render", "talos_linux.talos.talos_machine_config": dict(options, dest=str(tmp_path / "cp.yaml"))},
        {"name": "render with volumes", "talos_linux.talos.talos_machine_config": dict(
            options, config_patches=[volumes], dest=str(tmp_path / "volumes.yaml"))},
        {"name": "render with interfaces", "talos_linux.talos.talos_machine_config": dict(
            options, config_patches=[interfaces], dest=str(tmp_path / "interfaces.yaml"))},
        {"name": "plan only", MIGRATE: {"config_file": str(tmp_path / "cp.yaml")}, "diff": True},
    ]
    for door in DOORS:
        tasks += [
            {"name": "write (%s door)" % door, MIGRATE: {"config_file": str(tmp_path / "cp.yaml"), "dest": str(tmp_path / "cp-1.14.yaml")},
             "vars": {"talos_door": door}},
            {"name": "refuse volumes (%s door)" % door, MIGRATE: {"config_file": str(tmp_path / "volumes.yaml"),
                                                                  "dest": str(tmp_path / "volumes-1.14.yaml")},
             "vars": {"talos_door": door}, "ignore_errors": True},
            {"name": "interfaces (%s door)" % door, MIGRATE: {"config_file": str(tmp_path / "interfaces.yaml")},
             "vars": {"talos_door": door}},
        ]
    tasks.append({"name": "drop volumes", MIGRATE: {"config_file": str(tmp_path / "volumes.yaml"), "dest": str(tmp_path / "volumes-1.14.yaml"),
                                                    "accept_dropped": ["cluster.apiServer.extraVolumes"]}})

    run = run_playbook(play(tasks))

    plan_only = run.task("plan only")
    assert plan_only["status"] == "ok" and "dest" not in plan_only["result"]
    assert "kind: KubeAPIServerConfig" in plan_only["result"]["diff"]["after"]
    assert "<redacted>" in plan_only["result"]["diff"]["after"]
    assert run.task("write (controller door)")["status"] == "changed"
    assert run.task("write (module door)")["status"] == "ok"
    for door in DOORS:
        refused = run.task("refuse volumes (%s door)" % door)["result"]
        assert refused["msg"] == (".cluster.apiServer.extraVolumes has no home in the Talos v1.14 documents (the "
                                  "KubeAPIServerConfig document mounts no user volumes): remove it from the config, or name "
                                  "it in accept_dropped to migrate without it.")
        assert refused["plan"]["homeless"] == [refused["msg"]]
    assert run.task("drop volumes")["status"] == "changed"
    for door in DOORS:
        moved = run.task("interfaces (%s door)" % door)["result"]
        assert moved["plan"]["warnings"] == [moved["warnings"][0]] and len(moved["warnings"]) == 1
        assert moved["warnings"][0].startswith("With a link document in the config, Talos v1.14 stops the DHCP it runs by default")
        assert moved["plan"]["kept"] == [
            ".machine.network.interfaces.bond1: BondConfig has no primary link: Talos's v1alpha1 path sets .bond.primary on the "
            "bond by its link's index (SetBondMasterLegacy, controllers/network/network.go), a BondConfig never sets one; Talos "
            "v1.14 still reads it from v1alpha1"]
        assert {"from": ".machine.network.interfaces.bond0", "to": "BondConfig/bond0", "field": None,
                "value": {"links": ["eth1", "eth2"], "bondMode": "802.3ad"}} in moved["plan"]["steps"]
        assert {"from": ".machine.network.interfaces.eth0.dhcp", "to": "DHCPv4Config/eth0", "field": None,
                "value": {"clientIdentifier": "none"}} in moved["plan"]["steps"]
    written = list(yaml.safe_load_all((tmp_path / "cp-1.14.yaml").read_text()))
    assert [document.get("kind") for document in written].count("KubeAuthorizerConfig") == 2
    assert oct(os.stat(tmp_path / "cp-1.14.yaml").st_mode & 0o777) == "0o600"
    assert "extraVolumes" not in (tmp_path / "volumes-1.14.yaml").read_text()


@pytest.mark.once
def test_a_v1_13_node_is_refused_by_the_version_check_and_keeps_its_config(emulator, run_playbook):
    cluster = emulator(controlplanes=1, talos_version="v1.13.4")
    node = cluster.controlplanes[0]
    before = node.config_text()
    tasks = [{"name": "migrate (%s door)" % door, MIGRATE: {"node": node.address}, "vars": {"talos_door": door},
              "ignore_errors": True} for door in DOORS]
    tasks.append({"name": "preview", MIGRATE: {"node": node.address}, "check_mode": True, "ignore_errors": True})

    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    for name in ("migrate (controller door)", "migrate (module door)", "preview"):
        task = run.task(name)
        assert task["status"] == "failed", task
        result = task["result"]
        assert result["msg"].startswith("The config's ") and " needs Talos v1.14.0 or newer" in result["msg"]
        assert result["msg"].endswith("; node %s runs v1.13.4." % node.address)
        assert result["plan"]["steps"]  # what the migration would move is still said
    assert cluster.audit(APPLY, node=node.name) == []
    assert node.config_text() == before
