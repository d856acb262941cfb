#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_restore
short_description: Rebuild a Talos cluster's etcd from a snapshot when the control planes lost it
version_added: 1.0.0
description:
  - Talos's etcd disaster recovery as one task, for the day every control plane lost etcd (or quorum). The control
    planes are O(nodes).
  - The snapshot is checked first, as etcd's restore checks it (the sha256 etcd appends, the database itself), before
    any node is touched.
  - Then every control plane's etcd is read. While etcd still has quorum the task refuses - a restore rolls the whole
    cluster back in time to the snapshot - unless O(allow_quorum=true). Check mode does not refuse - it verifies a
    backup on a healthy cluster, and its plan says first that a run would be refused.
  - The control planes whose etcd still holds data are wiped (Reset of the EPHEMERAL volume, not graceful, then
    reboot), so that their etcd waits to join. The snapshot is uploaded to O(bootstrap_node) (EtcdRecover) and etcd
    bootstrapped from it (Bootstrap with C(recover_etcd)), as C(talosctl bootstrap --recover-from) does; the task
    waits for its one-member cluster, then until every other control plane has joined as a voting member.
  - A record of the restore (the snapshot's sha256 and the member that bootstrapped from it) is written on the
    controller (O(record)). A rerun finds the cluster restored from this snapshot and changes nothing, or continues
    where a failed run stopped - every failure says at which step, on which node, and what state etcd is in.
  - Control planes that do not answer are left out with a warning; wipe their EPHEMERAL volume when they are back.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  snapshot:
    description:
      - The snapshot file on the controller, as M(talos_linux.talos.talos_etcd_snapshot) writes it.
      - Exactly one of O(snapshot) and O(directory) is required.
    type: path
  directory:
    description:
      - A backup directory on the controller, as M(talos_linux.talos.talos_etcd_snapshot) fills it; the newest
        backup of O(prefix) that checks out is restored (newer ones that do not are named in warnings).
    type: path
  prefix:
    description:
      - The start of the backup names in O(directory).
    type: str
    default: etcd
  skip_hash_check:
    description:
      - Accept a file without the sha256 etcd appends to snapshots - a copy of a data directory's C(member/snap/db)
        (Talos's C(recover_skip_hash_check)). Its content cannot be verified then; only its structure is.
    type: bool
    default: false
  allow_quorum:
    description:
      - Restore even while etcd still has quorum - wiping etcd on every control plane and rolling the cluster back to
        the snapshot. Without it such a restore is refused.
    type: bool
    default: false
  bootstrap_node:
    description:
      - The control plane (one of O(nodes)) that bootstraps etcd from the snapshot; the first that answers by default.
    type: str
  record:
    description:
      - The file on the controller where the restore is recorded, so that a rerun knows the cluster's etcd is this
        snapshot's restore. Defaults to the snapshot's path with C(.restored.json) appended.
    type: path
  wait_timeout:
    description:
      - Seconds each wait may take - a node's reboot after the wipe, the restored member.
      - A control plane's join is waited for as long as its member makes progress - added as a learner, catching up
        with the restored member's raft log, promoted - and given up once it made none for this many seconds.
    type: int
    default: 600
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details:
      - Checks the snapshot, reads etcd on every control plane and returns the plan; nothing is sent.
      - Needs no O(allow_quorum) - verifying a backup on a healthy cluster is check mode's purpose. While etcd has quorum
        the plan starts with the refusal a run without O(allow_quorum=true) would meet, then lists the steps a run with
        it would take; C(changed) is then false, since such a run changes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A rerun after a restore from the same snapshot finds it recorded and changes nothing.
notes:
  - Needs the C(os:admin) role (Reset, EtcdRecover, Bootstrap).
seealso:
  - module: talos_linux.talos.talos_etcd_snapshot
  - module: talos_linux.talos.talos_bootstrap
  - name: etcd backups and restore with this collection
    description: The runbook - back up, verify, restore, and the AWX schedule.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/etcd.md
"""

EXAMPLES = r"""
- name: Restore etcd from last night's backup
  talos_linux.talos.talos_etcd_restore:
    nodes: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"
    snapshot: /backups/etcd/prod-20261127T020000Z-r48213.snapshot
  run_once: true

- name: Show the plan of a restore from the newest good backup of a directory
  talos_linux.talos.talos_etcd_restore:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
    directory: /backups/etcd
    prefix: prod
  check_mode: true
  register: plan
"""

RETURN = r"""
snapshot:
  description: The snapshot restored (or to restore) - C(path), C(sha256), C(revision), C(size).
  returned: always
  type: dict
plan:
  description:
    - The steps still to come when the task started, as sentences.
    - In check mode while etcd has quorum and O(allow_quorum) is false, the first says that a run would be refused.
  returned: always
  type: list
  elements: str
  sample: ["wipe etcd on 10.5.0.3 (reset of EPHEMERAL, not graceful, reboot)",
           "upload the snapshot (revision 48213) to 10.5.0.2 and bootstrap etcd from it"]
bootstrap_node:
  description: The control plane that bootstraps etcd from the snapshot.
  returned: always
  type: str
wiped:
  description: The control planes whose etcd was (in check mode, would be) wiped.
  returned: always
  type: list
  elements: str
joined:
  description: The other control planes that joined the restored etcd (in check mode, would join).
  returned: always
  type: list
  elements: str
left_out:
  description: Control planes that did not answer and were left out of the restore.
  returned: always
  type: list
  elements: str
record:
  description: The record file of the restore on the controller.
  returned: always
  type: str
members:
  description: The etcd members after the restore.
  returned: unless in check mode
  type: list
  elements: dict
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import recovery as etcd_recovery
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        snapshot=dict(type="path"),
        directory=dict(type="path"),
        prefix=dict(type="str", default="etcd"),
        skip_hash_check=dict(type="bool", default=False),
        allow_quorum=dict(type="bool", default=False),
        bootstrap_node=dict(type="str"),
        record=dict(type="path"),
    ),
    wait="timeout",
    host_node=False,
    mutually_exclusive=[("snapshot", "directory")],
    required_one_of=[("snapshot", "directory")],
)


def run(task):
    params = task.params
    if task.target_nodes == [None]:
        raise TalosConfigError("Set nodes to the cluster's control planes: the restore wipes, bootstraps and joins each of them.")
    return etcd_recovery.restore(task.client, task.target_nodes, snapshot=params["snapshot"], directory=params["directory"],
                                 prefix=params["prefix"], skip_hash_check=params["skip_hash_check"],
                                 allow_quorum=params["allow_quorum"], bootstrap_node=params["bootstrap_node"],
                                 record=params["record"], wait_timeout=params["wait_timeout"], check_mode=task.check_mode,
                                 warn=task.warn, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
