#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_adopt
short_description: Write what the collection needs to manage a running Talos cluster, from the configs its nodes run
version_added: 1.1.0
description:
  - Reads the machine config every node runs (and the Talos version and hostname it reports), however the cluster was
    made (C(talosctl gen config), talhelper, Omni, Terraform), and writes into O(dest) what the
    P(talos_linux.talos.cluster#role) role needs to render those configs again, so that the
    role's first run on the cluster changes nothing.
  - C(secrets.yaml), the secrets bundle, from a control plane's config (as C(talosctl gen secrets
    --from-controlplane-config) makes it), after checking that every node belongs to one cluster - control planes
    with different CAs or cluster IDs are refused. An existing bundle is kept when it is this cluster's and refused
    when it is another's.
  - C(inventory.yml), in the layout of the guides - groups O(controlplane_group) and O(worker_group), each host named
    by its node's hostname with C(ansible_host) the node as O(nodes) lists it, and C(talosconfig) next to the
    inventory.
  - C(group_vars/all.yml), the role's settings - the cluster name and endpoint, the version contract, the Kubernetes
    version, the installer, its home and the install disk, the extra SANs, found by rendering the configs for every
    supported contract not newer than the oldest Talos the nodes run and keeping the settings that need the smallest
    patches - and the patches every node of a group shares (C(cluster_controlplane_patches),
    C(cluster_worker_patches)).
  - C(host_vars/<host>.yml), each node's own patches (C(cluster_host_patches)); the group's patches and then the
    host's make what M(talos_linux.talos.talos_machine_config) renders for the settings equal to the node's running
    config. A field a node has and the rendering lacks is removed with C(null), a document with a C($patch) C(delete) patch;
    lists are given whole, as the collection applies patches.
  - C(controlplane.yaml) and C(worker.yaml), the configs M(talos_linux.talos.talos_machine_config) renders for the
    settings, as the role writes them.
  - Only reads from the nodes; it changes nothing on them. Every file is private (mode 0600); O(dest) is made (mode
    0700) when missing. A second run against the same cluster writes nothing. The talosconfig and the kubeconfig
    are not written here; the P(talos_linux.talos.adopt#role) role writes them with
    M(talos_linux.talos.talos_client_config) and M(talos_linux.talos.talos_kubeconfig), after a backup of every
    node's config (M(talos_linux.talos.talos_config_backup)).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  dest:
    description:
      - The directory of the adopted cluster's files on the controller. Its parent must exist.
    type: path
    required: true
  controlplane_group:
    description: The inventory group of the control planes.
    type: str
    default: controlplane
  worker_group:
    description: The inventory group of the workers.
    type: str
    default: workers
  talosconfig_endpoints:
    description:
      - The endpoints of the talosconfig the cluster role writes (C(cluster_talosconfig_endpoints)); by default those
        this task reached the cluster through.
    type: list
    elements: str
  backup:
    description:
      - The result M(talos_linux.talos.talos_config_backup) registered for the same nodes. Every node's running config
        must be the one the backup read (the same sha256), or the task fails before anything is written; a config
        changed between the backup and the adoption would be adopted in a state no backup holds.
      - Without it the configs are not compared with any backup.
    type: dict
  force:
    description:
      - Replace files of O(dest) that hold something else than the adoption writes (the inventory, the variables,
        the rendered configs). Without it such files fail the task before anything is written.
      - The secrets bundle is never replaced.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The nodes are read and the adoption planned, a cluster of disagreeing control planes refused; nothing is
      written, RV(files) lists what would be.
  diff_mode:
    support: full
    details: Each file that would change, with every secret redacted (the bundle's content is never shown).
  idempotent:
    support: full
notes:
  - Reading a node's machine config needs the C(os:admin) role, as Talos marks it sensitive.
  - The nodes must be listed in O(nodes) (or the talosconfig context's nodes); the
    P(talos_linux.talos.talos#inventory) inventory plugin lists every node of a cluster.
  - Patches that carry a secret (a node whose config holds a key the bundle does not) are written as they are; the
    files are private, and the variables can be moved into Ansible Vault.
seealso:
  - name: Adopting a running cluster
    description: The collection's guide to the adopt role, which runs this module after a backup of every node's config.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/adopting.md
  - module: talos_linux.talos.talos_config_backup
  - module: talos_linux.talos.talos_machine_config
"""

EXAMPLES = r"""
- name: Write the adopted cluster's files next to this inventory of its nodes
  talos_linux.talos.talos_adopt:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'talos_node') | list }}"
    dest: "{{ inventory_dir }}/prod"
  run_once: true
"""

RETURN = r"""
dest:
  description: Absolute path of the adopted cluster's directory.
  returned: always
  type: str
  sample: /srv/talos/prod
files:
  description: Every file of O(dest) the adoption writes (relative paths), and whether it changed (or would).
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: The path in O(dest).
      type: str
    changed:
      description: Whether the file was written (or would be, in check mode).
      type: bool
  sample: [{path: secrets.yaml, changed: true}, {path: inventory.yml, changed: true}]
cluster:
  description: The settings the configs are rendered from, as the cluster role's variables name them (without
    C(cluster_)).
  returned: success
  type: dict
  sample:
    name: prod
    endpoint: https://10.5.0.10:6443
    talos_version: v1.13
    kubernetes_version: 1.36.3
    install_disk: /dev/sda
    install_image: ghcr.io/siderolabs/installer:v1.13.6
    install_home: machine
    additional_sans: []
    talosconfig_endpoints: [10.5.0.2, 10.5.0.3, 10.5.0.4]
group_patches:
  description: How many patches each group's nodes share (C(cluster_controlplane_patches), C(cluster_worker_patches)).
  returned: success
  type: dict
  sample: {controlplane: 1, worker: 2}
host:
  description: The node's host name in the inventory.
  returned: with one node (O(node) or the endpoint itself)
  type: str
  sample: controlplane-1
group:
  description: The node's inventory group.
  returned: with one node (O(node) or the endpoint itself)
  type: str
patches:
  description: How many patches of its own the node has (C(cluster_host_patches)).
  returned: with one node (O(node) or the endpoint itself)
  type: int
sha256:
  description: The sha256 of the node's running config, as the node returned it.
  returned: with one node (O(node) or the endpoint itself)
  type: str
talos_version:
  description: The Talos version the node runs.
  returned: with one node (O(node) or the endpoint itself)
  type: str
hostname:
  description: The hostname the node runs with (null when it has none).
  returned: with one node (O(node) or the endpoint itself)
  type: str
machine_type:
  description: The machine type of the node's config, V(controlplane) or V(worker).
  returned: with one node (O(node) or the endpoint itself)
  type: str
documents:
  description: The documents of the node's running config, in order.
  returned: with one node (O(node) or the endpoint itself)
  type: list
  elements: str
nodes:
  description:
    - Each node's result (RV(host), RV(group), RV(patches), RV(sha256), RV(talos_version), RV(hostname),
      RV(machine_type), RV(documents)), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done; nothing is written then.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) it
      holds that node's keys at the top and not this key. The shape of every module that takes several nodes
      (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import ensure_mode, read_text, update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.config import adoption, running
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import file_diff
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

BUNDLE = "secrets.yaml"

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path", required=True),
        controlplane_group=dict(type="str", default="controlplane"),
        worker_group=dict(type="str", default="workers"),
        talosconfig_endpoints=dict(type="list", elements="str"),
        backup=dict(type="dict"),
        force=dict(type="bool", default=False),
    ),
    several_nodes=True,
    # The whole cluster, not the inventory host's node: the nodes are those O(nodes) lists.
    host_node=False,
)


def existing_bundle(path):
    return SecretsBundle.load(path) if os.path.exists(path) else None


def run(task):
    params = task.params
    dest = os.path.abspath(params["dest"])
    task.result["dest"] = dest
    nodes = task.target_nodes
    if nodes == [None]:
        raise TalosConfigError("talos_adopt needs every node of the cluster: list their addresses in nodes (the "
                               "talos_linux.talos.talos inventory plugin's hosts give them), or in the talosconfig context.")
    if params["controlplane_group"] == params["worker_group"]:
        raise TalosConfigError("controlplane_group and worker_group must differ, both are %r." % params["worker_group"])
    running.prepare_directory(dest, "dest", task.check_mode)

    configs = {}

    def read(client, node):
        configs[node] = running.read_running_config(client, node)
        return dict(configs[node].summary(), changed=False)

    result = several_nodes.run(task.client, nodes, read, params["max_concurrency"])
    ordered = [configs[node] for node in nodes]
    task.hide(value for config in ordered for value in secret_values(config.documents))
    if params["backup"] is not None:
        running.check_backed_up(ordered, params["backup"], lambda node: several_nodes.node_key(node, task.settings))

    bundle_path = os.path.join(dest, BUNDLE)
    bundle = existing_bundle(bundle_path)
    plan = adoption.plan_adoption(ordered, bundle, bundle_path)
    task.hide(plan.bundle.secret_values())
    endpoints = params["talosconfig_endpoints"] or list(task.settings.endpoints)
    files = adoption.inventory_files(plan, endpoints, params["controlplane_group"], params["worker_group"])
    files["controlplane.yaml"] = plan.rendered[adoption.CONTROLPLANE]
    files["worker.yaml"] = plan.rendered[adoption.WORKER]

    current = dict((path, read_text(os.path.join(dest, path))) for path in files)
    conflicts = sorted(path for path, text in files.items() if current[path] is not None and current[path] != text)
    for folder in sorted(set(os.path.join(dest, os.path.dirname(path)) for path in files if os.path.dirname(path))):
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise TalosConfigError("%s is a file, where the adoption writes variables: move it away, or choose another dest. "
                                   "Nothing was written." % folder)
    if conflicts and not params["force"]:
        raise TalosConfigError("%s already holds %s with other content than the adoption writes: set force to replace "
                               "them, or choose another dest. Nothing was written." % (dest, ", ".join(conflicts)))

    written = [{"path": BUNDLE, "changed": bundle is None or ensure_mode(bundle_path, "the secrets bundle", task.check_mode)}]
    if bundle is None and not task.check_mode:
        update_private(bundle_path, plan.bundle.to_yaml(), "the secrets bundle")
    diffs = [{"before": "", "after": "secrets bundle created (contents not shown)\n", "before_header": bundle_path,
              "after_header": bundle_path}] if bundle is None else []
    known_secrets = set(plan.bundle.secret_values()) | set(task.no_log_values)
    for path in sorted(files, key=lambda name: (name.count("/"), name)):
        target = os.path.join(dest, path)
        if os.path.dirname(path):
            running.prepare_directory(os.path.dirname(target), "dest", task.check_mode)
        changed = update_private(target, files[path], "the adopted cluster's %s" % path, task.check_mode)
        written.append({"path": path, "changed": changed})
        if changed and current[path] != files[path]:
            diffs.append(file_diff(current[path], files[path], known_secrets, target))

    entries = several_nodes.node_results(result, nodes, task.settings)
    names = adoption.host_names(ordered)
    groups = {adoption.CONTROLPLANE: params["controlplane_group"], adoption.WORKER: params["worker_group"]}
    for config in ordered:
        entries[config.node].update(host=names[config.node], group=groups[config.machine_type],
                                    patches=len(plan.host_patches[config.node]))
    for node, paths in sorted(plan.mismatches.items()):
        task.warn("The patches do not reproduce every field of %s's running config (%s): the cluster role would "
                  "change them." % (label(node), ", ".join(paths)))
    result.update(
        changed=any(entry["changed"] for entry in written),
        files=written,
        cluster=dict(plan.settings.facts(), talosconfig_endpoints=endpoints),
        group_patches=dict((machine_type, len(patches)) for machine_type, patches in plan.group_patches.items()),
    )
    if task.diff and diffs:
        result["diff"] = diffs
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
