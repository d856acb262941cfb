# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The upgrade role and installers: each node gets its own, pulled on every node of a batch before the first of
them reboots."""

import os

from talos_emulator.image_factory import set_factory_build

QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
EMPTY = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

PLAYBOOK = """
- name: Roll the upgrade
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.upgrade
      vars:
        upgrade_version: v1.14.0
        upgrade_talosconfig: "{{ talos_state_dir }}/talosconfig"
        upgrade_worker_batch_size: 2
        upgrade_force_quorum_loss: true
        upgrade_wait_timeout: 60
"""


def test_each_node_pulls_its_own_installer_before_its_batch_reboots(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True, talos_version="v1.13.5", reboot_seconds=0.2)
    controlplane, proxmox, plain = cluster.nodes
    set_factory_build(proxmox, QEMU, ["siderolabs/qemu-guest-agent"], platform="nocloud")

    run_playbook(PLAYBOOK, inventory=os.path.join(cluster.state_dir, "inventory.yml"))

    expected = {
        controlplane.name: "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY,
        proxmox.name: "factory.talos.dev/nocloud-installer/%s:v1.14.0" % QEMU,
        plain.name: "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY,
    }
    entries = cluster.audit()
    pulls = [(entry["node"], entry["image"]) for entry in entries if entry["method"] == "machine.ImageService/Pull"]
    assert set(pulls) == set(expected.items())
    assert all(entry["namespace"] == "NS_SYSTEM" for entry in entries if entry["method"] == "machine.ImageService/Pull")

    def first(method, node):
        return next(index for index, entry in enumerate(entries) if entry["method"] == method and entry["node"] == node)

    worker_reboots = [first("machine.MachineService/Reboot", node.name) for node in (proxmox, plain)]
    assert max(first("machine.ImageService/Pull", node.name) for node in (proxmox, plain)) < min(worker_reboots)
    assert first("machine.ImageService/Pull", controlplane.name) < first("machine.LifecycleService/Upgrade", controlplane.name)

    assert all(node.talos_version == "v1.14.0" for node in cluster.nodes)
    assert (proxmox.schematic_id, [extension["name"] for extension in proxmox.extensions]) == (QEMU, ["qemu-guest-agent"])
    assert {node.name: node.config["machine"]["install"]["image"] for node in cluster.nodes} == expected
