# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The right installer by default, against the emulator and the local Image Factory: an upgrade keeps the node's
schematic (and so its extensions), and the node's config names the new installer in whichever home it uses."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import yaml

from talos_emulator.image_factory import set_factory_build

EXTENSIONS = ["siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent"]


def play(cluster, tasks):
    return [{
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": cluster.talosconfig_path(), "wait_timeout": 60}},
        "tasks": tasks,
    }]


def test_an_upgrade_of_a_v1_14_node_keeps_its_schematic(emulator, image_factory, run_playbook):
    factory = image_factory()
    host = factory.url.split("://", 1)[1]
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = cluster.workers[0]
    schematic = run_playbook(play(cluster, [{"name": "schematic", "talos_linux.talos.talos_image_factory_schematic": {
        "image_factory_url": factory.url, "extensions": EXTENSIONS, "talos_version": "v1.14.1"}}])).task("schematic")["result"]["id"]
    # The node was installed from that schematic by this factory, on Proxmox.
    set_factory_build(worker, schematic, EXTENSIONS, factory_url=factory.url, platform="nocloud")
    installer = "%s/nocloud-installer/%s:v1.14.1" % (host, schematic)

    tasks = [
        {"name": "media", "talos_linux.talos.talos_image_factory_info": {
            "image_factory_url": factory.url, "schematic_id": schematic, "talos_version": "v1.14.1", "platform": "nocloud"}},
        {"name": "upgrade", "talos_linux.talos.talos_upgrade": {"node": worker.address, "version": "v1.14.1"}},
    ]
    check = run_playbook(play(cluster, tasks), check=True).task("upgrade")["result"]
    assert check["image"] == installer
    assert cluster.audit() == []

    run = run_playbook(play(cluster, tasks))
    assert run.task("media")["result"]["installer"] == installer
    upgraded = run.task("upgrade")["result"]
    assert upgraded["image"] == installer and upgraded["current_version"] == "v1.14.1"
    assert upgraded["image_reason"] == (
        "the node runs Image Factory schematic %s on platform nocloud, so its system extensions (iscsi-tools, "
        "qemu-guest-agent) are kept" % schematic)
    assert (worker.schematic_id, [extension["name"] for extension in worker.extensions]) == (
        schematic, ["iscsi-tools", "qemu-guest-agent"])
    assert upgraded["installer_reference"]["changed"] is True
    assert worker.config["machine"]["install"]["image"] == installer


def test_the_unattended_install_home_is_updated_and_nothing_else(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = cluster.workers[0]
    documents = list(yaml.safe_load_all(worker.config_text()))
    del documents[0]["machine"]["install"]
    documents.append({"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
                      "installer": {"image": "ghcr.io/siderolabs/installer:v1.14.0"},
                      "provisioning": {"diskSelector": {"match": 'disk.dev_path == "/dev/sda"'}, "wipe": False}})
    text = yaml.safe_dump_all(documents, sort_keys=False)
    worker.persistent_config_bytes = text.encode()
    worker.apply_active_config(text.encode())

    result = run_playbook(play(cluster, [{"name": "upgrade", "talos_linux.talos.talos_upgrade": {
        "node": worker.address, "installer_image": "registry.example.internal/installer:v1.14.1"}}])).task("upgrade")["result"]
    assert result["installer_reference"] == {
        "home": "UnattendedInstallConfig installer.image", "before": "ghcr.io/siderolabs/installer:v1.14.0",
        "after": "registry.example.internal/installer:v1.14.1", "changed": True}
    assert worker.config_text() == text.replace("ghcr.io/siderolabs/installer:v1.14.0", "registry.example.internal/installer:v1.14.1")
