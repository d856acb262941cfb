# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet-sized emulated cluster: 250 nodes in one process, reached through one endpoint."""

import ipaddress

import pytest

from talos_emulator import EmulatedCluster


def test_250_nodes_answer_through_one_endpoint(emulator, api):
    cluster = emulator(controlplanes=5, workers=245, reboot_seconds=0.1)
    assert len(cluster.controlplanes) == 5 and len(cluster.workers) == 245
    addresses = [node.address for node in cluster.nodes]
    assert len(set(addresses)) == 250
    assert all(ipaddress.ip_address(address).is_loopback for address in addresses)
    # Neither the network address nor the broadcast address of a /24, nor 127.0.x.1-10, is handed out.
    assert all(11 <= int(address.rsplit(".", 1)[1]) <= 254 for address in addresses)

    client = api(cluster)
    for node in (cluster.nodes[0], cluster.nodes[4], cluster.nodes[5], cluster.nodes[130], cluster.nodes[-1]):
        reply = client.call("machine.MachineService/Hostname", node=node.address)
        assert reply.messages[0].hostname == node.name
    # One-to-many through the same endpoint: every target answers once, under its own address.
    targets = [node.address for node in cluster.nodes[::25]]
    reply = client.call("machine.MachineService/Version", nodes=targets)
    assert [item.metadata.hostname for item in reply.messages] == targets
    assert all(item.version.tag == "v1.14.0" and not item.metadata.error for item in reply.messages)
    # The last node, reached directly, is itself.
    direct = client.call("machine.MachineService/Hostname", endpoint=cluster.nodes[-1].endpoint)
    assert direct.messages[0].hostname == cluster.nodes[-1].name


def test_clusters_of_one_process_never_share_an_address(emulator):
    first = emulator(controlplanes=1, workers=30)
    second = emulator(controlplanes=1, workers=0)
    assert not {node.address for node in first.nodes} & {node.address for node in second.nodes}
    # A cluster keeps room to grow beyond the nodes it starts with.
    added = first.add_node("worker")
    assert added.address not in {node.address for node in second.nodes}


def test_cluster_size_is_checked(tmp_path):
    with pytest.raises(ValueError, match="1 to 1000 nodes"):
        EmulatedCluster(str(tmp_path), controlplanes=3, workers=998)
    with pytest.raises(ValueError, match="at least one control plane"):
        EmulatedCluster(str(tmp_path), controlplanes=0, workers=3)
