# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's service started, stopped or restarted (nodes/services.py), against a node that keeps its services' states."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosTimeoutError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import services
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with

NODE = "10.5.0.3"
# Each goal's request, its reply message and the state the node then reports.
GOALS = {
    "started": (rpc.SERVICE_START, machine_pb2.ServiceStartRequest, machine_pb2.ServiceStart, "Running"),
    "stopped": (rpc.SERVICE_STOP, machine_pb2.ServiceStopRequest, machine_pb2.ServiceStop, "Finished"),
    "restarted": (rpc.SERVICE_RESTART, machine_pb2.ServiceRestartRequest, machine_pb2.ServiceRestart, "Running"),
}


def node_with(states, settling=()):
    """A node whose ServiceList reports ``states`` ({id: state}); a request sets the goal's state, or first the
    states in ``settling`` one ServiceList after another. Its services' newest event is the time of the last request."""
    node = {"states": states, "settling": [], "event": 100}

    def service_list(_request, _node):
        if node["settling"]:
            service, reached = node["settling"].pop(0)
            states[service] = reached
        infos = [machine_pb2.ServiceInfo(id=name, state=state, health=machine_pb2.ServiceHealth(unknown=True),
                                         events=machine_pb2.ServiceEvents(events=[machine_pb2.ServiceEvent(
                                             msg="%s now" % state, state=state, ts={"seconds": node["event"]})]))
                 for name, state in states.items()]
        return [machine_pb2.ServiceList(services=infos)]

    def control(reply_type, new_state):
        def answer(request, _node):
            node["event"] += 10
            node["settling"] = [(request.id, state) for state in settling] + [(request.id, new_state)]
            return [reply_type(resp="Service %r done" % request.id)]
        return answer

    client = FakeTalos(nodes=[NODE], answers={rpc.SERVICE_LIST: service_list, rpc.EVENTS: fails_with("Unimplemented", "unknown method Events")})
    for method, _request, reply, new_state in GOALS.values():
        client.answer(method, control(reply, new_state))
    return client


@pytest.mark.parametrize("goal, state", [("started", "Finished"), ("stopped", "Running"), ("restarted", "Running")])
def test_each_goal_sends_its_request_and_reports_the_state_reached(goal, state):
    client = node_with({"ext-foo": state})
    method, request_type, _reply, reached = GOALS[goal]
    result = services.control_service(client, NODE, "ext-foo", goal)
    assert [call.method for call in client.calls] == [rpc.SERVICE_LIST, method, rpc.SERVICE_LIST]
    (request,) = client.requests(method)
    assert isinstance(request, request_type) and request.id == "ext-foo"
    assert result["changed"] is True and result["name"] == "ext-foo" and result["node"] == NODE
    assert result["response"] == "Service 'ext-foo' done"
    assert result["before"]["state"] == state and result["state"] == result["after"]["state"] == reached
    assert result["diff"] == {"before": {"state": state}, "after": {"state": reached}}
    assert result["health"] == result["after"]["health"] == {"unknown": True, "healthy": False, "last_message": "",
                                                             "last_change": None}


@pytest.mark.parametrize("goal, state", [
    ("started", "Preparing"), ("started", "Waiting"), ("started", "Starting"), ("started", "Running"),
    ("stopped", "Finished"), ("stopped", "Failed"), ("stopped", "Skipped"),
])
def test_a_service_already_there_is_left_alone(goal, state):
    client = node_with({"ext-foo": state})
    result = services.control_service(client, NODE, "ext-foo", goal)
    assert result["changed"] is False and result["after"] == result["before"] and "response" not in result
    assert [call.method for call in client.calls] == [rpc.SERVICE_LIST]


def test_check_mode_predicts_the_state_without_a_request():
    states = {"ext-foo": "Running", "kubelet": "Running"}
    client = node_with(states)
    stopped = services.control_service(client, NODE, "ext-foo", "stopped", check_mode=True)
    restarted = services.control_service(client, NODE, "kubelet", "restarted", check_mode=True)
    assert stopped["changed"] is True and stopped["state"] == "Finished" and restarted["state"] == "Running"
    assert stopped["diff"] == {"before": {"state": "Running"}, "after": {"state": "Finished"}}
    assert [call.method for call in client.calls] == [rpc.SERVICE_LIST] * 2 and states == {"ext-foo": "Running", "kubelet": "Running"}


def test_an_unknown_service_names_the_services_the_node_has():
    client = node_with({"kubelet": "Running", "ext-foo": "Running"})
    with pytest.raises(ActionFailed) as failed:
        services.control_service(client, NODE, "ext-bar", "started")
    assert failed.value.message == ("Service ext-bar is not defined on node 10.5.0.3 (its services are: ext-foo, kubelet): "
                                    "extension services appear only when their system extension is installed.")
    assert failed.value.to_result() == {"name": "ext-bar", "node": NODE}
    assert [call.method for call in client.calls] == [rpc.SERVICE_LIST]


def test_without_a_wait_the_result_is_what_the_node_reports_next():
    client = node_with({"ext-foo": "Finished"}, settling=["Starting"])
    assert services.control_service(client, NODE, "ext-foo", "started")["state"] == "Starting"


def test_the_wait_lasts_until_the_service_has_settled(clock):
    client = node_with({"ext-foo": "Finished"}, settling=["Preparing", "Starting"])
    result = services.control_service(client, NODE, "ext-foo", "started", wait_timeout=60)
    assert result["state"] == "Running" and [call.method for call in client.calls].count(rpc.SERVICE_LIST) == 4
    assert result["after"]["events"] == [{"msg": "Running now", "state": "Running", "ts": "1970-01-01T00:01:50Z"}]


def test_a_restart_waits_for_an_event_newer_than_the_request(clock):
    client = node_with({"kubelet": "Running"})
    assert services.control_service(client, NODE, "kubelet", "restarted", wait_timeout=60)["after"]["events"][0]["ts"] == (
        "1970-01-01T00:01:50Z")
    # A restart that leaves no newer event has not happened yet, though the service reports Running throughout.
    client = node_with({"kubelet": "Running"})
    client.answer(rpc.SERVICE_RESTART, [machine_pb2.ServiceRestart(resp="restarted")])
    with pytest.raises(TalosTimeoutError) as raised:
        services.control_service(client, NODE, "kubelet", "restarted", wait_timeout=2)
    assert raised.value.message == ("Timed out after 2 seconds waiting for service kubelet on node 10.5.0.3 to be restarted; "
                                    "last observed: state Running, health unknown.")


def test_the_wait_times_out_naming_the_state_last_seen(clock):
    client = node_with({"ext-foo": "Finished"}, settling=["Starting"] * 100)
    with pytest.raises(TalosTimeoutError) as raised:
        services.control_service(client, NODE, "ext-foo", "started", wait_timeout=5)
    assert raised.value.message == ("Timed out after 5 seconds waiting for service ext-foo on node 10.5.0.3 to be started; "
                                    "last observed: state Starting, health unknown.")


def test_a_result_shows_the_newest_events():
    info = machine_pb2.ServiceInfo(id="kubelet", state="Running", events=machine_pb2.ServiceEvents(events=[
        machine_pb2.ServiceEvent(msg="event %d" % index, state="Running", ts={"seconds": index}) for index in range(1, 13)]))
    shown = services.service_to_dict(info)
    assert [event["msg"] for event in shown["events"]] == ["event %d" % index for index in range(3, 13)]
    assert shown["events"][-1]["ts"] == "1970-01-01T00:00:12Z" and shown["health"]["last_change"] is None
