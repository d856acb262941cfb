#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_facts
short_description: Gather facts about Talos nodes
version_added: 1.0.0
description:
  - Reads what a Talos node reports about itself through the Talos API - version, hostname, machine type and stage,
    services, etcd membership, disks, memory, addresses, mounts and a fingerprint of the active machine
    configuration - and returns it as the C(talos) fact.
  - Read-only; never changes a node.
  - With O(node) (or the host's own node, or the endpoint itself) the facts are the C(talos) fact of the host. With
    O(nodes) (or the talosconfig context's nodes) the nodes are read concurrently, at most O(max_concurrency) at a
    time, and each node's facts are returned in RV(nodes), keyed by node, not as facts; a node that cannot be read
    fails the task once every node is read, and RV(nodes) still holds the facts of the others.
  - A node in maintenance mode (reached with O(insecure=true)) answers what a reader may see; its facts say
    C(maintenance=true).
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  gather_subset:
    description:
      - Which facts to gather, as with M(ansible.builtin.setup). V(all) gathers everything, V(min) gathers
        V(version), V(hostname) and V(machine).
      - Prefix a subset with C(!) to leave it out, for example V(!etcd). With only exclusions, everything else is
        gathered; V(!all) leaves only the V(min) subsets.
      - V(version) is the Talos version (tag, sha, architecture, platform, features), V(hostname) the node's
        hostname, V(machine) its machine type and stage (COSI C(MachineStatus)), V(services) the system services
        with state and health, V(etcd) the etcd members and leader (control planes only), V(disks) the block
        devices, V(memory) the node's C(/proc/meminfo) values, V(network) the node addresses, V(mounts) the
        mounted filesystems, V(config) the active machine configuration's version and hash (never its content).
    type: list
    elements: str
    default: [all]
  resources:
    description:
      - COSI resources to read besides the subsets, as C(talosctl get) does. Each is returned with its metadata and
        its spec parsed from YAML; values of keys that look like secrets are redacted.
    type: list
    elements: dict
    default: []
    suboptions:
      type:
        description:
          - The resource type - in full (for example C(NodeAddresses.net.talos.dev)), its display name or an alias, as
            C(talosctl get) accepts it (see M(talos_linux.talos.talos_resource_info)).
        type: str
        required: true
      namespace:
        description:
          - The namespace of the resource. Defaults to the type's default namespace from its resource definition.
        type: str
      id:
        description:
          - The resource ID. When not set, every resource of the type in the namespace is returned.
        type: str
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Most facts need a certificate with the C(os:reader) role or more. The V(config) subset reads the sensitive
    machine configuration resource and needs C(os:admin); with a weaker role, or on a node in maintenance mode,
    subsets the node refuses are listed under C(unavailable) in the facts instead of failing the task.
  - A node in maintenance mode does not forward calls to other nodes; reach it through itself as the only
    endpoint (O(endpoints) set to the node's own address, with O(insecure=true)).
  - The configuration hash is the SHA-256 of the v1alpha1 document in canonical JSON (sorted keys), so it changes
    when the configuration changes but not with its formatting.
seealso:
  - module: talos_linux.talos.talos_apply_config
  - module: ansible.builtin.setup
"""

EXAMPLES = r"""
- name: Gather the facts of every node of the inventory
  talos_linux.talos.talos_facts:
    talosconfig: ./talosconfig
    node: "{{ ansible_host }}"

- name: Use the facts
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }} runs Talos {{ ansible_facts.talos.version.tag }} ({{ ansible_facts.talos.machine.stage }})"

- name: Only the version and the services
  talos_linux.talos.talos_facts:
    node: 10.5.0.2
    gather_subset: [version, services]

- name: Everything but disks and mounts, plus a COSI resource
  talos_linux.talos.talos_facts:
    node: 10.5.0.2
    gather_subset: ["!disks", "!mounts"]
    resources:
      - type: Members.cluster.talos.dev

- name: Read several nodes at once from one host
  talos_linux.talos.talos_facts:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
    gather_subset: [min]
  register: cluster
  run_once: true

- name: Each node's facts are under nodes, keyed by node
  ansible.builtin.debug:
    msg: "{{ item.key }} is a {{ item.value.machine.type }}"
  loop: "{{ cluster.nodes | dict2items }}"
  run_once: true

- name: Read a node in maintenance mode
  talos_linux.talos.talos_facts:
    endpoints: [10.5.0.9]
    insecure: true
    gather_subset: [min, disks]
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: with O(node), the host's own node or the endpoint itself
  type: dict
  contains:
    talos:
      description:
        - The facts of the node.
        - Subsets that were not gathered are absent.
      returned: with O(node), the host's own node or the endpoint itself
      type: dict
      contains:
        node:
          description: The node (null when the endpoint answered for itself).
          type: str
          sample: 10.5.0.2
        maintenance:
          description: True when the node is in maintenance mode (no machine configuration yet).
          type: bool
          sample: false
        version:
          description: The Talos version.
          type: dict
          sample:
            tag: v1.14.0
            sha: 7a84d742b
            built: ""
            go_version: go1.25.1
            os: linux
            arch: amd64
            platform: {name: metal, mode: metal}
            features: {rbac: true}
        hostname:
          description: The node's hostname.
          type: str
          sample: cp-1
        machine:
          description: Machine type, stage and readiness.
          type: dict
          sample:
            type: controlplane
            configured: true
            stage: running
            ready: true
            unmet_conditions: []
        services:
          description: The system services.
          type: list
          elements: dict
          sample:
            - id: etcd
              state: Running
              health: {unknown: false, healthy: true, last_message: ""}
        etcd:
          description:
            - The etcd members as the node sees the cluster, the leader's member ID, and the node's own member ID.
            - Member IDs are 16 hexadecimal digits, as C(talosctl etcd members) prints them.
            - Only on control planes.
          type: dict
          sample:
            members:
              - id: 8e9e05c52164694d
                hostname: cp-1
                peer_urls: ["https://10.5.0.2:2380"]
                client_urls: ["https://10.5.0.2:2379"]
                is_learner: false
            leader: 8e9e05c52164694d
            member_id: 8e9e05c52164694d
            is_leader: true
        disks:
          description: The node's disks (storage.StorageService Disks).
          type: list
          elements: dict
          sample:
            - device_name: /dev/sda
              size: 10737418240
              model: QEMU HARDDISK
              serial: ""
              type: HDD
              system_disk: true
              readonly: false
        memory:
          description: The node's C(/proc/meminfo) values, in kB as the kernel reports them.
          type: dict
          sample: {memtotal: 4028440, memfree: 2100000, memavailable: 3100000}
        network:
          description:
            - C(addresses) holds the node's current addresses (CIDR notation); C(node_addresses) every
              C(NodeAddresses) resource by ID.
          type: dict
          sample:
            addresses: ["10.5.0.2/24"]
            node_addresses: {current: ["10.5.0.2/24"], default: ["10.5.0.2/24"]}
        mounts:
          description: The mounted filesystems, sizes in bytes.
          type: list
          elements: dict
          sample:
            - filesystem: /dev/sda6
              size: 10000000000
              available: 9000000000
              mounted_on: /var
        config:
          description:
            - The active machine configuration without its content - the v1alpha1 version, the SHA-256 hash of the
              v1alpha1 document in canonical JSON, the machine type and the list of documents.
            - Null in maintenance mode, when the node has no configuration.
          type: dict
          sample:
            version: v1alpha1
            hash: 3f2a9c0d4e7b8f1a2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef0123
            machine_type: controlplane
            documents: [v1alpha1]
        resources:
          description: The resources of O(resources), in the same order.
          type: list
          elements: dict
          sample:
            - type: Members.cluster.talos.dev
              namespace: cluster
              id: null
              items:
                - metadata: {namespace: cluster, type: Members.cluster.talos.dev, id: cp-1, version: "2"}
                  spec: {hostname: cp-1, machineType: controlplane}
        unavailable:
          description: Subsets the node refused (for lack of a role, or in maintenance mode), with the reason.
          type: dict
          sample: {config: "Permission denied for cosi.resource.State/Get on node 10.5.0.2 ..."}
nodes:
  description:
    - Each node's facts (the keys of RV(ansible_facts.talos)), keyed by node; they are not set as facts.
    - A node that could not be read has C(failed=true), C(msg), C(code) and C(node) instead, and fails the task.
    - With O(nodes), even of one node, this is the whole result; the shape of every module that takes several
      nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.2: {node: 10.5.0.2, maintenance: false, hostname: cp-1}
    10.5.0.3: {node: 10.5.0.3, failed: true, code: Unavailable, msg: "Talos endpoint 10.5.0.2:50000 is unreachable ..."}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster.facts import FactGatherer, resolve_subsets
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        gather_subset=dict(type="list", elements="str", default=["all"]),
        resources=dict(type="list", elements="dict", default=[], options=dict(
            type=dict(type="str", required=True),
            namespace=dict(type="str"),
            id=dict(type="str"),
        )),
    ),
    several_nodes=True,
)


def run(task):
    subsets = resolve_subsets(task.params["gather_subset"])
    nodes = task.target_nodes
    gatherer = FactGatherer(task.client, nodes, task.params["insecure"], task.params["max_concurrency"])
    facts, errors = gatherer.gather(subsets, task.params["resources"])

    outcomes = dict((node, errors[node] if node in errors else facts[node]) for node in nodes)
    result = several_nodes.result(outcomes, nodes, task.settings)
    if task.settings.nodes_listed:
        return result
    return dict(changed=False, ansible_facts={"talos": result})


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
