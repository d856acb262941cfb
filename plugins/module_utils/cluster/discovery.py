# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which nodes a Talos cluster has, as the cluster itself reports them.

The first source is COSI ``Members`` (namespace ``cluster``), which every node
derives from cluster discovery. When discovery is turned off (by the caller,
or in the machine configuration, which leaves ``Members`` empty), the nodes
are the talosconfig's (or the ``nodes`` option's) plus the etcd members, and
each of them is asked who it is.

A node is a plain dict (it is cached as JSON by the inventory plugin):
``hostname``, ``addresses`` (IPv4 and IPv6 text), ``machine_type``
(``controlplane``, ``worker``...; None when unknown), ``os_version``
(``v1.14.0``; None when unknown), ``node_id`` (the discovery identity; None
when not from Members) and ``source`` (``members``, ``nodes`` or ``etcd``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster.facts import FactGatherer, node_is_down

MEMBERS_NAMESPACE = "cluster"
MEMBERS_TYPE = "Members.cluster.talos.dev"
NODE_SUBSETS = ("version", "hostname", "machine", "network")


def preferred_address(addresses, family="ipv4"):
    """The first address of ``family`` (``ipv4`` or ``ipv6``), else the first address, else None."""
    version = 6 if family == "ipv6" else 4
    for address in addresses:
        try:
            if ipaddress.ip_address(address).version == version:
                return address
        except ValueError:
            continue
    return addresses[0] if addresses else None


def _address(text):
    """An address without its prefix length (NodeAddresses carry ``10.5.0.2/24``)."""
    return str(text).split("/", 1)[0]


def member_node(resource):
    """A node from a ``Members`` resource (as ``client.list_resources`` returns it)."""
    spec = resource.get("spec") or {}
    return {
        "hostname": spec.get("hostname") or resource["metadata"]["id"],
        "addresses": [_address(address) for address in spec.get("addresses") or []],
        "machine_type": spec.get("machineType") or None,
        "os_version": talos_node.os_version(spec.get("operatingSystem")),
        "node_id": spec.get("nodeId") or None,
        "source": "members",
    }


def list_members(client):
    """The cluster's nodes from COSI Members, as the endpoint sees them (empty when discovery is off)."""
    return [member_node(resource) for resource in client.list_resources(MEMBERS_NAMESPACE, MEMBERS_TYPE)]


def etcd_nodes(client, warn):
    """Control planes from the etcd member list; none when etcd does not answer (not bootstrapped yet)."""
    try:
        members = etcd.list_members(client, None)
    except TalosError as error:
        if node_is_down(error):
            raise
        warn("The etcd member list is not available (%s); control planes that are not listed in nodes are missing."
             % error.message)
        return []
    found = []
    for member in members:
        address = etcd.member_address(member)
        if address:
            found.append({"hostname": member["hostname"] or None, "addresses": [address], "machine_type": "controlplane",
                          "os_version": None, "node_id": None, "source": "etcd"})
    return found


def ask_nodes(client, candidates, warn):
    """Complete ``candidates`` (nodes known by one address) with what each node reports about itself.

    A node that cannot be read keeps what was known and is reported with ``warn``.
    """
    addresses = [node["addresses"][0] for node in candidates]
    facts, errors = FactGatherer(client, addresses, client.settings.insecure).gather(set(NODE_SUBSETS), [])
    nodes = []
    for node, address in zip(candidates, addresses):
        if address in errors:
            warn("Node %s did not answer (%s); it is listed with what %s says of it."
                 % (address, errors[address].message, "etcd" if node["source"] == "etcd" else "the configuration"))
            nodes.append(dict(node, hostname=node["hostname"] or address))
            continue
        node_facts = facts[address]
        reported = [_address(a) for a in (node_facts.get("network") or {}).get("addresses") or []]
        machine_type = (node_facts.get("machine") or {}).get("type")
        nodes.append(dict(
            node,
            hostname=node_facts.get("hostname") or node["hostname"] or address,
            addresses=[address] + [a for a in reported if a != address],
            machine_type=machine_type if talos_node.is_configured_type(machine_type) else node["machine_type"],
            os_version=(node_facts.get("version") or {}).get("tag") or None,
        ))
    return nodes


def discover(client, use_members=True, warn=None):
    """The cluster's nodes: ``(nodes, source)`` where source says where the list came from.

    Raises TalosError when the endpoints cannot be reached or refuse the reads.
    """
    warn = warn or (lambda message: None)
    if use_members:
        members = list_members(client)
        if members:
            return members, "members"
    candidates = []
    seen = set()
    configured = [{"hostname": None, "addresses": [node], "machine_type": None, "os_version": None, "node_id": None,
                   "source": "nodes"} for node in client.nodes if node]
    for node in configured + etcd_nodes(client, warn):
        address = node["addresses"][0]
        if address not in seen:
            seen.add(address)
            candidates.append(node)
    if not candidates:
        return [], "none"
    return ask_nodes(client, candidates, warn), "nodes and etcd"
