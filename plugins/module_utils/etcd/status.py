# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd health as Talos reports it (talos_etcd_info): each member's EtcdStatus, the alarms (each counted against the
member it names, whichever statuses list it), which members are healthy and whom they follow as leader."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.members import (
    format_member_id,
    list_members,
    member_address,
)

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

# An alarm among a status's errors: etcd's AlarmMember in protobuf text (see parse_alarm).
_ALARM_TEXT = re.compile(r"^\s*memberID\s*:\s*(\d+)\s+alarm\s*:\s*([A-Z_]+)\s*$")


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
    items = client.call(rpc.ETCD_STATUS, node=node)
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
    answers = client.call_many(rpc.ETCD_STATUS, nodes=sorted(set(addresses.values())), deadline=deadline) if addresses else {}
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


# The status fields of a node that did not answer EtcdStatus.
_NO_STATUS = dict.fromkeys(("member_id", "leader", "is_learner", "db_size", "db_size_in_use", "raft_term", "raft_index",
                            "raft_applied_index", "protocol_version", "storage_version"))


def alarm_to_dict(alarm):
    """An ``EtcdMemberAlarm`` as the modules return it: ``{member_id, alarm}`` (NOSPACE, CORRUPT)."""
    return {"member_id": format_member_id(alarm.member_id),
            "alarm": machine_pb2.EtcdMemberAlarm.AlarmType.Name(alarm.alarm)}


def list_alarms(client, node):
    """The alarms of the cluster's etcd as ``node`` lists them (etcd keeps one list for the whole cluster)."""
    items = client.call(rpc.ETCD_ALARM_LIST, node=node)
    return [alarm_to_dict(alarm) for item in items for alarm in item.member_alarms
            if alarm.alarm != machine_pb2.EtcdMemberAlarm.NONE]


def node_statuses(client, nodes):
    """EtcdStatus of the member of each node: ``{node: status dict or the TalosError it answered}``."""
    answers = client.call_many(rpc.ETCD_STATUS, nodes=nodes)
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
