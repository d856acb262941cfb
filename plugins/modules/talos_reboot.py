#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_reboot
short_description: Reboot Talos Linux nodes and wait until they are back
version_added: 1.0.0
description:
  - Reboots a node, or several O(nodes) concurrently, with C(MachineService.Reboot), as C(talosctl reboot) does, and by
    default waits until each node has booted again (a new boot ID), reports stage C(running) and ready, and, with
    O(wait_for_services), runs the named services.
  - On a control-plane node the module first checks etcd and refuses to reboot when etcd would lose its quorum while
    the node is down - when fewer of the other voting members are healthy than quorum needs, which includes a
    one-member cluster. O(quorum_wait_timeout) waits for the guard to let the node go; O(force_quorum_loss=true)
    reboots anyway.
  - With several O(nodes), each node is rebooted on its own (guard, reboot, wait), at most O(max_concurrency) at a
    time; control planes go one at a time, each once the one before is back (without O(wait), the task refuses to
    take a second control plane down). Each node's outcome is in RV(nodes); a failed node fails the task once the
    others are done.
  - Like M(ansible.builtin.reboot), the task always reports a change.
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
    details: Runs the etcd quorum check and reports the reboot without sending it.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Every run reboots the node.
options:
  mode:
    description:
      - V(default) stops pods and services, then reboots (with kexec when possible).
      - V(powercycle) reboots through the firmware, without kexec.
      - V(force) skips the graceful stop of pods and services (Talos v1.12 and newer; refused before any call on
        older nodes).
    type: str
    choices: [default, powercycle, force]
    default: default
  wait_for_services:
    description:
      - Services that must be C(Running) (and healthy, when they have a health check) before the wait ends, for
        example V([etcd, kubelet]).
      - A service only control planes run (C(etcd), C(trustd)) is not waited for on a worker, so one list fits every
        node; its state in RV(services) is C(not run on worker nodes).
      - A name that is neither a Talos service nor a system extension's C(ext-<name>) is refused before any call.
    type: list
    elements: str
    default: []
  force_quorum_loss:
    description:
      - Reboot a control plane even when etcd loses its quorum while the node is down.
    type: bool
    default: false
notes:
  - Reading the boot ID needs the C(os:admin) role; with C(os:operator) the wait compares the node's boot time
    instead.
  - The module does not drain the node's Kubernetes workloads; drain it beforehand when that matters.
seealso:
  - module: talos_linux.talos.talos_shutdown
  - module: talos_linux.talos.talos_upgrade
  - name: Node lifecycle
    description: Reboot, shutdown, reset, rollback and node removal with this collection.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/lifecycle.md
"""

EXAMPLES = r"""
- name: Reboot this node and wait until etcd (on a control plane) and kubelet run again
  talos_linux.talos.talos_reboot:
    node: "{{ ansible_host }}"
    wait_for_services: [etcd, kubelet]

- name: Power-cycle a worker without waiting
  talos_linux.talos.talos_reboot:
    node: "{{ ansible_host }}"
    mode: powercycle
    wait: false

- name: Reboot two workers at once
  talos_linux.talos.talos_reboot:
    nodes: [10.5.0.5, 10.5.0.6]

- name: Reboot the only control plane of a lab cluster (etcd is down meanwhile)
  talos_linux.talos.talos_reboot:
    node: 10.5.0.2
    force_quorum_loss: true
"""

RETURN = r"""
boot_id_before:
  description:
    - The node's boot ID before the reboot; C(boot-time:<seconds>) when the certificate may not read it (no
      C(os:admin) role).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 3f1b0e1c-8d0a-4c57-9a35-5c1ec9f7b3a1
boot_id_after:
  description: The boot ID after the reboot, in the same form; null without O(wait) and in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 9a0c7f55-2b0e-4d8b-a1f2-7f4c0f2e9d11
elapsed:
  description: Seconds from the reboot request to the end of the wait; null without O(wait) and in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: float
  sample: 74.2
actor_id:
  description: The actor ID Talos gave the reboot (its events carry it); null in check mode.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 9b2d5c3e-7f0a-4a9e-8d3f-0e8a7c6b5d4f
mode:
  description: The reboot mode used.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: default
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
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
quorum:
  description: The etcd quorum check made on a control plane that is an etcd member; null otherwise.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample: {safe: true, voters_after: 3, quorum_after: 2, healthy_after: 2, unhealthy: []}
services:
  description:
    - The state and health of each service of O(wait_for_services) at the end of the wait; on a worker, a service only
      control planes run is C(not run on worker nodes).
  returned: with one node (O(node), the host's own node or the endpoint itself), O(wait_for_services) is set and the module waited
  type: dict
  sample: {etcd: "Running, healthy", kubelet: "Running, healthy"}
nodes:
  description:
    - The result of each node rebooted, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, mode: default, boot_id_before: 3f1b0e1c-8d0a-4c57-9a35-5c1ec9f7b3a1, elapsed: 41.3}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import unknown_services_problem
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        mode=dict(type="str", default="default", choices=["default", "powercycle", "force"]),
        wait_for_services=dict(type="list", elements="str", default=[]),
        force_quorum_loss=dict(type="bool", default=False),
    ),
    wait=True,
    quorum_wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params
    problem = unknown_services_problem("wait_for_services", params["wait_for_services"])
    if problem:
        raise TalosConfigError(problem)

    def reboot_node(client, node):
        return lifecycle.reboot(client, node, params["mode"], params["wait_for_services"],
                                force_quorum_loss=params["force_quorum_loss"],
                                quorum_wait_timeout=params["quorum_wait_timeout"],
                                wait_timeout=params["wait_timeout"] if params["wait"] else None,
                                check_mode=task.check_mode, progress=task.progress)

    return lifecycle.on_nodes(task.client, task.target_nodes, reboot_node, params["max_concurrency"],
                              waited=params["wait"] or task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
