# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The adopt role on clusters no code of the collection configured: emulated nodes installed with the machine
configs Talos's own generator and patcher made (tests/fixtures/adoption, from tests/conformance/
adoption_fixtures_test.go), for single- and multi-document contracts, with the patches users write. Each cluster is
adopted from a talosconfig alone (the inventory plugin's hosts), then the cluster role on the adopted inventory
changes nothing, and a change of the group variables reaches every node.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import hashlib
import os
import stat

import pytest
import yaml

from talos_emulator import configgen

pytestmark = pytest.mark.long

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(TESTS, "fixtures", "adoption")
CLUSTER_PLAYBOOK = os.path.join(os.path.dirname(TESTS), "docs", "examples", "cluster.yml")


def fixture_cluster(name):
    with open(os.path.join(FIXTURES, "clusters.yaml")) as manifest:
        return next(cluster for cluster in yaml.safe_load(manifest)["clusters"] if cluster["name"] == name)


def _read(path):
    with open(path) as handle:
        return handle.read()


class UpstreamCluster(object):
    """An emulated cluster whose nodes run the fixture's configs, installed as a maintenance-mode apply installs them,
    etcd bootstrapped, and a talosconfig of the fixture's bundle as talosctl gen config writes one."""

    def __init__(self, emulator, tmp_path, name):
        self.fixture = fixture_cluster(name)
        roles = [node["type"] for node in self.fixture["nodes"]]
        self.cluster = emulator(controlplanes=roles.count("controlplane"), workers=roles.count("worker"), maintenance=True,
                                talos_version=self.fixture["talos_version"], reboot_seconds=0.1)
        self.nodes = {}
        for spec in self.fixture["nodes"]:
            node = next(node for node in self.cluster.nodes if node.name == spec["name"])
            self.nodes[spec["name"]] = node
            self.cluster.call(node.install, self.config_bytes(spec["name"]))
        for node in self.nodes.values():
            self.cluster.wait_until(lambda: node.reachable and node.stage == "running", timeout=30)
        self.cluster.bootstrap()
        self.directory = tmp_path / "running"
        self.directory.mkdir()
        bundle = configgen.SecretsBundle.from_yaml(_read(os.path.join(FIXTURES, self.fixture["bundle"])))
        self.talosconfig = self.directory / "talosconfig"
        self.talosconfig.write_text(configgen.generate_talosconfig(
            bundle, self.fixture["cluster_name"], [node.endpoint for node in self.cluster.controlplanes]))
        # The inventory plugin's file next to the talosconfig: the nodes as the cluster lists them.
        self.source = self.directory / "cluster.talos.yml"
        self.source.write_text(yaml.safe_dump({"plugin": "talos_linux.talos.talos", "talosconfig": str(self.talosconfig),
                                               "discovery": False, "nodes": [node.address for node in self.nodes.values()]}))

    def config_bytes(self, name):
        return open(os.path.join(FIXTURES, self.fixture["name"], name + ".machineconfig"), "rb").read()

    def running_configs(self):
        return dict((name, node.config_bytes) for name, node in self.nodes.items())

    def mutations(self):
        """Every call that reached the emulator's audit log of mutating calls (dry runs of an apply are logged too)."""
        return [entry for entry in self.cluster.audit() if not entry["dry_run"]]


ADOPT = [{"name": "Adopt the cluster", "hosts": "all", "gather_facts": False,
          "roles": [{"role": "talos_linux.talos.adopt"}]}]


def recap(run):
    lines = [line for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines() if " : ok=" in line]
    return dict((line.split()[0], int(line.split("changed=")[1].split()[0])) for line in lines)


# Every contract proves the adoption's own logic, which neither the door nor the libraries change: one of them runs on
# every stack, through both doors, the others once.
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.once) for name in (
    "v1.9-patched", "v1.10", "v1.12-patched", "v1.13", "v1.14-patched")] + ["v1.11"])
def test_an_upstream_cluster_is_adopted_and_the_cluster_role_changes_nothing(emulator, run_playbook, tmp_path, name):
    upstream = UpstreamCluster(emulator, tmp_path, name)
    fixture = upstream.fixture
    before = upstream.running_configs()
    adopted = tmp_path / "adopted"

    run = run_playbook(ADOPT, inventory=str(upstream.source),
                       extra_vars={"adopt_dest": str(adopted), "adopt_talosconfig": str(upstream.talosconfig)})
    assert upstream.mutations() == [] and upstream.running_configs() == before, "adopting only reads"

    # The backup: one private file per node, byte for byte what the node runs, and the manifest.
    backup = adopted / "config-backup"
    manifest = yaml.safe_load((backup / "manifest.yaml").read_text())["nodes"]
    assert sorted(manifest) == sorted(node.address for node in upstream.nodes.values())
    for name_, node in upstream.nodes.items():
        entry = manifest[node.address]
        assert (backup / entry["file"]).read_bytes() == before[name_]
        assert entry["talos_version"] == fixture["talos_version"] and entry["hostname"] == name_
        assert entry["sha256"] == hashlib.sha256(before[name_]).hexdigest()
    for path in glob.glob(str(adopted / "**"), recursive=True):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if os.path.isdir(path) else 0o600), (path, oct(mode))

    # The settings are the generator's inputs, found again.
    settings = yaml.safe_load((adopted / "group_vars" / "all.yml").read_text())
    assert settings["cluster_name"] == fixture["cluster_name"]
    assert settings["cluster_endpoint"] == fixture["endpoint"]
    assert settings["cluster_talos_version"] == fixture["contract"]
    assert settings["cluster_kubernetes_version"] == fixture["kubernetes_version"]
    assert (settings["cluster_install_disk"], settings["cluster_install_image"]) == (fixture["install_disk"], fixture["install_image"])
    assert settings["cluster_additional_sans"] == fixture["additional_sans"]
    inventory = yaml.safe_load((adopted / "inventory.yml").read_text())["all"]
    assert inventory["vars"] == {"talosconfig": "{{ inventory_dir }}/talosconfig"}
    assert dict((group, sorted(members["hosts"])) for group, members in inventory["children"].items()) == {
        "controlplane": sorted(spec["name"] for spec in fixture["nodes"] if spec["type"] == "controlplane"),
        "workers": sorted(spec["name"] for spec in fixture["nodes"] if spec["type"] == "worker")}

    # The cluster role's first run on the adopted inventory: nothing changes on any node or file.
    files = dict((path, open(path, "rb").read()) for path in glob.glob(str(adopted / "**"), recursive=True) if os.path.isfile(path))
    converged = run_playbook(CLUSTER_PLAYBOOK, inventory=str(adopted / "inventory.yml"))
    assert recap(converged) == dict((spec["name"], 0) for spec in fixture["nodes"]), converged.stdout[-3000:]
    assert upstream.mutations() == [] and upstream.running_configs() == before
    assert dict((path, open(path, "rb").read()) for path in files) == files

    # A change of the group variables reaches every node, through the role's dry run and apply.
    settings["cluster_controlplane_patches"].append({"machine": {"env": {"HTTPS_PROXY": "http://proxy.adopt.example:3128"}}})
    settings["cluster_worker_patches"].append({"machine": {"env": {"HTTPS_PROXY": "http://proxy.adopt.example:3128"}}})
    (adopted / "group_vars" / "all.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    changed = run_playbook(CLUSTER_PLAYBOOK, inventory=str(adopted / "inventory.yml"))
    assert recap(changed) == dict((spec["name"], 1) for spec in fixture["nodes"])
    for node in upstream.nodes.values():
        assert node.config["machine"]["env"] == {"HTTPS_PROXY": "http://proxy.adopt.example:3128"}, node.name
    again = run_playbook(CLUSTER_PLAYBOOK, inventory=str(adopted / "inventory.yml"))
    assert recap(again) == dict((spec["name"], 0) for spec in fixture["nodes"])


def test_check_mode_writes_nothing_changes_no_node_and_lists_what_it_would_write(emulator, run_playbook, tmp_path):
    upstream = UpstreamCluster(emulator, tmp_path, "v1.14-patched")
    before = upstream.running_configs()
    adopted = tmp_path / "adopted"
    run = run_playbook(ADOPT, inventory=str(upstream.source), check=True, diff=True,
                       extra_vars={"adopt_dest": str(adopted), "adopt_talosconfig": str(upstream.talosconfig)})
    assert not os.path.exists(str(adopted)), "check mode writes nothing"
    assert upstream.mutations() == [] and upstream.running_configs() == before
    said = run.task("talos_linux.talos.adopt : Say what was written", "controlplane-1")["result"]["msg"]
    assert said.startswith("Would write in %s: %s (4 configs and manifest.yaml), " % (adopted, adopted / "config-backup"))
    for name in ("secrets.yaml", "inventory.yml", "group_vars/all.yml", "host_vars/worker-2.yml", "controlplane.yaml",
                 "worker.yaml", "talosconfig", "kubeconfig"):
        assert name in said, name
    planned = run.task("talos_linux.talos.adopt : Write the secrets bundle, the inventory, its variables and the rendered configs",
                       "controlplane-1")["result"]
    assert planned["changed"] and planned["cluster"]["talos_version"] == "v1.14"
    # The diff shows the files, never a key of the bundle.
    bundle = yaml.safe_load(_read(os.path.join(FIXTURES, "secrets.yaml")))
    keys = [ca["key"] for ca in bundle["certs"].values()] + [bundle["secrets"]["secretboxencryptionsecret"],
                                                             bundle["trustdinfo"]["token"], bundle["secrets"]["bootstraptoken"]]
    assert not [key for key in keys if key in run.stdout]
    assert "cluster_worker_patches" in run.stdout


@pytest.mark.once
def test_control_planes_of_two_clusters_are_refused_after_the_backup(emulator, run_playbook, tmp_path):
    upstream = UpstreamCluster(emulator, tmp_path, "v1.14-two-clusters")
    adopted = tmp_path / "adopted"
    variables = {"adopt_dest": str(adopted), "adopt_talosconfig": str(upstream.talosconfig)}
    sentence = ("The control planes disagree: node {0} and node {1} have different cluster IDs, Kubernetes CAs and etcd CAs, "
                "so they are not one cluster and no one secrets bundle renders both; adopt each cluster with its own nodes.").format(
        *[node.address for node in upstream.nodes.values()])
    for check in (True, False):
        run = run_playbook(ADOPT, inventory=str(upstream.source), check=check, extra_vars=variables, expect_rc=2)
        refused = run.task("talos_linux.talos.adopt : Write the secrets bundle, the inventory, its variables and the rendered "
                           "configs", "controlplane-1")["result"]
        assert refused["msg"] == sentence
    assert upstream.mutations() == []
    assert sorted(os.listdir(str(adopted))) == ["config-backup"], "the backup comes first, and nothing after the refusal"
    assert len(os.listdir(str(adopted / "config-backup"))) == 3


@pytest.mark.once
def test_a_config_applied_between_the_backup_and_the_adoption_stops_the_role_before_it_writes(emulator, run_playbook, tmp_path):
    upstream = UpstreamCluster(emulator, tmp_path, "v1.11")
    adopted = tmp_path / "adopted"
    worker = upstream.nodes["worker-1"]
    backed_up = worker.config_bytes
    manifest = adopted / "config-backup" / "manifest.yaml"

    def apply_once_backed_up(node):
        # The first call the worker gets once the backup is written is the adoption's read of its config.
        if manifest.exists() and node.config_bytes == backed_up:
            documents = list(yaml.safe_load_all(backed_up))
            documents[0]["machine"]["env"] = {"HTTPS_PROXY": "http://proxy.adopt.example:3128"}
            node.apply_active_config(yaml.safe_dump_all(documents).encode())

    upstream.cluster.faults.on_call("*", apply_once_backed_up, times=-1, node="worker-1")
    run = run_playbook(ADOPT, inventory=str(upstream.source), expect_rc=2,
                       extra_vars={"adopt_dest": str(adopted), "adopt_talosconfig": str(upstream.talosconfig)})
    assert worker.config_bytes != backed_up, "the config changed after the backup"
    refused = run.task("talos_linux.talos.adopt : Write the secrets bundle, the inventory, its variables and the rendered "
                       "configs", "controlplane-1")["result"]
    backup_hash, now_hash = hashlib.sha256(backed_up).hexdigest(), hashlib.sha256(worker.config_bytes).hexdigest()
    assert refused["msg"] == ("The running config of node %s changed since the backup (sha256 %s backed up, %s now): back up "
                              "again once nothing applies configs to the cluster. Nothing was written."
                              % (worker.address, backup_hash[:12], now_hash[:12]))
    assert sorted(os.listdir(str(adopted))) == ["config-backup"], "nothing but the backup is written"
    assert (adopted / "config-backup" / ("%s.yaml" % worker.address)).read_bytes() == backed_up
    assert upstream.mutations() == []


@pytest.mark.once
def test_a_second_adoption_writes_nothing_and_an_edited_file_is_kept_unless_forced(emulator, run_playbook, tmp_path):
    upstream = UpstreamCluster(emulator, tmp_path, "v1.11")
    adopted = tmp_path / "adopted"
    variables = {"adopt_dest": str(adopted), "adopt_talosconfig": str(upstream.talosconfig)}
    run_playbook(ADOPT, inventory=str(upstream.source), extra_vars=variables)
    again = run_playbook(ADOPT, inventory=str(upstream.source), extra_vars=variables)
    assert recap(again) == {"controlplane-1": 0, "worker-1": 0}
    edited = adopted / "host_vars" / "worker-1.yml"
    edited.write_text("cluster_host_patches: [{machine: {env: {A: '1'}}}]\n")
    refused = run_playbook(ADOPT, inventory=str(upstream.source), extra_vars=variables, expect_rc=2)
    assert ("%s already holds host_vars/worker-1.yml with other content than the adoption writes: set force to replace "
            "them, or choose another dest. Nothing was written." % adopted) in refused.stdout
    assert edited.read_text() == "cluster_host_patches: [{machine: {env: {A: '1'}}}]\n"
    run_playbook(ADOPT, inventory=str(upstream.source), extra_vars=dict(variables, adopt_force=True))
    assert "cluster_host_patches: []" in edited.read_text()
