#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_rollback
short_description: Roll Talos Linux nodes back to their previous installation
version_added: 1.0.0
description:
  - Makes a node, or several O(nodes), boot its previous Talos installation (the one an upgrade replaced) with
    C(MachineService.Rollback), as C(talosctl rollback) does; the node reboots at once.
  - By default waits until the node runs again with a new boot, then checks that its version changed and returns
    from which version to which; a node that comes back on the same version fails the task.
  - A node with no previous installation (never upgraded since it was installed) makes the task fail with Talos's
    own reason and is not rebooted.
  - On a control-plane node the module first checks etcd and refuses when etcd would lose its quorum while the node
    reboots. O(force_quorum_loss=true) rolls back anyway.
  - With several O(nodes), each node is rolled back on its own (guard, rollback, wait), at most O(max_concurrency) at a time; control
    planes go one at a time, each once the one before is back (without O(wait), the task refuses to take a second
    control plane down). Each node's outcome is in RV(nodes); a failed node fails the task once the others are done.
  - Needs the C(os:admin) role. The task always reports a change.
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
    msg: "{{ inventory_hostname }} went from {{ rollback.from_version }} back to {{ rollback.current_version }}"
"""

RETURN = r"""
from_version:
  description: The Talos version the node ran before the rollback.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: v1.14.1
current_version:
  description: The version the node runs after the rollback; null without O(wait) and in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: v1.14.0
boot_id_before:
  description: The node's boot ID before the rollback.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 3f1b0e1c-8d0a-4c57-9a35-5c1ec9f7b3a1
boot_id_after:
  description: The boot ID after the rollback; null without O(wait) and in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 9a0c7f55-2b0e-4d8b-a1f2-7f4c0f2e9d11
controlplane:
  description: Whether the node is a control plane (it answered the etcd member list).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: false
etcd_gate_open:
  description:
    - Whether the etcd quorum guard lets the node go - true when etcd keeps its quorum without it, or when there is
      nothing to guard (a worker, a node that is no etcd member).
    - False when etcd would lose its quorum; the task then fails, unless O(force_quorum_loss=true).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
quorum:
  description: The etcd quorum check made on a control plane that is an etcd member; null otherwise.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample: {safe: true, voters_after: 3, quorum_after: 2, healthy_after: 2, unhealthy: []}
nodes:
  description:
    - The result of each node rolled back, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, from_version: v1.14.1, current_version: v1.14.0}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        force_quorum_loss=dict(type="bool", default=False),
    ),
    wait=True,
    quorum_wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params

    def rollback_node(client, node):
        return lifecycle.rollback(client, node, force_quorum_loss=params["force_quorum_loss"],
                                  quorum_wait_timeout=params["quorum_wait_timeout"],
                                  wait_timeout=params["wait_timeout"] if params["wait"] else None,
                                  check_mode=task.check_mode, diff=task.diff, progress=task.progress)

    return lifecycle.on_nodes(task.client, task.target_nodes, rollback_node, params["max_concurrency"],
                              waited=params["wait"] or task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
