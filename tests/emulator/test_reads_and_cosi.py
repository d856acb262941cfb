# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubeconfig (§8), Read and statistics (§12), storage Disks and COSI State (§3.4, wire-contract §7)."""

import gzip
import io
import tarfile

import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

M = "machine.MachineService/"


def _error(client, method, request=None, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(method, request, **options)
    return excinfo.value.status, excinfo.value.message


def _get(client, namespace, resource_type, resource_id, **options):
    return client.call("cosi.resource.State/Get", state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id), **options).resource


def _list(client, namespace, resource_type, **options):
    return [reply.resource for reply in client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace=namespace, type=resource_type), **options)]


def test_kubeconfig_is_one_gzipped_tar_frame(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster)
    frames = client.call(M + "Kubeconfig")
    assert len(frames) == 1
    with tarfile.open(fileobj=gzip.GzipFile(fileobj=io.BytesIO(frames[0].bytes))) as archive:
        members = archive.getmembers()
        assert [(member.name, member.mode) for member in members] == [("kubeconfig", 0o600)]
        kubeconfig = yaml.safe_load(archive.extractfile(members[0]))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://%s:6443" % cluster.nodes[0].address
    assert kubeconfig["current-context"] == "admin@emulated"
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "Kubeconfig", node=cluster.workers[0].address)
    assert (excinfo.value.status, excinfo.value.message) == (Status.UNIMPLEMENTED, "kubeconfig is only available on control plane nodes")


def test_read_boot_id_and_errors(emulator, api):
    cluster = emulator()
    client = api(cluster)
    frames = client.call(M + "Read", machine_pb2.ReadRequest(path="/proc/sys/kernel/random/boot_id"))
    assert b"".join(frame.bytes for frame in frames) == (cluster.nodes[0].boot_id + "\n").encode()
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "Read", machine_pb2.ReadRequest(path="/etc/missing"))
    assert excinfo.value.status == Status.NOT_FOUND
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "Read", machine_pb2.ReadRequest(path="/var"))
    assert (excinfo.value.status, excinfo.value.message) == (Status.UNKNOWN, "path must be a regular file")


def test_statistics_and_disks(emulator, api):
    cluster = emulator()
    client = api(cluster, role="reader")
    assert client.call(M + "Memory").messages[0].meminfo.memtotal == 8148892
    assert client.call(M + "LoadAvg").messages[0].load1 == pytest.approx(0.12)
    assert client.call(M + "SystemStat").messages[0].boot_time == int(cluster.nodes[0].booted_at)
    assert len(client.call(M + "CPUInfo").messages[0].cpu_info) == 2
    assert client.call(M + "Mounts").messages[0].stats[0].mounted_on == "/system/state"
    disks = client.call("storage.StorageService/Disks").messages[0].disks
    assert [(disk.device_name, disk.name, disk.system_disk) for disk in disks] == [("/dev/sda", "", True), ("/dev/sdb", "", False)]


def test_cosi_machine_status_and_hostname(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster, role="reader")
    status = _get(client, "runtime", "MachineStatuses.runtime.talos.dev", "machine")
    assert status.metadata.namespace == "runtime" and status.metadata.id == "machine"
    assert yaml.safe_load(status.spec.yaml_spec) == {"stage": "running", "status": {"ready": True, "unmetConditions": []}}
    # The Go client decodes proto_spec (MachineStatusSpec: stage 1 = RUNNING (4), status 2 = {ready 1 = true}).
    assert status.spec.proto_spec == b"\x08\x04\x12\x02\x08\x01"
    hostname = _get(client, "network", "HostnameStatuses.net.talos.dev", "hostname", node=cluster.workers[0].address)
    assert yaml.safe_load(hostname.spec.yaml_spec)["hostname"] == "worker-1"
    nodename = _get(client, "k8s", "Nodenames.kubernetes.talos.dev", "nodename")
    assert yaml.safe_load(nodename.spec.yaml_spec)["nodename"] == "controlplane-1"
    members = _list(client, "cluster", "Members.cluster.talos.dev")
    assert sorted(yaml.safe_load(member.spec.yaml_spec)["hostname"] for member in members) == ["controlplane-1", "worker-1"]
    addresses = _list(client, "network", "NodeAddresses.net.talos.dev")
    assert yaml.safe_load(addresses[0].spec.yaml_spec) == {"addresses": ["%s/8" % cluster.nodes[0].address]}
    machine_type = _get(client, "config", "MachineTypes.config.talos.dev", "machine-type", node=cluster.workers[0].address)
    assert yaml.safe_load(machine_type.spec.yaml_spec) == "worker"
    assert machine_type.spec.proto_spec == b"\x08\x03"
    address = cluster.workers[0].address
    member = next(member for member in members if yaml.safe_load(member.spec.yaml_spec)["hostname"] == "worker-1")
    net_ip = b"\x0a\x04" + bytes(int(part) for part in address.split("."))
    assert b"\x12\x06" + net_ip in member.spec.proto_spec and b"\x20\x03" in member.spec.proto_spec


def test_cosi_machine_config_is_sensitive(emulator, api):
    cluster = emulator()
    assert _error(api(cluster, role="reader"), "cosi.resource.State/Get", state_pb2.GetRequest(
        namespace="config", type="MachineConfigs.config.talos.dev", id="v1alpha1")) == (Status.PERMISSION_DENIED, "not authorized")
    config = _get(api(cluster), "config", "MachineConfigs.config.talos.dev", "v1alpha1")
    assert yaml.safe_load(config.spec.yaml_spec) == cluster.nodes[0].config
    text = cluster.nodes[0].config_bytes
    assert config.spec.proto_spec.endswith(text) and config.spec.proto_spec.startswith(b"\x0a")


def test_cosi_errors(emulator, api):
    cluster = emulator()
    client = api(cluster)
    assert _error(client, "cosi.resource.State/Get", state_pb2.GetRequest(namespace="runtime", type="Bogus.talos.dev", id="x")) == (
        Status.PERMISSION_DENIED, 'resource type "Bogus.talos.dev" is not supported')
    assert _error(client, "cosi.resource.State/Get", state_pb2.GetRequest(
        namespace="nowhere", type="MachineStatuses.runtime.talos.dev", id="machine")) == (
        Status.PERMISSION_DENIED, 'namespace "nowhere" is not supported')
    assert _error(client, "cosi.resource.State/Get", state_pb2.GetRequest(
        namespace="runtime", type="MachineStatuses.runtime.talos.dev", id="other")) == (
        Status.NOT_FOUND, "resource MachineStatuses.runtime.talos.dev(runtime/other@undefined) doesn't exist")


def test_resource_definitions_resolve_aliases(emulator, api):
    cluster = emulator()
    definitions = _list(api(cluster), "meta", "ResourceDefinitions.meta.cosi.dev")
    specs = {resource.metadata.id: yaml.safe_load(resource.spec.yaml_spec) for resource in definitions}
    status = specs["machinestatuses.runtime.talos.dev"]
    assert status["type"] == "MachineStatuses.runtime.talos.dev" and status["defaultNamespace"] == "runtime"
    assert "machinestatus" in status["allAliases"]
    assert specs["machineconfigs.config.talos.dev"]["sensitivity"] == "sensitive"


def test_cosi_watch_follows_machine_status_through_a_reboot(emulator, api):
    cluster = emulator(reboot_seconds=0.1)
    client = api(cluster)
    request = state_pb2.WatchRequest(namespace="runtime", type="MachineStatuses.runtime.talos.dev", id="machine")
    # As the COSI server: an empty reply says the watch is established, then the resource.
    established, first = client.call("cosi.resource.State/Watch", request, limit=2, timeout=3)
    assert list(established.event) == []
    assert first.event[0].event_type == state_pb2.CREATED
    watch = client.call_async("cosi.resource.State/Watch", request, limit=3, timeout=3)
    client.call(M + "Reboot")
    events = client.wait(watch)[0][1:]
    # The watch sees the node leave "running" before the connection drops.
    stages = [yaml.safe_load(response.event[0].resource.spec.yaml_spec)["stage"] for response in events]
    assert stages == ["running", "rebooting"]
    assert events[1].event[0].event_type == state_pb2.UPDATED
    cluster.wait_until(lambda: cluster.nodes[0].reboots == 1)
    cluster.wait_ready(cluster.nodes[0])
    again = client.call("cosi.resource.State/Watch", request, limit=2, timeout=3)[1].event[0]
    assert yaml.safe_load(again.resource.spec.yaml_spec)["stage"] == "running"
    request.options.bootstrap_contents = True
    assert _error(client, "cosi.resource.State/Watch", request) == (
        Status.UNIMPLEMENTED, "bootstrap contents is not implemented for resource watch")


def _members(client, **options):
    return dict((member.metadata.id, yaml.safe_load(member.spec.yaml_spec)) for member in _list(client, "cluster", "Members.cluster.talos.dev", **options))


def test_members_match_what_each_node_reports_and_follow_the_cluster(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster, role="reader")
    members = _members(client)
    assert sorted(members) == ["controlplane-1", "worker-1"]
    for node in cluster.nodes:
        member = members[node.hostname]
        version = client.call(M + "Version", node=node.address).messages[0]
        hostname = client.call(M + "Hostname", node=node.address).messages[0]
        assert member["hostname"] == hostname.hostname == node.hostname
        assert member["operatingSystem"] == "Talos (%s)" % version.version.tag
        assert member["addresses"] == [node.address]
        assert member["nodeId"] == node.identity
        machine_type = _get(client, "config", "MachineTypes.config.talos.dev", "machine-type", node=node.address)
        assert member["machineType"] == yaml.safe_load(machine_type.spec.yaml_spec)
    assert members["controlplane-1"]["controlPlane"] == {"apiServerPort": 6443} and "controlPlane" not in members["worker-1"]
    # Every node sees the same members.
    assert _members(client, node=cluster.workers[0].address) == members

    added = cluster.add_node("worker")
    assert added.name == "worker-2" and added.address not in [node.address for node in cluster.nodes[:-1]]
    assert sorted(_members(client)) == ["controlplane-1", "worker-1", "worker-2"]
    assert client.call(M + "Hostname", node=added.address).messages[0].hostname == "worker-2"
    with open("%s/state.json" % cluster.state_dir) as state:
        assert [node["name"] for node in yaml.safe_load(state)["nodes"]][-1] == "worker-2"

    # A node whose configuration turns discovery off neither publishes itself nor sees members.
    cluster.call(lambda: added.config["cluster"]["discovery"].update(enabled=False))
    assert sorted(_members(client)) == ["controlplane-1", "worker-1"]
    assert _members(client, node=added.address) == {}
