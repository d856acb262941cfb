#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_etcd_member
short_description: Manage the etcd membership of Talos control-plane nodes
version_added: 0.1.0
description:
  - Removes a member from a Talos cluster's etcd, waits until a node has joined it, moves leadership away from a
    member and saves etcd snapshots, through the Talos etcd API (as C(talosctl etcd ...) does).
  - The node named by O(node) is the control plane the module asks about the cluster (EtcdMemberList, EtcdSnapshot).
    The health of every member is read with EtcdStatus from that member's own node, reached through the endpoint at
    the address of its etcd client URL.
  - The steps run in a fixed order, each only when requested - first O(snapshot), then O(forfeit_leadership), then O(state).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  member:
    description:
      - The etcd member to manage - its name (the node's hostname) or its member ID in hexadecimal as
        C(talosctl etcd members) prints it.
      - Defaults to the member of O(node) itself, found by its hostname.
    type: str
  state:
    description:
      - V(present) changes nothing; it waits until O(member) is a voting (non-learner) member, for up to
        O(wait_timeout) seconds. With O(wait=false) it checks once and fails when the member is not there. In check
        mode it checks once and only warns, since the tasks that would make the node join did not run either.
      - V(absent) removes O(member) from etcd. A member that is not there is left alone (no change).
        The removal is refused when it would cost the cluster its quorum, unless O(force=true) - removing a voting
        member from a cluster of N voting members leaves N-1, and etcd then needs (N-1)//2+1 of them to be healthy;
        the module counts the remaining voting members whose node answers EtcdStatus without errors and refuses when
        they are fewer. Removing a learner never affects quorum; removing the last member is always refused without
        O(force).
    type: str
    choices: [present, absent]
    default: present
  method:
    description:
      - How O(state=absent) removes the member.
      - V(leave) calls EtcdLeaveCluster on the member's own node, which also stops etcd there and empties its data
        directory, as a graceful reset does. The member's node must answer.
      - V(remove) calls EtcdRemoveMemberByID through another, healthy control plane. Meant for members whose node is
        gone; etcd keeps running on the removed node if it still exists.
      - V(auto) uses V(leave) when the member's node answers EtcdStatus, else V(remove).
    type: str
    choices: [auto, leave, remove]
    default: auto
  force:
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
  snapshot:
    description:
      - Path on the controller to save an etcd snapshot of O(node) to, before anything else happens.
      - The snapshot is streamed into a temporary file in the same directory and renamed to this path only when the
        stream is complete, with mode C(0600). An existing file with the same content is left alone.
      - In check mode the snapshot is read and compared but not written.
    type: path
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
  - EtcdLeaveCluster, EtcdRemoveMemberByID and EtcdForfeitLeadership need the C(os:admin) role; snapshots need
    C(os:admin), C(os:operator) or C(os:etcd:backup); reading members and status works with C(os:reader) too.
  - O(timeout) bounds each call (a snapshot stream included); O(wait_timeout) bounds the wait of O(state=present).
seealso:
  - module: talos_linux.talos.talos_bootstrap
"""

EXAMPLES = r"""
- name: Back up etcd before maintenance
  talos_linux.talos.talos_etcd_member:
    talosconfig: ./talosconfig
    node: 10.5.0.2
    snapshot: "./backups/etcd-{{ ansible_date_time.iso8601_basic_short }}.snapshot"

- name: Wait until a new control plane has joined etcd
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.2
    member: cp-4
    state: present
    wait_timeout: 900

- name: Remove the member of a control plane that is gone for good
  talos_linux.talos.talos_etcd_member:
    node: 10.5.0.2
    member: cp-3
    state: absent
    method: remove

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
      description: True when the member's node answered EtcdStatus without etcd errors.
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
snapshot:
  description: The saved snapshot.
  returned: when O(snapshot) is set
  type: dict
  contains:
    path:
      description: Absolute path of the snapshot file.
      type: str
    size:
      description: Size of the snapshot in bytes.
      type: int
    sha256:
      description: SHA-256 of the snapshot, hexadecimal.
      type: str
    changed:
      description: True when the file was (or, in check mode, would be) written.
      type: bool
"""

from ansible_collections.talos_linux.talos.plugins.module_utils import etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule
from ansible_collections.talos_linux.talos.plugins.module_utils.waiters import is_transient, wait_until

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

LEAVE = "machine.MachineService/EtcdLeaveCluster"
REMOVE = "machine.MachineService/EtcdRemoveMemberByID"
FORFEIT = "machine.MachineService/EtcdForfeitLeadership"
# A member whose node does not answer EtcdStatus within this many seconds
# (or the timeout option, when shorter) counts as unhealthy.
HEALTH_PROBE_SECONDS = 10


def describe(node):
    return "node %s" % node if node else "the endpoint"


class ClusterView:
    """The members as one control plane lists them, with each member's EtcdStatus."""

    def __init__(self, members, statuses):
        self.members = members
        self.statuses = statuses

    @classmethod
    def read(cls, client, node, probe_seconds):
        members = etcd.list_members(client, node)
        return cls(members, etcd.member_statuses(client, members, deadline=probe_seconds))

    def healthy(self, member):
        return etcd.is_healthy(self.statuses.get(member["id"]))

    def answers(self, member):
        return isinstance(self.statuses.get(member["id"]), dict)

    def with_health(self):
        return [dict(member, healthy=self.healthy(member)) for member in self.members]

    def leader(self):
        leader_id = etcd.leader_id(self.statuses)
        if leader_id is None:
            return None
        member = etcd.find_member(self.members, leader_id)
        return {"id": leader_id, "hostname": member["hostname"] if member else None}


def forfeit(module, client, view, member, result):
    """Move leadership away from ``member`` when it leads; True when it did (or would)."""
    leader = view.leader()
    if leader is None or leader["id"] != member["id"]:
        return False
    voters = [m for m in view.members if not m["is_learner"]]
    if len(voters) < 2:
        raise TalosError("etcd member %s cannot forfeit leadership: it is the only voting member, so there is no "
                         "member to hand leadership to." % member["hostname"])
    if not module.check_mode:
        address = etcd.member_address(member)
        items = client.call(FORFEIT, machine_pb2.EtcdForfeitLeadershipRequest(), node=address)
        result["new_leader"] = items[0].member if items else None
    return True


def remove(module, client, view, member, result):
    """Remove ``member`` unless that breaks quorum (without force); True when it did (or would)."""
    check = etcd.removal_check(view.members, view.statuses, member)
    result["quorum"] = check
    if not check["safe"] and not module.params["force"]:
        unhealthy = (" (not healthy: %s)" % ", ".join(check["unhealthy"])) if check["unhealthy"] else ""
        raise TalosError(
            "Refusing to remove etcd member %s: %d voting members would remain, etcd needs %d of them healthy for "
            "quorum, but only %d are healthy%s; fix the unhealthy members first or set force=true to remove it anyway."
            % (member["hostname"] or member["id"], check["voters_after"], check["quorum_after"], check["healthy_after"], unhealthy))

    method = module.params["method"]
    if method == "auto":
        method = "leave" if view.answers(member) else "remove"
    if method == "leave" and not view.answers(member):
        raise TalosError("Cannot make etcd member %s leave: its node %s does not answer (%s); use method=remove to "
                         "remove it through another control plane." % (
                             member["hostname"], etcd.member_address(member), str(view.statuses[member["id"]]).rstrip(".")))
    result["method"] = method
    if module.check_mode:
        return True
    if method == "leave":
        client.call(LEAVE, machine_pb2.EtcdLeaveClusterRequest(), node=etcd.member_address(member))
    else:
        through = surviving_node(view, member, None)
        if through is None:
            raise TalosError("Cannot remove etcd member %s: no other member is healthy to remove it through."
                             % member["hostname"])
        try:
            client.call(REMOVE, machine_pb2.EtcdRemoveMemberByIDRequest(member_id=int(member["id"], 16)), node=through)
        except TalosError as err:
            if err.code != "NotFound":  # removed meanwhile
                raise
    return True


def wait_for_member(module, client, node, ref):
    """Wait up to wait_timeout until ``ref`` is a voting member; True once it is.

    Without wait it checks once and fails when ``ref`` is not a voting member.
    In check mode (where the wait options do not apply) it checks once and
    only warns, since the steps that would make the node join did not run.
    """
    def joined():
        try:
            members = etcd.list_members(client, node)
        except TalosError as err:
            if not is_transient(err) and err.code not in ("FailedPrecondition", "Unknown"):
                raise
            return False, err.message
        member = etcd.find_member(members, ref)
        if member is None:
            return False, "%s is not a member (members: %s)" % (ref, ", ".join(m["hostname"] or m["id"] for m in members) or "none")
        if member["is_learner"]:
            return False, "%s is still a learner" % ref
        return True, "%s is a voting member" % ref

    if module.params["wait"] and not module.check_mode:
        wait_until(joined, timeout=module.params["wait_timeout"], description="%s to be a voting etcd member" % ref)
        return True
    done, observed = joined()
    if done:
        return True
    if module.check_mode:
        module.warn("etcd member %s is not a voting member yet (%s); check mode does not wait for it." % (ref, observed))
        return False
    raise TalosError("etcd member check failed: %s." % observed)


def run(module):
    params = module.params
    client = module.client
    node = module.single_node("talks to one control-plane node")
    ref = params["member"] or etcd.own_member_name(client, node)
    probe = min(HEALTH_PROBE_SECONDS, params["timeout"])
    result = {"changed": False}

    if params["snapshot"]:
        result["snapshot"] = etcd.save_snapshot(client, node, params["snapshot"], check_mode=module.check_mode)
        result["changed"] = result["snapshot"]["changed"]

    if params["state"] == "present":
        try:
            view = ClusterView.read(client, node, probe)
        except TalosError as err:
            if not is_transient(err) and err.code not in ("FailedPrecondition", "Unknown"):
                raise
            view = ClusterView([], {})
        members_before = view.with_health()
        if not _is_voter(view.members, ref) and wait_for_member(module, client, node, ref):
            view = ClusterView.read(client, node, probe)
    else:
        view = ClusterView.read(client, node, probe)
        members_before = view.with_health()
    member = etcd.find_member(view.members, ref)
    result.update(member=member, members_before=members_before)

    acted = False
    if member is not None and params["forfeit_leadership"]:
        acted = forfeit(module, client, view, member, result) or acted
    if member is not None and params["state"] == "absent":
        acted = remove(module, client, view, member, result) or acted
    result["changed"] = result["changed"] or acted

    if acted and module.check_mode:
        after = [m for m in members_before if params["state"] == "present" or m["id"] != member["id"]]
        result.update(members_after=after, leader=view.leader())
    elif acted:
        view_after = ClusterView.read(client, surviving_node(view, member, node) if params["state"] == "absent" else node, probe)
        result.update(members_after=view_after.with_health(), leader=view_after.leader())
    else:
        result.update(members_after=view.with_health(), leader=view.leader())
    result["diff"] = {
        "before": {"members": sorted(m["hostname"] or m["id"] for m in members_before)},
        "after": {"members": sorted(m["hostname"] or m["id"] for m in result["members_after"])},
    }
    module.exit_json(**result)


def surviving_node(view, removed, fallback):
    """A healthy member's node other than ``removed``: the one to ask about the cluster after the removal."""
    for member in view.members:
        if member["id"] != removed["id"] and view.healthy(member):
            return etcd.member_address(member)
    return fallback


def _is_voter(members, ref):
    member = etcd.find_member(members, ref)
    return member is not None and not member["is_learner"]


def main():
    module = TalosModule(
        argument_spec=dict(
            member=dict(type="str"),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            method=dict(type="str", default="auto", choices=["auto", "leave", "remove"]),
            force=dict(type="bool", default=False),
            forfeit_leadership=dict(type="bool", default=False),
            snapshot=dict(type="path"),
        ),
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
