#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_kubeconfig
short_description: Fetch the Kubernetes admin kubeconfig of a Talos cluster
version_added: 1.0.0
description:
  - Fetches the Kubernetes admin kubeconfig from a Talos control-plane node with the Kubeconfig RPC, the way
    C(talosctl kubeconfig) does, and writes it to O(dest) on the controller with mode C(0600), or returns it when
    O(dest) is not set.
  - Talos issues a new admin client certificate on every call. The module therefore compares the fetched kubeconfig
    with the file at O(dest) leaving out the client credentials (C(client-certificate-data), C(client-key-data)) of
    its users, and rewrites the file only when something else differs (cluster CA, server, names) or when the file's
    client certificate has expired or expires within a day; a file whose mode is not C(0600) gets that mode. A
    second run therefore reports no change and leaves the existing credentials in place.
  - Optionally points the kubeconfig at another API server address (O(server)) and renames its context and cluster
    (O(context_name), O(cluster_name)), for example to merge several clusters' kubeconfigs later.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  dest:
    description:
      - Path on the controller to write the kubeconfig to. Its directory must exist.
      - When not set, the kubeconfig is returned in RV(kubeconfig) instead.
    type: path
  server:
    description:
      - Kubernetes API server URL to write into every cluster entry (C(clusters[].cluster.server)), for example
        V(https://k8s.example.com:6443). By default the endpoint Talos put there is kept.
    type: str
  context_name:
    description:
      - New name for the kubeconfig's context; C(current-context) follows.
      - Named so because O(context) selects the talosconfig context.
    type: str
  cluster_name:
    description:
      - New name for the kubeconfig's cluster entry; the context's reference follows.
    type: str
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The kubeconfig is fetched and compared but not written.
  diff_mode:
    support: full
    details: The diff shows the kubeconfig with client credentials replaced by C(<redacted>).
  idempotent:
    support: full
    details: Regenerated client credentials alone do not count as a change.
notes:
  - Needs the C(os:admin) role and a control-plane node; Talos serves the kubeconfig only there.
  - Without O(dest), RV(kubeconfig) holds cluster-admin credentials. Set C(no_log=true) on such tasks so that the
    credentials are not printed or logged.
requirements:
  - PyYAML
  - cryptography
"""

EXAMPLES = r"""
- name: Write the admin kubeconfig next to the playbook
  talos_linux.talos.talos_kubeconfig:
    talosconfig: ./talosconfig
    node: 10.5.0.2
    dest: ./kubeconfig

- name: Point the kubeconfig at the load balancer and give it a name of its own
  talos_linux.talos.talos_kubeconfig:
    node: 10.5.0.2
    dest: ~/.kube/prod.yaml
    server: https://k8s.example.com:6443
    context_name: prod
    cluster_name: prod

- name: Hand the kubeconfig to the next task without writing a file
  talos_linux.talos.talos_kubeconfig:
    node: 10.5.0.2
  register: admin
  no_log: true
"""

RETURN = r"""
dest:
  description: Absolute path of the kubeconfig file.
  returned: when O(dest) is set
  type: str
  sample: /home/ops/.kube/prod.yaml
kubeconfig:
  description:
    - The kubeconfig (YAML text), with the O(server), O(context_name) and O(cluster_name) rewrites applied.
    - Holds cluster-admin credentials; use C(no_log) on the task.
  returned: when O(dest) is not set
  type: str
server:
  description: The API server URL of the kubeconfig's (first) cluster entry.
  returned: always
  type: str
  sample: https://10.5.0.2:6443
context:
  description: The kubeconfig's current context.
  returned: always
  type: str
  sample: admin@prod
cluster:
  description: The name of the kubeconfig's (first) cluster entry.
  returned: always
  type: str
  sample: prod
node:
  description: The control-plane node that issued the kubeconfig (null when the endpoint answered for itself).
  returned: always
  type: str
  sample: 10.5.0.2
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import kubeconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import check_destination, update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path"),
        server=dict(type="str"),
        context_name=dict(type="str"),
        cluster_name=dict(type="str"),
    ),
)


def run(task):
    params = task.params
    dest = os.path.abspath(params["dest"]) if params["dest"] else None
    if dest:
        check_destination(dest, "the kubeconfig", "dest")
    node = task.single_node("fetches from one control-plane node")
    text, config = kubeconfig.fetch_kubeconfig(task.client, node)
    if params["server"] or params["context_name"] or params["cluster_name"]:
        text = kubeconfig.rewrite(config, server=params["server"], context=params["context_name"],
                                  cluster=params["cluster_name"])
    result = dict(kubeconfig.summary(config), changed=False, node=node)
    if not dest:
        result["kubeconfig"] = text
        return result

    existing = kubeconfig.read_kubeconfig(dest)
    result.update(dest=dest, changed=update_private(dest, text, "the kubeconfig", task.check_mode,
                                                    keep=kubeconfig.may_stay(existing, config)))
    if result["changed"]:
        result["diff"] = kubeconfig.file_diff(existing, config, dest)
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
