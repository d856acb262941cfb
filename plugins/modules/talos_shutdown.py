#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_shutdown
short_description: Power off Talos Linux nodes
version_added: 1.0.0
description:
  - Shuts a node, or several O(nodes), down with C(MachineService.Shutdown), as C(talosctl shutdown) does, and by
    default waits until each node stops answering the API.
  - On a control-plane node the module first checks etcd and refuses when etcd would lose its quorum without the
    node - when fewer of the other voting members are healthy than quorum needs, which includes a one-member
    cluster. O(force_quorum_loss=true) shuts it down anyway.
  - With several O(nodes), each node is shut down on its own (guard, shutdown, wait), at most O(max_concurrency) at a
    time; control planes go one at a time, each judged by the quorum guard with the ones before it gone (without
    O(wait), the task refuses to take a second control plane down; in check mode each is judged with the others up).
    Each node's outcome is in RV(nodes); a failed node fails the task once the others are done.
  - The node stays off until it is powered on out of band (its BMC, hypervisor or power button); the Talos API
    cannot start it again.
  - The task always reports a change.
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
    details: Runs the etcd quorum check and reports the shutdown without sending it.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: A node that is already off cannot be reached, so the task fails on it instead of reporting no change.
options:
  graceful:
    description:
      - Cordon and drain the node's Kubernetes workloads before the shutdown, as Talos does by default.
      - V(false) powers the node off at once (C(talosctl shutdown --force), C(ShutdownRequest.force)).
    type: bool
    default: true
  force_quorum_loss:
    description:
      - Shut a control plane down even when etcd loses its quorum without it.
    type: bool
    default: false
seealso:
  - module: talos_linux.talos.talos_reboot
  - module: talos_linux.talos.talos_reset
  - name: Node lifecycle
    description: Reboot, shutdown, reset, rollback and node removal with this collection.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/lifecycle.md
"""

EXAMPLES = r"""
- name: Power off a worker for hardware maintenance
  talos_linux.talos.talos_shutdown:
    node: "{{ ansible_host }}"

- name: Power off without draining and without waiting
  talos_linux.talos.talos_shutdown:
    node: 10.5.0.12
    graceful: false
    wait: false
"""

RETURN = r"""
actor_id:
  description: The actor ID Talos gave the shutdown (its events carry it); null in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 9b2d5c3e-7f0a-4a9e-8d3f-0e8a7c6b5d4f
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
elapsed:
  description: Seconds from the shutdown request until the node stopped answering; null without O(wait) and in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: float
  sample: 12.5
nodes:
  description:
    - The result of each node shut down, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, controlplane: false, etcd_gate_open: true, elapsed: 12.5}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        graceful=dict(type="bool", default=True),
        force_quorum_loss=dict(type="bool", default=False),
    ),
    wait=True,
    quorum_wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params

    def shutdown_node(client, node):
        return lifecycle.shutdown(client, node, graceful=params["graceful"], force_quorum_loss=params["force_quorum_loss"],
                                  quorum_wait_timeout=params["quorum_wait_timeout"],
                                  wait_timeout=params["wait_timeout"] if params["wait"] else None,
                                  check_mode=task.check_mode, progress=task.progress)

    return lifecycle.on_nodes(task.client, task.target_nodes, shutdown_node, params["max_concurrency"],
                              waited=params["wait"] or task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
