# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_service: the allow-list, the idempotency decision and the wait condition (node.py rules)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosTimeoutError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_service
from fake_talos import FakeTalos, fails_with
from module_fakes import run_task

SERVICE_LIST = "machine.MachineService/ServiceList"
# Each control call and the state it leaves the service in.
CONTROLS = {"ServiceStart": (machine_pb2.ServiceStart, "Running"), "ServiceStop": (machine_pb2.ServiceStop, "Finished"),
            "ServiceRestart": (machine_pb2.ServiceRestart, "Running")}


def node_with(services, nodes=("10.5.0.3",)):
    """A node serving ServiceList from ``services`` ({id: state}); start, stop and restart change that dict."""
    def service_list(_request, _node):
        infos = [machine_pb2.ServiceInfo(id=name, state=state, health=machine_pb2.ServiceHealth(unknown=True))
                 for name, state in services.items()]
        return [machine_pb2.ServiceList(services=infos)]

    def control(reply_type, new_state):
        def answer(request, _node):
            services[request.id] = new_state
            return [reply_type(resp="Service %r done" % request.id)]
        return answer

    client = FakeTalos(nodes=list(nodes), answers={SERVICE_LIST: service_list})
    for name, (reply_type, new_state) in CONTROLS.items():
        client.answer("machine.MachineService/" + name, control(reply_type, new_state))
    return client


def run(client, **params):
    options = dict(wait=False, wait_timeout=5)
    options.update(params)
    return run_task(talos_service, client, **options)[:2]


@pytest.mark.parametrize("name, state", [
    ("kubelet", "started"), ("kubelet", "restarted"),
    ("ext-tailscale", "started"), ("ext-tailscale", "stopped"), ("ext-tailscale", "restarted"),
])
def test_allowed_operations(name, state):
    assert talos_node.control_refusal(name, state) is None


@pytest.mark.parametrize("name, state, words", [
    ("kubelet", "stopped", "does not let the API stop service kubelet: it can only be started or restarted"),
    ("etcd", "restarted", "Service etcd cannot be controlled through the Talos API: Talos only lets the API start "
                          "and restart kubelet and start, stop and restart system extension services"),
    ("apid", "started", "every other service is managed by Talos itself"),
])
def test_refused_operations_fail_before_any_call(name, state, words):
    client = node_with({name: "Running"})
    with pytest.raises(TalosConfigError) as refused:
        run(client, name=name, state=state)
    assert words in refused.value.message
    assert client.names() == []


def test_started_when_stopped_changes_then_is_idempotent():
    services = {"ext-tailscale": "Finished"}
    client = node_with(services)
    ok, result = run(client, name="ext-tailscale", state="started")
    assert ok and result["changed"] is True
    assert result["before"]["state"] == "Finished" and result["state"] == "Running"
    assert result["diff"] == {"before": {"state": "Finished"}, "after": {"state": "Running"}}
    assert client.names() == ["ServiceList", "ServiceStart", "ServiceList"]

    client = node_with(services)
    ok, result = run(client, name="ext-tailscale", state="started")
    assert ok and result["changed"] is False and client.names() == ["ServiceList"]


@pytest.mark.parametrize("state", ["Preparing", "Waiting", "Starting", "Running"])
def test_started_accepts_a_service_on_its_way_up(state):
    client = node_with({"kubelet": state})
    ok, result = run(client, name="kubelet", state="started")
    assert ok and result["changed"] is False and client.names() == ["ServiceList"]


def test_stopped_is_idempotent_for_finished_and_failed_services():
    for state in ("Finished", "Failed", "Skipped"):
        client = node_with({"ext-foo": state})
        ok, result = run(client, name="ext-foo", state="stopped")
        assert ok and result["changed"] is False and client.names() == ["ServiceList"]


def test_restarted_always_changes():
    client = node_with({"kubelet": "Running"})
    ok, result = run(client, name="kubelet", state="restarted")
    assert ok and result["changed"] is True and "ServiceRestart" in client.names()


def test_check_mode_predicts_without_calling():
    services = {"ext-foo": "Running"}
    client = node_with(services)
    ok, result = run(client, check_mode=True, name="ext-foo", state="stopped")
    assert ok and result["changed"] is True and result["state"] == "Finished"
    assert client.names() == ["ServiceList"] and services["ext-foo"] == "Running"


def test_unknown_service_names_the_services_the_node_has():
    client = node_with({"kubelet": "Running", "ext-foo": "Running"})
    with pytest.raises(ActionFailed) as failed:
        run(client, name="ext-bar", state="started")
    assert failed.value.message.startswith("Service ext-bar is not defined on node 10.5.0.3 (its services are: ext-foo, "
                                           "kubelet)")
    assert failed.value.to_result() == {"name": "ext-bar", "node": "10.5.0.3"}
    assert client.names() == ["ServiceList"]


def test_several_nodes_each_get_the_service_and_their_own_result():
    client = node_with({"kubelet": "Running"}, nodes=["10.5.0.3", "10.5.0.4"])
    ok, result = run(client, name="kubelet", state="restarted")
    assert ok and result["changed"] and sorted(result["nodes"]) == ["10.5.0.3", "10.5.0.4"]
    assert all(entry["response"] == "Service 'kubelet' done" for entry in result["nodes"].values())
    assert sorted(call.node for call in client.calls_to("machine.MachineService/ServiceRestart")) == ["10.5.0.3", "10.5.0.4"]
    assert result["diff"] == {"before": {"10.5.0.3": {"state": "Running"}, "10.5.0.4": {"state": "Running"}},
                              "after": {"10.5.0.3": {"state": "Running"}, "10.5.0.4": {"state": "Running"}}}


def _info(state, healthy=None, event_seconds=()):
    health = machine_pb2.ServiceHealth(unknown=healthy is None, healthy=bool(healthy))
    events = machine_pb2.ServiceEvents(events=[machine_pb2.ServiceEvent(state="Running", ts={"seconds": s})
                                               for s in event_seconds])
    return machine_pb2.ServiceInfo(id="kubelet", state=state, health=health, events=events)


def test_reached_requires_health_when_the_service_has_a_check():
    assert talos_node.has_settled(_info("Running"), "started", 0)
    assert not talos_node.has_settled(_info("Running", healthy=False), "started", 0)
    assert talos_node.has_settled(_info("Running", healthy=True), "started", 0)
    assert not talos_node.has_settled(_info("Starting"), "started", 0)


def test_reached_after_restart_needs_a_newer_event():
    assert not talos_node.has_settled(_info("Running", event_seconds=[100]), "restarted", 100)
    assert talos_node.has_settled(_info("Running", event_seconds=[100, 130]), "restarted", 100)


def test_reached_stopped_waits_out_stopping():
    assert not talos_node.has_settled(_info("Stopping"), "stopped", 0)
    assert talos_node.has_settled(_info("Finished"), "stopped", 0)


def test_wait_timeout_names_the_state_last_seen():
    services = {"ext-foo": "Finished"}
    client = node_with(services)

    def start_stuck_in_starting(request, _node):
        services[request.id] = "Starting"
        return [machine_pb2.ServiceStart(resp="Service %r started" % request.id)]
    client.answer("machine.MachineService/ServiceStart", start_stuck_in_starting)
    # Without Events the wait polls at its interval: the shortest wait_timeout allowed ends it after a few polls.
    client.answer("machine.MachineService/Events", fails_with("Unimplemented", "unknown method Events"))
    with pytest.raises(TalosTimeoutError) as raised:
        run(client, name="ext-foo", state="started", wait=True, wait_timeout=1)
    assert raised.value.message == ("Timed out after 1 seconds waiting for service ext-foo on node 10.5.0.3 to be started; "
                                    "last observed: state Starting, health unknown.")
