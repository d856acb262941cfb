#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_support_bundle
short_description: Collect a Talos support bundle of the cluster into one zip on the controller
version_added: 0.1.0
description:
  - Collects what C(talosctl support) collects, in its layout, into one zip file O(dest) on the controller - for each
    node C(<node>/dmesg.log), C(controller-runtime.log), C(dependencies.dot), C(dns-resolve-cache.log), C(service-logs/<service>.log)
    and C(.state), C(kubernetes-logs/kube-system/<pod>.log), C(mounts), C(devices), C(io), C(processes),
    C(summary) and C(resources/<type>.yaml); for the cluster C(kubernetesResources/nodes.yaml) and
    C(kubernetesResources/systemPods.yaml) read through the admin kubeconfig Talos returns (kept in memory).
  - Beside them, C(support-bundle.yaml) lists the nodes reached and missed and every section missed with the reason.
    A node that cannot be reached, a section a node refuses or a Kubernetes API that does not answer is recorded
    there and in RV(missed), and does not fail the task.
  - No secret goes into the bundle - a resource of a type Talos marks sensitive (C(MachineConfigs), C(KubeletSpecs),
    C(APIServerConfigs), the C(secrets) namespace...) is written as talosctl writes it, its metadata kept and its
    C(spec) replaced by C(<REDACTED>) (listing them needs C(os:admin); with a weaker role they are in RV(missed)), every other
    resource and every Kubernetes manifest is redacted as M(talos_linux.talos.talos_resource_info) redacts, Secrets are
    not read, and log lines that hold a secret by their shape are replaced as M(talos_linux.talos.talos_logs) replaces
    them.
  - The file is private (mode 0600) and appears whole or not at all. With O(encryption_recipients) it is encrypted
    with age to them, as C(talosctl support) does (the C(pyrage) library); decrypt with C(age -d -i <identity>).
  - Each section is asked of every node at once, at most O(max_concurrency) nodes at a time.
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
  max_concurrency:
    description:
      - How many nodes are asked at the same time.
    type: int
    default: 5
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Asks every node for its version and reports which nodes and sections would be collected; writes nothing.
  diff_mode:
    support: none
    details: A bundle is new every time; there is nothing to compare.
  idempotent:
    support: none
    details: Every run collects a new bundle.
requirements:
  - kubernetes (Python library) for the Kubernetes part; without it that part is listed as missed.
  - pyrage (Python library) when O(encryption_recipients) is set.
notes:
  - Name every node with O(nodes) (control planes and workers); the kubeconfig comes from the first node reached that
    gives one.
  - Reading files (C(devices)) and the kubeconfig needs the C(os:admin) role; with a lesser role those parts are
    listed as missed.
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
nodes:
  description: The nodes asked, as named in the archive.
  returned: always
  type: list
  elements: str
reached_nodes:
  description: The nodes that answered.
  returned: always
  type: list
  elements: str
missed_nodes:
  description: The nodes that could not be reached; their reasons are in RV(missed).
  returned: always
  type: list
  elements: str
collected:
  description: For each node (and V(cluster)), the sections collected.
  returned: unless in check mode
  type: dict
  sample: {"10.5.0.2": [summary, dmesg, service-logs, mounts], cluster: [kubernetes-nodes]}
missed:
  description: Every section missed, with its source (a node or V(cluster)) and the reason.
  returned: always
  type: list
  elements: dict
  sample: [{source: 10.5.0.4, section: summary, reason: "node 10.5.0.4 is unreachable ..."}]
sections:
  description: In check mode, the sections that would be collected from each reached node and from the cluster.
  returned: in check mode
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils import support_bundle
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.files import check_destination
from ansible_collections.talos_linux.talos.plugins.module_utils.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task import TaskFailed, TaskSpec, missing_libraries

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path", required=True),
        kubernetes=dict(type="bool", default=True),
        kubernetes_endpoint=dict(type="str"),
        encryption_recipients=dict(type="list", elements="str", default=[]),
        max_concurrency=dict(type="int", default=5),
    ),
    ranges=dict(max_concurrency=(1, None)),
)


def _names(task, nodes):
    # The endpoint answers for itself when no node is named: its host names the node's folder then.
    endpoint_host = task.settings.endpoints[0].rsplit(":", 1)[0].strip("[]")
    return dict((node, node or endpoint_host) for node in nodes)


def _kube_api_factory(task):
    if not task.params["kubernetes"]:
        return None
    from ansible_collections.talos_linux.talos.plugins.module_utils import kube_api
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
    if recipients and missing_libraries([support_bundle.AGE_LIBRARY]):
        raise TaskFailed("encryption_recipients needs the pyrage Python library on the controller "
                         "(pip install pyrage), or leave encryption_recipients empty for a plain zip.")
    parsed = support_bundle.age_recipients(recipients) if recipients else []
    nodes = task.target_nodes
    bundle = support_bundle.SupportBundle(task.client, nodes, _names(task, nodes), params["max_concurrency"], task.progress,
                                          _kube_api_factory(task), hide=task.hide)
    if task.check_mode:
        report = bundle.plan()
        return dict(report, changed=True, encrypted=bool(recipients))
    report = support_bundle.write_bundle(bundle, dest, parsed)
    return dict(report, changed=True, dest=dest, encrypted=bool(recipients))


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
