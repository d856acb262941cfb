# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_facts: subsets, node types, maintenance, refusals and several nodes."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import facts as facts_utils
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import config_hash
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_facts
from fake_talos import FakeTalos, cosi_state, fails_with, resource
from module_fakes import run_task

CONFIG_TEXT = "version: v1alpha1\nmachine:\n  type: %s\n  token: abcdef.0123456789abcdef\ncluster:\n  secret: c2VjcmV0\n"
MACHINE_CONFIGS = "MachineConfigs.config.talos.dev"


def node_answers(node, machine_type, hostname, role):
    """What a node of ``machine_type`` (controlplane/worker/None for maintenance) answers a caller with ``role``."""
    control_plane = machine_type == "controlplane"
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0", sha="abc", arch="amd64"),
                                  platform=machine_pb2.PlatformInfo(name="metal", mode="metal"))
    if machine_type:
        version.features.rbac = True
    services = [machine_pb2.ServiceInfo(id="apid", state="Running", health=machine_pb2.ServiceHealth(healthy=True))]
    if control_plane:
        services.append(machine_pb2.ServiceInfo(id="etcd", state="Running", health=machine_pb2.ServiceHealth(healthy=True)))
    if not machine_type:
        etcd_refusal = fails_with("Unimplemented", "machine type is not set, cannot use etcd API")
    elif not control_plane:
        etcd_refusal = fails_with("Unimplemented", "etcd is only available on control plane nodes")
    else:
        etcd_refusal = None

    addresses = "addresses:\n  - %s/24\n" % node
    stored = [
        resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", "stage: %s\nstatus:\n  ready: %s\n  unmetConditions: []\n"
                 % ("running" if machine_type else "maintenance", "true" if machine_type else "false")),
        resource("config", "MachineTypes.config.talos.dev", "machine-type", "%s\n" % (machine_type or "unknown")),
        resource("meta", "ResourceDefinitions.meta.cosi.dev", "members.cluster.talos.dev",
                 "type: Members.cluster.talos.dev\ndefaultNamespace: cluster\n"),
        resource("k8s", "KubeletSpecs.k8s.talos.dev", "kubelet", "image: kubelet\nclientKey: c2VjcmV0LWtleQ==\n"),
        resource("network", "NodeAddresses.net.talos.dev", "current", addresses),
        resource("network", "NodeAddresses.net.talos.dev", "default", addresses),
        resource("cluster", "Members.cluster.talos.dev", "cp-1", "hostname: cp-1\nmachineType: controlplane\n"),
    ]
    if machine_type:
        stored.append(resource("config", MACHINE_CONFIGS, "v1alpha1", CONFIG_TEXT % machine_type
                               + "---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n"))
    state = cosi_state(*stored)

    def get(request, node):
        if request.type == MACHINE_CONFIGS and role != "os:admin":
            return fails_with("PermissionDenied", "not authorized")
        return state(request, node)

    return {
        rpc.VERSION: [version],
        rpc.HOSTNAME: [machine_pb2.Hostname(hostname=hostname or "talos-" + node.rsplit(".", 1)[-1])],
        rpc.SERVICE_LIST: [machine_pb2.ServiceList(services=services)],
        rpc.ETCD_MEMBER_LIST: etcd_refusal or [machine_pb2.EtcdMembers(members=[
            machine_pb2.EtcdMember(id=10, hostname="cp-1", peer_urls=["https://10.5.0.2:2380"])])],
        rpc.ETCD_STATUS: etcd_refusal or [machine_pb2.EtcdStatus(
            member_status=machine_pb2.EtcdMemberStatus(leader=10, member_id=10))],
        rpc.STORAGE_DISKS: [storage_pb2.Disks(disks=[
            storage_pb2.Disk(device_name="/dev/sda", size=10, type=storage_pb2.Disk.SSD, system_disk=True)])],
        rpc.MEMORY: [machine_pb2.Memory(meminfo=machine_pb2.MemInfo(memtotal=4000, memfree=1000))],
        rpc.MOUNTS: [machine_pb2.Mounts(stats=[
            machine_pb2.MountStat(filesystem="/dev/sda6", size=100, available=50, mounted_on="/var")])],
        rpc.COSI_GET: get,
        rpc.COSI_LIST: state,
    }


def cluster(specs, role="os:admin"):
    """Nodes by address: ``type``, ``hostname``, ``down`` or ``error`` (the answer to every call); the caller's ``role``."""
    client = FakeTalos()
    for node, spec in specs.items():
        answers = node_answers(node, spec.get("type"), spec.get("hostname"), role)
        failure = fails_with("Unavailable", "connection refused") if spec.get("down") else spec.get("error")
        for method, answer in answers.items():
            client.answer(method, failure or answer, node=node)
    return client


CP = "10.5.0.2"
WORKER = "10.5.0.3"


def run(client, nodes, **params):
    return run_task(talos_facts, client, targets=nodes, **params)[:2]


class TestSubsets:
    @pytest.mark.parametrize("gather_subset, expected", [
        (["all"], set(facts_utils.SUBSETS)),
        (["min"], {"version", "hostname", "machine"}),
        (["!etcd", "!disks"], set(facts_utils.SUBSETS) - {"etcd", "disks"}),
        (["!all"], {"version", "hostname", "machine"}),
        (["!all", "!min"], set()),
        (["min", "services", "!hostname"], {"version", "machine", "services"}),
        (["config"], {"config"}),
    ])
    def test_resolve(self, gather_subset, expected):
        assert facts_utils.resolve_subsets(gather_subset) == expected

    def test_unknown_subset(self):
        with pytest.raises(TalosConfigError, match=r"^gather_subset entry 'hardware' is not one of all, min, version"):
            facts_utils.resolve_subsets(["hardware"])


class TestOneNode:
    def test_control_plane_facts(self):
        ok, result = run(cluster({CP: {"type": "controlplane", "hostname": "cp-1"}}), [CP])
        assert ok and result["changed"] is False
        facts = result["ansible_facts"]["talos"]
        assert facts["node"] == CP and facts["maintenance"] is False and "unavailable" not in facts
        assert facts["version"]["tag"] == "v1.14.0" and facts["version"]["features"] == {"rbac": True}
        assert facts["version"]["platform"] == {"name": "metal", "mode": "metal"}
        assert facts["hostname"] == "cp-1"
        assert facts["machine"] == {"type": "controlplane", "configured": True, "stage": "running", "ready": True, "unmet_conditions": []}
        assert [service["id"] for service in facts["services"]] == ["apid", "etcd"]
        assert facts["etcd"]["members"][0]["id"] == "000000000000000a"
        assert facts["etcd"]["leader"] == "000000000000000a" and facts["etcd"]["is_leader"] is True
        assert facts["disks"][0]["type"] == "SSD" and facts["disks"][0]["system_disk"] is True
        assert facts["memory"]["memtotal"] == 4000
        assert facts["network"]["addresses"] == ["%s/24" % CP]
        assert facts["mounts"] == [{"filesystem": "/dev/sda6", "size": 100, "available": 50, "mounted_on": "/var"}]

    def test_config_is_a_version_and_hash_without_secrets(self):
        ok, result = run(cluster({CP: {"type": "controlplane"}}), [CP], gather_subset=["config"])
        config = result["ansible_facts"]["talos"]["config"]
        expected_hash = config_hash({"version": "v1alpha1", "machine": {"type": "controlplane", "token": "abcdef.0123456789abcdef"},
                                     "cluster": {"secret": "c2VjcmV0"}})
        assert config == {"version": "v1alpha1", "hash": expected_hash, "machine_type": "controlplane",
                          "documents": ["v1alpha1", "HostnameConfig"]}
        assert "abcdef.0123456789abcdef" not in repr(result) and "c2VjcmV0" not in repr(result)

    def test_worker_has_no_etcd_and_is_not_asked(self):
        client = cluster({WORKER: {"type": "worker"}})
        ok, result = run(client, [WORKER])
        facts = result["ansible_facts"]["talos"]
        assert "etcd" not in facts and "unavailable" not in facts
        assert not [name for name in client.names() if name.startswith("Etcd")]
        assert facts["machine"]["type"] == "worker"

    def test_only_the_requested_subsets_are_read(self):
        client = cluster({CP: {"type": "controlplane"}})
        ok, result = run(client, [CP], gather_subset=["version"])
        assert set(result["ansible_facts"]["talos"]) == {"node", "maintenance", "version"}
        assert set(client.names()) == {"Get", "Version"}

    def test_maintenance_node(self):
        ok, result = run(cluster({WORKER: {"type": None}}), [WORKER], insecure=True)
        facts = result["ansible_facts"]["talos"]
        assert facts["maintenance"] is True
        assert facts["machine"]["configured"] is False and facts["machine"]["stage"] == "maintenance"
        assert facts["version"]["features"] is None
        assert facts["config"] is None
        assert "etcd" not in facts and "unavailable" not in facts

    def test_refused_subset_is_listed_not_fatal(self):
        ok, result = run(cluster({CP: {"type": "controlplane"}}, role="os:reader"), [CP])
        facts = result["ansible_facts"]["talos"]
        assert ok and "config" not in facts
        assert "Permission denied" in facts["unavailable"]["config"]
        assert facts["hostname"]

    @pytest.mark.parametrize("error, message", [
        (fails_with("PermissionDenied", "no request forwarding", endpoint="10.5.0.3:50000"),
         r"^Endpoint 10.5.0.3:50000 refused to forward .* endpoints must be control-plane nodes"),
        (TalosConfigError("The client certificate and key from talosconfig context 'a' cannot be loaded."),
         r"^The client certificate and key .* cannot be loaded"),
        (fails_with("PermissionDenied", "not authorized", client_roles=[]),
         r"^Permission denied for .* the client certificate carries no role"),
    ], ids=["routing", "configuration", "every-call-refused"])
    def test_a_node_that_answered_nothing_fails_the_task(self, error, message):
        with pytest.raises(TalosError, match=message):
            run(cluster({CP: {"error": error}}), [CP])

    def test_unreachable_node_fails_the_task(self):
        with pytest.raises(TalosError, match="unavailable"):
            run(cluster({CP: {"down": True}}), [CP])

    def test_resources(self):
        client = cluster({CP: {"type": "controlplane"}})
        ok, result = run(client, [CP], gather_subset=["!all", "!min"], resources=[
            {"type": "Members.cluster.talos.dev", "namespace": None, "id": None},
            {"type": "KubeletSpecs.k8s.talos.dev", "namespace": "k8s", "id": "kubelet"},
            {"type": "KubeletSpecs.k8s.talos.dev", "namespace": "k8s", "id": "absent"},
        ])
        resources = result["ansible_facts"]["talos"]["resources"]
        assert resources[0]["namespace"] == "cluster" and resources[0]["items"][0]["spec"]["machineType"] == "controlplane"
        assert resources[1]["items"][0]["spec"] == {"image": "kubelet", "clientKey": REDACTED}
        assert resources[1]["items"][0]["metadata"]["id"] == "kubelet"
        assert resources[2]["items"] == []

    def test_resource_without_definition_needs_a_namespace(self):
        with pytest.raises(TalosConfigError, match="set namespace"):
            run(cluster({CP: {"type": "controlplane"}}), [CP], gather_subset=["min"],
                resources=[{"type": "Unknown.example.dev", "namespace": None, "id": None}])


class TestSeveralNodes:
    def test_facts_per_node(self):
        client = cluster({CP: {"type": "controlplane"}, WORKER: {"type": "worker"}})
        ok, result = run(client, [CP, WORKER])
        # Each node's facts once, under nodes; none of them is the host's fact.
        assert ok and set(result) == {"changed", "nodes"} and set(result["nodes"]) == {CP, WORKER}
        assert "etcd" in result["nodes"][CP] and "etcd" not in result["nodes"][WORKER]
        assert result["nodes"][WORKER]["network"]["addresses"] == ["%s/24" % WORKER]

    def test_a_list_of_one_node_is_keyed_as_a_list_of_several(self):
        client = cluster({CP: {"type": "controlplane"}})
        ok, result, _task = run_task(talos_facts, client, targets=[CP], nodes_listed=True, gather_subset=["min"])
        assert ok and set(result) == {"changed", "nodes"} and result["nodes"][CP]["machine"]["type"] == "controlplane"

    def test_a_failed_node_fails_the_task_once_the_others_are_read(self):
        client = cluster({CP: {"type": "controlplane"}, WORKER: {"down": True}})
        with pytest.raises(ActionFailed) as failed:
            run(client, [CP, WORKER])
        assert failed.value.message.startswith("1 of 2 nodes failed (%s): " % WORKER)
        result = failed.value.to_result()
        assert result["nodes"][WORKER]["failed"] is True and "unavailable" in result["nodes"][WORKER]["msg"]
        assert result["nodes"][WORKER]["code"] == "Unavailable" and result["nodes"][WORKER]["node"] == WORKER
        assert result["nodes"][CP]["hostname"] and "ansible_facts" not in result
        # A node that is down is asked once by each read of the first wave (they go out together), never after it.
        asked = [call for call in client.calls if call.node == WORKER]
        assert len(asked) == len(set((call.method, call.request.SerializeToString()) for call in asked)) == 8
        assert not set(call.method for call in asked) & {rpc.COSI_LIST, rpc.ETCD_MEMBER_LIST}

    def test_a_refused_route_fails_that_node_only(self):
        refuse = fails_with("PermissionDenied", "no request forwarding", endpoint="10.5.0.9:50000")
        with pytest.raises(ActionFailed) as failed:
            run(cluster({CP: {"type": "controlplane"}, WORKER: {"error": refuse}}), [CP, WORKER])
        result = failed.value.to_result()
        assert result["nodes"][WORKER]["failed"] is True and "refused to forward" in result["nodes"][WORKER]["msg"]
        assert "unavailable" not in result["nodes"][CP] and "failed" not in result["nodes"][CP]

    def test_every_node_failed(self):
        with pytest.raises(ActionFailed) as failed:
            run(cluster({CP: {"down": True}, WORKER: {"down": True}}), [CP, WORKER])
        assert failed.value.message.startswith("2 of 2 nodes failed (%s, %s): " % (CP, WORKER))


class TestConcurrency:
    def test_max_concurrency_reaches_every_concurrent_read(self):
        client = cluster({CP: {"type": "controlplane"}, WORKER: {"type": "worker"}})
        ok, result = run(client, [CP, WORKER], gather_subset=["min", "etcd", "network"], max_concurrency=5)
        concurrency = [call.kwargs["max_concurrency"] for call in client.calls if call.via in ("call_many", "stream_many")]
        assert ok and concurrency and set(concurrency) == {5}
        assert result["nodes"][WORKER]["network"]["addresses"] == ["%s/24" % WORKER]
