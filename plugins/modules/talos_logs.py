#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_logs
short_description: Read the logs of a Talos service, a Kubernetes container or the kernel
version_added: 1.0.0
description:
  - Reads the log of a Talos service (C(etcd), C(kubelet), C(apid), C(machined), ...) or of a container in the
    Kubernetes containerd namespace (a control-plane static pod) with the C(Logs) RPC, or the kernel log with
    C(Dmesg), and returns it as lines - as C(talosctl logs) and C(talosctl dmesg) do.
  - The log is read to its end, never followed. O(lines) and O(since) keep the result small.
  - Several O(nodes) are read in one task, concurrently (at most O(max_concurrency) at a time); a node that fails
    does not stop the others. Read-only.
  - A line that holds a secret by its shape (a private key, a URL with a password, a bearer token) is returned as
    C(<redacted>).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  service:
    description:
      - The service ID as ServiceList reports it (V(etcd), V(kubelet), ...), or with O(namespace=cri) the
        container ID as C(talosctl logs -k) names it (V(kube-system/kube-apiserver-cp-1:kube-apiserver)).
      - Exactly one of O(service) and O(kernel) is required.
    type: str
  kernel:
    description:
      - Read the kernel log (C(dmesg)) instead of a service log.
    type: bool
    default: false
  namespace:
    description:
      - The containerd namespace, named as in M(talos_linux.talos.talos_image) and C(talosctl image --namespace) -
        V(system) for Talos services, V(cri) for Kubernetes containers (containerd's C(k8s.io), read through CRI).
    type: str
    choices: [system, cri]
    default: system
  lines:
    description:
      - Keep only the last this many lines of each node's log; V(0) keeps them all.
    type: int
    default: 200
  since:
    description:
      - Keep only the lines since this point - a duration before now as talosctl takes one (V(15m), V(1h30m), V(90s))
        or in days (V(2d)), or an RFC 3339 time (V(2026-01-02T15:04:05Z)).
      - Lines are dated by the time they start with (CRI and kernel logs, JSON C(ts) fields as etcd writes them);
        a line without a time goes with the line before it.
    type: str
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Reading logs needs the C(os:reader) role or better.
seealso:
  - module: talos_linux.talos.talos_health
  - module: talos_linux.talos.talos_service
"""

EXAMPLES = r"""
- name: The last 50 lines of etcd on a control plane
  talos_linux.talos.talos_logs:
    node: 10.5.0.2
    service: etcd
    lines: 50
  register: etcd_log

- name: Kubelet logs of the last 10 minutes of every node
  talos_linux.talos.talos_logs:
    nodes: "{{ groups['all'] | map('extract', hostvars, 'ansible_host') | list }}"
    service: kubelet
    since: 10m
  run_once: true

- name: The API server's container log
  talos_linux.talos.talos_logs:
    node: 10.5.0.2
    namespace: cri
    service: kube-system/kube-apiserver-cp-1:kube-apiserver

- name: The kernel log
  talos_linux.talos.talos_logs:
    node: 10.5.0.3
    kernel: true
    lines: 100
"""

RETURN = r"""
lines:
  description: The log lines, oldest first, when the task reads one node.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: str
  sample: ['{"level":"info","ts":"2026-11-23T21:00:00.000Z","msg":"ready to serve client requests"}']
nodes:
  description:
    - Each node's result (RV(lines)), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.2:
      lines: ["kern:    info: [2026-11-23T21:00:00.000Z]: Linux version 6.12.0-talos"]
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.common import durations
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import logs
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        service=dict(type="str"),
        kernel=dict(type="bool", default=False),
        namespace=dict(type="str", choices=["system", "cri"], default="system"),
        lines=dict(type="int", default=200),
        since=dict(type="str"),
    ),
    required_if=[("kernel", False, ("service",))],
    ranges=dict(lines=(0, None)),
    several_nodes=True,
)


def run(task):
    params = task.params
    if params["kernel"] and params["service"]:
        raise TalosConfigError("Set either service (a service or container log) or kernel=true (the kernel log), not both.")
    since = durations.parse_since(params["since"], "since") if params["since"] else None

    def read(client, node):
        if params["kernel"]:
            return {"lines": logs.read_kernel_log(client, node, params["lines"], since)}
        return {"lines": logs.read_logs(client, node, params["service"], params["namespace"], params["lines"], since)}

    return several_nodes.run(task.client, task.target_nodes, read, params["max_concurrency"])


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
