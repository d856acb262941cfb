# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_service's run: the refusal before any call, the options passed to nodes/services.py
(test_services.py tests the control itself) and the result of several nodes."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosTimeoutError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_service
from fake_talos import FakeTalos, fails_with
from module_fakes import run_task

# Each control call and the state it leaves the service in.
CONTROLS = {rpc.SERVICE_START: (machine_pb2.ServiceStart, "Running"), rpc.SERVICE_STOP: (machine_pb2.ServiceStop, "Finished"),
            rpc.SERVICE_RESTART: (machine_pb2.ServiceRestart, "Running")}


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

    client = FakeTalos(nodes=list(nodes), answers={rpc.SERVICE_LIST: service_list})
    for method, (reply_type, new_state) in CONTROLS.items():
        client.answer(method, control(reply_type, new_state))
    return client


def run(client, **params):
    options = dict(wait=False, wait_timeout=5)
    options.update(params)
    return run_task(talos_service, client, **options)[:2]


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


def test_check_mode_predicts_without_calling():
    services = {"ext-foo": "Running"}
    client = node_with(services)
    ok, result = run(client, check_mode=True, name="ext-foo", state="stopped")
    assert ok and result["changed"] is True and result["state"] == "Finished"
    assert client.names() == ["ServiceList"] and services["ext-foo"] == "Running"


def test_several_nodes_each_get_the_service_and_their_own_result():
    client = node_with({"kubelet": "Running"}, nodes=["10.5.0.3", "10.5.0.4"])
    ok, result = run(client, name="kubelet", state="restarted")
    assert ok and result["changed"] and sorted(result["nodes"]) == ["10.5.0.3", "10.5.0.4"]
    assert all(entry["response"] == "Service 'kubelet' done" for entry in result["nodes"].values())
    assert sorted(call.node for call in client.calls_to(rpc.SERVICE_RESTART)) == ["10.5.0.3", "10.5.0.4"]
    assert result["diff"] == {"before": {"10.5.0.3": {"state": "Running"}, "10.5.0.4": {"state": "Running"}},
                              "after": {"10.5.0.3": {"state": "Running"}, "10.5.0.4": {"state": "Running"}}}


def test_wait_timeout_names_the_state_last_seen():
    services = {"ext-foo": "Finished"}
    client = node_with(services)

    def start_stuck_in_starting(request, _node):
        services[request.id] = "Starting"
        return [machine_pb2.ServiceStart(resp="Service %r started" % request.id)]
    client.answer(rpc.SERVICE_START, start_stuck_in_starting)
    # Without Events the wait polls at its interval: the shortest wait_timeout allowed ends it after a few polls.
    client.answer(rpc.EVENTS, fails_with("Unimplemented", "unknown method Events"))
    with pytest.raises(TalosTimeoutError) as raised:
        run(client, name="ext-foo", state="started", wait=True, wait_timeout=1)
    assert raised.value.message == ("Timed out after 1 seconds waiting for service ext-foo on node 10.5.0.3 to be started; "
                                    "last observed: state Starting, health unknown.")
    # Without wait, the state the node reports after the request is the result.
    services["ext-foo"] = "Finished"
    ok, result = run(client, name="ext-foo", state="started")
    assert ok and result["state"] == "Starting"
