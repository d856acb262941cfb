# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""TalosClient against the Talos API emulator: TLS, routing, failover, retries, envelopes, streams."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import socket
import threading
import time

import pytest

from talos_emulator import EmulatedCluster
from talos_emulator.pki import CertificateAuthority

from ansible_collections.talos_linux.talos.plugins.module_utils.client import client as client_module
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosError,
    TalosNodeError,
    TalosPermissionError,
    TalosTimeoutError,
    TalosTLSError,
    TalosUnimplementedError,
    TalosUnreachableError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter

VERSION = "machine.MachineService/Version"
READ = "machine.MachineService/Read"
HOSTNAME = "machine.MachineService/Hostname"


def settings_for(cluster, role="admin", **options):
    params = dict(talosconfig=cluster.talosconfig_path(role=role), context=None, endpoints=None, node=None, nodes=None,
                  ca=None, crt=None, key=None, insecure=False, timeout=10)
    params.update(options)
    return ConnectionSettings.from_params(params, environ={})


def node_of(cluster, role):
    return next(node for node in cluster.nodes if node.role == role)


def audit_of(cluster, method):
    return [entry for entry in cluster.audit() if entry["method"] == method]


def closed_port():
    """A local address nothing listens on: connecting to it is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return "127.0.0.1:%d" % port


@pytest.fixture
def silent_endpoints():
    """Factory of local addresses that accept TCP and never answer: connecting (TLS included) times out."""
    sockets = []

    def make():
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # never accepted: the kernel completes the TCP handshake, nobody speaks TLS
        sockets.append(sock)
        return "127.0.0.1:%d" % sock.getsockname()[1]

    yield make
    for sock in sockets:
        sock.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # One cluster for the whole module (the `emulator` fixture starts one per
    # test): each test undoes its faults and leaves every node running.
    started = EmulatedCluster.start(str(tmp_path_factory.mktemp("cluster")), controlplanes=2, workers=1, bootstrapped=True)
    yield started
    started.stop()


def test_version_over_ed25519_mutual_tls(cluster):
    with open(cluster.talosconfig_path(role="admin")) as config:
        assert config.read()  # the talosconfig carries Talos's "ED25519 PRIVATE KEY" label (base64 inside)
    settings = settings_for(cluster)
    assert "ED25519" not in settings.key
    with TalosClient(settings) as client:
        items = client.call(VERSION)
    assert len(items) == 1
    assert items[0].version.tag == cluster.talos_version
    assert not items[0].HasField("metadata")


def test_close_sends_close_notify_and_does_not_wait_for_the_nodes_reply(cluster):
    client = TalosClient(settings_for(cluster))
    client.call(VERSION)
    (channel,) = list(client._channels.values())
    closed = channel.connection_closed
    # The emulator's loop is busy for a while: it cannot answer the close_notify.
    busy = threading.Thread(target=cluster.call, args=(time.sleep, 1.5))
    busy.start()
    try:
        time.sleep(0.1)
        client.close()
        assert closed.done() and channel.transport.is_closing()
    finally:
        busy.join()
    with TalosClient(settings_for(cluster)) as again:  # the node serves the next connection as ever
        assert again.call(VERSION)[0].version.tag == cluster.talos_version


def test_nodes_are_targeted_through_a_control_plane_endpoint(cluster):
    controlplane = node_of(cluster, "controlplane")
    worker = node_of(cluster, "worker")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        assert client.call(HOSTNAME, node=worker.address)[0].hostname == worker.hostname
        assert client.call(HOSTNAME)[0].hostname == controlplane.hostname
        addresses = [node.address for node in cluster.nodes]
        results = client.call_many(HOSTNAME, nodes=addresses)
    assert sorted(results) == sorted(addresses)
    for node in cluster.nodes:
        assert results[node.address][0].hostname == node.hostname


@pytest.mark.parametrize("limit, expected", [(None, client_module.DEFAULT_MAX_CONCURRENCY), (7, 7), (1, 1)])
def test_call_many_keeps_at_most_max_concurrency_calls_in_flight(monkeypatch, limit, expected):
    import asyncio

    in_flight = [0]
    peak = [0]

    async def call(spec, request, node, retry_codes, deadline, retry_unreachable=False):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.001)
        in_flight[0] -= 1
        return [node]

    client = TalosClient(ConnectionSettings(endpoints=["127.0.0.1"], insecure=True))
    monkeypatch.setattr(client, "_call", call)
    nodes = ["10.0.%d.%d" % (i // 250, i % 250 + 1) for i in range(1000)]
    with client:
        results = client.call_many(VERSION, nodes=nodes, max_concurrency=limit)
    assert results == dict((node, [node]) for node in nodes)
    assert peak[0] == expected


def test_call_batch_sends_every_call_at_once_within_one_bound(monkeypatch):
    import asyncio

    in_flight, peak, started = [0], [0], []

    async def call(spec, request, node, retry_codes, deadline, retry_unreachable=False):
        started.append((spec.path, in_flight[0]))
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        return [(spec.path, node)]

    client = TalosClient(ConnectionSettings(endpoints=["127.0.0.1"], insecure=True))
    monkeypatch.setattr(client, "_call", call)
    nodes = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    with client:
        versions, hostnames = client.call_batch([(VERSION, None, nodes), (HOSTNAME, None, nodes[:2])], max_concurrency=4)
    assert versions == dict((node, [("/" + VERSION, node)]) for node in nodes)
    assert hostnames == dict((node, [("/" + HOSTNAME, node)]) for node in nodes[:2])
    # The second call does not wait for the first one's nodes: a hostname read starts while versions are in flight.
    assert peak[0] == 4 and any(path == "/" + HOSTNAME and busy > 0 for path, busy in started)


def test_call_many_refuses_a_concurrency_below_one():
    with TalosClient(ConnectionSettings(endpoints=["127.0.0.1"], insecure=True)) as client:
        with pytest.raises(ValueError, match="max_concurrency must be at least 1"):
            client.call_many(VERSION, nodes=["10.0.0.1"], max_concurrency=0)


def test_call_many_one_at_a_time_through_the_emulator(cluster):
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        results = client.call_many(HOSTNAME, nodes=[node.address for node in cluster.nodes], max_concurrency=1)
    assert dict((address, items[0].hostname) for address, items in results.items()) == dict(
        (node.address, node.hostname) for node in cluster.nodes)


def test_stream_many_reads_every_node_and_reports_a_failing_one(cluster):
    import asyncio

    controlplane = node_of(cluster, "controlplane")
    addresses = [node.address for node in cluster.nodes]
    request = client_module.METHODS["cosi.resource.State/List"].request_type(namespace="network", type="NodeAddresses.net.talos.dev")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        results = client.stream_many("cosi.resource.State/List", request, nodes=addresses + ["10.255.255.1"],
                                     max_concurrency=2)
        in_flight, peak = [0], [0]
        original = client._stream

        async def counted(*args):
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            try:
                await asyncio.sleep(0.001)
                return await original(*args)
            finally:
                in_flight[0] -= 1

        client._stream = counted
        client.stream_many("cosi.resource.State/List", request, nodes=addresses, max_concurrency=2)
    for node in cluster.nodes:
        ids = sorted(reply.resource.metadata.id for reply in results[node.address])
        assert "current" in ids
    assert isinstance(results["10.255.255.1"], TalosUnreachableError)
    assert peak[0] == 2


def test_call_many_reports_a_failing_node_without_raising(cluster):
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        results = client.call_many(VERSION, nodes=[controlplane.address, "10.255.255.1"])
    assert results[controlplane.address][0].version.tag == cluster.talos_version
    failure = results["10.255.255.1"]
    # The endpoint could not dial the node: that is final, not retried until the deadline.
    assert isinstance(failure, TalosUnreachableError)
    assert failure.node == "10.255.255.1" and failure.code == "Unavailable"
    assert failure.message.startswith("Node 10.255.255.1 is unreachable through endpoint %s (connection refused)"
                                      % controlplane.endpoint)


def test_a_worker_endpoint_refuses_to_forward(cluster):
    worker = node_of(cluster, "worker")
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[worker.endpoint])) as client:
        assert client.call(HOSTNAME, node=worker.address)[0].hostname == worker.hostname
        with pytest.raises(TalosPermissionError) as err:
            client.call(HOSTNAME, node=controlplane.address)
    assert "refused to forward" in err.value.message
    assert "endpoints must be control-plane nodes" in err.value.message
    assert err.value.code == "PermissionDenied" and err.value.node == controlplane.address


def test_failover_from_an_unreachable_endpoint_is_remembered(cluster):
    dead = closed_port()
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[dead, controlplane.endpoint])) as client:
        assert client.call(VERSION)[0].version.tag == cluster.talos_version
        assert client.active_endpoint == controlplane.endpoint
        assert client.call(HOSTNAME)[0].hostname == controlplane.hostname


def test_failover_when_a_control_plane_goes_away(cluster):
    first, second = [node for node in cluster.nodes if node.role == "controlplane"][:2]
    with TalosClient(settings_for(cluster, endpoints=[first.endpoint, second.endpoint])) as client:
        assert client.call(HOSTNAME)[0].hostname == first.hostname
        cluster.faults.make_unreachable(first.name)
        try:
            assert client.call(HOSTNAME, node=second.address)[0].hostname == second.hostname
            assert client.active_endpoint == second.endpoint
        finally:
            cluster.faults.make_reachable(first.name)


def test_every_endpoint_unreachable_is_one_sentence(cluster):
    dead, other = closed_port(), closed_port()
    with TalosClient(settings_for(cluster, endpoints=[dead, other])) as client:
        with pytest.raises(TalosUnreachableError) as err:
            client.call(VERSION)
    assert err.value.message == ("None of the Talos endpoints is reachable: %s (connection refused); %s (connection refused); "
                                 "endpoints must be control-plane nodes whose Talos API is reachable on port 50000." % (dead, other))
    assert err.value.code == "Unavailable"


def test_a_read_from_a_dead_endpoint_fails_at_once_not_at_the_timeout(cluster):
    dead = closed_port()
    started = time.monotonic()
    with TalosClient(settings_for(cluster, endpoints=[dead], timeout=60)) as client:
        with pytest.raises(TalosUnreachableError) as err:
            client.call(VERSION)
        results = client.call_many(HOSTNAME, nodes=["10.5.0.2", "10.5.0.3"])
    assert time.monotonic() - started < 5, "a refused connection is not retried"
    assert "Talos endpoint %s (connection refused) is unreachable" % dead in err.value.message
    assert all(isinstance(result, TalosUnreachableError) for result in results.values())


def test_endpoints_that_time_out_share_one_connect_budget(cluster, silent_endpoints, monkeypatch):
    monkeypatch.setattr(client_module, "CONNECT_TIMEOUT", 1.0)
    first, second = silent_endpoints(), silent_endpoints()
    started = time.monotonic()
    with TalosClient(settings_for(cluster, endpoints=[first, second], timeout=60)) as client:
        with pytest.raises(TalosUnreachableError) as err:
            client.call(VERSION)
        time.sleep(client_module.REDIAL_INTERVAL)
        # The nodes of one call_many share one round of connection attempts, even a few at a time.
        results = client.call_many(HOSTNAME, nodes=["10.5.0.%d" % n for n in range(2, 12)], max_concurrency=2)
    elapsed = time.monotonic() - started - client_module.REDIAL_INTERVAL
    assert elapsed < 4, "two rounds of one CONNECT_TIMEOUT each, took %.1f s" % elapsed
    assert err.value.message == ("None of the Talos endpoints is reachable: %s (timed out connecting); %s (timed out "
                                 "connecting); endpoints must be control-plane nodes whose Talos API is reachable on "
                                 "port 50000." % (first, second))
    assert set(type(result) for result in results.values()) == {TalosUnreachableError}


def test_failover_past_an_endpoint_that_times_out(cluster, silent_endpoints, monkeypatch):
    monkeypatch.setattr(client_module, "CONNECT_TIMEOUT", 2.0)
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[silent_endpoints(), controlplane.endpoint])) as client:
        assert client.call(VERSION)[0].version.tag == cluster.talos_version
        assert client.active_endpoint == controlplane.endpoint


def test_waits_retry_through_a_dead_endpoint_until_their_deadline(cluster):
    dead = closed_port()
    with TalosClient(settings_for(cluster, endpoints=[dead])) as client:
        with pytest.raises(TalosTimeoutError) as err:
            client.call(VERSION, deadline=1, retry_unreachable=True)
    assert err.value.message.startswith("%s on the endpoint node did not complete within 1 seconds; the last answer was: "
                                        "Talos endpoint %s (connection refused) is unreachable" % (VERSION, dead))


@pytest.mark.parametrize("cause, said", [("refused", "connection refused"), ("no-route", "no route to host"),
                                         ("timeout", "timed out connecting")])
def test_a_node_its_endpoint_cannot_reach_fails_at_once_and_the_others_answer(cluster, cause, said):
    controlplane = node_of(cluster, "controlplane")
    worker = node_of(cluster, "worker")
    cluster.faults.make_unreachable(worker.name, cause=cause)
    try:
        started = time.monotonic()
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint], timeout=60)) as client:
            with pytest.raises(TalosUnreachableError) as err:
                client.call(VERSION, node=worker.address)
            results = client.call_many(HOSTNAME, nodes=[node.address for node in cluster.nodes])
            listed = client.stream_many("cosi.resource.State/List",
                                        client_module.METHODS["cosi.resource.State/List"].request_type(
                                            namespace="runtime", type="MachineStatuses.runtime.talos.dev"),
                                        nodes=[controlplane.address, worker.address])
        elapsed = time.monotonic() - started
    finally:
        cluster.faults.make_reachable(worker.name)
    assert elapsed < 5, "an unreachable node is not retried until the timeout (took %.1f s)" % elapsed
    assert err.value.message.startswith("Node %s is unreachable through endpoint %s (%s): "
                                        % (worker.address, controlplane.endpoint, said))
    assert err.value.node == worker.address
    assert isinstance(results[worker.address], TalosUnreachableError)
    for node in cluster.nodes:
        if node is not worker:
            assert results[node.address][0].hostname == node.hostname
    assert isinstance(listed[worker.address], TalosUnreachableError)
    assert [reply.resource.metadata.id for reply in listed[controlplane.address]] == ["machine"]


def test_waits_retry_through_an_unreachable_node_until_it_answers(cluster):
    controlplane = node_of(cluster, "controlplane")
    worker = node_of(cluster, "worker")
    cluster.faults.make_unreachable(worker.name)
    back = threading.Timer(1.0, cluster.faults.make_reachable, [worker.name])
    back.start()
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            status = client.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", node=worker.address,
                                         deadline=15, retry_unreachable=True)
    finally:
        back.join()
        cluster.faults.make_reachable(worker.name)
    assert status["spec"]["stage"] == "running"


def test_mutation_to_an_unreachable_endpoint_fails_at_once(cluster):
    dead = closed_port()
    with TalosClient(settings_for(cluster, endpoints=[dead])) as client:
        with pytest.raises(TalosConnectionError) as err:
            client.call("machine.MachineService/ServiceRestart", machine_pb2.ServiceRestartRequest(id="kubelet"))
    assert err.value.message == ("Talos endpoint %s (connection refused) is unreachable; endpoints must be control-plane "
                                 "nodes whose Talos API is reachable on port 50000." % dead)


def test_reads_are_retried_on_unavailable(cluster):
    controlplane = node_of(cluster, "controlplane")
    cluster.faults.fail("Version", "Unavailable", message="apid is restarting", times=2, node=controlplane.name)
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            assert client.call(VERSION)[0].version.tag == cluster.talos_version
    finally:
        cluster.faults.clear()


def test_reads_give_up_at_the_deadline_with_the_last_answer(cluster):
    controlplane = node_of(cluster, "controlplane")
    cluster.faults.fail("Version", "Unavailable", message="apid is restarting", times=-1, node=controlplane.name)
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            with pytest.raises(TalosTimeoutError) as err:
                client.call(VERSION, deadline=1)
    finally:
        cluster.faults.clear()
    assert err.value.code == "Unavailable"
    assert "did not complete within 1 seconds" in err.value.message and "apid is restarting" in err.value.message


def test_mutations_are_not_retried_unless_asked(cluster):
    controlplane = node_of(cluster, "controlplane")
    method = "machine.MachineService/ServiceRestart"
    request = machine_pb2.ServiceRestartRequest(id="kubelet")
    before = len(audit_of(cluster, method))
    # The injected failure answers once, before the handler runs: a retry
    # would succeed and show up in the audit log.
    cluster.faults.fail("ServiceRestart", "Unavailable", message="node is busy", times=1, node=controlplane.name)
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            with pytest.raises(TalosConnectionError) as err:
                client.call(method, request, node=controlplane.address)
            assert err.value.code == "Unavailable" and "node is busy" in err.value.message
            assert audit_of(cluster, method)[before:] == []

            cluster.faults.fail("ServiceRestart", "Unavailable", times=1, node=controlplane.name)
            items = client.call(method, request, node=controlplane.address, retry_codes=("Unavailable",))
            assert items[0].resp
            assert [entry["code"] for entry in audit_of(cluster, method)[before:]] == ["OK"]
    finally:
        cluster.faults.clear()


def test_wrong_ca_is_a_certificate_verification_sentence(cluster):
    stranger = CertificateAuthority.generate(common_name="stranger").crt_pem.decode()
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint], ca=stranger)) as client:
        with pytest.raises(TalosTLSError) as err:
            client.call(VERSION)
    host = controlplane.endpoint.rsplit(":", 1)[0]
    assert err.value.message.startswith("Certificate verification of endpoint %s failed" % controlplane.endpoint)
    assert "the CA from the ca option" in err.value.message
    assert "list %s among its subject alternative names" % host in err.value.message


@pytest.mark.parametrize("payload", [0, 200000], ids=["small-request", "large-request"])
def test_insecure_connection_to_a_configured_node_says_it_is_configured(cluster, payload):
    controlplane = node_of(cluster, "controlplane")
    request = machine_pb2.ApplyConfigurationRequest(data=b"x" * payload, dry_run=True)
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint], insecure=True)) as client:
        with pytest.raises(TalosTLSError) as err:
            client.call("machine.MachineService/ApplyConfiguration", request)
    assert err.value.message == ("Endpoint %s requires a client certificate, so the node is configured (no longer in "
                                 "maintenance mode): connect with its talosconfig (mutual TLS) instead of insecure: true."
                                 % controlplane.endpoint)
    assert err.value.code == "Unauthenticated" and audit_of(cluster, "machine.MachineService/ApplyConfiguration") == []


def test_reader_certificate_calling_an_admin_rpc(cluster):
    controlplane = node_of(cluster, "controlplane")
    read = machine_pb2.ReadRequest(path=waits.BOOT_ID_PATH)
    with TalosClient(settings_for(cluster, role="reader")) as client:
        assert client.call(VERSION)[0].version.tag == cluster.talos_version
        with pytest.raises(TalosPermissionError) as err:
            client.read_bytes("machine.MachineService/Read", read, node=controlplane.address)
        assert waits.read_boot_id(client, controlplane.address) is None
    assert "needs role os:admin" in err.value.message
    assert "the client certificate carries role os:reader" in err.value.message


def test_reader_certificate_reading_a_sensitive_resource(cluster):
    with TalosClient(settings_for(cluster, role="reader")) as client:
        assert client.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine")["spec"]["stage"] == "running"
        with pytest.raises(TalosPermissionError) as err:
            client.get_resource("config", "MachineConfigs.config.talos.dev", "v1alpha1")
    assert "role os:reader may read resources, but not this type or namespace" in err.value.message
    assert "sensitive resource types need os:admin" in err.value.message


def test_per_node_errors_in_the_reply_envelope(cluster, monkeypatch):
    """A proxy that merges replies (one-to-many) marks failed nodes in metadata.error."""
    controlplane = node_of(cluster, "controlplane")

    def one_to_many(self, node):
        return [("nodes", controlplane.address), ("nodes", "10.255.255.1")]

    monkeypatch.setattr(TalosClient, "_metadata", one_to_many)
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        with pytest.raises(TalosNodeError) as err:
            client.call(VERSION)
    assert err.value.node == "10.255.255.1"
    assert err.value.code == "Unavailable"
    assert "connection refused" in err.value.message


def test_unpack_returns_items_and_raises_on_an_error_item():
    good = machine_pb2.VersionResponse()
    good.messages.add().version.tag = "v1.14.0"
    assert [item.version.tag for item in client_module._unpack(good, "n1")] == ["v1.14.0"]
    bad = machine_pb2.VersionResponse()
    bad.messages.add().version.tag = "v1.14.0"
    failed = bad.messages.add()
    failed.metadata.hostname = "n2"
    failed.metadata.error = "rpc error: code = PermissionDenied desc = not authorized"
    failed.metadata.status.code = 7
    with pytest.raises(TalosNodeError) as err:
        client_module._unpack(bad, None)
    assert (err.value.node, err.value.code) == ("n2", "PermissionDenied")


# A file of several 1 KiB frames that the stream tests read (MachineService/Read streams common.Data as EtcdSnapshot does).
STREAMED_FILE = "/var/lib/streamed.bin"


def streamed_file_on(cluster):
    """The control plane that holds STREAMED_FILE (placed on first use) and the Read request of it."""
    controlplane = node_of(cluster, "controlplane")
    if STREAMED_FILE not in controlplane.placed_files:
        cluster.call(controlplane.place_file, STREAMED_FILE, size=5000)
    return controlplane, machine_pb2.ReadRequest(path=STREAMED_FILE)


def test_data_streams_are_assembled_in_order(cluster):
    controlplane, request = streamed_file_on(cluster)
    frames = []
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        streamed = client.stream(READ, request, node=controlplane.address, on_message=frames.append)
        again = client.read_bytes(READ, request, node=controlplane.address)
    assert streamed is None, "frames given to a callback are not kept as well"
    assert isinstance(again, bytes) and len(again) == 5000
    assert len(frames) > 1, "the file should span several 1 KiB frames"
    assert all(isinstance(frame, common_pb2.Data) for frame in frames)
    assert again == b"".join(frame.bytes for frame in frames)


def test_stopping_at_the_last_message_of_a_stream_the_server_ended_is_no_error(cluster):
    controlplane, request = streamed_file_on(cluster)
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        frames = -(-len(client.read_bytes(READ, request, node=controlplane.address)) // 1024)
        for attempt in range(5):
            seen = []
            assert client.stream(READ, request, node=controlplane.address,
                                 on_message=lambda frame: seen.append(frame) or len(seen) == frames) is None
            assert len(seen) == frames
        assert client.call("machine.MachineService/Version", node=controlplane.address)[0].version.tag


def test_stopping_at_the_first_message_of_a_stream_closes_it_and_the_connection_serves_on(cluster):
    controlplane, request = streamed_file_on(cluster)
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        for attempt in range(5):
            seen = []
            assert client.stream(READ, request, node=controlplane.address, on_message=lambda frame: seen.append(frame) or True) is None
            assert len(seen) == 1
        assert client.call("machine.MachineService/Version", node=controlplane.address)[0].version.tag


def test_a_callback_failure_is_raised_as_it_is(cluster):
    controlplane, request = streamed_file_on(cluster)
    seen = []

    def disk_full(frame):
        seen.append(frame)
        raise OSError(28, "No space left on device")

    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        with pytest.raises(OSError) as err:
            client.stream(READ, request, node=controlplane.address, on_message=disk_full)
        assert client.call("machine.MachineService/Version", node=controlplane.address)[0].version.tag
    assert not isinstance(err.value, TalosError)
    assert err.value.errno == 28
    assert len(seen) == 1, "reading stops at the callback's failure"


def test_a_stream_cut_midway_is_an_error_not_a_silent_retry(cluster):
    controlplane, request = streamed_file_on(cluster)
    frames = []
    # Every attempt is cut after two frames. An attempt cut before the client
    # read anything may be repeated; one that delivered data may not.
    cluster.faults.cut_stream("Read", after_frames=2, times=-1, node=controlplane.name)
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            with pytest.raises((TalosConnectionError, TalosTimeoutError)) as err:
                client.stream(READ, request, node=controlplane.address, on_message=frames.append, deadline=5)
    finally:
        cluster.faults.clear()
    assert len(frames) <= 2, "a partly delivered stream must not be restarted"
    if frames:
        assert err.value.message.startswith("%s on node %s was interrupted" % (READ, controlplane.address))


def test_cosi_resources(cluster):
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        status = client.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", node=controlplane.address)
        listed = client.list_resources("runtime", "MachineStatuses.runtime.talos.dev", node=controlplane.address)
        with pytest.raises(TalosApiError) as err:
            client.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "nope", node=controlplane.address)
    assert status["metadata"]["id"] == "machine"
    assert status["spec"]["stage"] == "running"
    assert [item["metadata"]["id"] for item in listed] == ["machine"]
    assert err.value.code == "NotFound"


def test_call_timeout(cluster):
    controlplane = node_of(cluster, "controlplane")
    cluster.faults.set_latency(controlplane.name, 3)
    try:
        with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
            with pytest.raises(TalosTimeoutError) as err:
                client.call(HOSTNAME, deadline=0.5)
    finally:
        cluster.faults.clear()
    assert err.value.message.startswith("%s on the endpoint node did not complete within 0.5 seconds" % HOSTNAME)


def test_with_settings_gives_a_client_with_other_credentials(cluster):
    with TalosClient(settings_for(cluster, role="reader")) as reader:
        with reader.with_settings(talosconfig=cluster.talosconfig_path(role="admin")) as admin:
            assert admin.settings.client_roles == ["os:admin"]
            assert admin.call(VERSION)[0].version.tag == cluster.talos_version


def test_wait_for_reboot_sees_a_new_boot_id(cluster):
    worker = node_of(cluster, "worker")
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        previous = waits.read_boot_id(client, worker.address)
        assert previous
        client.call("machine.MachineService/Reboot", machine_pb2.RebootRequest(), node=worker.address)
        current = waits.wait_for_reboot(client, worker.address, previous, Waiter(30, interval=0.2))
    assert current and current != previous
    assert current == worker.boot_id
    assert [entry["code"] for entry in audit_of(cluster, "machine.MachineService/Reboot")][-1] == "OK"


@pytest.fixture(scope="module")
def old_cluster(tmp_path_factory):
    started = EmulatedCluster.start(str(tmp_path_factory.mktemp("old-cluster")), controlplanes=1, talos_version="v1.12.0")
    yield started
    started.stop()


def test_unimplemented_names_the_version_that_introduced_the_api(old_cluster):
    request = client_module.METHODS["machine.LifecycleService/Upgrade"].request_type()
    with TalosClient(settings_for(old_cluster)) as client:
        with pytest.raises(TalosUnimplementedError) as err:
            client.stream("machine.LifecycleService/Upgrade", request)
    assert "appeared in Talos v1.13" in err.value.message
    assert err.value.code == "Unimplemented"


def test_a_client_certificate_without_client_auth_is_refused(cluster, tmp_path):
    crt, key = cluster.secrets.os_ca.issue_client(["os:admin"], client_auth=False)
    controlplane = node_of(cluster, "controlplane")
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint], crt=crt.decode(), key=key.decode())) as client:
        with pytest.raises(TalosTLSError) as err:
            client.call(VERSION)
    assert err.value.message.startswith("Endpoint %s refused the client certificate" % controlplane.endpoint)
    assert "clientAuth" in err.value.message


@pytest.fixture(scope="module")
def maintenance_cluster(tmp_path_factory):
    started = EmulatedCluster.start(str(tmp_path_factory.mktemp("maintenance")), controlplanes=1, maintenance=True)
    yield started
    started.stop()


def test_insecure_reaches_a_maintenance_node_and_the_secure_client_does_not(maintenance_cluster):
    node = maintenance_cluster.nodes[0]
    settings = settings_for(maintenance_cluster, endpoints=[node.endpoint], insecure=True)
    with TalosClient(settings) as client:
        assert client.call(VERSION)[0].version.tag == maintenance_cluster.talos_version
        with pytest.raises(TalosPermissionError) as err:
            client.call("machine.MachineService/Reboot", machine_pb2.RebootRequest())
        assert err.value.message.endswith("it needs role os:admin or os:operator and an insecure connection sends no client "
                                          "certificate (only os:reader in maintenance mode).")
        with client.with_settings(insecure=False) as secure:
            with pytest.raises(TalosTLSError) as tls:
                secure.call(VERSION)
    assert tls.value.message.startswith("Certificate verification of endpoint %s failed" % node.endpoint)
    assert "talosconfig context" in tls.value.message


def test_upload_streams_chunks_to_the_node(cluster):
    controlplane = node_of(cluster, "controlplane")
    method = "machine.MachineService/EtcdRecover"
    chunks = [b"a" * 1024, b"b" * 1024, common_pb2.Data(bytes=b"tail")]
    with TalosClient(settings_for(cluster, endpoints=[controlplane.endpoint])) as client:
        items = client.upload(method, iter(chunks), node=controlplane.address)
    assert len(items) == 1
    assert controlplane.etcd_snapshot == b"a" * 1024 + b"b" * 1024 + b"tail"
    entry = audit_of(cluster, method)[-1]
    assert (entry["code"], entry["address"], entry["size"]) == ("OK", controlplane.address, 2052)
