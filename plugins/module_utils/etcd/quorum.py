# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd quorum: the arithmetic (how many voters a removal or an outage leaves) and the one etcd quorum guard every
module passes before a control plane goes down or leaves etcd (QuorumGuard, and guard with its quorum wait)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosError,
    TalosUnimplementedError,
    format_seconds,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, WaitTimedOut, Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.members import (
    HEALTH_PROBE_SECONDS,
    find_member,
    list_members,
    own_member_name,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.status import health_problems, healthy_ids, member_statuses


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


# Seconds between two asks of the etcd quorum guard that refused for now (each ask reads every member's status).
QUORUM_POLL_SECONDS = 2.0


def guard(client, node, action, force_quorum_loss=False, removal=False, quorum_wait_timeout=0, progress=None):
    """The etcd quorum guard's findings before ``action`` (``"reboot"``) takes ``node`` down; raises when it refuses.

    With ``quorum_wait_timeout`` (seconds) a refusal that may pass - a member
    unhealthy for now, one catching up after its own reboot - is asked again
    until the guard lets the node go or the time is up; ``progress`` hears
    why etcd cannot spare the node yet. 0 refuses at once.
    """
    quorum_guard = QuorumGuard(client, force_quorum_loss)
    what = "%s control-plane %s" % (action, label(node))
    if not quorum_wait_timeout:
        return quorum_guard.let_node_go(node, what, removal=removal)
    refusals = []

    def poll():
        try:
            findings = quorum_guard.let_node_go(node, what, removal=removal)
        except QuorumLossRefused as refusal:
            if refusal.reason is None:
                raise
            refusals.append(refusal)
            return Seen(refusal.reason)
        return Seen("spared", done=True, value=findings)

    waiter = Waiter(quorum_wait_timeout, QUORUM_POLL_SECONDS, progress=progress)
    try:
        return waiter.until(poll, "etcd to spare %s" % label(node), "waiting for etcd to spare %s" % short_label(node),
                            tolerate=lambda error: False)
    except WaitTimedOut:
        last = refusals[-1]
        raise QuorumLossRefused("%s The guard still refused after %s seconds of waiting (quorum_wait_timeout)."
                                % (last.message, format_seconds(quorum_wait_timeout)), last.result, last.reason)
