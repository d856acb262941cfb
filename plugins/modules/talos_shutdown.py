#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_shutdown
short_description: Power off one Talos Linux node
version_added: 0.1.0
description:
  - Shuts one node down with C(MachineService.Shutdown), as C(talosctl shutdown) does, and by default waits until
    the node stops answering the API.
  - On a control-plane node the module first checks etcd and refuses when etcd would lose its quorum without the
    node - when fewer of the other voting members are healthy than quorum needs, which includes a one-member
    cluster. O(force_quorum_loss=true) shuts it down anyway.
  - The node stays off until it is powered on out of band (its BMC, hypervisor or power button); the Talos API
    cannot start it again.
  - The task always reports a change.
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
    details: Runs the etcd quorum check and reports the shutdown without sending it.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: A node that is already off cannot be reached, so the task fails on it instead of reporting no change.
options:
  force:
    description:
      - Skip cordoning and draining the node's Kubernetes workloads before the shutdown (C(ShutdownRequest.force)).
    type: bool
    default: false
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
    force: true
    wait: false
"""

RETURN = r"""
actor_id:
  description: The actor ID Talos gave the shutdown (its events carry it); null in check mode.
  returned: always
  type: str
  sample: 9b2d5c3e-7f0a-4a9e-8d3f-0e8a7c6b5d4f
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
elapsed:
  description: Seconds from the shutdown request until the node stopped answering; null without O(wait) and in check mode.
  returned: always
  type: float
  sample: 12.5
"""

import time

from ansible_collections.talos_linux.talos.plugins.module_utils import lifecycle, waiters
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

SHUTDOWN = "machine.MachineService/Shutdown"


def run(module):
    params = module.params
    client = module.client
    node = module.single_node("shuts down one node per task")
    guard = lifecycle.etcd_guard(client, node)
    result = dict(changed=True, controlplane=guard["controlplane"], quorum=guard["quorum"],
                  etcd_gate_open=guard["safe"], actor_id=None, elapsed=None)
    lifecycle.refuse_unless_forced(module, guard, "shut down", node, **result)
    if module.check_mode:
        client.call(lifecycle.VERSION, node=node)  # the node must answer now to be shut down
        module.exit_json(**result)

    started = time.monotonic()
    items = client.call(SHUTDOWN, machine_pb2.ShutdownRequest(force=params["force"]), node=node)
    result["actor_id"] = items[0].actor_id if items and items[0].actor_id else None
    if params["wait"]:
        try:
            waiters.wait_until_unreachable(client, node, params["wait_timeout"])
        except TalosError as err:
            result.update(err.to_result())
            module.fail_json(msg="The shutdown of %s was requested but the node still answers: %s"
                                 % (lifecycle.describe(node), err.message), **result)
        result["elapsed"] = round(time.monotonic() - started, 1)
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            force=dict(type="bool", default=False),
            force_quorum_loss=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
