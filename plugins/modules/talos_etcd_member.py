#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_member
short_description: Manage the etcd membership of Talos control-plane nodes
version_added: 1.0.0
description:
  - Removes a member from a Talos cluster's etcd, waits until a node has joined it and moves leadership away from a
    member, through the Talos etcd API (as C(talosctl etcd ...) does).
  - The node named by O(node) is the control plane the module asks about the cluster (EtcdMemberList).
    The health of every member is read with EtcdStatus from that member's own node, reached through the endpoint at
    the address of its etcd client URL.
  - The steps run in a fixed order, each only when requested - first O(forfeit_leadership), then O(state).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  member:
    description:
      - The etcd member to manage - its name (the node's hostname) or its member ID in hexadecimal as
        C(talosctl etcd members) prints it.
      - Defaults to the member of O(node) itself, found by its hostname.
      - The member is looked up in the member list of O(node), so a member whose machine is off (or gone) can be
        named by its hostname too.
    type: str
  member_id:
    description:
      - The etcd member to manage, by its member ID - a string is the ID in hexadecimal as C(talosctl etcd members)
        prints it (an optional C(0x) prefix is allowed), an integer is the ID in decimal.
      - Quote a hexadecimal ID that has only digits (V("1234")), or YAML reads it as a decimal integer.
      - With O(state=absent), O(method=auto) removes the member with EtcdRemoveMemberByID through O(node), as
        O(method=remove) does; a member that is not there any more is left alone.
      - Mutually exclusive with O(member).
    type: raw
  state:
    description:
      - V(present) changes nothing; it waits until O(member) is a voting (non-learner) member. The wait follows the
        member's way in - added as a learner, catching up with the cluster's raft log, promoted - and gives up only
        once the member made no progress for O(wait_timeout) seconds. With O(wait=false) it checks once and fails when
        the member is not there. In check mode it checks once and only warns, since the tasks that would make the node
        join did not run either.
      - V(absent) removes O(member) from etcd. A member that is not there is left alone (no change).
        The removal passes the etcd quorum guard first - removing a voting member from a cluster of N voting members
        leaves N-1, and etcd then needs (N-1)//2+1 of them to be healthy; the module counts the remaining voting
        members that are healthy (their node answers EtcdStatus without etcd errors of its own, and no alarm names
        them) and refuses when they are fewer, unless O(force_quorum_loss=true). Removing a learner never affects
        quorum; the last voting member is never removed, whatever O(force_quorum_loss) says.
    type: str
    choices: [present, absent]
    default: present
  method:
    description:
      - How O(state=absent) removes the member.
      - V(leave) calls EtcdLeaveCluster on the member's own node, which also stops etcd there and empties its data
        directory, as a graceful reset does. The member's node must answer.
      - V(remove) calls EtcdRemoveMemberByID through O(node) (through another healthy control plane when O(node) is
        the member's own node). Meant for members whose node is off or gone - only O(node) has to answer; etcd keeps
        running on the removed node if it still exists.
      - V(auto) uses V(leave) when the member's node answers EtcdStatus, else V(remove); with O(member_id) always
        V(remove).
    type: str
    choices: [auto, leave, remove]
    default: auto
  force_quorum_loss:
    description:
      - Remove the member even when the remaining healthy members would lose quorum.
    type: bool
    default: false
  forfeit_leadership:
    description:
      - When O(member) is the etcd leader, make it hand leadership to another member (EtcdForfeitLeadership on its
        node) and report the new leader. Nothing changes when it is not the leader. Useful before maintenance of
        that node.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Decisions come from EtcdMemberList and EtcdStatus; no member is removed and no leadership moves.
  diff_mode:
    support: full
    details: Shows the member names before and after.
  idempotent:
    support: full
    details: A second run finds the member already absent or not the leader and changes nothing.
notes:
  - EtcdLeaveCluster, EtcdRemoveMemberByID and EtcdForfeitLeadership need the C(os:admin) role; reading members and
    status works with C(os:reader) too.
  - O(timeout) bounds each call; O(wait_timeout) is how long the wait of
    O(state=present) lets the joining member make no progress.
seealso:
  - module: talos_linux.talos.talos_bootstrap
  - module: talos_linux.talos.talos_etcd_snapshot
"""

EXAMPLES = r"""
- name: Wait until a new control plane has joined etcd
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.2
    member: cp-4
    state: present
    wait_timeout: 900

- name: Remove the member of a control plane that is gone for good (its machine may be off)
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.2
    member: cp-3
    state: absent
    method: remove

- name: Remove a member by the ID talosctl etcd members prints
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.2
    member_id: 8e9e05c52164694d
    state: absent

- name: Move etcd leadership away from a node before rebooting it
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.3
    forfeit_leadership: true
"""

RETURN = r"""
member:
  description: The managed member as it was found (see RV(members_before) for its fields), null when it is not a member.
  returned: always
  type: dict
  sample: {"id": "8e9e05c52164694d", "hostname": "cp-3", "is_learner": false,
           "peer_urls": ["https://10.5.0.4:2380"], "client_urls": ["https://10.5.0.4:2379"]}
members_before:
  description: The etcd members before the task.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The member ID, 16 hexadecimal digits.
      type: str
      sample: 8e9e05c52164694d
    hostname:
      description: The member name (the node's hostname).
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
    healthy:
      description:
        - True when the member's node answered EtcdStatus without etcd errors of its own and no alarm names the member.
        - etcd lists every alarm of the cluster in every member's status; an alarm counts only against the member it
          names.
      type: bool
members_after:
  description:
    - The etcd members after the task, with the same fields as RV(members_before).
    - In check mode, the members the task would leave.
  returned: always
  type: list
  elements: dict
leader:
  description: The etcd leader after the task, null when no healthy member reports one.
  returned: always
  type: dict
  sample: {"id": "5f1c2a7b9d3e4f60", "hostname": "cp-1"}
new_leader:
  description: The member that took over leadership after O(forfeit_leadership) moved it.
  returned: when leadership moved
  type: str
  sample: cp-2
method:
  description: How the member was removed, V(leave) or V(remove).
  returned: when a member was removed (or would be, in check mode)
  type: str
  sample: leave
etcd_gate_open:
  description:
    - Whether the etcd quorum guard lets the member go - false when the remaining members would lose quorum (the
      task then fails, unless O(force_quorum_loss=true)).
  returned: when O(state=absent) and the member exists
  type: bool
  sample: true
quorum:
  description: The quorum check made before a removal.
  returned: when O(state=absent) and the member exists
  type: dict
  contains:
    safe:
      description: True when the remaining healthy members keep quorum.
      type: bool
    voters_after:
      description: Voting members left after the removal.
      type: int
    quorum_after:
      description: Healthy voting members etcd needs after the removal.
      type: int
    healthy_after:
      description: Healthy voting members left after the removal.
      type: int
    unhealthy:
      description: Names of the remaining voting members that are not healthy.
      type: list
      elements: str
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        member=dict(type="str"),
        member_id=dict(type="raw"),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        method=dict(type="str", default="auto", choices=["auto", "leave", "remove"]),
        force_quorum_loss=dict(type="bool", default=False),
        forfeit_leadership=dict(type="bool", default=False),
    ),
    wait=True,
    mutually_exclusive=[("member", "member_id")],
)


def run(task):
    params = task.params
    client = task.client
    node = task.single_node("talks to one control-plane node")
    method = params["method"]
    if params["member_id"] is not None:
        ref = etcd.member_id_option(params["member_id"])
        method = "remove" if method == "auto" else method
    else:
        ref = params["member"] or etcd.own_member_name(client, node)
    return etcd_membership.manage_member(client, node, ref, params["state"], method,
                                         forfeit=params["forfeit_leadership"], force_quorum_loss=params["force_quorum_loss"],
                                         probe_seconds=min(etcd.HEALTH_PROBE_SECONDS, params["timeout"]),
                                         wait_timeout=params["wait_timeout"] if params["wait"] else None,
                                         check_mode=task.check_mode, warn=task.warn, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
