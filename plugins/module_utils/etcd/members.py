# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd on Talos: members, quorum, the quorum guard, membership changes, maintenance, bootstrap.

Member lookup, quorum arithmetic, leader detection, the one etcd quorum guard
every module passes before a control plane goes down or leaves etcd, member
removal and leadership moves, the wait for a member that joins, the
cluster's etcd health (status, alarms) and its maintenance
(defragmentation, alarm disarm), bootstrap and recovery, on top of the Talos
etcd RPCs (EtcdMemberList, EtcdStatus, EtcdAlarmList, EtcdAlarmDisarm,
EtcdDefragment, EtcdLeaveCluster, EtcdRemoveMemberByID,
EtcdForfeitLeadership, Bootstrap, EtcdRecover). Snapshots are
etcd_snapshot's.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
from urllib.parse import urlparse

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConfigError,
    TalosError,
    TalosUnimplementedError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter, is_transient

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

MEMBER_LIST = "machine.MachineService/EtcdMemberList"
STATUS = "machine.MachineService/EtcdStatus"
SNAPSHOT = "machine.MachineService/EtcdSnapshot"
LEAVE = "machine.MachineService/EtcdLeaveCluster"
REMOVE = "machine.MachineService/EtcdRemoveMemberByID"
FORFEIT = "machine.MachineService/EtcdForfeitLeadership"
BOOTSTRAP = "machine.MachineService/Bootstrap"
RECOVER = "machine.MachineService/EtcdRecover"
ALARM_LIST = "machine.MachineService/EtcdAlarmList"
ALARM_DISARM = "machine.MachineService/EtcdAlarmDisarm"
DEFRAGMENT = "machine.MachineService/EtcdDefragment"

# A member whose node does not answer EtcdStatus within this many seconds
# (or the task's timeout, when shorter) counts as unhealthy.
HEALTH_PROBE_SECONDS = 10

# Answers of a node that is not ready for bootstrap yet, as talosctl's cluster helper retries them.
BOOTSTRAP_RETRY_CODES = ("FailedPrecondition", "Unavailable", "DeadlineExceeded", "Canceled")

# EtcdRecover takes the snapshot as a stream of common.Data messages.
UPLOAD_CHUNK_SIZE = 1024 * 1024

_MEMBER_ID = re.compile(r"^[0-9a-fA-F]{1,16}$")
# An alarm among a status's errors: etcd's AlarmMember in protobuf text (see parse_alarm).
_ALARM_TEXT = re.compile(r"^\s*memberID\s*:\s*(\d+)\s+alarm\s*:\s*([A-Z_]+)\s*$")


def format_member_id(member_id):
    """etcd member IDs as talosctl prints them: 16 lower-case hex digits."""
    return "%016x" % member_id


def parse_member_id(text):
    """The integer ID for a hex member ID such as ``"8e9e05c52164694d"``, or None when ``text`` is not one."""
    text = str(text).strip()
    if text.lower().startswith("0x"):
        text = text[2:]
    if not _MEMBER_ID.match(text):
        return None
    return int(text, 16)


def member_id_option(value):
    """The member ID an option names: a string is hex as talosctl prints it (``0x`` allowed), an integer is decimal."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        if 0 < value < 2 ** 64:
            return value
        raise TalosConfigError("member_id %d is not an etcd member ID: member IDs are 1 to 2^64-1." % value)
    member_id = parse_member_id(value)
    if not member_id:
        raise TalosConfigError("member_id %r is not an etcd member ID: give it in hexadecimal as talosctl etcd members "
                               "prints it (8e9e05c52164694d, 0x allowed) or as a decimal integer." % (value,))
    return member_id


def describe_ref(ref):
    """A member reference as messages show it: a hostname as it is, a member ID in hex."""
    return format_member_id(ref) if isinstance(ref, int) else str(ref)


def member_to_dict(member):
    """An ``EtcdMember`` message as the modules return it."""
    return {
        "id": format_member_id(member.id),
        "hostname": member.hostname,
        "peer_urls": list(member.peer_urls),
        "client_urls": list(member.client_urls),
        "is_learner": member.is_learner,
    }


def list_members(client, node):
    """The cluster's members as seen by ``node`` (EtcdMemberList with the cluster view)."""
    items = client.call(MEMBER_LIST, machine_pb2.EtcdMemberListRequest(query_local=False), node=node)
    return [member_to_dict(member) for item in items for member in item.members]


def find_member(members, ref):
    """The member named by ``ref``, or None: a string is a hostname, else the address of the member's node (as its
    etcd URLs give it), else a hex member ID; an int is a member ID."""
    if isinstance(ref, int):
        member_id = ref
    else:
        for member in members:
            if member["hostname"] == ref:
                return member
        for member in members:
            if member_address(member) == ref:
                return member
        member_id = parse_member_id(ref)
    if member_id is None:
        return None
    for member in members:
        if int(member["id"], 16) == member_id:
            return member
    return None


def member_address(member):
    """The address Talos can target for ``member``: the host of its client (else peer) URL, or None.

    Talos registers each control plane's node IP in its etcd URLs, and that
    address is what the ``node`` metadata of a call accepts.
    """
    for url in member["client_urls"] + member["peer_urls"]:
        host = urlparse(url).hostname
        if host:
            return host
    return None


def status_to_dict(status):
    """An ``EtcdMemberStatus`` message as the modules return it."""
    return {
        "member_id": format_member_id(status.member_id),
        "leader": format_member_id(status.leader) if status.leader else None,
        "is_learner": status.is_learner,
        "db_size": status.db_size,
        "db_size_in_use": status.db_size_in_use,
        "raft_term": status.raft_term,
        "raft_index": status.raft_index,
        "raft_applied_index": status.raft_applied_index,
        "protocol_version": status.protocol_version,
        "storage_version": status.storage_version,
        "errors": list(status.errors),
    }


def member_status(client, node):
    """EtcdStatus of the local member of ``node`` as a dict."""
    items = client.call(STATUS, node=node)
    return status_to_dict(items[0].member_status)


def member_statuses(client, members, deadline=None):
    """EtcdStatus of every member, asked of each member's own node concurrently.

    Returns ``{member id: status dict}``; a member whose node cannot be reached
    or answers with an error maps to the TalosError instead. ``deadline``
    bounds the probe of a node that does not answer (default: the client's
    timeout).
    """
    addresses = {}
    for member in members:
        address = member_address(member)
        if address:
            addresses[member["id"]] = address
    answers = client.call_many(STATUS, nodes=sorted(set(addresses.values())), deadline=deadline) if addresses else {}
    statuses = {}
    for member in members:
        address = addresses.get(member["id"])
        if address is None:
            statuses[member["id"]] = TalosError("etcd member %s advertises no client or peer URL to reach it." % member["hostname"])
            continue
        answer = answers.get(address)
        if isinstance(answer, TalosError):
            statuses[member["id"]] = answer
        else:
            statuses[member["id"]] = status_to_dict(answer[0].member_status)
    return statuses


def parse_alarm(error):
    """``(member ID in hex, alarm type)`` for an error of a status that is one of the cluster's alarms, else None.

    etcd lists every alarm of the cluster among the errors of every member's
    status, as the protobuf text of the alarm, whose spacing Go varies on
    purpose: ``memberID:9 alarm:NOSPACE``, ``memberID: 9  alarm: NOSPACE``.
    """
    match = _ALARM_TEXT.match(error)
    if match is None:
        return None
    return format_member_id(int(match.group(1))), match.group(2)


def alarm_text(member_id, alarm):
    """An alarm as a status's errors show it, spaced one way: ``memberID:<decimal ID> alarm:NOSPACE``."""
    return "memberID:%d alarm:%s" % (int(member_id, 16), alarm)


def own_errors(status):
    """The errors of a status dict that belong to its member: etcd's own (``etcdserver: no leader``), not the alarms."""
    return [error for error in status["errors"] if parse_alarm(error) is None]


def listed_alarms(statuses):
    """The alarms that ``statuses`` list, once each, as ``(member ID in hex, alarm type)`` in the order first seen."""
    alarms = []
    for status in statuses.values():
        if isinstance(status, dict):
            for error in status["errors"]:
                alarm = parse_alarm(error)
                if alarm is not None and alarm not in alarms:
                    alarms.append(alarm)
    return alarms


def alarms_of(member_id, alarms):
    """The alarms of ``alarms`` (listed_alarms) that name member ``member_id`` (hex), as alarm_text writes them."""
    return [alarm_text(named, alarm) for named, alarm in alarms if named == member_id]


def health_problems(statuses):
    """Why each member of ``statuses`` (``{member id: status dict or the TalosError its node answered}``) is not
    healthy: ``{member id: [problem]}``, an empty list for a healthy member.

    A member's own etcd errors and its node's failure to answer stay with it;
    an alarm goes to the member it names, whichever members' statuses list it.
    """
    alarms = listed_alarms(statuses)
    problems = {}
    for member_id, status in statuses.items():
        own = own_errors(status) if isinstance(status, dict) else [getattr(status, "message", None) or "no status"]
        problems[member_id] = own + alarms_of(member_id, alarms)
    return problems


def healthy_ids(statuses):
    """The IDs of the members of ``statuses`` that are healthy (see health_problems)."""
    return set(member_id for member_id, problems in health_problems(statuses).items() if not problems)


def leader_id(statuses):
    """The leader's member ID as most statuses without etcd errors of their own report it, or None when none
    reports one (an alarm does not change whom a member follows)."""
    votes = {}
    for status in statuses.values():
        if isinstance(status, dict) and not own_errors(status) and status["leader"]:
            votes[status["leader"]] = votes.get(status["leader"], 0) + 1
    if not votes:
        return None
    return max(sorted(votes), key=lambda leader: votes[leader])


def quorum(voters):
    """Votes etcd needs to make progress with ``voters`` voting members."""
    return voters // 2 + 1


def removal_check(members, statuses, member):
    """Whether removing ``member`` keeps quorum.

    Learners do not vote, so removing one never affects quorum. Removing a
    voting member from a cluster of N voting members leaves N-1, whose quorum
    is (N-1)//2+1; the removal is safe only when at least that many of the
    remaining voting members are healthy.
    """
    voters_after = [m for m in members if not m["is_learner"] and m["id"] != member["id"]]
    return _quorum_check(voters_after, statuses, member)


def outage_check(members, statuses, member):
    """Whether etcd keeps quorum while ``member``'s node is down (a reboot, a shutdown, a wipe without leaving).

    The member stays in the cluster, so quorum stays (N//2+1 of the N voting
    members), but only the other members can provide it: at least that many
    of them must be healthy. A one-member cluster never keeps quorum.
    """
    voters = [m for m in members if not m["is_learner"]]
    return _quorum_check(voters, statuses, member)


def _quorum_check(voters_after, statuses, member):
    """The quorum of ``voters_after`` against its healthy members other than ``member``."""
    healthy = healthy_ids(statuses)
    healthy_after = [m for m in voters_after if m["id"] != member["id"] and m["id"] in healthy]
    needed = quorum(len(voters_after))
    return {
        "safe": member["is_learner"] or len(healthy_after) >= needed,
        "voters_after": len(voters_after),
        "quorum_after": needed,
        "healthy_after": len(healthy_after),
        "unhealthy": sorted(m["hostname"] or m["id"] for m in voters_after
                            if m["id"] != member["id"] and m not in healthy_after),
    }


# -- the quorum guard ----------------------------------------------------------

class QuorumLossRefused(ActionFailed):
    """The quorum guard refused to let a member go; ``result`` holds the guard's findings (its result keys).

    Its own class because a wait for the guard asks again after a refusal.
    ``reason`` says why etcd cannot spare the member now (members unhealthy, the
    list unreadable), which may pass; it is None for a refusal no wait changes
    (the last voting member's removal).
    """

    def __init__(self, message, findings, reason=None):
        super(QuorumLossRefused, self).__init__(message, findings)
        self.reason = reason


class QuorumGuard:
    """The one etcd quorum guard: a control plane's member goes only when etcd keeps its quorum.

    Two situations, one rule each:

    - an outage - the member stays in etcd while its node is down (reboot,
      shutdown, rollback, upgrade, reset without leaving etcd): ``outage_check``;
    - a removal - the member leaves etcd (graceful reset, member removal):
      ``removal_check``. The last voting member can never leave: etcd keeps no
      cluster without one.

    ``force_quorum_loss`` lets the member go although etcd loses its quorum,
    except the last member's removal, which cannot be done. The findings are
    result keys: ``controlplane``, ``etcd_gate_open`` (False when the guard
    refused or, forced, would have) and ``quorum`` (the check made, or None).
    A refusal raises QuorumLossRefused carrying them, before anything changed.
    """

    def __init__(self, client, force_quorum_loss=False, probe_seconds=HEALTH_PROBE_SECONDS):
        self.client = client
        self.force_quorum_loss = force_quorum_loss
        self.probe_seconds = probe_seconds

    def let_node_go(self, node, what, removal=False):
        """The findings on the member of ``node`` before ``what`` (``"reboot control-plane node 10.5.0.2"``) happens."""
        try:
            members = list_members(self.client, node)
        except TalosUnimplementedError:
            # Workers (and nodes without a machine type) run no etcd: nothing to guard.
            return {"controlplane": False, "etcd_gate_open": True, "quorum": None}
        except TalosError as err:
            # EtcdMemberList needs a raft leader: an unreadable list is itself a closed guard.
            return self._decide(what, {"controlplane": True, "quorum": None},
                                "its etcd member list cannot be read (%s), so etcd may have lost quorum already"
                                % err.message.rstrip("."))
        member = find_member(members, own_member_name(self.client, node))
        if member is None:
            return {"controlplane": True, "etcd_gate_open": True, "quorum": None}
        statuses = member_statuses(self.client, members, deadline=self.probe_seconds)
        return self.let_member_go(members, statuses, member, what, removal, {"controlplane": True})

    def let_member_go(self, members, statuses, member, what, removal=False, findings=None):
        """The findings on ``member`` of ``members`` (with their ``statuses``) before ``what`` happens."""
        check = (removal_check if removal else outage_check)(members, statuses, member)
        findings = dict(findings or {}, quorum=check)
        name = member["hostname"] or member["id"]
        if removal and not member["is_learner"] and check["voters_after"] == 0:
            findings["etcd_gate_open"] = False
            raise QuorumLossRefused(
                "Refusing to %s: %s is the last voting etcd member, and etcd cannot lose its last member whatever "
                "force_quorum_loss says; to wipe the cluster's last control plane, reset it with graceful: false and "
                "force_quorum_loss: true, which destroys the cluster's etcd data." % (what, name), findings)
        problem = None
        if not check["safe"]:
            unhealthy = unhealthy_text(members, statuses, check["unhealthy"])
            problem = ("etcd would keep %s and need %d of them healthy for quorum, but only %s other than %s %s "
                       "healthy%s" % (_members(check["voters_after"], "voting member"), check["quorum_after"],
                                      _members(check["healthy_after"], "member"), name,
                                      "is" if check["healthy_after"] == 1 else "are", unhealthy))
        return self._decide(what, findings, problem)

    def _decide(self, what, findings, problem):
        findings["etcd_gate_open"] = problem is None
        if problem is None or self.force_quorum_loss:
            return findings
        raise QuorumLossRefused("Refusing to %s: %s; fix the unhealthy members first, or set force_quorum_loss: true "
                                "to go ahead anyway." % (what, problem), findings, reason=problem)


def _members(count, noun):
    """``1 member``, ``3 voting members``: a count of members as a sentence says it."""
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


def unhealthy_text(members, statuses, names):
    """`` (not healthy: cp-2 - memberID:2 alarm:NOSPACE; cp-3 - <why its node did not answer>)``, or ``""``."""
    problems = health_problems(statuses)
    described = []
    for name in names:
        reason = "; ".join(problems.get(find_member(members, name)["id"]) or ["no status"])
        described.append("%s - %s" % (name, reason.rstrip(".")))
    return " (not healthy: %s)" % "; ".join(described) if described else ""


def own_member_name(client, node):
    """The etcd member name of ``node``: Talos names members after the node's hostname."""
    return client.call("machine.MachineService/Hostname", node=node)[0].hostname


def _still_starting(error):
    """True for the answers of a node whose etcd is starting, joining or electing a leader: worth waiting out."""
    return is_transient(error) or error.code in ("FailedPrecondition", "Unknown")


# -- membership (talos_etcd_member) ----------------------------------------------

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
            if not _still_starting(err):
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
        items = client.call(FORFEIT, machine_pb2.EtcdForfeitLeadershipRequest(), node=member_address(member))
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
        client.call(LEAVE, machine_pb2.EtcdLeaveClusterRequest(), node=member_address(member))
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
        client.call(REMOVE, machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id), node=node)
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
            if not _still_starting(err):
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
            return self._seen((2, -behind), "learner catching up", "%s is a learner %d raft entries behind the cluster"
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


# -- health and maintenance (talos_etcd_info, talos_etcd_maintenance) ------------

# The status fields of a node that did not answer EtcdStatus.
_NO_STATUS = dict.fromkeys(("member_id", "leader", "is_learner", "db_size", "db_size_in_use", "raft_term", "raft_index",
                            "raft_applied_index", "protocol_version", "storage_version"))


def alarm_to_dict(alarm):
    """An ``EtcdMemberAlarm`` as the modules return it: ``{member_id, alarm}`` (NOSPACE, CORRUPT)."""
    return {"member_id": format_member_id(alarm.member_id),
            "alarm": machine_pb2.EtcdMemberAlarm.AlarmType.Name(alarm.alarm)}


def list_alarms(client, node):
    """The alarms of the cluster's etcd as ``node`` lists them (etcd keeps one list for the whole cluster)."""
    items = client.call(ALARM_LIST, node=node)
    return [alarm_to_dict(alarm) for item in items for alarm in item.member_alarms
            if alarm.alarm != machine_pb2.EtcdMemberAlarm.NONE]


def node_statuses(client, nodes):
    """EtcdStatus of the member of each node: ``{node: status dict or the TalosError it answered}``."""
    answers = client.call_many(STATUS, nodes=nodes)
    return dict((node, answer if isinstance(answer, TalosError) else status_to_dict(answer[0].member_status))
                for node, answer in answers.items())


def free_ratio(status):
    """The share of the member's database file that defragmentation would give back: (db_size - in use) / db_size."""
    if not status["db_size"]:
        return 0.0
    return round(float(status["db_size"] - status["db_size_in_use"]) / status["db_size"], 4)


def read_info(client, nodes, warn=None):
    """The etcd health of the cluster as ``nodes`` see it: ``{members, status, alarms}``.

    ``status`` has one entry per node (a node that does not answer has its
    error in ``errors`` and ``warn`` hears of it); an alarm is in the ``errors``
    of the member it names only, though etcd lists it in every member's status.
    The members and alarms come from the first node that answers. When none
    answers, its error is raised.
    """
    statuses = node_statuses(client, nodes)
    alarms = listed_alarms(statuses)
    entries = []
    for node in nodes:
        status = statuses[node]
        if isinstance(status, TalosError):
            if warn is not None:
                warn("%s did not answer EtcdStatus: %s" % (label(node, start=True), status.message))
            entries.append(dict(_NO_STATUS, node=node, errors=[status.message]))
        else:
            entries.append(dict(status, node=node, errors=own_errors(status) + alarms_of(status["member_id"], alarms)))
    answering = [node for node in nodes if not isinstance(statuses[node], TalosError)]
    if not answering:
        raise statuses[nodes[0]]
    return {"members": list_members(client, answering[0]), "status": entries, "alarms": list_alarms(client, answering[0])}


def defragment_order(nodes, statuses):
    """The nodes to defragment in turn: one per member, the leader's last (it would lose leadership while busy)."""
    leader = leader_id(dict((node, status) for node, status in statuses.items()))
    seen, followers, leaders = set(), [], []
    for node in nodes:
        member_id = statuses[node]["member_id"]
        if member_id in seen:
            continue
        seen.add(member_id)
        (leaders if member_id == leader else followers).append(node)
    return followers + leaders, leader


def maintain(client, nodes, defragment=False, min_free_ratio=0.0, disarm_alarms=False, check_mode=False, progress=None):
    """Defragment the members of ``nodes`` one at a time, the leader last, then disarm the cluster's alarms.

    Only members whose free ratio reaches ``min_free_ratio`` are defragmented;
    the alarms are disarmed only when there are some. In check mode the plan
    is made and nothing runs. Returns the task's result; a failed step raises
    ActionFailed with what ran before it (a defragmentation never starts
    while another might still run).
    """
    result = {"changed": False, "defragmented": [], "members": [], "alarms": [], "alarms_disarmed": []}
    if defragment:
        statuses = node_statuses(client, nodes)
        for node in nodes:
            if isinstance(statuses[node], TalosError):
                raise ActionFailed("Cannot defragment etcd: %s did not answer EtcdStatus (%s); nothing was "
                                   "defragmented." % (label(node), statuses[node].message.rstrip(".")),
                                   result, statuses[node])
        order, leader = defragment_order(nodes, statuses)
        for node in order:
            status = statuses[node]
            entry = {"node": node, "member_id": status["member_id"], "leader": status["member_id"] == leader,
                     "db_size": status["db_size"], "db_size_in_use": status["db_size_in_use"],
                     "free_ratio": free_ratio(status), "defragmented": False, "db_size_after": None}
            entry["selected"] = entry["free_ratio"] >= min_free_ratio
            result["members"].append(entry)
        for entry in result["members"]:
            if not entry["selected"]:
                continue
            result["changed"] = True
            if check_mode:
                continue
            _defragment(client, entry, result, progress)
    if disarm_alarms:
        result["alarms"] = list_alarms(client, nodes[0])
        if result["alarms"]:
            result["changed"] = True
            if not check_mode:
                try:
                    items = client.call(ALARM_DISARM, node=nodes[0])
                except TalosError as err:
                    raise ActionFailed("Disarming the etcd alarms failed: %s" % err.message, result, err)
                result["alarms_disarmed"] = [alarm_to_dict(alarm) for item in items for alarm in item.member_alarms
                                             if alarm.alarm != machine_pb2.EtcdMemberAlarm.NONE]
    return result


def _defragment(client, entry, result, progress):
    """Defragment the member of ``entry``'s node and record its new size; a failure ends the maintenance."""
    node = entry["node"]
    if progress is not None:
        progress("%s: defragmenting etcd member %s%s (%d of %d bytes free)" % (
            short_label(node), entry["member_id"], ", the leader" if entry["leader"] else "",
            entry["db_size"] - entry["db_size_in_use"], entry["db_size"]))
    try:
        client.call(DEFRAGMENT, node=node)
    except TalosError as err:
        # The server may still be defragmenting: no other member is started.
        raise ActionFailed("Defragmenting etcd on %s failed: %s The members after it were not defragmented."
                           % (label(node), err.message), result, err)
    entry["defragmented"] = True
    result["defragmented"].append(node)
    try:
        entry["db_size_after"] = member_status(client, node)["db_size"]
    except TalosError:
        pass  # done all the same; the size is only reported


# -- bootstrap (talos_bootstrap) -------------------------------------------------

def etcd_service(client, node):
    """The node's etcd ``ServiceInfo``, or None when the node runs no etcd service."""
    return talos_node.list_services(client, node).get("etcd")


def current_members(client, node):
    """The members ``node`` reports (None: the endpoint), or [] while it cannot answer (etcd not running, no leader)."""
    try:
        return list_members(client, node)
    except TalosError as err:
        if err.code == "PermissionDenied":
            raise
        return []


def bootstrap(client, node, recover_from=None, skip_hash_check=False, wait_timeout=None, check_mode=False,
              progress=None):
    """Bootstrap the cluster's etcd on control plane ``node`` unless it already was; returns the task's result.

    Already bootstrapped: etcd runs on the node, or (for a node still joining)
    the endpoint's etcd has members - bootstrapping then would start a second,
    separate etcd cluster. ``recover_from`` (a snapshot file) is uploaded first
    and etcd starts from it. With ``wait_timeout`` the node's etcd must then run
    as a healthy voting member.
    """
    if talos_node.read_machine_type(client, node) == "worker":
        # Checked first: the cluster being bootstrapped already says nothing about a worker.
        raise TalosError("Cannot bootstrap %s: it is a worker node, and only a control-plane node can bootstrap etcd; "
                         "target one of the cluster's control planes." % label(node), node=node)
    service = etcd_service(client, node)
    bootstrapped = service is not None and service.state == "Running"
    if not bootstrapped and node is not None:
        # The endpoint (a control plane) knows whether etcd already has members.
        bootstrapped = bool(current_members(client, None))
    if service is None and not bootstrapped and check_mode:
        # Without calling Bootstrap only the missing etcd service tells why it would fail.
        raise TalosError("Cannot bootstrap %s: it runs no etcd service, so it is not a control-plane node with etcd "
                         "configured; target one of the cluster's control planes." % label(node), node=node)
    result = {"changed": not bootstrapped, "node": node, "bootstrapped": bootstrapped, "recovered": False}
    if result["changed"] and not check_mode:
        result["changed"] = _call_bootstrap(client, node, recover_from, skip_hash_check)
        result.update(bootstrapped=True, recovered=result["changed"] and bool(recover_from))
        if wait_timeout is not None:
            _wait_for_healthy_member(client, node, Waiter(wait_timeout, progress=progress))
        service = etcd_service(client, node)
    result["etcd_state"] = service.state if service else None
    result["members"] = current_members(client, node) if result["bootstrapped"] else []
    return result


def _snapshot_chunks(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(UPLOAD_CHUNK_SIZE), b"")


def _call_bootstrap(client, node, recover_from, skip_hash_check):
    """Upload the recovery snapshot if any, then call Bootstrap; False when the node answers AlreadyExists."""
    request = machine_pb2.BootstrapRequest()
    if recover_from:
        client.upload(RECOVER, _snapshot_chunks(recover_from), node=node)
        request = machine_pb2.BootstrapRequest(recover_etcd=True, recover_skip_hash_check=skip_hash_check)
    try:
        client.call(BOOTSTRAP, request, node=node, retry_codes=BOOTSTRAP_RETRY_CODES)
    except TalosError as err:
        if err.code == "AlreadyExists":
            return False
        # Talos v1.12 and older answer a worker with FailedPrecondition, which is retried until the timeout.
        if err.code == "Unimplemented" or "only be performed on a control plane" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: %s; Bootstrap works only on a configured control-plane node, so "
                             "target one of the cluster's control planes."
                             % (label(node), err.server_message or "not a control plane"),
                             code=err.code, node=node, server_message=err.server_message)
        if err.code == "InvalidArgument" and "etcd is not configured" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: its machine config has no etcd CA (cluster.etcd.ca), so it runs no "
                             "etcd; apply a control-plane config generated with the cluster's secrets." % label(node),
                             code=err.code, node=node, server_message=err.server_message)
        raise
    return True


def _wait_for_healthy_member(client, node, waiter):
    """Wait until etcd on ``node`` runs, is healthy and the node is a voting member."""
    def poll():
        info = etcd_service(client, node)
        if info is None:
            return Seen("no etcd service")
        if not talos_node.is_healthy(info):
            return Seen("etcd %s" % talos_node.service_state(info), detail="etcd service %s (%s)"
                        % (info.state, talos_node.last_event_message(info) or "no events"))
        status = member_status(client, node)
        member = find_member(list_members(client, node), status["member_id"])
        if member is None or member["is_learner"]:
            return Seen("joining", detail="etcd running, the node is not a voting member yet")
        return Seen("etcd member", done=True, detail="etcd running and healthy, the node is a member")

    waiter.until(poll, "etcd on %s to run as a healthy member" % label(node), short_label(node),
                 tolerate=_still_starting, follow=waits.EventFollower(client, node))
