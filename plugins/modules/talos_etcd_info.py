#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_info
short_description: Read the health of a Talos cluster's etcd - members, status and alarms
version_added: 1.0.0
description:
  - Reads what C(talosctl etcd members), C(talosctl etcd status) and C(talosctl etcd alarm list) show - the members
    (EtcdMemberList), the status of the member of every targeted node (EtcdStatus - database size and the part in use,
    leader, raft index, term and applied index, protocol version, errors) and the cluster's alarms (EtcdAlarmList).
  - Target the control planes with O(nodes) to see the status of each member; the members and the alarms come from
    the first node that answers.
  - A node that does not answer EtcdStatus (powered off, unreachable) gets a status entry with its error in
    C(errors) and the other fields null, and a warning; the task fails only when no node answers.
  - Read-only; never changes a node.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options: {}
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Needs the C(os:reader) role or more (C(os:etcd:backup) also may read on Talos v1.11 and newer). Workers run no
    etcd and answer that the API is only available on control planes.
  - The database size of a member shrinks only when it is defragmented
    (M(talos_linux.talos.talos_etcd_maintenance)); a NOSPACE alarm stays until it is disarmed.
seealso:
  - module: talos_linux.talos.talos_etcd_maintenance
  - module: talos_linux.talos.talos_etcd_member
  - name: etcd on Talos with this collection
    description: Members, quorum, snapshots and scheduled maintenance.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/etcd.md
"""

EXAMPLES = r"""
- name: Read the etcd health of every control plane
  talos_linux.talos.talos_etcd_info:
    nodes: [10.5.0.2, 10.5.0.3, 10.5.0.4]
  register: etcd

- name: Fail when a member reports an alarm or an error
  ansible.builtin.assert:
    that:
      - etcd.alarms | length == 0
      - etcd.status | map(attribute='errors') | flatten | length == 0
"""

RETURN = r"""
members:
  description: The etcd members, as the first node that answers lists them.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The member ID, 16 hexadecimal digits as C(talosctl etcd members) prints it.
      type: str
      sample: 8e9e05c52164694d
    hostname:
      description: The member name (the node's hostname); empty for a member that has never started.
      type: str
      sample: cp-1
    peer_urls:
      description: The member's peer URLs.
      type: list
      elements: str
    client_urls:
      description: The member's client URLs.
      type: list
      elements: str
    is_learner:
      description: True while the member is a learner.
      type: bool
status:
  description: The status of the member of each targeted node, in the order of the nodes.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node (null when the endpoint answered for itself).
      type: str
    member_id:
      description: The ID of the node's member, in hexadecimal; null when the node did not answer.
      type: str
    db_size:
      description: Size of the member's database file in bytes.
      type: int
    db_size_in_use:
      description: Bytes of the database file in use; the rest is given back by a defragmentation.
      type: int
    leader:
      description: The ID of the leader the member follows, in hexadecimal; null when it knows none.
      type: str
    raft_index:
      description: The member's raft index.
      type: int
    raft_term:
      description: The member's raft term.
      type: int
    raft_applied_index:
      description: The raft index the member has applied.
      type: int
    protocol_version:
      description: The etcd version the member runs.
      type: str
      sample: 3.6.5
    is_learner:
      description: True while the member is a learner.
      type: bool
    storage_version:
      description: The member's storage version.
      type: str
    errors:
      description:
        - "The errors of the member: its own (C(etcdserver: no leader)) and the alarms that name it, written
          C(memberID:<decimal member ID> alarm:NOSPACE) with one space; or why the node did not answer."
        - etcd lists every alarm of the cluster in every member's status; each is shown here once, in the entry of the
          member it names (RV(alarms) lists them all, including those of members whose node was not targeted).
      type: list
      elements: str
  sample:
    - {node: 10.5.0.2, member_id: 8e9e05c52164694d, db_size: 20971520, db_size_in_use: 8388608,
       leader: 8e9e05c52164694d, raft_index: 3108, raft_term: 2, raft_applied_index: 3108, protocol_version: 3.6.5,
       is_learner: false, storage_version: 3.6.0, errors: []}
alarms:
  description: The alarms of the cluster's etcd.
  returned: always
  type: list
  elements: dict
  contains:
    member_id:
      description: The member that raised the alarm, in hexadecimal.
      type: str
    alarm:
      description: V(NOSPACE) (the database reached its quota; etcd accepts no more writes) or V(CORRUPT).
      type: str
  sample: [{member_id: 8e9e05c52164694d, alarm: NOSPACE}]
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import status as etcd_status
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(argument_spec=dict())


def run(task):
    info = etcd_status.read_info(task.client, task.target_nodes, warn=task.warn)
    return dict(changed=False, **info)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
