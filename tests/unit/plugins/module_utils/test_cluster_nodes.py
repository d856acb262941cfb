# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for cluster_nodes: Members, the etcd and talosconfig fallback, addresses and versions."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import cluster_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError, TalosTLSError, from_status
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


def resource(namespace, resource_type, resource_id, yaml_spec):
    return resource_pb2.Resource(metadata=resource_pb2.Metadata(namespace=namespace, type=resource_type, id=resource_id, version="1"),
                                 spec=resource_pb2.Spec(yaml_spec=yaml_spec))


MEMBER = """nodeId: 7x1SuC8Ege5BGXdAfTEff5iQnlWZLfv9h1LGMxA2pYkC
addresses:
  - 10.5.0.2
  - fd00::2
hostname: cp-1
machineType: controlplane
operatingSystem: Talos (v1.14.0)
controlPlane:
  apiServerPort: 6443
"""


class Settings:
    insecure = False


class FakeClient:
    """The endpoint answers Members (``members``) and etcd (``etcd`` member list or an error); ``nodes`` by address."""

    def __init__(self, members=(), etcd=None, nodes=None, configured=(), list_error=None):
        self.settings = Settings()
        self.members = list(members)
        self.etcd = etcd if etcd is not None else []
        self.node_specs = nodes or {}
        self.nodes = list(configured) or [None]
        self.list_error = list_error
        self.asked = []

    def list_resources(self, namespace, resource_type, node=None, deadline=None):
        assert (namespace, resource_type, node) == ("cluster", "Members.cluster.talos.dev", None)
        if self.list_error:
            raise self.list_error
        return [resource_to_dict(resource("cluster", resource_type, member_id, spec)) for member_id, spec in self.members]

    def call(self, method, request=None, node=None, **_kwargs):
        assert method == "machine.MachineService/EtcdMemberList" and node is None and request.query_local is False
        if isinstance(self.etcd, TalosError):
            raise self.etcd
        members = [machine_pb2.EtcdMember(id=index + 1, hostname=hostname, peer_urls=["https://%s:2380" % address],
                                          client_urls=["https://%s:2379" % address])
                   for index, (hostname, address) in enumerate(self.etcd)]
        return [machine_pb2.EtcdMembers(members=members)]

    def _answer(self, method, request, node):
        spec = self.node_specs[node]
        self.asked.append(node)
        if spec.get("down"):
            raise from_status("Unavailable", "connection refused", method, node)
        name = method.rsplit("/", 1)[-1]
        if name == "Version":
            return [machine_pb2.Version(version=machine_pb2.VersionInfo(tag=spec["version"]))]
        if name == "Hostname":
            return [machine_pb2.Hostname(hostname=spec["hostname"])]
        if request.type == "MachineStatuses.runtime.talos.dev":
            return [state_pb2.GetResponse(resource=resource("runtime", request.type, "machine", "stage: running\n"))]
        if request.type == "MachineTypes.config.talos.dev":
            return [state_pb2.GetResponse(resource=resource("config", request.type, "machine-type", spec["type"] + "\n"))]
        raise AssertionError("unexpected call %s %s" % (method, getattr(request, "type", "")))

    def call_many(self, method, request=None, nodes=None, **_kwargs):
        results = {}
        for node in nodes:
            try:
                results[node] = self._answer(method, request, node)
            except TalosError as error:
                results[node] = error
        return results

    def stream_many(self, method, request=None, nodes=None, **_kwargs):
        results = {}
        for node in nodes:
            try:
                results[node] = self.stream(method, request, node=node)
            except TalosError as error:
                results[node] = error
        return results

    def stream(self, method, request=None, node=None, **_kwargs):
        assert request.type == "NodeAddresses.net.talos.dev"
        addresses = "".join("  - %s\n" % address for address in self.node_specs[node].get("addresses", [node + "/24"]))
        return [state_pb2.ListResponse(resource=resource("network", request.type, "current", "addresses:\n" + addresses))]


@pytest.mark.parametrize("addresses, family, expected", [
    (["fd00::2", "10.5.0.2", "10.6.0.2"], "ipv4", "10.5.0.2"),
    (["10.5.0.2", "fd00::2"], "ipv6", "fd00::2"),
    (["fd00::2"], "ipv4", "fd00::2"),
    (["10.5.0.2"], "ipv6", "10.5.0.2"),
    ([], "ipv4", None),
])
def test_preferred_address(addresses, family, expected):
    assert cluster_nodes.preferred_address(addresses, family) == expected


def test_members_are_the_nodes_when_discovery_has_some():
    worker = "addresses: [10.5.0.3]\nhostname: w-1\nmachineType: worker\noperatingSystem: Talos (v1.13.2)\n"
    client = FakeClient(members=[("cp-1", MEMBER), ("w-1", worker)], etcd=from_status("Unavailable", "never asked", "x", None))
    nodes, source = cluster_nodes.discover(client)
    assert source == "members"
    assert nodes == [
        {"hostname": "cp-1", "addresses": ["10.5.0.2", "fd00::2"], "machine_type": "controlplane", "os_version": "v1.14.0",
         "node_id": "7x1SuC8Ege5BGXdAfTEff5iQnlWZLfv9h1LGMxA2pYkC", "source": "members"},
        {"hostname": "w-1", "addresses": ["10.5.0.3"], "machine_type": "worker", "os_version": "v1.13.2", "node_id": None,
         "source": "members"},
    ]
    assert client.asked == []


def test_a_member_without_hostname_is_named_by_its_resource_id():
    node = cluster_nodes.member_node(resource_to_dict(resource("cluster", "Members.cluster.talos.dev", "talos-abc",
                                                               "addresses: [10.5.0.9]\nmachineType: worker\n")))
    assert node["hostname"] == "talos-abc" and node["os_version"] is None


@pytest.mark.parametrize("use_members", [True, False])
def test_without_members_the_configured_nodes_and_etcd_members_are_asked(use_members):
    specs = {
        "10.5.0.3": {"hostname": "w-1", "type": "worker", "version": "v1.14.0", "addresses": ["10.5.0.3/24", "fd00::3/64"]},
        "10.5.0.2": {"hostname": "cp-1", "type": "controlplane", "version": "v1.14.0"},
        "10.5.0.4": {"hostname": "cp-2", "type": "controlplane", "version": "v1.13.0"},
    }
    client = FakeClient(members=[("cp-1", MEMBER)] if not use_members else [], etcd=[("cp-1", "10.5.0.2"), ("cp-2", "10.5.0.4")],
                        nodes=specs, configured=["10.5.0.3", "10.5.0.2"])
    nodes, source = cluster_nodes.discover(client, use_members=use_members)
    assert source == "nodes and etcd"
    assert [(n["hostname"], n["addresses"], n["machine_type"], n["os_version"], n["source"]) for n in nodes] == [
        ("w-1", ["10.5.0.3", "fd00::3"], "worker", "v1.14.0", "nodes"),
        ("cp-1", ["10.5.0.2"], "controlplane", "v1.14.0", "nodes"),
        ("cp-2", ["10.5.0.4"], "controlplane", "v1.13.0", "etcd"),
    ]


def test_a_node_that_does_not_answer_keeps_what_etcd_says_and_is_warned_about():
    specs = {"10.5.0.2": {"hostname": "cp-1", "type": "controlplane", "version": "v1.14.0"}, "10.5.0.4": {"down": True}}
    warnings = []
    client = FakeClient(etcd=[("cp-1", "10.5.0.2"), ("cp-2", "10.5.0.4")], nodes=specs)
    nodes, _source = cluster_nodes.discover(client, warn=warnings.append)
    assert nodes[1] == {"hostname": "cp-2", "addresses": ["10.5.0.4"], "machine_type": "controlplane", "os_version": None,
                        "node_id": None, "source": "etcd"}
    assert len(warnings) == 1 and warnings[0].startswith("Node 10.5.0.4 did not answer (") and "etcd says" in warnings[0]


def test_an_etcd_refusal_is_a_warning_and_the_configured_nodes_remain():
    warnings = []
    client = FakeClient(etcd=from_status("FailedPrecondition", "etcd is not bootstrapped", "machine.MachineService/EtcdMemberList", None),
                        nodes={"10.5.0.3": {"hostname": "w-1", "type": "worker", "version": "v1.14.0"}}, configured=["10.5.0.3"])
    nodes, _source = cluster_nodes.discover(client, warn=warnings.append)
    assert [node["hostname"] for node in nodes] == ["w-1"]
    assert "The etcd member list is not available" in warnings[0]


def test_no_members_no_etcd_and_no_nodes_is_an_empty_answer():
    assert cluster_nodes.discover(FakeClient()) == ([], "none")


def test_unreachable_or_untrusted_endpoints_raise():
    error = TalosTLSError("Certificate verification of endpoint 10.5.0.2:50000 failed.")
    with pytest.raises(TalosTLSError):
        cluster_nodes.discover(FakeClient(list_error=error))
    down = from_status("Unavailable", "connection refused", "machine.MachineService/EtcdMemberList", None)
    with pytest.raises(TalosError):
        cluster_nodes.discover(FakeClient(etcd=down), use_members=False)
