# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's service started, stopped or restarted through the API (talos_service).

The rules are ``nodes/node.py``'s (which services the API may control, which
states count as started, when a service has settled) and the wait is
``waits.wait_for_service``; here are the request each goal sends, the
service as a result shows it and ``control_service``, one node from the
ServiceList read to its result and diff.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.waits import wait_for_service

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by the doors through missing_required_lib
    machine_pb2 = None

# The newest events of a service that a result shows.
RECENT_EVENTS = 10

# The RPC each goal sends, and the name of its request message.
REQUESTS = {
    "started": (rpc.SERVICE_START, "ServiceStartRequest"),
    "stopped": (rpc.SERVICE_STOP, "ServiceStopRequest"),
    "restarted": (rpc.SERVICE_RESTART, "ServiceRestartRequest"),
}


def _timestamp(value):
    if not value.seconds and not value.nanos:
        return None
    return value.ToJsonString()


def service_to_dict(info):
    """A ``ServiceInfo`` message as a result shows it: state, health and the newest events."""
    return {
        "state": info.state,
        "health": {
            "unknown": info.health.unknown,
            "healthy": info.health.healthy,
            "last_message": info.health.last_message,
            "last_change": _timestamp(info.health.last_change),
        },
        "events": [{"msg": event.msg, "state": event.state, "ts": _timestamp(event.ts)}
                   for event in info.events.events[-RECENT_EVENTS:]],
    }


def control_service(client, node, name, goal, wait_timeout=None, check_mode=False, progress=None):
    """Service ``name`` of ``node`` brought to ``goal`` (started, stopped, restarted): the node's result.

    Nothing is sent when the service is already there (a restart always is);
    check mode predicts the state instead. With ``wait_timeout`` the request
    is followed by the wait for the service to settle, else by one more
    ServiceList. The caller has refused a goal Talos does not allow
    (``node.control_refusal``).
    """
    services = talos_node.list_services(client, node)
    if name not in services:
        raise ActionFailed("Service %s is not defined on %s (its services are: %s): extension services appear only when "
                           "their system extension is installed." % (name, label(node), ", ".join(sorted(services))),
                           {"name": name}, node=node)
    info = services[name]
    before = service_to_dict(info)

    result = {"changed": talos_node.needs_control(info.state, goal), "name": name, "node": node, "before": before}
    if not result["changed"]:
        after = before
    elif check_mode:
        after = dict(before, state=talos_node.STOPPED if goal == "stopped" else talos_node.RUNNING)
    else:
        method, request_type = REQUESTS[goal]
        items = client.call(method, getattr(machine_pb2, request_type)(id=name), node=node)
        result["response"] = items[0].resp if items else ""
        if wait_timeout is not None:
            waiter = Waiter(wait_timeout, progress=progress)
            info = wait_for_service(client, node, name, goal, waiter, restarted_after=talos_node.last_event_time(info))
        else:
            info = talos_node.list_services(client, node)[name]
        after = service_to_dict(info)

    result.update(after=after, state=after["state"], health=after["health"])
    result["diff"] = {"before": {"state": before["state"]}, "after": {"state": after["state"]}}
    return result
