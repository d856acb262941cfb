# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_image and talos_image_info through ansible-playbook against the emulator: pull (idempotent, check mode,
several nodes, progress), list, remove, the legacy API of old nodes, and each node's own installer."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from talos_emulator.image_factory import set_factory_build

IMAGE = "talos_linux.talos.talos_image"
IMAGE_INFO = "talos_linux.talos.talos_image_info"
QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
EMPTY = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
# Not the pod sandbox the kubelet pulls as a node boots (pause:3.10): an image the nodes do not hold yet.
PAUSE = "registry.k8s.io/pause:3.9"


def play(cluster, tasks):
    return [{
        "name": "talos_image",
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": cluster.talosconfig_path()}},
        "tasks": tasks,
    }]


def _pulls(cluster):
    return [(entry["node"], entry["image"], entry["namespace"]) for entry in cluster.audit()
            if entry["method"] in ("machine.ImageService/Pull", "machine.MachineService/ImagePull")]


def test_pull_on_several_nodes_check_mode_then_pull_then_unchanged(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True)
    nodes = [node.address for node in cluster.nodes]
    task = {"name": "pull", IMAGE: {"nodes": nodes, "name": PAUSE}}

    check = run_playbook(play(cluster, [task]), check=True).task("pull")["result"]
    assert check["changed"] is True
    assert sorted(check["nodes"]) == sorted(nodes)
    assert all(result["changed"] and result["pulled"] is None for result in check["nodes"].values())
    assert _pulls(cluster) == []

    # Progress is shown live only through the controller door.
    run = run_playbook(play(cluster, [task]), env={"TALOS_TEST_DOOR": ""})
    result = run.task("pull")["result"]
    assert result["changed"] is True
    for node in nodes:
        outcome = result["nodes"][node]
        assert (outcome["image"], outcome["namespace"], outcome["api"]) == (PAUSE, "cri", "image_service")
        assert outcome["pulled"].startswith("registry.k8s.io/pause@sha256:")
        # The line names its node; the host that runs the task (localhost) is not that node, so it is not named.
        assert "\nnode %s: pulling %s into the cri namespace" % (node, PAUSE) in run.stdout
    assert sorted(_pulls(cluster)) == sorted((node.name, PAUSE, "NS_CRI") for node in cluster.nodes)

    again = run_playbook(play(cluster, [task])).task("pull")
    assert again["status"] == "ok"
    assert len(_pulls(cluster)) == 3, "a present image is not pulled again"


@pytest.mark.parametrize("door", ["controller", "module"])
def test_list_and_remove_on_one_node(emulator, run_playbook, door):
    cluster = emulator(workers=1, bootstrapped=True)
    worker = cluster.workers[0].address
    tasks = [
        # What the node pulled as it booted (machined's kubelet image, the kubelet's pod sandbox).
        {"name": "list before", IMAGE_INFO: {"node": worker, "namespace": "system"}},
        {"name": "list cri before", IMAGE_INFO: {"node": worker}},
        {"name": "pull", IMAGE: {"node": worker, "name": "ghcr.io/org/app:v1", "namespace": "system"}},
        {"name": "list", IMAGE_INFO: {"node": worker, "namespace": "system"}, "check_mode": True},
        {"name": "remove in check mode", IMAGE: {"node": worker, "name": "ghcr.io/org/app:v1", "namespace": "system",
                                                 "state": "absent"}, "check_mode": True},
        {"name": "remove", IMAGE: {"node": worker, "name": "ghcr.io/org/app:v1", "namespace": "system", "state": "absent"}},
        {"name": "remove again", IMAGE: {"node": worker, "name": "ghcr.io/org/app:v1", "namespace": "system", "state": "absent"}},
        {"name": "list cri", IMAGE_INFO: {"node": worker}},
        {"name": "bad name", IMAGE: {"node": worker, "name": "Not An Image"}, "ignore_errors": True},
    ]
    run = run_playbook(play(cluster, tasks), extra_vars={"talos_door": door})
    pulled = run.task("pull")["result"]
    assert pulled["changed"] is True and pulled["image"] == "ghcr.io/org/app:v1"
    digest = pulled["pulled"].split("@", 1)[1]
    listed = run.task("list")["result"]
    assert (listed["changed"], listed["namespace"]) == (False, "system")
    assert "nodes" not in listed, "one node's images are returned once (issue 31)"
    booted = [image["name"] for image in run.task("list before")["result"]["images"]]
    assert booted and not any("ghcr.io/org/app" in name for name in booted)
    assert sorted(image["name"] for image in listed["images"] if image["name"] not in booted) == sorted(
        ["ghcr.io/org/app:v1", "ghcr.io/org/app@" + digest, digest])
    assert all(image["size"] > 0 and image["created_at"] for image in listed["images"])
    planned = run.task("remove in check mode")["result"]
    assert planned["changed"] is True and len(planned["removed"]) == 3
    removed = run.task("remove")["result"]
    assert removed["changed"] is True and removed["removed"] == planned["removed"]
    assert run.task("remove again")["status"] == "ok"
    assert run.task("list cri")["result"]["images"] == run.task("list cri before")["result"]["images"]
    assert run.task("bad name")["result"]["msg"].startswith("name 'Not An Image' is not an image reference")
    assert [entry["method"] for entry in cluster.audit()].count("machine.ImageService/Remove") == 3


def test_legacy_node_pulls_with_image_pull_and_refuses_removal(emulator, run_playbook):
    cluster = emulator(workers=1, bootstrapped=True, talos_version="v1.12.6")
    worker = cluster.workers[0].address
    tasks = [
        {"name": "pull", IMAGE: {"node": worker, "name": "busybox:1.36"}},
        {"name": "list", IMAGE_INFO: {"node": worker}},
        {"name": "remove", IMAGE: {"node": worker, "name": "busybox:1.36", "state": "absent"}, "ignore_errors": True},
    ]
    run = run_playbook(play(cluster, tasks))
    pulled = run.task("pull")["result"]
    assert (pulled["changed"], pulled["api"], pulled["image"]) == (True, "legacy", "docker.io/library/busybox:1.36")
    assert _pulls(cluster) == [("worker-1", "docker.io/library/busybox:1.36", "NS_CRI")]
    assert "docker.io/library/busybox:1.36" in [image["name"] for image in run.task("list")["result"]["images"]]
    refused = run.task("remove")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"] == "Node %s cannot remove images: ImageService.Remove needs Talos v1.13 or later." % worker


def test_each_node_gets_its_own_installer(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True, node_versions={"worker-2": "v1.13.5"})
    controlplane, factory_node, extensions_only = cluster.nodes
    set_factory_build(factory_node, QEMU, ["siderolabs/qemu-guest-agent"], platform="nocloud")
    extensions_only.extensions = [{"name": "iscsi-tools", "version": "v0.2.0", "author": "Sidero Labs", "description": "iSCSI"}]
    task = {"name": "installers", IMAGE: {"nodes": [node.address for node in cluster.nodes], "installer_version": "v1.14.1"},
            "ignore_errors": True}

    installers = run_playbook(play(cluster, [task])).task("installers")
    assert installers["status"] == "failed"
    result = installers["result"]
    assert result["msg"].startswith("1 of 3 nodes failed (%s): The node runs system extensions (iscsi-tools)" % extensions_only.address)
    cp, factory, refused = (result["nodes"][node.address] for node in cluster.nodes)
    assert (cp["image"], cp["namespace"]) == ("factory.talos.dev/metal-installer/%s:v1.14.1" % EMPTY, "system")
    assert "the node has no schematic" in cp["image_reason"]
    assert factory["image"] == "factory.talos.dev/nocloud-installer/%s:v1.14.1" % QEMU
    assert "qemu-guest-agent" in factory["image_reason"]
    assert refused["failed"] is True
    assert sorted(_pulls(cluster)) == sorted([
        (controlplane.name, cp["image"], "NS_SYSTEM"), (factory_node.name, factory["image"], "NS_SYSTEM")])
