# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd membership changes (talos_etcd_member): member removal (leave, or by ID through any healthy control plane)
behind the quorum guard, leadership moves, and the wait for a member that joins until it votes."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.members import (
    HEALTH_PROBE_SECONDS,
    describe_ref,
    find_member,
    list_members,
    member_address,
    still_starting,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.status import (
    healthy_ids,
    leader_id,
    member_statuses,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.quorum import QuorumGuard

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None


class ClusterView:
    """The members as one control plane lists them, with each member's EtcdStatus."""

    def __init__(self, members, statuses):
        self.members = members
        self.statuses = statuses
        self.healthy_ids = healthy_ids(statuses)

    @classmethod
    def read(cls, client, node, probe_seconds):
        members = list_members(client, node)
        return cls(members, member_statuses(client, members, deadline=probe_seconds))

    def healthy(self, member):
        return member["id"] in self.healthy_ids

    def answers(self, member):
        return isinstance(self.statuses.get(member["id"]), dict)

    def is_voter(self, ref):
        member = find_member(self.members, ref)
        return member is not None and not member["is_learner"]

    def with_health(self):
        return [dict(member, healthy=self.healthy(member)) for member in self.members]

    def leader(self):
        leader = leader_id(self.statuses)
        if leader is None:
            return None
        member = find_member(self.members, leader)
        return {"id": leader, "hostname": member["hostname"] if member else None}

    def surviving_node(self, removed, fallback):
        """A healthy member's node other than ``removed``: the one to ask about the cluster after the removal."""
        for member in self.members:
            if member["id"] != removed["id"] and self.healthy(member):
                return member_address(member)
        return fallback


def manage_member(client, node, ref, state="present", method="auto", forfeit=False, force_quorum_loss=False,
                  probe_seconds=HEALTH_PROBE_SECONDS, wait_timeout=None, check_mode=False, warn=None, progress=None):
    """Make member ``ref`` (name or hex ID, or an int member ID) as asked, asking the cluster through ``node``;
    returns the task's result.

    ``state`` present waits (up to ``wait_timeout``; None checks once) until
    ``ref`` is a voting member; absent removes it (``method``), behind the
    quorum guard. ``forfeit`` first moves leadership away from it. In check
    mode nothing changes and a missing member only calls ``warn``. Only
    ``node`` has to answer for a removal by ``remove``: the member is found in
    its member list, so its own machine may be off.
    """
    if state == "present":
        try:
            view = ClusterView.read(client, node, probe_seconds)
        except TalosError as err:
            if not still_starting(err):
                raise
            view = ClusterView([], {})
        before = view.with_health()
        if not view.is_voter(ref) and await_voter(client, node, ref, wait_timeout, check_mode, warn, progress, probe_seconds):
            view = ClusterView.read(client, node, probe_seconds)
    else:
        view = ClusterView.read(client, node, probe_seconds)
        before = view.with_health()
    member = find_member(view.members, ref)
    result = {"changed": False, "member": member, "members_before": before}
    if member is not None and forfeit:
        result["changed"] = _forfeit(client, view, member, check_mode, result)
    if member is not None and state == "absent":
        _remove(client, node, view, member, method, force_quorum_loss, check_mode, result)
        result["changed"] = True

    if result["changed"] and check_mode:
        after = [m for m in before if state == "present" or m["id"] != member["id"]]
        result.update(members_after=after, leader=view.leader())
    else:
        if result["changed"]:
            view = ClusterView.read(client, view.surviving_node(member, node) if state == "absent" else node, probe_seconds)
        result.update(members_after=view.with_health(), leader=view.leader())
    result["diff"] = {"before": {"members": _names(before)}, "after": {"members": _names(result["members_after"])}}
    return result


def _names(members):
    return sorted(m["hostname"] or m["id"] for m in members)


def _forfeit(client, view, member, check_mode, result):
    """Move leadership away from ``member`` when it leads; True when it did (or would)."""
    leader = view.leader()
    if leader is None or leader["id"] != member["id"]:
        return False
    if len([m for m in view.members if not m["is_learner"]]) < 2:
        raise TalosError("etcd member %s cannot forfeit leadership: it is the only voting member, so there is no "
                         "member to hand leadership to." % member["hostname"])
    if not check_mode:
        items = client.call(rpc.ETCD_FORFEIT_LEADERSHIP, machine_pb2.EtcdForfeitLeadershipRequest(), node=member_address(member))
        result["new_leader"] = items[0].member if items else None
    return True


def _remove(client, node, view, member, method, force_quorum_loss, check_mode, result):
    """Remove ``member`` (``method`` auto, leave or remove) once the quorum guard lets it go.

    ``remove`` asks etcd through ``node`` (the task's control plane), or
    through another healthy member when ``node`` is the member itself.
    """
    name = member["hostname"] or member["id"]
    result.update(QuorumGuard(client, force_quorum_loss).let_member_go(
        view.members, view.statuses, member, "remove etcd member %s" % name, removal=True))
    if method == "auto":
        method = "leave" if view.answers(member) else "remove"
    if method == "leave" and not view.answers(member):
        raise TalosError("Cannot make etcd member %s leave: its node %s does not answer (%s); use method=remove to "
                         "remove it through another control plane." % (
                             name, member_address(member), str(view.statuses[member["id"]]).rstrip(".")))
    result["method"] = method
    if check_mode:
        return
    if method == "leave":
        client.call(rpc.ETCD_LEAVE_CLUSTER, machine_pb2.EtcdLeaveClusterRequest(), node=member_address(member))
        return
    through = node  # None: the endpoint itself
    if member_address(member) == node:
        through = view.surviving_node(member, None)
        if through is None:
            raise TalosError("Cannot remove etcd member %s: no other member is healthy to remove it through." % name)
    remove_member_by_id(client, through, int(member["id"], 16))


def remove_member_by_id(client, node, member_id):
    """EtcdRemoveMemberByID through ``node``; False when etcd no longer has the member (removed meanwhile)."""
    try:
        client.call(rpc.ETCD_REMOVE_MEMBER_BY_ID, machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id), node=node)
    except TalosError as err:
        if err.code == "NotFound":
            return False
        raise
    return True


class JoinProgress:
    """A poll of member ``ref`` on its way into the etcd cluster ``node`` belongs to (Seen, for a Waiter).

    The way is etcd's: not a member yet, a learner (added, then started), a
    learner catching up with the cluster - its applied raft index against
    the highest committed index of the voting members - and, once caught up,
    promoted to a voting member by its node's etcd service. A look that
    finds the member further on that way than ever before is ``advanced``, so
    that the wait gives up only once the member stopped moving. The members'
    statuses are probed as the quorum guard probes them (``probe_seconds``).
    """

    def __init__(self, client, node, ref, probe_seconds=HEALTH_PROBE_SECONDS):
        self.client = client
        self.node = node
        self.ref = ref
        self.probe_seconds = probe_seconds
        self.name = describe_ref(ref)
        self._furthest = None

    def __call__(self):
        try:
            members = list_members(self.client, self.node)
        except TalosError as err:
            if not still_starting(err):
                raise
            return Seen("no member list yet", detail=err.message)
        member = find_member(members, self.ref)
        if member is None:
            return self._seen((0, 0), "not a member", "%s is not a member (members: %s)"
                              % (self.name, ", ".join(m["hostname"] or m["id"] for m in members) or "none"))
        if not member["is_learner"]:
            return Seen("voting member", done=True, value=True, detail="%s is a voting member" % self.name)
        behind = self._entries_behind(members, member)
        if behind is None:
            return self._seen((1, 0), "learner", "%s is a learner whose node does not answer EtcdStatus yet" % self.name)
        if behind:
            # int(): the pylint of ansible-core 2.16's sanity does not narrow behind after the None check above.
            return self._seen((2, -int(behind)), "learner catching up", "%s is a learner %d raft entries behind the cluster"
                              % (self.name, behind))
        return self._seen((2, 0), "learner caught up", "%s is a learner that caught up with the cluster and has not "
                          "been promoted by its node's etcd service" % self.name)

    def _entries_behind(self, members, learner):
        """How many committed raft entries ``learner`` has not applied yet, or None while that cannot be told."""
        statuses = member_statuses(self.client, members, deadline=self.probe_seconds)
        committed = [statuses[member["id"]]["raft_index"] for member in members
                     if not member["is_learner"] and isinstance(statuses[member["id"]], dict)]
        if not committed or not isinstance(statuses[learner["id"]], dict):
            return None
        return max(0, max(committed) - statuses[learner["id"]]["raft_applied_index"])

    def _seen(self, rank, state, detail):
        advanced = self._furthest is None or rank > self._furthest
        if advanced:
            self._furthest = rank
        return Seen(state, detail=detail, advanced=advanced)


def await_voter(client, node, ref, wait_timeout, check_mode, warn, progress, probe_seconds=HEALTH_PROBE_SECONDS):
    """Wait until ``ref`` is a voting member, asking through ``node``; True once it is.

    The wait follows the member's progress (JoinProgress) and gives up only
    once it made none for ``wait_timeout`` seconds. Without a wait it checks
    once and fails when ``ref`` is not a voting member. In check mode it
    checks once and only warns, since the steps that would make the node
    join did not run.
    """
    poll = JoinProgress(client, node, ref, probe_seconds)
    if wait_timeout is not None and not check_mode:
        waiter = Waiter(wait_timeout, progress=progress)
        return waiter.until(poll, "%s to be a voting etcd member" % poll.name, poll.name)
    seen = poll()
    if seen.done:
        return True
    if check_mode:
        if warn:
            warn("etcd member %s is not a voting member yet (%s); check mode does not wait for it." % (poll.name, seen.detail))
        return False
    raise TalosError("etcd member check failed: %s." % seen.detail)
