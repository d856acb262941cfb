# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What talosctl's everyday commands read, answered as Talos does (tests/integration/talosctl_judge.py runs talosctl
itself): unserved RPCs, time, stats, netstat, events, the resources talosctl and its support bundle read, member
names as targets and the listener on port 50000."""

import base64
import hashlib
import re
import socket
import ssl

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from google.protobuf import empty_pb2
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from talos_emulator import extra_api

M = "machine.MachineService/"


def _unserved(client, path, **metadata):
    async def call():
        async with client._channel(None).request(path, Cardinality.UNARY_UNARY, empty_pb2.Empty, empty_pb2.Empty,
                                                 timeout=10, metadata=metadata or None) as stream:
            await stream.send_message(empty_pb2.Empty(), end=True)
            return await stream.recv_message()

    with pytest.raises(GRPCError) as raised:
        client.loop.run_until_complete(call())
    return raised.value.status, raised.value.message


def test_an_unserved_rpc_answers_unimplemented_as_grpc_go_does(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster)
    # grpclib's own answer has no content type, which grpc-go rejects; the emulator answers as grpc-go does.
    assert _unserved(client, "/machine.MachineService/EtcdDowngradeValidate") == (
        Status.UNIMPLEMENTED, "unknown method EtcdDowngradeValidate for service machine.MachineService")
    assert _unserved(client, "/machine.Nope/Nothing") == (Status.UNIMPLEMENTED, "unknown service machine.Nope")
    # Routed like any call: the target answers, a worker endpoint still refuses to forward.
    assert _unserved(client, "/machine.MachineService/PacketCapture", node=cluster.workers[0].address)[0] == Status.UNIMPLEMENTED


def test_time_stats_and_netstat(emulator, api):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True)
    client = api(cluster)
    reply = client.call("time.TimeService/Time").messages[0]
    assert reply.server == "time.cloudflare.com" and abs(reply.localtime.seconds - reply.remotetime.seconds) <= 1
    assert client.call("time.TimeService/TimeCheck", extra_api.TimeRequest(server="ntp.example.org")).messages[0].server == (
        "ntp.example.org")
    with pytest.raises(GRPCError) as raised:
        client.call("time.TimeService/TimeCheck", extra_api.TimeRequest())
    assert (raised.value.status, raised.value.message) == (Status.INVALID_ARGUMENT, "ntp server is required")

    stats = client.call(M + "Stats", extra_api.StatsRequest(namespace="system")).messages[0].stats
    assert sorted(stat.id for stat in stats) == ["apid", "etcd", "kubelet", "trustd"] and all(stat.memory_usage for stat in stats)
    worker = client.call(M + "Stats", extra_api.StatsRequest(namespace="system"), node=cluster.workers[0].address).messages[0].stats
    assert sorted(stat.id for stat in worker) == ["apid", "kubelet"]
    pods = client.call(M + "Stats", extra_api.StatsRequest(namespace="k8s.io", driver=common_pb2.CRI)).messages[0].stats
    assert {stat.pod_id for stat in pods} == {"kube-system/%s-controlplane-1" % name
                                              for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")}

    request = extra_api.NetstatRequest(filter=extra_api.NETSTAT_LISTENING)
    request.l4proto.tcp, request.l4proto.tcp6, request.feature.pid = True, True, True
    records = client.call(M + "Netstat", request).messages[0].connectrecord
    listening = {(record.localport, record.process.name) for record in records}
    assert {(50000, "apid"), (50001, "trustd"), (10250, "kubelet")} <= listening
    assert all(record.state == extra_api.TCP_LISTEN and record.remoteport == 0 for record in records)
    # The members' peer connections, without the listeners.
    request.filter = extra_api.NETSTAT_CONNECTED
    connected = client.call(M + "Netstat", request).messages[0].connectrecord
    assert [record.remoteip for record in connected] == [cluster.controlplanes[1].address]
    with pytest.raises(GRPCError) as raised:
        client.call(M + "Netstat", extra_api.NetstatRequest(filter=7))
    assert raised.value.status == Status.INVALID_ARGUMENT


def test_events_are_xids_and_a_boot_fills_the_buffer(emulator, api):
    cluster = emulator(bootstrapped=True)
    client = api(cluster)
    events = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=5), limit=6)[1:]
    ids = [event.id for event in events]
    assert len(ids) == 5 and all(re.match(r"^[0-9a-v]{20}$", event_id) for event_id in ids) and ids == sorted(ids)
    services = cluster.controlplanes[0].services
    # Each service's last event is its runner's or, with a health check, the check's.
    assert services["etcd"].events[-1][0] == "Health check successful"
    assert services["machined"].events[-2][0] == "Service started as goroutine"
    assert services["apid"].events[-2][0].startswith("Started task apid (PID ")
    assert services["dashboard"].events[-1][0].startswith('Process Process(["/sbin/dashboard"]) started with PID ')


def _list(client, namespace, resource_type, **options):
    replies = client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace=namespace, type=resource_type), **options)
    return {reply.resource.metadata.id: yaml.safe_load(reply.resource.spec.yaml_spec) for reply in replies}


def test_the_resources_talosctl_reads(emulator, api):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    client = api(cluster)
    volumes = _list(client, "runtime", "VolumeStatuses.block.talos.dev")
    assert volumes["EPHEMERAL"]["size"] > 100 * 10 ** 9 and volumes["EPHEMERAL"]["prettySize"] == "105 GB"
    assert _list(client, "runtime", "SystemDisks.block.talos.dev") == {"system-disk": {"diskID": "sda", "devPath": "/dev/sda"}}
    assert set(_list(client, "runtime", "DiscoveredVolumes.block.talos.dev")) == {"sda", "sda1", "sda2", "sda3", "sda4", "sdb"}
    assert set(_list(client, "network", "AddressStatuses.net.talos.dev")) == {
        "lo/127.0.0.1/8", "eth0/%s/8" % cluster.controlplanes[0].address}
    root = _list(client, "secrets", "OSRootSecrets.secrets.talos.dev")["os"]
    assert root["issuingCA"]["key"] and cluster.controlplanes[0].address in root["certSANIPs"]
    worker_root = _list(client, "secrets", "OSRootSecrets.secrets.talos.dev", node=cluster.workers[0].address)["os"]
    assert "key" not in worker_root["issuingCA"]
    with pytest.raises(GRPCError) as raised:
        _list(api(cluster, role="reader"), "secrets", "OSRootSecrets.secrets.talos.dev")
    assert (raised.value.status, raised.value.message) == (Status.PERMISSION_DENIED, "not authorized")


def test_member_names_resolve_when_the_config_says(emulator, api):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True)
    client = api(cluster)
    name = cluster.workers[0].name
    with pytest.raises(GRPCError) as raised:
        client.call(M + "Hostname", node=name)
    assert raised.value.status == Status.UNAVAILABLE and "lookup %s: no such host" % name in raised.value.message
    endpoint = cluster.controlplanes[0]
    config = yaml.safe_load(endpoint.config_bytes)
    config["machine"].setdefault("features", {})["hostDNS"] = {"enabled": True, "resolveMemberNames": True}
    client.call(M + "ApplyConfiguration", machine_pb2.ApplyConfigurationRequest(
        data=yaml.safe_dump(config).encode(), mode=machine_pb2.ApplyConfigurationRequest.NO_REBOOT))
    assert client.call(M + "Hostname", node=name).messages[0].hostname == name


def test_a_node_in_maintenance_mode_listens_on_port_50000(emulator):
    cluster = emulator(maintenance=True)
    node = cluster.controlplanes[0]
    if not node.server.on_api_port:
        pytest.fail("port 50000 of %s is taken on this machine" % node.address)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((node.address, 50000), timeout=10) as raw, context.wrap_socket(raw) as tls:
        leaf = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
    spki = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    # The fingerprint as Talos prints it (base64 of the SHA-256) names the certificate served there.
    assert base64.b64encode(hashlib.sha256(spki).digest()).decode() == node.server.maintenance_fingerprint
