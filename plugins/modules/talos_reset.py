#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_reset
short_description: Wipe Talos Linux nodes and power them off or reboot them
version_added: 1.0.0
description:
  - Resets a node, or several O(nodes), with C(MachineService.Reset), as C(talosctl reset) does - wipes its system disk (or the chosen
    system volumes) and user disks - then powers it off or, with O(reboot=true), reboots it.
  - A graceful reset (the default) cordons and drains the node and, on a control plane, makes it leave etcd first,
    as Talos does.
  - Refused before any call, with a message saying why - user disks with O(wipe_mode=system_disk) and system volumes
    with O(wipe_mode=user_disks).
  - Refused before the reset is sent, with a message saying why - a graceful reset of the last etcd member (Talos
    cannot make it leave), a reset whose departure would cost etcd its quorum (unless O(force_quorum_loss=true)), and
    a volume label the node does not have (the message lists the ones it has).
  - With several O(nodes), each node is reset on its own (guard, reset, wait), at most O(max_concurrency) at a time; control
    planes go one at a time, each once the one before is done (without O(wait), the task refuses to take a second
    control plane down). Each node's outcome is in RV(nodes); a failed node fails the task once the others are done.
  - A node already in maintenance mode has no configuration to reset. When the reset would wipe the C(STATE) volume
    (where the configuration lives), the task reports no change and calls nothing; otherwise it fails, since Talos
    refuses Reset in maintenance mode.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.wait
  - talos_linux.talos.quorum_wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Runs every check and returns what would be wiped in RV(wiped) without sending the reset.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: A node in maintenance mode counts as reset when the reset would wipe C(STATE); anything else resets again.
options:
  graceful:
    description:
      - Cordon and drain the node and, on a control plane, leave etcd before wiping.
      - V(false) wipes at once; a control plane then stays an etcd member that no longer runs, which
        M(talos_linux.talos.talos_etcd_member) with O(talos_linux.talos.talos_etcd_member#module:state=absent)
        can remove.
    type: bool
    default: true
  reboot:
    description:
      - Reboot after wiping instead of powering off. The node comes back in maintenance mode when C(STATE) was
        wiped, and with its configuration otherwise.
    type: bool
    default: false
  wipe_mode:
    description:
      - V(all) wipes the system disk (or the volumes of O(system_labels_to_wipe)) and the disks of
        O(user_disks_to_wipe).
      - V(system_disk) wipes only the system disk (or the volumes of O(system_labels_to_wipe)).
      - V(user_disks) wipes only the disks of O(user_disks_to_wipe) and leaves the system disk alone.
    type: str
    choices: [all, system_disk, user_disks]
    default: all
  system_labels_to_wipe:
    description:
      - Volumes to wipe instead of the whole system disk, by label, for example V([STATE, EPHEMERAL]). Empty wipes
        the whole system disk.
      - The labels are the IDs of the node's volumes as Talos reports them (C(talosctl get volumestatus), the
        C(VolumeStatuses.block.talos.dev) resources) - on Talos v1.14 C(META), C(STATE) and C(EPHEMERAL), any
        C(IMAGECACHE) or user volumes, and directory volumes such as C(ETCD) or C(LOG), which reside on C(EPHEMERAL)
        and are wiped only together with it. The module reads them first, matches the labels case-insensitively and
        refuses one the node does not have, listing the ones it has.
      - The boot partitions (C(EFI) of a UEFI install, C(BIOS) and C(BOOT) of a GRUB install) have no volume status,
        so Talos cannot wipe them by label; wipe the whole system disk instead.
    type: list
    elements: str
    default: []
  user_disks_to_wipe:
    description:
      - User disks to wipe, as device paths of the C(Disks) API, for example V(/dev/sdb).
    type: list
    elements: str
    default: []
  force_quorum_loss:
    description:
      - Reset a control plane even when etcd loses its quorum without it.
      - Does not allow a graceful reset of the last etcd member, which Talos cannot perform.
    type: bool
    default: false
notes:
  - With O(wait=true) and O(reboot=true) the wait ends when the node answers in maintenance mode (over an insecure
    connection straight to the node, port of the endpoint) or runs again with a new boot; without O(reboot) it ends
    when the node stops answering.
seealso:
  - module: talos_linux.talos.talos_etcd_member
  - module: talos_linux.talos.talos_shutdown
  - name: Node lifecycle
    description: Reboot, shutdown, reset, rollback and node removal with this collection.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/lifecycle.md
"""

EXAMPLES = r"""
- name: Wipe a worker and reboot it into maintenance mode, ready for a new configuration
  talos_linux.talos.talos_reset:
    node: "{{ ansible_host }}"
    reboot: true
    system_labels_to_wipe: [STATE, EPHEMERAL]

- name: Wipe only the EPHEMERAL volume and keep the node's configuration
  talos_linux.talos.talos_reset:
    node: 10.5.0.12
    reboot: true
    wipe_mode: system_disk
    system_labels_to_wipe: [EPHEMERAL]

- name: Wipe a data disk only
  talos_linux.talos.talos_reset:
    node: 10.5.0.12
    wipe_mode: user_disks
    user_disks_to_wipe: [/dev/sdb]

- name: Show what would be wiped
  talos_linux.talos.talos_reset:
    node: 10.5.0.12
  check_mode: true
  register: plan
"""

RETURN = r"""
wiped:
  description: What the reset wipes (or, in check mode, would wipe).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  contains:
    system_disk:
      description: True when the whole system disk is wiped.
      type: bool
    labels:
      description: The volumes wiped by label, as the node names them; empty when the whole system disk is wiped.
      type: list
      elements: str
    user_disks:
      description: The user disks wiped.
      type: list
      elements: str
  sample: {system_disk: false, labels: [EPHEMERAL, STATE], user_disks: []}
expected_state:
  description:
    - How the node ends - V(maintenance) (rebooted without configuration), V(configured) (rebooted with its
      configuration) or V(off).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: maintenance
state:
  description:
    - The state observed at the end - V(maintenance), V(configured) or V(off) after the wait; null without O(wait)
      and in check mode; V(maintenance) for a node found in maintenance mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: maintenance
graceful:
  description: Whether the reset was graceful.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
controlplane:
  description: Whether the node is a control plane (it answered the etcd member list).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
etcd_gate_open:
  description:
    - Whether the etcd quorum guard lets the node go - true when etcd keeps its quorum without it, or when there is
      nothing to guard (a worker, a node that is no etcd member).
    - False when etcd would lose its quorum; the task then fails, unless O(force_quorum_loss=true).
    - Null when the node was found in maintenance mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
quorum:
  description:
    - The etcd quorum check made on a control plane that is an etcd member - of its removal for a graceful reset,
      of its absence otherwise; null when none was made.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample: {safe: true, voters_after: 2, quorum_after: 2, healthy_after: 2, unhealthy: []}
actor_id:
  description: The actor ID Talos gave the reset; null when no reset was sent.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 9b2d5c3e-7f0a-4a9e-8d3f-0e8a7c6b5d4f
nodes:
  description:
    - The result of each node reset, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, controlplane: false, state: powered off}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.maintenance import MAINTENANCE_PROBE_SECONDS
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.reset import reset_plan

SPEC = TaskSpec(
    argument_spec=dict(
        graceful=dict(type="bool", default=True),
        reboot=dict(type="bool", default=False),
        wipe_mode=dict(type="str", default="all", choices=["all", "system_disk", "user_disks"]),
        system_labels_to_wipe=dict(type="list", elements="str", default=[]),
        user_disks_to_wipe=dict(type="list", elements="str", default=[]),
        force_quorum_loss=dict(type="bool", default=False),
    ),
    wait=True,
    quorum_wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params
    plan = reset_plan(params["wipe_mode"], params["system_labels_to_wipe"], params["user_disks_to_wipe"],
                      params["reboot"])

    def reset_node(client, node):
        return lifecycle.reset(client, node, plan, params["wipe_mode"], graceful=params["graceful"],
                               force_quorum_loss=params["force_quorum_loss"],
                               quorum_wait_timeout=params["quorum_wait_timeout"],
                               probe_seconds=min(MAINTENANCE_PROBE_SECONDS, params["timeout"]),
                               wait_timeout=params["wait_timeout"] if params["wait"] else None,
                               check_mode=task.check_mode, progress=task.progress)

    return lifecycle.on_nodes(task.client, task.target_nodes, reset_node, params["max_concurrency"],
                              waited=params["wait"] or task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
