#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_maintenance
short_description: Defragment a Talos cluster's etcd and disarm its alarms
version_added: 1.0.0
description:
  - The routine maintenance of etcd that C(talosctl etcd defrag) and C(talosctl etcd alarm disarm) do, made safe to
    schedule - defragments the members of the targeted nodes one at a time, never two at once, the leader last, and
    disarms the cluster's alarms (a NOSPACE alarm stops every write until it is disarmed).
  - O(defragment_min_free_ratio) defragments only the members whose database has at least that share of free space -
    (db_size - db_size_in_use) / db_size as EtcdStatus reports it; a member with less is left alone.
  - The defragmentations run first, then the alarms are disarmed - after a NOSPACE alarm the space has to be given
    back before etcd accepts writes again.
  - Reports a change only when something ran (or, in check mode, would run).
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  defragment:
    description:
      - Defragment the etcd member of each targeted node (O(nodes), the control planes), one at a time and the leader
        last. A defragmentation blocks its member while it rewrites the database - reads and writes it serves wait -
        so the members are never defragmented together.
      - Every targeted node must answer EtcdStatus first, else nothing is defragmented. A defragmentation that fails
        ends the task; the members after it are left alone.
    type: bool
    default: false
  defragment_min_free_ratio:
    description:
      - Defragment only members whose free share of the database, (db_size - db_size_in_use) / db_size, is at least
        this ratio (V(0.0) to V(1.0)). V(0.0) defragments every member; V(0.5) only those whose file is at least half
        free space.
    type: float
    default: 0.0
  disarm_alarms:
    description:
      - Disarm the alarms of the cluster's etcd (EtcdAlarmList then EtcdAlarmDisarm on the first targeted node;
        etcd keeps one list for the whole cluster). Reports a change only when there were alarms.
      - Disarm a NOSPACE alarm only once space was given back (O(defragment=true) runs first) or the quota raised,
        else etcd raises it again at the next write.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Reads the status and the alarms and returns what would run in RV(members) and RV(alarms); nothing runs.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - Disarming reports a change only when there were alarms.
      - A defragmentation runs again on every run whose member reaches O(defragment_min_free_ratio); with V(0.0) that
        is every run. Set a ratio to skip members with little free space.
notes:
  - EtcdDefragment and EtcdAlarmDisarm need the C(os:admin) or C(os:operator) role; reading the status and the
    alarms works with C(os:reader) too.
  - O(timeout) bounds each call, a defragmentation included; raise it for large databases (etcd rewrites the whole
    file).
seealso:
  - module: talos_linux.talos.talos_etcd_info
  - module: talos_linux.talos.talos_etcd_member
  - name: etcd on Talos with this collection
    description: Members, quorum, snapshots and scheduled maintenance (AWX schedule, cron).
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/etcd.md
"""

EXAMPLES = r"""
- name: Defragment the control planes whose etcd database is at least 30 % free, then disarm the alarms
  talos_linux.talos.talos_etcd_maintenance:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
    defragment: true
    defragment_min_free_ratio: 0.3
    disarm_alarms: true
    timeout: 300

- name: See what would be defragmented
  talos_linux.talos.talos_etcd_maintenance:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
    defragment: true
  check_mode: true
  register: plan
"""

RETURN = r"""
members:
  description:
    - The member of each targeted node, in the order they were (or would be) defragmented - the leader last.
    - Empty without O(defragment).
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node (null when the endpoint answered for itself).
      type: str
    member_id:
      description: The node's member ID in hexadecimal.
      type: str
    leader:
      description: True for the leader's member.
      type: bool
    db_size:
      description: The database size before, in bytes.
      type: int
    db_size_in_use:
      description: The bytes in use before.
      type: int
    free_ratio:
      description: (db_size - db_size_in_use) / db_size before.
      type: float
    selected:
      description: True when the member reaches O(defragment_min_free_ratio) and is (or, in check mode, would be)
        defragmented.
      type: bool
    defragmented:
      description: True once the member was defragmented (always false in check mode).
      type: bool
    db_size_after:
      description: The database size after the defragmentation; null when none ran.
      type: int
  sample:
    - {node: 10.5.0.3, member_id: 5f1c2a7b9d3e4f60, leader: false, db_size: 104857600, db_size_in_use: 31457280,
       free_ratio: 0.7, selected: true, defragmented: true, db_size_after: 31457280}
defragmented:
  description: The nodes whose member was defragmented, in order.
  returned: always
  type: list
  elements: str
alarms:
  description: The alarms found before disarming (empty without O(disarm_alarms)).
  returned: always
  type: list
  elements: dict
  contains:
    member_id:
      description: The member that raised the alarm, in hexadecimal.
      type: str
    alarm:
      description: V(NOSPACE) or V(CORRUPT).
      type: str
alarms_disarmed:
  description: The alarms etcd reported as disarmed (empty in check mode).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import maintenance as etcd_maintenance
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        defragment=dict(type="bool", default=False),
        defragment_min_free_ratio=dict(type="float", default=0.0),
        disarm_alarms=dict(type="bool", default=False),
    ),
    ranges=dict(defragment_min_free_ratio=(0.0, 1.0)),
)


def run(task):
    params = task.params
    if not (params["defragment"] or params["disarm_alarms"]):
        task.warn("Neither defragment nor disarm_alarms is set: nothing to do.")
    return etcd_maintenance.maintain(task.client, task.target_nodes, defragment=params["defragment"],
                                     min_free_ratio=params["defragment_min_free_ratio"], disarm_alarms=params["disarm_alarms"],
                                     check_mode=task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
