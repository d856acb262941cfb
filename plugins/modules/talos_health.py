#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_health
short_description: Wait until a Talos cluster is healthy, and say which check is not
version_added: 1.0.0
description:
  - Runs the cluster health checks of C(talosctl health) and waits until they all pass, for as long as
    O(wait_timeout) says (no hidden cap).
  - With O(checks=talos) (the default) the module runs the Talos-level checks itself, through the Talos API of every
    node - etcd service healthy on the control planes, etcd member lists consistent across control planes, etcd
    members are the control-plane nodes, apid answers on every node, every node reports memory and disks, no
    diagnostics (COSI C(Diagnostics)), kubelet healthy on the control planes, and every node's C(MachineStatus)
    running and ready. It does not need Kubernetes, so it fits clusters whose CNI is installed later.
  - With O(checks=all) the node runs the server-side health check (C(cluster.ClusterService/HealthCheck)), which adds
    the Kubernetes checks (nodes ready, control-plane static pods, kube-proxy, CoreDNS, schedulable nodes).
  - The nodes come from O(controlplane_nodes) and O(worker_nodes), else from the cluster members the node
    discovered (COSI C(Members)); RV(node_source) says which.
  - Read-only; runs the checks in check mode too.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  checks:
    description:
      - V(talos) runs the Talos-level checks client-side; V(all) asks the node for the server-side check, Talos and
        Kubernetes.
    type: str
    choices: [talos, all]
    default: talos
  controlplane_nodes:
    description:
      - Addresses of the control-plane nodes. Without them the nodes are discovered from the cluster members.
    type: list
    elements: str
  worker_nodes:
    description:
      - Addresses of the worker nodes, with O(controlplane_nodes).
    type: list
    elements: str
  wait_timeout:
    description:
      - Seconds to wait for every check to pass. Any length; the checks are polled until then.
      - V(0) checks once, without waiting (with O(checks=talos)) - every check runs, whatever the ones before it found,
        and the task fails naming every failed check; RV(unhealthy_nodes) says what is wrong with each node and
        RV(unreachable_nodes) which do not answer at all. A node that does not answer is asked once. This is the
        health gate the P(talos_linux.talos.upgrade#role) role passes before its first node.
    type: int
    default: 600
  ignore_nodes:
    description:
      - Nodes known to be down or unhealthy, to leave out of the checks (with O(checks=talos)) - they are not asked and
        no check fails because of them. They are still the cluster's nodes - the etcd member of an ignored control
        plane still counts as a control plane's - so list them in O(controlplane_nodes) or O(worker_nodes) too.
      - The P(talos_linux.talos.upgrade#role) role ignores the nodes that were unhealthy before it started, when told
        to go ahead without them.
    type: list
    elements: str
    default: []
  poll_interval:
    description:
      - Seconds between two rounds of checks with O(checks=talos), at most - a round starts as soon as the node that
        holds the checks up reports an event (a service or its stage changed), and within half a second while that node
        does not answer.
    type: int
    default: 2
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The checks only read; they run in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - O(node) (or the endpoint, when it is not set; the talosconfig's node list is not used) is the control plane that
    discovers the nodes and, with O(checks=all), runs the server-side check. Every other node is reached through the
    endpoint.
  - The checks need the C(os:reader) role or better.
seealso:
  - module: talos_linux.talos.talos_logs
  - module: talos_linux.talos.talos_resource_info
  - module: talos_linux.talos.talos_facts
"""

EXAMPLES = r"""
- name: Wait until Talos is healthy on every discovered node
  talos_linux.talos.talos_health:
    talosconfig: ./talosconfig
    wait_timeout: 1200

- name: Wait with the inventory's node lists, through a given control plane
  talos_linux.talos.talos_health:
    node: "{{ hostvars[groups['controlplane'][0]].ansible_host }}"
    controlplane_nodes: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"
    worker_nodes: "{{ groups['workers'] | map('extract', hostvars, 'ansible_host') | list }}"
  run_once: true

- name: Wait for Talos and Kubernetes, with the logs of etcd when it fails
  block:
    - name: Wait for the whole cluster
      talos_linux.talos.talos_health:
        checks: all
        wait_timeout: 900
  rescue:
    - name: Read the etcd log of the failing nodes
      talos_linux.talos.talos_logs:
        nodes: "{{ ansible_failed_result.failed_nodes }}"
        service: etcd
        lines: 100
"""

RETURN = r"""
checks:
  description:
    - Every check in the order it runs, with its C(name), C(description) (as C(talosctl health) prints it),
      C(state) (V(passed), V(failed), V(pending) when an earlier check failed while waiting, V(running) on the server),
      C(nodes) where it failed and the last C(message).
  returned: always
  type: list
  elements: dict
  sample:
    - name: etcd_healthy
      description: etcd to be healthy
      state: failed
      nodes: [10.5.0.3]
      message: '10.5.0.3: service "etcd" is Preparing: Running pre state'
    - name: etcd_members_consistent
      description: etcd members to be consistent across nodes
      state: pending
      nodes: []
      message: null
failed_check:
  description: The name of the check that did not pass, when the task fails (with O(wait_timeout=0), the first of them).
  returned: on failure
  type: str
  sample: etcd_healthy
failed_nodes:
  description: The nodes the failed check named, when the task fails (with O(wait_timeout=0), every failed check's).
  returned: on failure
  type: list
  elements: str
  sample: [10.5.0.3]
elapsed:
  description: Seconds the checks took, waiting included.
  returned: always
  type: float
  sample: 12.4
node_source:
  description: Where the node lists came from - V(options) or V(discovery) (the cluster members).
  returned: always
  type: str
  sample: discovery
controlplane_nodes:
  description: The control-plane nodes that were checked.
  returned: always
  type: list
  elements: str
  sample: [10.5.0.2, 10.5.0.3, 10.5.0.4]
worker_nodes:
  description: The worker nodes that were checked.
  returned: always
  type: list
  elements: str
  sample: [10.5.0.5]
unhealthy_nodes:
  description:
    - With O(wait_timeout=0), what each unhealthy node's checks found, keyed by node - each problem once, after the
      name of the first check that found it. Empty when every check passed.
  returned: when O(wait_timeout=0)
  type: dict
  sample:
    10.5.0.6: ["apid_ready: Node 10.5.0.6 is unreachable through endpoint 10.5.0.2:50000: connection refused."]
unreachable_nodes:
  description: With O(wait_timeout=0), the nodes that did not answer at all (off, or cut off from the endpoint).
  returned: when O(wait_timeout=0)
  type: list
  elements: str
  sample: [10.5.0.6]
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import health
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        checks=dict(type="str", choices=["talos", "all"], default="talos"),
        controlplane_nodes=dict(type="list", elements="str"),
        worker_nodes=dict(type="list", elements="str"),
        poll_interval=dict(type="int", default=2),
        ignore_nodes=dict(type="list", elements="str", default=[]),
    ),
    wait="timeout",
    ranges=dict(wait_timeout=(0, None), poll_interval=(1, None)),
    # The node is the control plane that is asked, whatever host the task runs on.
    host_node=False,
)


def run(task):
    params = task.params
    # The talosconfig's own node list does not choose the control plane to ask: the endpoint answers then.
    node = task.single_node("asks one control plane for the cluster's health") if params["nodes"] else params["node"]
    if params["checks"] == "all" and (params["ignore_nodes"] or not params["wait_timeout"]):
        raise TalosConfigError("%s works with checks: talos only: the server-side check (checks: all) waits and checks "
                               "every node." % ("ignore_nodes" if params["ignore_nodes"] else "wait_timeout 0 (check once)"))
    nodes = health.nodes_to_check(task.client, params["controlplane_nodes"], params["worker_nodes"], node)
    task.result.update(changed=False, node_source=nodes.source, controlplane_nodes=nodes.control_planes,
                       worker_nodes=nodes.workers)
    if not params["wait_timeout"]:
        return _check_once(task, nodes)
    if params["checks"] == "all":
        checks, elapsed = health.server_health_check(task.client, nodes, node, params["wait_timeout"], task.progress)
    else:
        checks, elapsed = health.run_talos_checks(task.client, nodes, params["wait_timeout"], params["poll_interval"],
                                                  task.progress, ignored=params["ignore_nodes"])
    return dict(checks=checks, elapsed=elapsed)


def _check_once(task, nodes):
    """Every Talos check once (wait_timeout 0): the result names every unhealthy node."""
    survey = health.survey(task.client, nodes, ignored=task.params["ignore_nodes"])
    result = dict(checks=survey.checks, elapsed=survey.elapsed, unhealthy_nodes=survey.unhealthy,
                  unreachable_nodes=survey.unreachable)
    if survey.healthy:
        return result
    raise ActionFailed(survey.message(), dict(result, failed_check=survey.failed[0]["name"],
                                              failed_nodes=sorted(set(node for check in survey.failed
                                                                      for node in check["nodes"]))))


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
