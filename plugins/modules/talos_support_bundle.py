#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_support_bundle
short_description: Collect a Talos support bundle of the cluster into one zip on the controller
version_added: 1.0.0
description:
  - Collects what C(talosctl support) collects, in its layout, into one zip file O(dest) on the controller - for each
    node C(<node>/dmesg.log), C(controller-runtime.log), C(dependencies.dot), C(dns-resolve-cache.log), C(service-logs/<service>.log)
    and C(.state), C(kubernetes-logs/kube-system/<pod>.log), C(mounts), C(devices), C(io), C(processes),
    C(summary) and C(resources/<type>.yaml); for the cluster C(kubernetesResources/nodes.yaml) and
    C(kubernetesResources/systemPods.yaml) read through the admin kubeconfig Talos returns (kept in memory).
  - Beside them, C(support-bundle.yaml) says, for each node and for the cluster, what was collected and every section
    missed with the reason, as the task returns it. A section a node refuses or a Kubernetes API that does not answer
    is recorded there and does not fail the task, since the bundle is for looking at what is there.
  - A node that cannot be reached at all fails the task, as in every module that takes several nodes, once the bundle
    of the nodes that answered is written; its entry in RV(nodes) says why. A play that wants the bundle of a
    cluster with a node down sets C(failed_when) or C(ignore_errors) on the task.
  - No secret goes into the bundle - a resource of a type Talos marks sensitive (C(MachineConfigs), C(KubeletSpecs),
    C(APIServerConfigs), the C(secrets) namespace...) is written as talosctl writes it, its metadata kept and its
    C(spec) replaced by C(<REDACTED>) (listing them needs C(os:admin); with a weaker role they are in RV(missed)), every other
    resource and every Kubernetes manifest is redacted as M(talos_linux.talos.talos_resource_info) redacts, Secrets are
    not read, and log lines that hold a secret by their shape are replaced as M(talos_linux.talos.talos_logs) replaces
    them.
  - The file is private (mode 0600) and appears whole or not at all. With O(encryption_recipients) it is encrypted
    with age to them, as C(talosctl support) does (the C(pyrage) library); decrypt with C(age -d -i <identity>).
  - Each section is asked of every node at once, at most O(max_concurrency) nodes at a time.
  - With O(node) (or the host's own node, or the endpoint itself) that node's entry is at the top of the result; with
    O(nodes) (or the talosconfig context's nodes) the entries are in RV(nodes), keyed by node.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  dest:
    description:
      - The zip file to write on the controller, such as V(support.zip) (V(support.zip.age) when encrypted). An
        existing file is replaced.
    type: path
    required: true
  kubernetes:
    description:
      - Collect the Kubernetes Nodes and kube-system pods too.
    type: bool
    default: true
  kubernetes_endpoint:
    description:
      - The URL of the Kubernetes API server to use, such as V(https://10.5.0.2:6443). By default the cluster's
        control-plane endpoint, as the kubeconfig Talos issues names it.
    type: str
  encryption_recipients:
    description:
      - age recipients (V(age1...)) or SSH public keys (V(ssh-ed25519 ...)) to encrypt the bundle to. Empty writes
        a plain zip. Needs the C(pyrage) Python library.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Asks every node for its version and reports the sections that would be collected; writes nothing.
  diff_mode:
    support: none
    details: A bundle is new every time; there is nothing to compare.
  idempotent:
    support: none
    details: Every run collects a new bundle.
requirements:
  - kubernetes (Python library) for the Kubernetes part; without it that part is listed in RV(cluster) as missed.
  - pyrage (Python library) when O(encryption_recipients) is set.
notes:
  - Name every node with O(nodes) (control planes and workers); the kubeconfig comes from the first node reached that
    gives one.
  - Reading files (C(devices)) and the kubeconfig needs the C(os:admin) role; with a lesser role those parts are
    listed as missed, and the task does not fail for them.
seealso:
  - module: talos_linux.talos.talos_logs
  - module: talos_linux.talos.talos_resource_info
  - module: talos_linux.talos.talos_fetch
"""

EXAMPLES = r"""
- name: Collect a support bundle of every node
  talos_linux.talos.talos_support_bundle:
    nodes: "{{ groups['all'] | map('extract', hostvars, 'ansible_host') | list }}"
    dest: "{{ playbook_dir }}/support.zip"
  run_once: true
  register: bundle

- name: The same, encrypted to the support team's age key
  talos_linux.talos.talos_support_bundle:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
    dest: /var/tmp/support.zip.age
    encryption_recipients:
      - age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p
  run_once: true
"""

RETURN = r"""
dest:
  description: The bundle written.
  returned: unless in check mode
  type: str
  sample: /srv/support.zip
encrypted:
  description: Whether the bundle is encrypted with age.
  returned: always
  type: bool
reached:
  description: Whether the node answered.
  returned: with O(node), the host's own node or the endpoint itself
  type: bool
collected:
  description: The sections collected from the node (in check mode, that would be collected).
  returned: with O(node), the host's own node or the endpoint itself
  type: list
  elements: str
  sample: [summary, dmesg, service-logs, mounts]
missed:
  description: Every section missed on the node, with the reason.
  returned: with O(node), the host's own node or the endpoint itself
  type: list
  elements: dict
  sample: [{section: devices, reason: "Permission denied for machine.MachineService/Read on node 10.5.0.3 ..."}]
nodes:
  description:
    - Each node's entry (the keys above), keyed by node as the archive's folders are named (the endpoint's host when
      it answered for itself).
    - A node that could not be reached has C(failed=true), C(msg), C(code) and C(node) instead, and fails the task
      once the bundle of the others is written.
    - With O(nodes), even of one node, nothing of a node is at the top of the result; the shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.2: {reached: true, collected: [summary, dmesg, service-logs, mounts], missed: []}
    10.5.0.4: {node: 10.5.0.4, failed: true, code: Unavailable, msg: "Talos endpoint 10.5.0.2:50000 is unreachable ..."}
cluster:
  description: The Kubernetes part - C(collected), the sections collected (in check mode, that would be), and
    C(missed), each with C(section) and C(reason).
  returned: always
  type: dict
  sample: {collected: [kubernetes-nodes], missed: [{section: kubernetes-system-pods, reason: "..."}]}
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import support_bundle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import check_destination
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec, missing_libraries

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path", required=True),
        kubernetes=dict(type="bool", default=True),
        kubernetes_endpoint=dict(type="str"),
        encryption_recipients=dict(type="list", elements="str", default=[]),
    ),
    several_nodes=True,
)


def _kube_api_factory(task):
    if not task.params["kubernetes"]:
        return None
    from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
    if missing_libraries([kube_api.LIBRARY]):
        return lambda kubeconfig: _Unavailable()
    return lambda kubeconfig: kube_api.KubeAPI(kubeconfig, server=task.params["kubernetes_endpoint"])


class _Unavailable:
    """Stands for the Kubernetes client when the library is missing: every list is missed with that reason."""

    def list_objects(self, what, path):
        raise TalosError("The kubernetes Python library is not installed on the controller, so the "
                         "Kubernetes API was not asked.")

    def close(self):
        pass


def run(task):
    params = task.params
    dest = os.path.abspath(params["dest"])
    check_destination(dest, "the support bundle", "dest")
    recipients = params["encryption_recipients"]
    if recipients:
        task.require([support_bundle.AGE_LIBRARY], "for encryption_recipients (leave it empty for a plain zip)")
    parsed = support_bundle.age_recipients(recipients) if recipients else []
    nodes = task.target_nodes
    names = dict((node, several_nodes.node_key(node, task.settings)) for node in nodes)
    bundle = support_bundle.SupportBundle(task.client, nodes, names, params["max_concurrency"], task.progress,
                                          _kube_api_factory(task), hide=task.hide)
    task_keys = dict(changed=True, encrypted=bool(recipients))
    if task.check_mode:
        report, unreached = bundle.plan()
    else:
        report, unreached = support_bundle.write_bundle(bundle, dest, parsed)
        task_keys["dest"] = dest
    task_keys["cluster"] = report["cluster"]
    # A node that was not reached fails the task; the bundle of the others is written by then.
    outcomes = dict((node, unreached.get(node) or report["nodes"][names[node]]) for node in nodes)
    return several_nodes.result(outcomes, nodes, task.settings, task_keys)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
