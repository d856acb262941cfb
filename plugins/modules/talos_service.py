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

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.waits import wait_for_service
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by the doors through missing_required_lib
    machine_pb2 = None

SPEC = TaskSpec(
    argument_spec=dict(
        name=dict(type="str", required=True),
        state=dict(type="str", required=True, choices=["started", "stopped", "restarted"]),
    ),
    wait=True,
    several_nodes=True,
)

RECENT_EVENTS = 10

REQUESTS = {
    "started": (rpc.SERVICE_START, "ServiceStartRequest"),
    "stopped": (rpc.SERVICE_STOP, "ServiceStopRequest"),
    "restarted": (rpc.SERVICE_RESTART, "ServiceRestartRequest"),
}


def _timestamp(value):
    if not value.seconds and not value.nanos:
        return None
    return value.ToJsonString()


def service_to_dict(info):
    """A ``ServiceInfo`` message as the module returns it."""
    return {
        "state": info.state,
        "health": {
            "unknown": info.health.unknown,
            "healthy": info.health.healthy,
            "last_message": info.health.last_message,
            "last_change": _timestamp(info.health.last_change),
        },
        "events": [{"msg": event.msg, "state": event.state, "ts": _timestamp(event.ts)}
                   for event in info.events.events[-RECENT_EVENTS:]],
    }


def run(task):
    name = task.params["name"]
    state = task.params["state"]
    reason = talos_node.control_refusal(name, state)
    if reason:
        task.result["name"] = name
        raise TalosConfigError(reason)

    def control(client, node):
        return _control(task, client, node, name, state)

    # A service's start, stop or restart leaves the node up: no control plane waits for another.
    return several_nodes.run(task.client, task.target_nodes, control, task.params["max_concurrency"])


def _control(task, client, node, name, state):
    """``name`` brought to ``state`` on ``node``: the node's result."""
    services = talos_node.list_services(client, node)
    if name not in services:
        raise ActionFailed("Service %s is not defined on %s (its services are: %s): extension services appear only when "
                           "their system extension is installed." % (name, label(node),
                                                                     ", ".join(sorted(services))),
                           {"name": name}, node=node)
    info = services[name]
    before = service_to_dict(info)

    result = {"changed": talos_node.needs_control(info.state, state), "name": name, "node": node, "before": before}
    if not result["changed"]:
        after = before
    elif task.check_mode:
        after = dict(before, state=talos_node.STOPPED if state == "stopped" else talos_node.RUNNING)
    else:
        method, request_type = REQUESTS[state]
        items = client.call(method, getattr(machine_pb2, request_type)(id=name), node=node)
        result["response"] = items[0].resp if items else ""
        if task.params["wait"]:
            waiter = Waiter(task.params["wait_timeout"], progress=task.progress)
            info = wait_for_service(client, node, name, state, waiter, restarted_after=talos_node.last_event_time(info))
        else:
            info = talos_node.list_services(client, node)[name]
        after = service_to_dict(info)

    result.update(after=after, state=after["state"], health=after["health"])
    result["diff"] = {"before": {"state": before["state"]}, "after": {"state": after["state"]}}
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
