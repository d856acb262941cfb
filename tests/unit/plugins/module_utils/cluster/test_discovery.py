# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for cluster_nodes: Members, the etcd and talosconfig fallback, addresses and versions."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import discovery as cluster_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, TalosTLSError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, cosi_state, fails_with, resource

MEMBERS = "Members.cluster.talos.dev"
NODE_ADDRESSES = "NodeAddresses.net.talos.dev"

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


def cluster(members=(), etcd=(), nodes=None, configured=(), list_error=None):
    """The endpoint answers Members (``members``: (id, spec) pairs) and the etcd member list (``etcd``: (hostname,
    address) pairs, or the answer that refuses it); ``nodes`` answer by address: ``hostname``, ``type``, ``version``,
    ``addresses``, or ``down``."""
    def members_list(request, _node):
        assert (request.namespace, request.type) == ("cluster", MEMBERS)
        return list_error or [state_pb2.ListResponse(resource=resource("cluster", MEMBERS, member_id, spec))
                              for member_id, spec in members]

    def etcd_members(request, _node):
        assert request.query_local is False
        if not isinstance(etcd, (list, tuple)):
            return etcd
        return [machine_pb2.EtcdMembers(members=[
            machine_pb2.EtcdMember(id=index + 1, hostname=hostname, peer_urls=["https://%s:2380" % address],
                                   client_urls=["https://%s:2379" % address])
            for index, (hostname, address) in enumerate(etcd)])]

    client = FakeTalos(nodes=list(configured) or None)
    client.answer(rpc.COSI_LIST, members_list, node=None).answer(rpc.ETCD_MEMBER_LIST, etcd_members, node=None)
    for address, spec in (nodes or {}).items():
        for method, answer in node_answers(address, spec).items():
            client.answer(method, fails_with("Unavailable", "connection refused") if spec.get("down") else answer, node=address)
    return client


def node_answers(address, spec):
    """What a node reports about itself: Version, Hostname, its machine status and type, and its addresses."""
    def node_addresses(request, _node):
        assert request.type == NODE_ADDRESSES
        listed = "".join("  - %s\n" % each for each in spec.get("addresses", [address + "/24"]))
        return [state_pb2.ListResponse(resource=resource("network", NODE_ADDRESSES, "current", "addresses:\n" + listed))]

    return {
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag=spec.get("version")))],
        rpc.HOSTNAME: [machine_pb2.Hostname(hostname=spec.get("hostname"))],
        rpc.COSI_GET: cosi_state(resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", "stage: running\n"),
                                 resource("config", "MachineTypes.config.talos.dev", "machine-type", "%s\n" % spec.get("type"))),
        rpc.COSI_LIST: node_addresses,
    }


def asked_nodes(client):
    """The nodes asked anything (the endpoint itself left out)."""
    return [call.node for call in client.calls if call.node is not None]


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
    client = cluster(members=[("cp-1", MEMBER), ("w-1", worker)], etcd=fails_with("Unavailable", "never asked"))
    nodes, source = cluster_nodes.discover(client)
    assert source == "members"
    assert nodes == [
        {"hostname": "cp-1", "addresses": ["10.5.0.2", "fd00::2"], "machine_type": "controlplane", "os_version": "v1.14.0",
         "node_id": "7x1SuC8Ege5BGXdAfTEff5iQnlWZLfv9h1LGMxA2pYkC", "source": "members"},
        {"hostname": "w-1", "addresses": ["10.5.0.3"], "machine_type": "worker", "os_version": "v1.13.2", "node_id": None,
         "source": "members"},
    ]
    assert asked_nodes(client) == []


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
    client = cluster(members=[("cp-1", MEMBER)] if not use_members else [], etcd=[("cp-1", "10.5.0.2"), ("cp-2", "10.5.0.4")],
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
    client = cluster(etcd=[("cp-1", "10.5.0.2"), ("cp-2", "10.5.0.4")], nodes=specs)
    nodes, _source = cluster_nodes.discover(client, warn=warnings.append)
    assert nodes[1] == {"hostname": "cp-2", "addresses": ["10.5.0.4"], "machine_type": "controlplane", "os_version": None,
                        "node_id": None, "source": "etcd"}
    assert len(warnings) == 1 and warnings[0].startswith("Node 10.5.0.4 did not answer (") and "etcd says" in warnings[0]


def test_an_etcd_refusal_is_a_warning_and_the_configured_nodes_remain():
    warnings = []
    client = cluster(etcd=fails_with("FailedPrecondition", "etcd is not bootstrapped"),
                     nodes={"10.5.0.3": {"hostname": "w-1", "type": "worker", "version": "v1.14.0"}}, configured=["10.5.0.3"])
    nodes, _source = cluster_nodes.discover(client, warn=warnings.append)
    assert [node["hostname"] for node in nodes] == ["w-1"]
    assert "The etcd member list is not available" in warnings[0]


def test_no_members_no_etcd_and_no_nodes_is_an_empty_answer():
    assert cluster_nodes.discover(cluster()) == ([], "none")


def test_unreachable_or_untrusted_endpoints_raise():
    error = TalosTLSError("Certificate verification of endpoint 10.5.0.2:50000 failed.")
    with pytest.raises(TalosTLSError):
        cluster_nodes.discover(cluster(list_error=error))
    with pytest.raises(TalosError):
        cluster_nodes.discover(cluster(etcd=fails_with("Unavailable", "connection refused")), use_members=False)
