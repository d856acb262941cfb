#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_file_info
short_description: List a directory, read a file or measure disk usage on Talos nodes
version_added: 1.0.0
description:
  - Looks at the files of Talos nodes through the Talos API, as C(talosctl ls), C(talosctl read) and
    C(talosctl usage) do. Read-only.
  - O(get=list) lists a directory (the C(List) RPC) down to O(depth) levels, with O(types) and O(patterns) as
    filters; O(get=stat) returns the metadata of O(path) itself; O(get=content) reads a text file (C(Read));
    O(get=usage) reports how much space O(path) and what it holds take (C(DiskUsage)).
  - Text read with O(get=content) is redacted - values of secret YAML fields, private key bodies and long base64
    runs become C(<redacted>); to copy a file as it is, use M(talos_linux.talos.talos_fetch).
  - Several O(nodes) are read in one task, concurrently (at most O(max_concurrency) at a time); each node's answer
    is under RV(nodes), and a node that fails does not stop the others.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  path:
    description:
      - An absolute path on the node, for example V(/var/log) or V(/etc/resolv.conf).
    type: str
    required: true
  get:
    description:
      - V(list) the entries of the directory O(path) (a file lists as itself), V(stat) the metadata of O(path)
        (a symbolic link is not followed), V(content) the text of the file O(path) (links are followed),
        V(usage) the disk usage of O(path) and of what it holds.
    type: str
    choices: [list, stat, content, usage]
    default: list
  depth:
    description:
      - With O(get=list) or O(get=usage), how many levels below O(path) to report; V(1) the entries of O(path)
        itself, V(0) no limit.
    type: int
    default: 1
  types:
    description:
      - With O(get=list), report only entries of these types (O(path) itself is always first).
    type: list
    elements: str
    choices: [file, directory, symlink]
  patterns:
    description:
      - With O(get=list), report only entries whose name (the last path component) matches one of these shell
        patterns, for example V(*.log).
    type: list
    elements: str
  max_size:
    description:
      - With O(get=content), the largest file read, in bytes; a larger one fails the task (fetch it with
        M(talos_linux.talos.talos_fetch)).
    type: int
    default: 1048576
  include_files:
    description:
      - With O(get=usage), report files too, not only directories.
    type: bool
    default: false
  threshold:
    description:
      - With O(get=usage), leave out entries smaller than this many bytes; a negative value leaves out entries
        larger than its absolute value. V(0) reports every entry.
    type: int
    default: 0
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Listing, stat and disk usage need the C(os:reader) role or better; reading a file needs C(os:admin), as Talos
    lets only administrators read files. A refusal names the path and the role it needs.
  - Talos has no path restrictions of its own for administrators; a path that does not exist fails the task with
    the node's answer.
seealso:
  - module: talos_linux.talos.talos_fetch
  - module: talos_linux.talos.talos_logs
  - module: talos_linux.talos.talos_support_bundle
"""

EXAMPLES = r"""
- name: What is under /var/log
  talos_linux.talos.talos_file_info:
    node: 10.5.0.2
    path: /var/log
    depth: 3
    types: [file]
    patterns: ["*.log"]
  register: var_log

- name: The resolver configuration
  talos_linux.talos.talos_file_info:
    node: 10.5.0.2
    path: /etc/resolv.conf
    get: content
  register: resolv

- name: What fills /var, directories of 1 GiB and more, three levels deep
  talos_linux.talos.talos_file_info:
    node: 10.5.0.2
    path: /var
    get: usage
    depth: 3
    threshold: 1073741824

- name: The kubelet directory of every node
  talos_linux.talos.talos_file_info:
    nodes: [10.5.0.2, 10.5.0.3]
    path: /var/lib/kubelet
    get: stat
  run_once: true
"""

RETURN = r"""
files:
  description: With O(get=list), the entries, O(path) itself first, in the order the node walks them.
  returned: with get=list and one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: dict
  contains:
    path:
      description: The absolute path on the node.
      type: str
    name:
      description: The path relative to O(path) (V(.) for O(path) itself).
      type: str
    type:
      description: V(file), V(directory), V(symlink), V(char_device), V(block_device), V(pipe), V(socket) or V(irregular).
      type: str
    size:
      description: Size in bytes (of the link text for a link).
      type: int
    mode:
      description: The permission bits in octal, with setuid, setgid and sticky bits.
      type: str
      sample: "0644"
    modified:
      description: Last modification, seconds since the epoch.
      type: int
    uid:
      description: Owner user ID.
      type: int
    gid:
      description: Owner group ID.
      type: int
    link:
      description: The target of a symbolic link.
      type: str
      returned: for links
    error:
      description: Why the node could not read this entry (the other keys are missing then).
      type: str
      returned: for entries the node could not read
  sample:
    - {path: /var/log, name: ".", type: directory, size: 4096, mode: "0755", modified: 1795000000, uid: 0, gid: 0}
stat:
  description: With O(get=stat), the metadata of O(path), keys as in RV(files).
  returned: with get=stat and one node (O(node), the host's own node or the endpoint itself)
  type: dict
content:
  description: With O(get=content), the file's text, redacted.
  returned: with get=content and one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: "nameserver 127.0.0.53\n"
usage:
  description: With O(get=usage), the sizes, deepest entries first and O(path) itself last; a directory's size is
    that of everything it holds.
  returned: with get=usage and one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: dict
  contains:
    path:
      description: The absolute path on the node.
      type: str
    name:
      description: The path relative to O(path).
      type: str
    size:
      description: Bytes.
      type: int
size:
  description: With O(get=usage), the size of O(path) with everything it holds (when the threshold kept it).
  returned: with get=usage and one node (O(node), the host's own node or the endpoint itself)
  type: int
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

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import files as node_files
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        path=dict(type="str", required=True),
        get=dict(type="str", choices=["list", "stat", "content", "usage"], default="list"),
        depth=dict(type="int", default=1),
        types=dict(type="list", elements="str", choices=list(node_files.FILE_TYPES)),
        patterns=dict(type="list", elements="str"),
        max_size=dict(type="int", default=1024 * 1024),
        include_files=dict(type="bool", default=False),
        threshold=dict(type="int", default=0),
    ),
    # Read's 1 KiB frames arrive in one reply stream; 32 MiB is Talos's largest message, a sane ceiling for text.
    ranges=dict(depth=(0, None), max_size=(1, 32 * 1024 * 1024), threshold=(None, None)),
    several_nodes=True,
)


def _look(params, client, node, path):
    if params["get"] == "list":
        return {"files": node_files.list_files(client, node, path, params["depth"], params["types"] or (),
                                               params["patterns"] or ())}
    if params["get"] == "stat":
        return {"stat": node_files.stat_file(client, node, path)}
    if params["get"] == "content":
        return {"content": node_files.read_text(client, node, path, params["max_size"])}
    usage = node_files.disk_usage(client, node, path, params["depth"], params["include_files"], params["threshold"])
    result = {"usage": usage}
    if usage and usage[-1]["path"] == path:
        result["size"] = usage[-1]["size"]
    return result


def run(task):
    params = task.params
    path = node_files.node_path(params["path"], "path")
    return several_nodes.run(task.client, task.target_nodes, lambda client, node: _look(params, client, node, path),
                             params["max_concurrency"])


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
