# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd maintenance (talos_etcd_maintenance): defragmentation, one member at a time and the leader last, and alarm
disarm."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.status import (
    alarm_to_dict,
    free_ratio,
    leader_id,
    list_alarms,
    member_status,
    node_statuses,
)

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None


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
                    items = client.call(rpc.ETCD_ALARM_DISARM, node=nodes[0])
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
        client.call(rpc.ETCD_DEFRAGMENT, node=node)
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
