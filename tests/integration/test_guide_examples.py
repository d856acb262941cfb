# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The guides' example playbooks (docs/examples/, included verbatim in the guides) run together, in the order a
reader meets them, against one emulated cluster laid out as docs/examples/inventory.yml says: the cluster's files
next to the inventory (issue 31)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "docs", "examples")

# Each example and the guide that shows it as a whole YAML block.
GUIDES = {
    "inventory.yml": "getting-started.md",
    "site.yml": "getting-started.md",
    "provision.yml": "provisioning.md",
    "rolling-restart.yml": "lifecycle.md",
    "node-remove.yml": "lifecycle.md",
    "upgrade.yml": "upgrading.md",
    "images.yml": "images.md",
    "etcd-maintenance.yml": "etcd.md",
}


def _example(name):
    return os.path.join(EXAMPLES, name)


def _read(path):
    with open(path) as handle:
        return handle.read()


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_each_example_is_in_its_guide_verbatim(name):
    blocks = re.findall(r"```yaml\n(.*?)```", _read(os.path.join(REPO, "docs", GUIDES[name])), re.S)
    assert _read(_example(name)) in blocks, "docs/%s does not show docs/examples/%s as it is" % (GUIDES[name], name)


def _recap_changes(run):
    lines = [line for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines() if " : ok=" in line]
    return dict((line.split()[0], int(line.split("changed=")[1].split()[0])) for line in lines)


@pytest.mark.once
@pytest.mark.skipif(os.environ.get("TALOS_TEST_DOOR") == "module",
                    reason="the guides run through the default door; the doors' equivalence is test_doors.py's, and "
                           "the module door would double this test's time (CI budget)")
def test_the_guides_examples_run_in_sequence_on_one_cluster(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, workers=2, maintenance=True, reboot_seconds=0.05)
    # The emulator's inventory (its hosts, and where its nodes listen) with the documented layout's talosconfig.
    inventory = cluster.inventory()
    inventory["all"]["vars"]["talosconfig"] = yaml.safe_load(_read(_example("inventory.yml")))["all"]["vars"]["talosconfig"]
    cluster_dir = tmp_path / "prod"
    (cluster_dir / "host_vars").mkdir(parents=True)
    (cluster_dir / "inventory.yml").write_text(yaml.safe_dump(inventory))
    for node in cluster.nodes:  # docs/provisioning.md's host_vars/cp-1.yml, for each host
        (cluster_dir / "host_vars" / ("%s.yml" % node.name)).write_text(yaml.safe_dump({"cluster_host_patches": [
            {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None, "hostname": node.name}]}))

    def run(name, **options):
        return run_playbook(_example(name), inventory=str(cluster_dir / "inventory.yml"), **options)

    run("provision.yml")
    assert cluster.etcd.bootstrapped and not any(node.maintenance for node in cluster.nodes)
    made = ["controlplane.yaml", "host_vars", "inventory.yml", "kubeconfig", "secrets.yaml", "talosconfig", "worker.yaml"]
    assert sorted(os.listdir(str(cluster_dir))) == made

    site = run("site.yml")
    for node in cluster.nodes:
        facts = site.task("Gather Talos facts", node.name)["result"]["ansible_facts"]["talos"]
        assert (facts["node"], facts["hostname"]) == (node.address, node.name)

    restarted = run("rolling-restart.yml")
    assert sorted(entry["node"] for entry in cluster.audit(method="Reboot")) == sorted(node.name for node in cluster.nodes)
    assert _recap_changes(restarted) == dict((node.name, 1) for node in cluster.nodes)

    images = run("images.yml")
    for node in cluster.nodes:
        listed = images.task("List the system namespace", node.name)["result"]
        assert any(image["name"].endswith(":v1.14.1") for image in listed["images"]) and "nodes" not in listed

    cluster.raise_etcd_alarm(cluster.controlplanes[1].name)
    run("etcd-maintenance.yml", check=True)
    assert cluster.etcd.alarms, "check mode disarms nothing"
    run("etcd-maintenance.yml")
    assert not cluster.etcd.alarms

    run("upgrade.yml")
    assert all(node.talos_version == "v1.14.1" for node in cluster.nodes)

    run("node-remove.yml")
    assert cluster.node("worker-2").maintenance
