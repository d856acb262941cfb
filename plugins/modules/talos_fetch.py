#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_fetch
short_description: Copy a file or directory from Talos nodes to the controller
version_added: 1.0.0
description:
  - Copies O(src) from each node into O(dest) on the controller through the Talos API (the C(Copy) RPC), as
    C(talosctl cp) does. The node sends a compressed tar archive; it is kept in a temporary file, never whole in
    memory, and unpacked member by member.
  - Nothing lands outside O(dest). A member with an absolute name or C(..), or one below a symbolic link of the
    archive, fails the task before anything is written; a member below a symbolic link (or a file) already in
    O(dest) fails it when that member is reached. Device files, pipes and hard links are skipped and listed in
    RV(not_fetched); symbolic links are kept as links (their targets are neither followed nor checked).
  - A file whose content and mode are already in place is left alone, so a second run reports no change. Files in
    O(dest) that the node does not have are left alone too.
  - With several O(nodes), each node's files go to C(dest/<node>/); the nodes are copied concurrently, at most
    O(max_concurrency) at a time, and a node that fails does not stop the others.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  src:
    description:
      - An absolute path on the node, a file or a directory. A directory's content is copied (not the directory
        itself); a file lands as C(dest/<file name>).
    type: str
    required: true
  dest:
    description:
      - A directory on the controller; it is made (mode 0700) when missing.
    type: path
    required: true
  flat:
    description:
      - V(false) puts each node's files under C(dest/<node>/), V(true) straight into O(dest); V(true) works with
        one node only.
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
    details: The archive is read and compared with O(dest); nothing is written.
  diff_mode:
    support: full
    details: Lists the paths that are made or replaced, one list per node.
  idempotent:
    support: full
notes:
  - Copying files needs the C(os:admin) role, as Talos lets only administrators read files.
  - Files keep their permission bits from the node (without setuid, setgid and sticky bits), not their owner.
seealso:
  - module: talos_linux.talos.talos_file_info
  - module: talos_linux.talos.talos_support_bundle
"""

EXAMPLES = r"""
- name: The kube-apiserver audit log of a control plane
  talos_linux.talos.talos_fetch:
    node: 10.5.0.2
    src: /var/log/audit/kube
    dest: "{{ playbook_dir }}/audit"
    flat: true

- name: The pod logs of every node, one directory per node
  talos_linux.talos.talos_fetch:
    nodes: "{{ groups['all'] | map('extract', hostvars, 'ansible_host') | list }}"
    src: /var/log/pods
    dest: /srv/talos/pod-logs
  run_once: true
"""

RETURN = r"""
dest:
  description: Where the node's files went.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: /srv/talos/pod-logs/10.5.0.2
files:
  description: Every member placed, in archive order.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: dict
  contains:
    path:
      description: The path on the controller.
      type: str
    type:
      description: V(file), V(directory) or V(symlink).
      type: str
    changed:
      description: Whether it was made or replaced (would be, in check mode).
      type: bool
    size:
      description: Bytes of a file.
      type: int
      returned: for files
    sha256:
      description: SHA-256 of a file's content.
      type: str
      returned: for files
    link:
      description: The target of a link, as the node has it.
      type: str
      returned: for links
not_fetched:
  description: Members not fetched and why (device files, pipes, hard links).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: dict
  sample: [{path: /srv/talos/dev/null, reason: a device file is not fetched}]
nodes:
  description:
    - Each node's result (the keys above), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import files as node_files
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        src=dict(type="str", required=True),
        dest=dict(type="path", required=True),
        flat=dict(type="bool", default=False),
    ),
    several_nodes=True,
)


def run(task):
    params = task.params
    src = node_files.node_path(params["src"], "src")
    nodes = task.target_nodes
    if params["flat"] and len(nodes) > 1:
        raise TalosConfigError("flat=true puts the files straight into dest, which works with one node, but %d nodes are "
                               "targeted (%s): leave flat false to get one directory per node." % (len(nodes), ", ".join(nodes)))
    dest = os.path.abspath(params["dest"])
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise TalosConfigError("dest %s is not a directory: set dest to a directory on the controller." % dest)

    def copy(client, node):
        root = dest if params["flat"] else os.path.join(dest, several_nodes.node_key(node, task.settings))
        files, skipped = node_files.fetch(client, node, src, root, check_mode=task.check_mode)
        changed = [entry for entry in files if entry["changed"]]
        result = dict(changed=bool(changed), dest=root, files=files, not_fetched=skipped)
        if task.diff:
            result["diff"] = {"before_header": root, "after_header": root, "before": "",
                              "after": "".join("%s %s\n" % (entry["type"], entry["path"]) for entry in changed)}
        return result

    return several_nodes.run(task.client, nodes, copy, params["max_concurrency"])


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
