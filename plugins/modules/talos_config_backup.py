#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_config_backup
short_description: Back up the machine configs Talos nodes run, one private file per node
version_added: 1.1.0
description:
  - Reads the machine config each node runs (its active C(MachineConfigs) resource, as the node was given it) with the
    Talos version and the hostname the node reports, and writes the config to C(<directory>/<node>.yaml), as the node
    returned it, and a manifest, C(<directory>/manifest.yaml), listing for each node its file, the file's sha256, its
    Talos version, hostname, machine type and documents. Every file is private (mode 0600); O(directory) is made (mode 0700) when
    missing.
  - Only reads from the nodes; it changes nothing on them.
  - A file whose content is already in place is left alone, so a second run reports no change while the nodes run the
    same configs.
  - The nodes are read concurrently, at most O(max_concurrency) at a time. The manifest is written only when every
    node was read; a node that cannot be read fails the task, naming it, after the others' files were written.
  - Acts on the nodes O(nodes) lists (or O(node), or the talosconfig context's nodes), never on the inventory host's
    own node, so run it once for the cluster (C(run_once)).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  directory:
    description:
      - The backup directory on the controller. Its parent must exist.
    type: path
    required: true
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The nodes are read and compared with O(directory); nothing is written, the result lists what would be.
  diff_mode:
    support: partial
    details: Names the files that would be written, never their contents.
  idempotent:
    support: full
notes:
  - Reading a node's machine config needs the C(os:admin) role, as Talos marks it sensitive.
  - The files hold every key of the cluster that the configs carry; keep the directory as safe as the secrets bundle.
seealso:
  - module: talos_linux.talos.talos_adopt
  - name: Adopting a running cluster
    description: The collection's guide to the adopt role, which backs up every node's config first.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/adopting.md
"""

EXAMPLES = r"""
- name: Back up every node's running config before changing the cluster
  talos_linux.talos.talos_config_backup:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'ansible_host') | list }}"
    directory: "{{ inventory_dir }}/config-backup"
  run_once: true
"""

RETURN = r"""
directory:
  description: Absolute path of the backup directory.
  returned: always
  type: str
  sample: /srv/talos/prod/config-backup
manifest:
  description: Absolute path of the manifest; it is written once every node was read.
  returned: always
  type: str
  sample: /srv/talos/prod/config-backup/manifest.yaml
file:
  description: The node's file, in O(directory).
  returned: with one node (O(node) or the endpoint itself)
  type: str
  sample: 10.5.0.2.yaml
sha256:
  description: The sha256 of the node's config, as the file holds it.
  returned: with one node (O(node) or the endpoint itself)
  type: str
talos_version:
  description: The Talos version the node runs.
  returned: with one node (O(node) or the endpoint itself)
  type: str
  sample: v1.14.1
hostname:
  description: The hostname the node runs with (null when it has none).
  returned: with one node (O(node) or the endpoint itself)
  type: str
  sample: controlplane-1
machine_type:
  description: The machine type of the config, V(controlplane) or V(worker).
  returned: with one node (O(node) or the endpoint itself)
  type: str
documents:
  description: The config's documents, C(v1alpha1) and C(<kind>[/<name>]) of the others, in order.
  returned: with one node (O(node) or the endpoint itself)
  type: list
  elements: str
  sample: [v1alpha1, HostnameConfig, KubeletConfig]
nodes:
  description:
    - Each node's result (the keys above but O(directory) and RV(manifest)), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) it
      holds that node's keys at the top and not this key. The shape of every module that takes several nodes
      (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.config import running
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        directory=dict(type="path", required=True),
    ),
    several_nodes=True,
    # One backup of the cluster, not of the inventory host's node: the manifest lists every node it read.
    host_node=False,
)


def run(task):
    directory = os.path.abspath(task.params["directory"])
    manifest = os.path.join(directory, running.MANIFEST)
    task.result.update(directory=directory, manifest=manifest)
    running.prepare_directory(directory, "directory", task.check_mode)

    def back_up(client, node):
        config = running.read_running_config(client, node)
        name, changed = running.write_node_backup(directory, several_nodes.node_key(node, task.settings), config, task.check_mode)
        return dict(config.summary(), file=name, changed=changed)

    nodes = task.target_nodes
    result = several_nodes.run(task.client, nodes, back_up, task.params["max_concurrency"])
    entries = dict((several_nodes.node_key(node, task.settings), entry)
                   for node, entry in several_nodes.node_results(result, nodes, task.settings).items())
    manifest_changed = running.write_manifest(directory, entries, task.check_mode)
    result["changed"] = any(entry["changed"] for entry in entries.values()) or manifest_changed
    if task.diff and result["changed"]:
        written = [entry["file"] for entry in entries.values() if entry["changed"]] + ([running.MANIFEST] if manifest_changed else [])
        result["diff"] = {"before_header": directory, "after_header": directory, "before": "",
                          "after": "".join("%s (contents not shown)\n" % name for name in written)}
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
