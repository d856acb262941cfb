#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_resource_info
short_description: Read Talos COSI resources, optionally waiting for a condition
version_added: 1.0.0
description:
  - Reads any COSI resource of a Talos node, as C(talosctl get) does, and returns each with its metadata and its spec
    parsed from YAML.
  - The type may be given in full (C(Members.cluster.talos.dev)), as its display name (C(Member)) or as an alias
    (C(members), C(machinestatus)), in any case; it is resolved through the node's resource definitions, which also
    give the default namespace.
  - Without O(id), every resource of the type in the namespace is returned, optionally only those whose labels match
    O(label_selectors).
  - With O(wait=true) the module waits until O(wait_condition) holds on every targeted node, following the node's
    COSI Watch stream (or polling when the node cannot watch).
  - Read-only; never changes a node. Several O(nodes) are read in one task, concurrently (at most
    O(max_concurrency) at a time); a node that fails does not stop the others.
  - Secrets are redacted - every value of a type Talos marks sensitive (C(MachineConfigs), C(OSRootSecrets),
    C(KubeletSpecs), C(LinkSpecs), every type of the C(secrets) namespace, ..., and any type whose resource definition
    on the node has the sensitivity C(sensitive)), whatever its keys are called; in other types the values under keys
    that look like secrets, and values that are secrets by their shape (private keys, credentials).
  - Waiting on a field of a sensitive type compares the redacted value, so only O(wait_condition.state) is useful
    there.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  type:
    description:
      - The resource type - full type, display type or alias, case-insensitive, as C(talosctl get) accepts it.
    type: str
    required: true
  namespace:
    description:
      - The namespace. Defaults to the type's default namespace from its resource definition.
    type: str
  id:
    description:
      - The resource ID. Without it, every resource of the type in the namespace is returned.
      - A missing resource is not an error; RV(resources) is empty then.
    type: str
  label_selectors:
    description:
      - Only resources whose labels match every selector, as in M(kubernetes.core.k8s_info) - V(key), V(!key),
        V(key=value), V(key!=value), V(key in (a, b)), V(key notin (a, b)); several terms may be separated by commas.
    type: list
    elements: str
    default: []
  wait:
    description:
      - Wait until O(wait_condition) holds on every targeted node before returning.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait when O(wait=true), for all nodes together.
    type: int
    default: 120
  wait_condition:
    description:
      - What to wait for when O(wait=true).
    type: dict
    default: {}
    suboptions:
      state:
        description:
          - V(present) waits until at least one resource matches (and, with O(wait_condition.field), until every
            matching resource's field has the value). V(absent) waits until no resource matches.
        type: str
        choices: [present, absent]
        default: present
      field:
        description:
          - A dotted path into the resource spec, for example V(stage) or V(status.ready).
        type: str
      value:
        description:
          - The value O(wait_condition.field) must have. Compared as YAML prints it, so V(true) matches a boolean.
        type: raw
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Reading needs the C(os:reader) role or better; sensitive types (C(MachineConfig), the C(secrets) namespace, ...) need
    C(os:admin).
seealso:
  - module: talos_linux.talos.talos_facts
  - module: talos_linux.talos.talos_health
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: List the cluster members a control plane discovered
  talos_linux.talos.talos_resource_info:
    node: 10.5.0.2
    type: members
  register: members

- name: Read the machine status of every node
  talos_linux.talos.talos_resource_info:
    nodes: [10.5.0.2, 10.5.0.3]
    type: MachineStatus
    id: machine

- name: Only the node addresses labelled as routed
  talos_linux.talos.talos_resource_info:
    node: 10.5.0.2
    type: NodeAddresses.net.talos.dev
    label_selectors:
      - talos.dev/kind in (routed, current)

- name: Wait until the node is running and ready
  talos_linux.talos.talos_resource_info:
    node: 10.5.0.3
    type: MachineStatus
    id: machine
    wait: true
    wait_timeout: 600
    wait_condition:
      field: status.ready
      value: true

- name: Wait until a member is gone
  talos_linux.talos.talos_resource_info:
    node: 10.5.0.2
    type: members
    id: "{{ old_member_id }}"
    wait: true
    wait_condition:
      state: absent
"""

RETURN = r"""
type:
  description: The full resource type the O(type) resolved to.
  returned: always
  type: str
  sample: Members.cluster.talos.dev
namespace:
  description: The namespace that was read.
  returned: always
  type: str
  sample: cluster
resources:
  description:
    - The resources read, each with the C(node) it was read from, its C(metadata) and its C(spec) parsed from YAML
      (a list for multi-document specs) with secrets redacted.
    - With several nodes, each node's list is under RV(nodes).
  returned: with one node
  type: list
  elements: dict
  sample:
    - node: 10.5.0.2
      metadata:
        namespace: cluster
        type: Members.cluster.talos.dev
        id: controlplane-1
        version: "2"
        owner: cluster.MemberController
        phase: running
        created: "2026-11-23T21:00:00Z"
        updated: "2026-11-23T21:00:05Z"
        labels: {}
        annotations: {}
        finalizers: []
      spec:
        hostname: controlplane-1
        machineType: controlplane
        addresses: [10.5.0.2]
nodes:
  description:
    - Each node's result (RV(resources)), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
elapsed:
  description: Seconds spent waiting, when O(wait=true).
  returned: when O(wait=true)
  type: float
  sample: 3.2
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import resources
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter

SPEC = TaskSpec(
    argument_spec=dict(
        type=dict(type="str", required=True),
        namespace=dict(type="str"),
        id=dict(type="str"),
        label_selectors=dict(type="list", elements="str", default=[]),
        wait_condition=dict(type="dict", default={}, options=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            field=dict(type="str"),
            value=dict(type="raw"),
        )),
    ),
    # Reading does not wait unless asked, and not for long.
    wait=True,
    wait_defaults=dict(wait=False, wait_timeout=120),
    ranges=dict(wait_timeout=(0, None)),
    several_nodes=True,
)

# Seconds between two reads of a node that cannot watch.
POLL_INTERVAL = 1.0


def run(task):
    params = task.params
    client = task.client
    nodes = task.target_nodes
    selectors = params["label_selectors"]
    resources.label_query(selectors)  # bad selectors fail before any read
    condition = dict(state="present", field=None, value=None)
    condition.update((key, value) for key, value in (params["wait_condition"] or {}).items() if value is not None)
    if params["wait"] and condition.get("field") and condition.get("value") is None:
        raise TalosConfigError("wait_condition.field needs wait_condition.value: the value the field must have.")
    # One waiter for every node, type resolution included: wait_timeout is for all of it together.
    waiter = Waiter(params["wait_timeout"], POLL_INTERVAL, task.progress) if params["wait"] else None
    kind = resources.resolve_kind(client, params["type"], node=nodes[0], waiter=waiter)
    namespace = resources.namespace_for(kind, params["namespace"])

    def read(node_client, node):
        if waiter:
            items = resources.wait_for_condition(node_client, kind, namespace, params["id"], selectors, condition, node,
                                                 waiter)
        else:
            items = resources.read_resources(node_client, kind, namespace, params["id"], selectors, node=node)
        return {"resources": [dict(item, node=node) for item in items]}

    task.result.update(type=kind.type, namespace=namespace)
    result = several_nodes.run(client, nodes, read, params["max_concurrency"])
    if waiter:
        result["elapsed"] = waiter.elapsed
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
