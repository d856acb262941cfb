# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unreachable nodes (powered off, no route, silent) and the rules table read from the RPC catalogue."""

import socket
import ssl

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from emulator_client import client_context, talosconfig_credentials


def _connect(cluster, node, timeout):
    """Open a TLS connection to the node's API as a client would."""
    context = client_context(*talosconfig_credentials(cluster.talosconfig()))
    with socket.create_connection((node.address, node.port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=node.address):
            return True


@pytest.mark.parametrize("cause, dial_error", [
    ("refused", "connect: connection refused"),
    ("no-route", "connect: no route to host"),
    ("timeout", "i/o timeout"),
])
def test_an_endpoint_relays_why_it_cannot_reach_a_node(emulator, api, cause, dial_error):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    client = api(cluster)
    cluster.faults.make_unreachable(worker, cause=cause)
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.MachineService/Version", node=worker.address)
    assert (excinfo.value.status, excinfo.value.message) == (
        Status.UNAVAILABLE,
        'connection error: desc = "transport: Error while dialing: dial tcp %s:50000: %s"' % (worker.address, dial_error))
    cluster.faults.make_reachable(worker)
    assert client.call("machine.MachineService/Version", node=worker.address).messages[0].version.tag == "v1.14.0"


def test_a_powered_off_node_refuses_connections(emulator):
    cluster = emulator(controlplanes=1)
    node = cluster.nodes[0]
    cluster.faults.make_unreachable(node)
    with pytest.raises(ConnectionRefusedError):
        _connect(cluster, node, timeout=2)
    cluster.faults.make_reachable(node)
    assert _connect(cluster, node, timeout=5)


def test_a_silent_node_lets_connections_time_out_until_it_is_back(emulator):
    cluster = emulator(controlplanes=1)
    node = cluster.nodes[0]
    cluster.faults.make_unreachable(node, cause="timeout")
    with pytest.raises((socket.timeout, ssl.SSLError, TimeoutError)):
        _connect(cluster, node, timeout=0.5)
    cluster.faults.make_reachable(node)
    assert _connect(cluster, node, timeout=5)


def test_an_unknown_cause_is_refused(emulator):
    cluster = emulator(controlplanes=1)
    with pytest.raises(ValueError, match="cause must be one of no-route, refused, timeout"):
        cluster.faults.make_unreachable(cluster.nodes[0], cause="unplugged")
    assert cluster.nodes[0].reachable


@pytest.mark.parametrize("talos_version, refused", [("v1.10.0", True), ("v1.11.0", False)])
def test_rules_that_were_narrower_on_older_releases(emulator, api, talos_version, refused):
    """os:etcd:backup may list etcd members from v1.11 on (the catalogue's role history)."""
    cluster = emulator(controlplanes=1, talos_version=talos_version, bootstrapped=True)
    backup = api(cluster, talosconfig=cluster.talosconfig(roles=["os:etcd:backup"]))
    if refused:
        with pytest.raises(GRPCError) as excinfo:
            backup.call("machine.MachineService/EtcdMemberList")
        assert (excinfo.value.status, excinfo.value.message) == (Status.PERMISSION_DENIED, "not authorized")
    else:
        assert [member.hostname for member in backup.call("machine.MachineService/EtcdMemberList").messages[0].members] == [
            "controlplane-1"]
    # Never in any release: the rule for Version lists no os:etcd:backup.
    with pytest.raises(GRPCError) as excinfo:
        backup.call("machine.MachineService/Version")
    assert excinfo.value.status == Status.PERMISSION_DENIED
