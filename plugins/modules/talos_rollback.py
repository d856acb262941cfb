#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_rollback
short_description: Roll one Talos Linux node back to its previous installation
version_added: 0.1.0
description:
  - Makes the node boot its previous Talos installation (the one an upgrade replaced) with
    C(MachineService.Rollback), as C(talosctl rollback) does; the node reboots at once.
  - By default waits until the node runs again with a new boot, then checks that its version changed and returns
    from which version to which; a node that comes back on the same version fails the task.
  - A node with no previous installation (never upgraded since it was installed) makes the task fail with Talos's
    own reason and is not rebooted.
  - On a control-plane node the module first checks etcd and refuses when etcd would lose its quorum while the node
    reboots. O(force_quorum_loss=true) rolls back anyway.
  - Needs the C(os:admin) role. The task always reports a change.
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
    details:
      - Runs the etcd quorum check and reports the rollback without sending it.
      - Whether a previous installation exists is only known to the node, so check mode cannot tell.
  diff_mode:
    support: full
    details: Shows the version before; the version after is only known once the node is back.
  idempotent:
    support: none
    details: A second rollback returns to the version the first one left.
options:
  force_quorum_loss:
    description:
      - Roll a control plane back even when etcd loses its quorum while it reboots.
    type: bool
    default: false
seealso:
  - module: talos_linux.talos.talos_upgrade
  - name: Node lifecycle
    description: Reboot, shutdown, reset, rollback and node removal with this collection.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/lifecycle.md
"""

EXAMPLES = r"""
- name: Roll back a node whose upgrade misbehaves
  talos_linux.talos.talos_rollback:
    node: "{{ ansible_host }}"
  register: rollback

- name: Say what happened
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }} went from {{ rollback.previous_version }} back to {{ rollback.current_version }}"
"""

RETURN = r"""
previous_version:
  description: The Talos version the node ran before the rollback.
  returned: always
  type: str
  sample: v1.14.1
current_version:
  description: The version the node runs after the rollback; null without O(wait) and in check mode.
  returned: always
  type: str
  sample: v1.14.0
boot_id_before:
  description: The node's boot ID before the rollback.
  returned: always
  type: str
  sample: 3f1b0e1c-8d0a-4c57-9a35-5c1ec9f7b3a1
boot_id_after:
  description: The boot ID after the rollback; null without O(wait) and in check mode.
  returned: always
  type: str
  sample: 9a0c7f55-2b0e-4d8b-a1f2-7f4c0f2e9d11
controlplane:
  description: Whether the node is a control plane (it answered the etcd member list).
  returned: always
  type: bool
  sample: false
etcd_gate_open:
  description:
    - False when etcd would lose quorum without the node (the module refuses unless O(force_quorum_loss=true)).
  returned: always
  type: bool
  sample: true
quorum:
  description: The etcd quorum check made on a control plane that is an etcd member; null otherwise.
  returned: always
  type: dict
  sample: {safe: true, voters_after: 3, quorum_after: 2, healthy_after: 2, unhealthy: []}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils import lifecycle, waiters
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule

ROLLBACK = "machine.MachineService/Rollback"


def run(module):
    params = module.params
    client = module.client
    node = module.single_node("rolls back one node per task")
    previous = client.call(lifecycle.VERSION, node=node)[0].version.tag
    guard = lifecycle.etcd_guard(client, node)
    result = dict(changed=True, previous_version=previous, current_version=None, controlplane=guard["controlplane"],
                  quorum=guard["quorum"], etcd_gate_open=guard["safe"], boot_id_before=None, boot_id_after=None)
    lifecycle.refuse_unless_forced(module, guard, "roll back", node, **result)
    result["boot_id_before"] = waiters.read_boot_id(client, node)
    if module._diff:
        result["diff"] = dict(before={"version": previous}, after={"version": "(the previous installation)"})
    if module.check_mode:
        module.exit_json(**result)

    try:
        client.call(ROLLBACK, node=node)
    except TalosError as err:
        result.update(err.to_result())
        result["changed"] = False
        module.fail_json(msg="%s cannot roll back from %s: %s It has no previous installation to return to (it was "
                             "not upgraded since its installation), or its boot loader refused; the node was not "
                             "changed." % (lifecycle.describe(node, start=True), previous, err.message), **result)
    if not params["wait"]:
        module.exit_json(**result)
    try:
        result["boot_id_after"] = waiters.wait_for_reboot(client, node, result["boot_id_before"], params["wait_timeout"])
        current = client.call(lifecycle.VERSION, node=node)[0].version.tag
    except TalosError as err:
        result.update(err.to_result())
        module.fail_json(msg="The rollback of %s from %s was requested but the node is not back as expected: %s"
                             % (lifecycle.describe(node), previous, err.message), **result)
    result["current_version"] = current
    if module._diff:
        result["diff"]["after"] = {"version": current}
    if current == previous:
        module.fail_json(msg="%s rebooted but still runs %s: the rollback did not change its version (its previous "
                             "installation holds the same version, or the boot loader did not switch)."
                             % (lifecycle.describe(node, start=True), current), **result)
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            force_quorum_loss=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
