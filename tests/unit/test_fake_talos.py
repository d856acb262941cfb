# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""FakeTalos keeps TalosClient's surface and refuses what the real client refuses."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import inspect

import pytest
from google.rpc import status_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConnectionError, TalosNodeError, TalosTLSError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import EVERY_NODE, FakeTalos, cosi_state, fails_with, in_turn, resource

VERSION = "machine.MachineService/Version"
HEALTH = "cluster.ClusterService/HealthCheck"
READ = "machine.MachineService/Read"


def version(tag):
    return machine_pb2.Version(version=machine_pb2.VersionInfo(tag=tag))


@pytest.mark.parametrize("name", ["call", "call_many", "call_batch", "stream", "stream_many", "read_bytes", "upload", "get_resource",
                                  "list_resources", "with_settings", "close"])
def test_the_methods_take_the_arguments_of_the_real_client(name):
    assert inspect.signature(getattr(FakeTalos, name)) == inspect.signature(getattr(TalosClient, name))


def test_a_path_outside_the_catalogue_is_refused():
    with pytest.raises(ValueError, match="not in the RPC catalogue"):
        FakeTalos().answer("machine.MachineService/Versoin", [])
    with pytest.raises(ValueError, match="not in the RPC catalogue"):
        FakeTalos().call("machine.MachineService/Versoin")


def test_the_wrong_cardinality_or_request_type_is_refused():
    fake = FakeTalos(answers={VERSION: [version("v1.14.0")]})
    with pytest.raises(ValueError, match="is a unary-unary call"):
        fake.stream(VERSION)
    with pytest.raises(TypeError, match="expects Empty, got ReadRequest"):
        fake.call(VERSION, machine_pb2.ReadRequest())
    with pytest.raises(ValueError, match="does not stream common.Data"):
        fake.read_bytes(HEALTH)


def test_an_answer_of_the_wrong_message_type_is_refused():
    fake = FakeTalos(answers={VERSION: [machine_pb2.Hostname(hostname="cp-1")]})
    with pytest.raises(TypeError, match="replies with machine.Version messages"):
        fake.call(VERSION)


def test_an_rpc_without_answer_fails_the_test():
    fake = FakeTalos(answers={VERSION: [version("v1.14.0")]})
    fake.answer(VERSION, [], node="10.5.0.2")
    with pytest.raises(AssertionError, match="no answer for machine.MachineService/Hostname on node 10.5.0.3"):
        fake.call("machine.MachineService/Hostname", node="10.5.0.3")


def test_answers_per_node_and_the_record_of_calls():
    fake = FakeTalos(nodes=["10.5.0.2", "10.5.0.3"], answers={VERSION: [version("v1.14.0")]})
    fake.answer(VERSION, fails_with("Unavailable", "connection refused"), node="10.5.0.3")
    results = fake.call_many(VERSION, max_concurrency=4)
    assert results["10.5.0.2"][0].version.tag == "v1.14.0"
    assert isinstance(results["10.5.0.3"], TalosConnectionError) and results["10.5.0.3"].node == "10.5.0.3"
    assert results["10.5.0.3"].message == ("Node 10.5.0.3 is unavailable for machine.MachineService/Version: "
                                           "connection refused.")
    assert [(call.via, call.node, call.kwargs["max_concurrency"]) for call in fake.calls] == [
        ("call_many", "10.5.0.2", 4), ("call_many", "10.5.0.3", 4)]
    assert fake.names() == ["Version", "Version"] and [type(request).__name__ for request in fake.requests(VERSION)] == ["Empty"] * 2


def test_a_callable_answer_sees_the_request_and_node_and_in_turn_repeats_the_last():
    fake = FakeTalos(answers={VERSION: lambda request, node: [version(node)]})
    assert fake.call(VERSION, node="v1.13.0")[0].version.tag == "v1.13.0"
    fake.answer(VERSION, in_turn(TalosTLSError("maintenance certificate"), [version("v1.14.0")]))
    with pytest.raises(TalosTLSError):
        fake.call(VERSION)
    assert [fake.call(VERSION)[0].version.tag for _call in range(2)] == ["v1.14.0", "v1.14.0"]


def test_a_stream_delivers_the_messages_before_its_error():
    seen = []
    fake = FakeTalos(answers={HEALTH: [cluster_pb2.HealthCheckProgress(message="one"), fails_with("DeadlineExceeded", "late")]})
    with pytest.raises(Exception, match="did not finish before its deadline"):
        fake.stream(HEALTH, on_message=seen.append)
    assert [message.message for message in seen] == ["one"]


def test_data_streams_are_bytes_and_stream_many_returns_per_node():
    fake = FakeTalos(nodes=["a", "b"], answers={READ: b"boot-1\n"})
    assert fake.read_bytes(READ, machine_pb2.ReadRequest(path="/x"), node="a") == b"boot-1\n"
    assert fake.stream_many(READ, machine_pb2.ReadRequest(path="/x")) == {"a": b"boot-1\n", "b": b"boot-1\n"}
    fake.answer(VERSION, b"x")
    with pytest.raises(TypeError, match="does not stream common.Data"):
        fake.call(VERSION)


def test_cosi_state_answers_get_and_list_as_a_node_does():
    status = resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", {"stage": "running"})
    fake = FakeTalos(answers={rpc.COSI_GET: cosi_state(status), rpc.COSI_LIST: cosi_state(status)})
    assert fake.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine")["spec"] == {"stage": "running"}
    assert [item["metadata"]["id"] for item in fake.list_resources("runtime", "MachineStatuses.runtime.talos.dev")] == ["machine"]
    assert fake.list_resources("config", "MachineStatuses.runtime.talos.dev") == []
    with pytest.raises(Exception, match=r"resource MachineStatuses.runtime.talos.dev\(runtime/other@undefined\) doesn't exist"):
        fake.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "other")
    assert [call.via for call in fake.calls] == ["get_resource", "list_resources", "list_resources", "get_resource"]


def test_with_settings_shares_answers_and_records():
    fake = FakeTalos(nodes=["10.5.0.3"], answers={VERSION: [version("v1.14.0")]})
    with fake.with_settings(insecure=True, node=None) as other:
        assert other.settings.insecure is True and other.nodes == [None]
        other.call(VERSION)
    assert other.closed and not fake.closed
    assert fake.settings_changes == [{"insecure": True, "node": None}] and fake.settings.insecure is False
    assert [call.node for call in fake.calls] == [None]


def test_every_node_is_a_key_of_its_own():
    assert repr(EVERY_NODE) == "every node"
    fake = FakeTalos(answers={VERSION: [version("all")]}).answer(VERSION, [version("endpoint")], node=None)
    assert fake.call(VERSION)[0].version.tag == "endpoint" and fake.call(VERSION, node="n")[0].version.tag == "all"


def test_a_reply_item_with_a_node_error_raises_it_and_ends_a_stream_on_deadline():
    failed = machine_pb2.Version(metadata=common_pb2.Metadata(hostname="cp-1", error="boom", status=status_pb2.Status(code=13)))
    with pytest.raises(TalosNodeError, match=r"^Node cp-1 answered with an error \(Internal\): boom\.$"):
        FakeTalos(answers={VERSION: [failed]}).call(VERSION, node="10.5.0.2")
    late = cluster_pb2.HealthCheckProgress(metadata=common_pb2.Metadata(error="late", status=status_pb2.Status(code=4)))
    fake = FakeTalos(answers={HEALTH: [cluster_pb2.HealthCheckProgress(message="one"), late]})
    assert [message.message for message in fake.stream(HEALTH)] == ["one"]


def test_node_errors_are_what_the_answer_raises():
    error = TalosNodeError("Node n answered with an error (Unknown): x.", code="Unknown", node="n")
    fake = FakeTalos(answers={VERSION: error})
    assert fake.call_many(VERSION, nodes=["n"]) == {"n": error}
