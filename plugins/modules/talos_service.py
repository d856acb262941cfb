#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_service
short_description: Start, stop or restart a Talos service through the Talos API
version_added: 1.0.0
description:
  - Starts, stops or restarts one service of a Talos node with the ServiceStart, ServiceStop and ServiceRestart RPCs.
  - The current state is read with ServiceList first, so O(state=started) and O(state=stopped) change nothing when the
    service is already there; O(state=restarted) always restarts.
  - Talos lets the API control only services that implement its API hooks. C(kubelet) can be started and restarted
    (not stopped), and system extension services (C(ext-<name>)) can be started, stopped and restarted. Every other
    service (C(etcd), C(apid), C(trustd), C(containerd), C(cri), ...) is managed by Talos itself; the module refuses
    it before making any call.
  - Manages the service on the node named by O(node) (or the only node of the talosconfig context), or on several
    O(nodes) concurrently, at most O(max_concurrency) at a time; each node's outcome is in RV(nodes), and a failed
    node fails the task once the others are done.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  name:
    description:
      - The service ID as ServiceList reports it, for example V(kubelet) or V(ext-tailscale).
    type: str
    required: true
  state:
    description:
      - V(started) starts the service unless it is already starting or running.
      - V(stopped) stops the service unless it is already stopped. Not allowed for V(kubelet).
      - V(restarted) always restarts the service (a stopped service is started).
    type: str
    required: true
    choices: [started, stopped, restarted]
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The decision comes from ServiceList; no start, stop or restart is sent.
  diff_mode:
    support: full
    details: Shows the service state before and after.
  idempotent:
    support: partial
    details: V(started) and V(stopped) are idempotent; V(restarted) restarts on every run.
seealso:
  - module: talos_linux.talos.talos_facts
notes:
  - Starting, stopping and restarting services needs the C(os:admin) or C(os:operator) role; reading the state needs
    C(os:reader) or better.
"""

EXAMPLES = r"""
- name: Restart kubelet on every node, one node at a time
  talos_linux.talos.talos_service:
    talosconfig: ./talosconfig
    node: "{{ inventory_hostname }}"
    name: kubelet
    state: restarted
    wait: true
  throttle: 1

- name: Stop an extension service
  talos_linux.talos.talos_service:
    node: 10.5.0.3
    name: ext-tailscale
    state: stopped

- name: Make sure kubelet runs
  talos_linux.talos.talos_service:
    node: 10.5.0.3
    name: kubelet
    state: started
"""

RETURN = r"""
name:
  description: The service ID.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: kubelet
node:
  description: The node the service runs on (null when the endpoint answered for itself).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 10.5.0.3
state:
  description:
    - The service state after the task, as ServiceList reports it (C(Running), C(Finished), C(Waiting), ...).
    - In check mode, the state the service would reach.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: Running
health:
  description: The service health after the task (see RV(before.health)).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample: {"unknown": false, "healthy": true, "last_message": "", "last_change": "2026-01-01T10:00:00Z"}
before:
  description: The service as ServiceList reported it before the task.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  contains:
    state:
      description: The service state.
      type: str
      sample: Finished
    health:
      description:
        - The result of the service's health check; C(unknown) is true when the service has no health check result.
      type: dict
      sample: {"unknown": true, "healthy": false, "last_message": "", "last_change": null}
    events:
      description: The most recent service events (up to ten), oldest first.
      type: list
      elements: dict
      sample: [{"msg": "Service started as goroutine", "state": "Running", "ts": "2026-01-01T10:00:00Z"}]
after:
  description:
    - The service as ServiceList reported it after the task, with the same fields as RV(before).
    - In check mode, RV(before) with the state the service would reach.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
response:
  description: The node's answer to the start, stop or restart request.
  returned: when a request was sent, with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: Service "kubelet" restarted
nodes:
  description:
    - The result of each node acted on, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, name: kubelet, state: Running, response: Service "kubelet" restarted}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import control_refusal
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.services import control_service
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        name=dict(type="str", required=True),
        state=dict(type="str", required=True, choices=["started", "stopped", "restarted"]),
    ),
    wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params
    name = params["name"]
    state = params["state"]
    reason = control_refusal(name, state)
    if reason:
        task.result["name"] = name
        raise TalosConfigError(reason)

    def control(client, node):
        return control_service(client, node, name, state, wait_timeout=params["wait_timeout"] if params["wait"] else None,
                               check_mode=task.check_mode, progress=task.progress)

    # A service's start, stop or restart leaves the node up: no control plane waits for another.
    return several_nodes.run(task.client, task.target_nodes, control, params["max_concurrency"])


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
