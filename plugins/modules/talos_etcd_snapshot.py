#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_snapshot
short_description: Back up a Talos cluster's etcd - a checked snapshot from a healthy member onto the controller
version_added: 1.0.0
description:
  - Streams an etcd snapshot (EtcdSnapshot, as C(talosctl etcd snapshot) does) from a healthy member into a private
    file on the controller (mode C(0600)). The stream goes to a temporary file beside the destination and takes its
    name only once it is complete and checked, so no partial or damaged snapshot is ever left.
  - The destination is checked first (its directory exists and takes files), in check mode too, before the cluster is
    asked anything.
  - The check is etcd's own - the sha256 that etcd appends to every snapshot must match, as C(etcdutl snapshot
    restore) requires - and the database is then read as C(etcdutl snapshot status) reads it, for its revision,
    key count, raft index and term, and storage version.
  - With O(source=auto) the snapshot comes from a healthy member that is not the leader when there is one (reading
    a snapshot loads the member that serves it), else from the healthy leader; O(node) is then only the control
    plane that lists the members.
  - With O(dest) the task is idempotent - a file there that checks out is kept. With O(directory) every run adds a
    backup named C(<prefix>-<UTC time>-r<revision>.snapshot) and applies the retention (O(keep), O(max_age)) to the
    backups of O(prefix); the role C(talos_linux.talos.etcd_backup) runs it on a schedule.
  - Snapshot bytes hold every Kubernetes Secret; they never appear in the task's result or output.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  dest:
    description:
      - The snapshot file to write on the controller. Its directory must exist.
      - A file there that checks out as an etcd snapshot is kept (nothing is streamed) unless O(force=true).
      - Exactly one of O(dest) and O(directory) is required.
    type: path
  directory:
    description:
      - A backup directory on the controller (it must exist and take new files). Every run adds a snapshot named
        C(<prefix>-<YYYYmmddTHHMMSSZ>-r<revision>.snapshot).
    type: path
  prefix:
    description:
      - The start of the backup names in O(directory), usually the cluster's name; retention only ever touches files
        named C(<prefix>-<time>-r<revision>.snapshot).
    type: str
    default: etcd
  keep:
    description:
      - Keep only this many of the newest backups of O(prefix) in O(directory), the new one included.
    type: int
  max_age:
    description:
      - Remove the backups of O(prefix) in O(directory) older than this duration - as talosctl takes one (V(720h),
        V(1h30m)) or in days (V(30d)). The new backup is never removed.
    type: str
  source:
    description:
      - V(auto) takes the snapshot from a healthy follower (else the healthy leader) among the members O(node) lists.
      - V(node) takes it from the member of O(node) itself and asks nothing else, for a client with only the
        C(os:etcd:backup) role on Talos v1.10 and older.
    type: str
    choices: [auto, node]
    default: auto
  force:
    description:
      - With O(dest), take a new snapshot even when the file there checks out; the file is replaced when the new
        snapshot's bytes differ.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details:
      - Checks the destination and chooses the member, then finds out that the member can stream a snapshot - it opens
        the member's EtcdSnapshot stream, reads its first page, checks that it begins as an etcd database and closes
        the stream again. That is a read; nothing changes on the node and nothing is written. A member that cannot
        make a snapshot, or a talosconfig whose role may not take one, fails check mode as it would fail a run.
      - Reports the member and the backups the retention would remove.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: With O(dest) a second run keeps the file; with O(directory) every run adds a backup, by design.
notes:
  - Needs the C(os:etcd:backup) role or more; with O(source=auto) also the right to list members and read their
    status (C(os:etcd:backup) may on Talos v1.11 and newer, else C(os:reader)).
  - O(timeout) bounds each call, the snapshot stream included; raise it for a large database.
  - Restore a snapshot with M(talos_linux.talos.talos_etcd_restore) or the role C(talos_linux.talos.etcd_restore).
seealso:
  - module: talos_linux.talos.talos_etcd_restore
  - module: talos_linux.talos.talos_etcd_info
  - name: etcd backups and restore with this collection
    description: The runbook - back up, verify, restore, and the AWX schedule.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/etcd.md
"""

EXAMPLES = r"""
- name: Snapshot etcd into a file (kept when it is already there and good)
  talos_linux.talos.talos_etcd_snapshot:
    node: 10.5.0.2
    dest: /backups/etcd-before-upgrade.snapshot

- name: Nightly backup with retention
  talos_linux.talos.talos_etcd_snapshot:
    node: "{{ groups['controlplane'][0] }}"
    directory: /backups/etcd
    prefix: prod
    keep: 14
    max_age: 30d
  register: backup

- name: Show what was saved
  ansible.builtin.debug:
    msg: "{{ backup.dest }} (revision {{ backup.revision }}, sha256 {{ backup.sha256 }}) from {{ backup.member.hostname }}"
"""

RETURN = r"""
dest:
  description: Absolute path of the snapshot file (null in check mode with O(directory), whose name needs the revision).
  returned: always
  type: str
  sample: /backups/etcd/prod-20261127T020000Z-r48213.snapshot
size:
  description: Size of the snapshot file in bytes.
  returned: unless in check mode
  type: int
sha256:
  description: SHA-256 of the whole snapshot file, hexadecimal.
  returned: unless in check mode
  type: str
hash_appended:
  description: Whether the file ends with the sha256 etcd appends (always true for a snapshot this module takes).
  returned: unless in check mode
  type: bool
revision:
  description: The newest etcd revision the snapshot holds.
  returned: unless in check mode
  type: int
total_keys:
  description: How many keys the snapshot holds at its revision, as C(etcdutl snapshot status) counts them.
  returned: unless in check mode
  type: int
raft_index:
  description: The raft index the snapshot's data is consistent with (etcd's consistent index).
  returned: unless in check mode
  type: int
raft_term:
  description: The raft term stored with it.
  returned: unless in check mode
  type: int
storage_version:
  description:
    - The etcd storage version of the database (V(3.6.0), ...), as C(etcdutl snapshot status) shows it.
    - Empty when etcd had not recorded it yet; a new cluster records it a few seconds after it forms.
  returned: unless in check mode
  type: str
taken_at:
  description: When the stream started, UTC (RFC 3339).
  returned: when a snapshot was taken
  type: str
member:
  description: The member the snapshot comes (or would come) from; null when an existing file was kept.
  returned: always
  type: dict
  contains:
    id:
      description: Member ID, hex (null with O(source=node)).
      type: str
    hostname:
      description: Member name (the node's hostname), or the node's address with O(source=node).
      type: str
    node:
      description: The node the snapshot was streamed from.
      type: str
    leader:
      description: Whether that member led the cluster (null with O(source=node)).
      type: bool
etcd_version:
  description: The etcd version of that member (null when the client's role may not read it).
  returned: when a snapshot was taken
  type: str
talos_version:
  description: The Talos version of that node (null when the client's role may not read it).
  returned: when a snapshot was taken
  type: str
removed:
  description: Backups the retention removed (in check mode, would remove).
  returned: always
  type: list
  elements: str
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path"),
        directory=dict(type="path"),
        prefix=dict(type="str", default="etcd"),
        keep=dict(type="int"),
        max_age=dict(type="str"),
        source=dict(type="str", default="auto", choices=["auto", "node"]),
        force=dict(type="bool", default=False),
    ),
    ranges=dict(keep=(1, None)),
    mutually_exclusive=[("dest", "directory")],
    required_one_of=[("dest", "directory")],
    required_by=dict(keep=("directory",), max_age=("directory",)),
)


def run(task):
    params = task.params
    return etcd_snapshot.take(task.client, task.single_node("takes one snapshot"), dest=params["dest"],
                              directory=params["directory"], prefix=params["prefix"], source=params["source"],
                              force=params["force"], keep=params["keep"], max_age=params["max_age"],
                              check_mode=task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
