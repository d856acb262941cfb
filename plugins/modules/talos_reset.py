#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_reset
short_description: Wipe one Talos Linux node and power it off or reboot it
version_added: 0.1.0
description:
  - Resets one node with C(MachineService.Reset), as C(talosctl reset) does - wipes its system disk (or the chosen
    system volumes) and user disks - then powers it off or, with O(reboot=true), reboots it.
  - A graceful reset (the default) cordons and drains the node and, on a control plane, makes it leave etcd first,
    as Talos does.
  - Refused before any call, with a message saying why - a graceful reset of the last etcd member (Talos cannot
    make it leave), a reset whose departure would cost etcd its quorum (unless O(force_quorum_loss=true)), user disks
    with O(wipe_mode=system_disk), system volumes with O(wipe_mode=user_disks), and unknown volume labels.
  - A node already in maintenance mode has no configuration to reset. When the reset would wipe the C(STATE) volume
    (where the configuration lives), the task reports no change and calls nothing; otherwise it fails, since Talos
    refuses Reset in maintenance mode.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.wait
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
      - System volumes to wipe instead of the whole system disk, by label - C(BOOT), C(EFI), C(EPHEMERAL), C(META)
        or C(STATE), for example V([STATE, EPHEMERAL]). Empty wipes the whole system disk.
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
  returned: always
  type: dict
  contains:
    system_disk:
      description: True when the whole system disk is wiped.
      type: bool
    labels:
      description: The system volumes wiped.
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
  returned: always
  type: str
  sample: maintenance
state:
  description:
    - The state observed at the end - V(maintenance), V(configured) or V(off) after the wait; null without O(wait)
      and in check mode; V(maintenance) for a node found in maintenance mode.
  returned: always
  type: str
  sample: maintenance
graceful:
  description: Whether the reset was graceful.
  returned: always
  type: bool
  sample: true
controlplane:
  description: Whether the node is a control plane (it answered the etcd member list).
  returned: always
  type: bool
  sample: true
etcd_gate_open:
  description:
    - False when etcd would lose quorum without the node (the module refuses unless O(force_quorum_loss=true));
      null when the node was found in maintenance mode.
  returned: always
  type: bool
  sample: true
quorum:
  description:
    - The etcd quorum check made on a control plane that is an etcd member - of its removal for a graceful reset,
      of its absence otherwise; null when none was made.
  returned: always
  type: dict
  sample: {safe: true, voters_after: 2, quorum_after: 2, healthy_after: 2, unhealthy: []}
actor_id:
  description: The actor ID Talos gave the reset; null when no reset was sent.
  returned: always
  type: str
  sample: 9b2d5c3e-7f0a-4a9e-8d3f-0e8a7c6b5d4f
"""

from ansible_collections.talos_linux.talos.plugins.module_utils import lifecycle, waiters
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule

RESET = "machine.MachineService/Reset"

# How long the maintenance-mode probe of an unanswering node may take.
PROBE_SECONDS = 10


def found_in_maintenance(module, node):
    """True when ``node`` is in maintenance mode; raises the secure client's error when it simply does not answer."""
    client = module.client
    probe_seconds = min(PROBE_SECONDS, module.params["timeout"])
    if client.settings.insecure:
        return lifecycle.in_maintenance(client, node, probe_seconds)
    try:
        client.call(lifecycle.VERSION, node=node, retry_codes=(), deadline=probe_seconds)
    except TalosError:
        if lifecycle.in_maintenance(client, node, probe_seconds):
            return True
        client.call(lifecycle.VERSION, node=node)  # a node that is only slow to answer gets the whole timeout
    return False


def run(module):
    params = module.params
    try:
        plan = lifecycle.reset_plan(params["wipe_mode"], params["system_labels_to_wipe"], params["user_disks_to_wipe"],
                                    params["reboot"])
    except ValueError as err:
        module.fail_json(msg=str(err))
    node = module.single_node("resets one node per task")
    expected = plan.pop("ends")
    result = dict(changed=False, wiped=plan, expected_state=expected, state=None, graceful=params["graceful"],
                  controlplane=None, quorum=None, etcd_gate_open=None, actor_id=None)

    if found_in_maintenance(module, node):
        if "STATE" not in plan["labels"]:
            module.fail_json(msg="%s is in maintenance mode, where Talos refuses Reset; it has no configuration, and "
                                 "only wiping STATE would count as done - install it with talos_apply_config first to "
                                 "wipe anything else." % lifecycle.describe(node, start=True), **result)
        result["state"] = "maintenance"
        module.exit_json(**result)

    client = module.client
    guard = lifecycle.etcd_guard(client, node, leaves_etcd=params["graceful"])
    result.update(controlplane=guard["controlplane"], quorum=guard["quorum"], etcd_gate_open=guard["safe"])
    lifecycle.refuse_unless_forced(module, guard, "gracefully reset" if params["graceful"] else "reset", node, **result)
    result["changed"] = True
    if module.check_mode:
        module.exit_json(**result)

    marker = waiters.read_boot_marker(client, node) if params["reboot"] and params["wait"] else None
    request = lifecycle.reset_request(params["graceful"], params["reboot"], params["wipe_mode"],
                                      params["system_labels_to_wipe"], params["user_disks_to_wipe"])
    items = client.call(RESET, request, node=node)
    result["actor_id"] = items[0].actor_id if items and items[0].actor_id else None
    if not params["wait"]:
        module.exit_json(**result)
    try:
        if params["reboot"]:
            result["state"] = lifecycle.wait_for_reset_reboot(client, node, marker, params["wait_timeout"])[0]
        else:
            waiters.wait_until_unreachable(client, node, params["wait_timeout"])
            result["state"] = "off"
    except TalosError as err:
        result.update(err.to_result())
        module.fail_json(msg="The reset of %s was requested but did not complete as expected: %s"
                             % (lifecycle.describe(node), err.message), **result)
    if result["state"] != expected:
        module.fail_json(msg="%s came back %s after the reset, not %s as expected: check that the wipe happened."
                             % (lifecycle.describe(node, start=True), result["state"], expected), **result)
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            graceful=dict(type="bool", default=True),
            reboot=dict(type="bool", default=False),
            wipe_mode=dict(type="str", default="all", choices=["all", "system_disk", "user_disks"]),
            system_labels_to_wipe=dict(type="list", elements="str", default=[]),
            user_disks_to_wipe=dict(type="list", elements="str", default=[]),
            force_quorum_loss=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
