# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import asyncio
import ssl

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.client import transport_errors as errors
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosNodeError,
    TalosPermissionError,
    TalosTimeoutError,
    TalosTLSError,
    TalosUnimplementedError,
    TalosUnreachableError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2


@pytest.mark.parametrize("status, name", [
    (Status.PERMISSION_DENIED, "PermissionDenied"),
    (Status.UNAVAILABLE, "Unavailable"),
    (Status.DEADLINE_EXCEEDED, "DeadlineExceeded"),
    (14, "Unavailable"),
    (9, "FailedPrecondition"),
    (999, "Unknown"),
])
def test_status_name_uses_the_go_spelling(status, name):
    assert errors.status_name(status) == name


def test_permission_denied_names_required_and_carried_roles():
    err = errors.from_grpc_error(GRPCError(Status.PERMISSION_DENIED, "not authorized"),
                                 "machine.MachineService/Reset", "10.5.0.3", client_roles=["os:reader"])
    assert isinstance(err, TalosPermissionError)
    assert err.code == "PermissionDenied" and err.node == "10.5.0.3" and err.server_message == "not authorized"
    assert err.message == ("Permission denied for machine.MachineService/Reset on node 10.5.0.3 (not authorized): "
                           "it needs role os:admin and the client certificate carries role os:reader.")


def test_permission_denied_lists_every_accepted_role():
    err = errors.from_status("PermissionDenied", "not authorized", "machine.MachineService/Reboot", None, client_roles=[])
    assert "needs role os:admin or os:operator" in err.message
    assert "carries no role" in err.message
    assert "on the endpoint" in err.message


def test_sensitive_resource_refusal_is_not_blamed_on_the_method_role():
    err = errors.from_status("PermissionDenied", "not authorized", "cosi.resource.State/Get", "10.5.0.2",
                             client_roles=["os:reader"])
    assert err.message == ("Permission denied for cosi.resource.State/Get on node 10.5.0.2 (not authorized): role os:reader "
                           "may read resources, but not this type or namespace; sensitive resource types need os:admin.")


def test_maintenance_refusal_keeps_the_server_message():
    err = errors.from_status("Unimplemented", "API is not implemented in maintenance mode", "machine.MachineService/EtcdStatus",
                             None)
    assert err.message == ("The endpoint node does not support machine.MachineService/EtcdStatus: "
                           "API is not implemented in maintenance mode.")


def test_unlisted_method_needs_admin_like_on_the_server():
    err = errors.from_status("PermissionDenied", "not authorized", "machine.MachineService/Unlisted", None,
                             client_roles=["os:operator"])
    assert "it needs role os:admin and the client certificate carries role os:operator" in err.message


def test_a_reader_applying_to_a_configured_node_is_told_it_needs_admin():
    # The rules table accepts os:reader for ApplyConfiguration, but only a node in maintenance mode honours it.
    err = errors.from_status("PermissionDenied", "not authorized", "machine.MachineService/ApplyConfiguration", "10.5.0.2",
                             client_roles=["os:reader"])
    assert err.message == ("Permission denied for machine.MachineService/ApplyConfiguration on node 10.5.0.2 (not authorized): "
                           "it needs role os:admin and the client certificate carries role os:reader.")


def test_a_role_that_older_releases_refuse_names_the_release():
    err = errors.from_status("PermissionDenied", "not authorized", "machine.MachineService/EtcdMemberList", "10.5.0.2",
                             client_roles=["os:etcd:backup"])
    assert err.message == ("Permission denied for machine.MachineService/EtcdMemberList on node 10.5.0.2 (not authorized): "
                           "role os:etcd:backup may call it from Talos v1.11.0 on; an older node needs role os:admin, "
                           "os:operator or os:reader.")


def test_refused_forwarding_explains_endpoints_must_be_control_planes():
    err = errors.from_status("PermissionDenied", "no request forwarding", "machine.MachineService/Version", "10.5.0.4",
                             endpoint="10.5.0.3:50000", client_roles=["os:admin"])
    assert isinstance(err, TalosPermissionError)
    assert "Endpoint 10.5.0.3:50000 refused to forward" in err.message
    assert "endpoints must be control-plane nodes" in err.message


@pytest.mark.parametrize("method, server_message, version", [
    ("machine.LifecycleService/Upgrade", "unknown service machine.LifecycleService", "v1.13"),
    ("machine.ImageService/Pull", "Method not found", "v1.13"),
    ("machine.MachineService/EtcdStatus", "unknown method EtcdStatus for service machine.MachineService", "v1.4"),
    ("cosi.resource.State/Get", "", "v1.2"),
])
def test_unimplemented_names_the_version_that_introduced_the_api(method, server_message, version):
    err = errors.from_status("Unimplemented", server_message, method, "10.5.0.2")
    assert isinstance(err, TalosUnimplementedError)
    assert "appeared in Talos %s" % version in err.message
    assert err.message.startswith("Node 10.5.0.2 does not implement %s" % method)


def test_unimplemented_for_another_reason_keeps_the_server_message():
    err = errors.from_status("Unimplemented", "etcd status is only available on control plane nodes",
                             "machine.MachineService/EtcdStatus", "10.5.0.4")
    assert err.message == ("Node 10.5.0.4 does not support machine.MachineService/EtcdStatus: "
                           "etcd status is only available on control plane nodes.")


def test_invalid_argument_carries_the_server_message():
    err = errors.from_status("InvalidArgument", "configuration validation failed: 1 error occurred",
                             "machine.MachineService/ApplyConfiguration", "10.5.0.2")
    assert isinstance(err, TalosApiError)
    assert err.message == ("Node 10.5.0.2 rejected machine.MachineService/ApplyConfiguration as invalid: "
                           "configuration validation failed: 1 error occurred.")


def test_other_codes_keep_code_and_message():
    err = errors.from_status("FailedPrecondition", "bootstrap is not available yet", "machine.MachineService/Bootstrap",
                             "10.5.0.2")
    assert isinstance(err, TalosApiError) and err.code == "FailedPrecondition"
    assert err.message == ("machine.MachineService/Bootstrap failed on node 10.5.0.2 with FailedPrecondition: "
                           "bootstrap is not available yet.")


def test_unavailable_node_behind_an_endpoint_is_a_connection_error():
    err = errors.from_status("Unavailable", "connection refused", "machine.MachineService/Version", "10.5.0.9",
                             endpoint="10.5.0.2:50000")
    assert isinstance(err, TalosConnectionError) and not isinstance(err, TalosUnreachableError) and err.code == "Unavailable"
    assert "through endpoint 10.5.0.2:50000" in err.message


@pytest.mark.parametrize("relayed, cause, hint", [
    ('connection error: desc = "transport: Error while dialing: dial tcp 10.5.0.9:50000: connect: connection refused"',
     "connection refused", "the node may be powered off or rebooting."),
    ('connection error: desc = "transport: Error while dialing: dial tcp 10.5.0.9:50000: connect: no route to host"',
     "no route to host", "the endpoint has no route to it"),
    ('last connection error: connection error: desc = "transport: Error while dialing: dial tcp 10.5.0.9:50000: i/o timeout"',
     "timed out connecting", "a firewall drops the port."),
    ('connection error: desc = "transport: Error while dialing dial tcp: lookup worker-1: no such host"',
     "no such host", "target nodes by IP address."),
])
def test_a_node_the_endpoint_cannot_dial_is_unreachable(relayed, cause, hint):
    """apid relays Go's dial error as Unavailable (one-to-one, server-behaviour.md §1.2-1.3)."""
    err = errors.from_status("Unavailable", relayed, "machine.MachineService/Version", "10.5.0.9", endpoint="10.5.0.2:50000")
    assert isinstance(err, TalosUnreachableError) and err.code == "Unavailable" and err.node == "10.5.0.9"
    assert err.message.startswith("Node 10.5.0.9 is unreachable through endpoint 10.5.0.2:50000 (%s): " % cause)
    assert hint in err.message and err.server_message == relayed


def test_the_endpoint_itself_dialling_nothing_is_not_a_node_failure():
    """Without a node the endpoint answered for itself: its own trouble, worth a retry."""
    relayed = 'connection error: desc = "transport: Error while dialing: dial unix /system/run/machined/machine.sock: connect: connection refused"'
    err = errors.from_status("Unavailable", relayed, "machine.MachineService/Version", None, endpoint="10.5.0.2:50000")
    assert not isinstance(err, TalosUnreachableError)


def test_certificate_verification_names_ca_source_and_host():
    failure = ssl.SSLCertVerificationError(1, "certificate verify failed")
    failure.verify_message = "unable to get local issuer certificate"
    err = errors.tls_error(failure, "10.5.0.2:50000", "10.5.0.2", "talosconfig context 'prod' (/tmp/talosconfig)")
    assert isinstance(err, TalosTLSError)
    assert err.message == (
        "Certificate verification of endpoint 10.5.0.2:50000 failed (unable to get local issuer certificate): its server "
        "certificate must be signed by the CA from talosconfig context 'prod' (/tmp/talosconfig) and list 10.5.0.2 among "
        "its subject alternative names.")


def test_refused_client_certificate():
    failure = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    failure.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    err = errors.tls_error(failure, "10.5.0.2:50000", "10.5.0.2", "the ca option")
    assert "refused the client certificate" in err.message


def test_unreachable_endpoints_are_each_named_with_the_port_hint():
    err = errors.unreachable_error([("10.0.0.1:50000", ConnectionRefusedError(111, "Connection refused")),
                                    ("10.0.0.2:50000", asyncio.TimeoutError())])
    assert isinstance(err, TalosUnreachableError) and err.code == "Unavailable"
    assert err.message == ("None of the Talos endpoints is reachable: 10.0.0.1:50000 (connection refused); "
                           "10.0.0.2:50000 (timed out connecting); endpoints must be control-plane nodes whose "
                           "Talos API is reachable on port 50000.")


def test_an_unreachable_node_in_maintenance_mode_is_told_its_own_address_is_the_endpoint():
    err = errors.unreachable_error([("10.0.0.3:50000", ConnectionRefusedError(111, "Connection refused"))], insecure=True)
    assert err.message == ("Talos endpoint 10.0.0.3:50000 (connection refused) is unreachable; with insecure "
                           "(maintenance mode) the endpoint must be the node's own address, where its Talos API "
                           "listens on port 50000: check that the node is up and the address and port are right.")
    assert "control-plane" not in err.message


def test_timeout_mentions_the_option_and_the_last_answer():
    last = errors.from_status("Unavailable", "etcd is starting", "machine.MachineService/EtcdStatus", "10.5.0.2")
    err = errors.timeout_error("machine.MachineService/EtcdStatus", "10.5.0.2", 30, last, "the timeout option")
    assert isinstance(err, TalosTimeoutError)
    assert err.message.startswith("machine.MachineService/EtcdStatus on node 10.5.0.2 did not complete within 30 seconds "
                                  "(the timeout option); the last answer was: ")
    assert err.message.endswith(".") and not err.message.endswith("..")
    assert err.code == "Unavailable"


def test_node_error_uses_the_status_code_when_present():
    metadata = common_pb2.Metadata(hostname="10.5.0.4", error="rpc error: code = Unavailable desc = down")
    metadata.status.code = 14
    metadata.status.message = "down"
    err = errors.node_error(metadata, None)
    assert isinstance(err, TalosNodeError)
    assert (err.code, err.node, err.server_message) == ("Unavailable", "10.5.0.4", "down")
    plain = errors.node_error(common_pb2.Metadata(error="boom"), "10.5.0.5")
    assert (plain.code, plain.node) == ("Unknown", "10.5.0.5")
    assert plain.message == "Node 10.5.0.5 answered with an error (Unknown): boom."


def test_a_node_whose_certificate_the_endpoint_does_not_trust_is_a_final_tls_error_not_an_unreachable_one():
    """A node in maintenance mode answers with a self-signed certificate: it is not off (no api_unreachable), and
    the client never retries a TLS error."""
    relayed = ('connection error: desc = "transport: authentication handshake failed: tls: failed to verify '
               'certificate: x509: certificate signed by unknown authority"')
    error = errors.from_status("Unavailable", relayed, "machine.MachineService/Version", "10.5.0.5", endpoint="10.5.0.2:50000")
    assert isinstance(error, TalosTLSError) and error.code == "Unavailable" and error.node == "10.5.0.5"
    assert "api_unreachable" not in error.to_result()
    assert error.message.endswith("(x509: certificate signed by unknown authority), so the node is probably in "
                                  "maintenance mode (not configured yet, or reset) or belongs to another cluster; reach it "
                                  "directly with endpoints: [10.5.0.5] and insecure: true.")


@pytest.mark.parametrize("relayed, start", [
    (True, "machine.MachineService/Reset on node 10.5.0.4 was interrupted through endpoint 10.5.0.2:50000 (connection lost)"),
    (False, "The connection to endpoint 10.5.0.2:50000 was lost during machine.MachineService/Reset on node 10.5.0.4 "
            "(connection lost)"),
])
def test_a_change_cut_off_mid_call_says_whether_the_node_took_it_is_unknown(relayed, start):
    err = errors.connection_lost("machine.MachineService/Reset", "10.5.0.4", "10.5.0.2:50000", "connection lost", relayed)
    assert isinstance(err, TalosConnectionError) and not isinstance(err, TalosUnreachableError)
    assert err.code == "Unavailable" and err.node == "10.5.0.4"
    assert err.message == start + (", so whether node 10.5.0.4 took the request is unknown: check it before running the "
                                   "task again.")


def test_a_read_cut_off_mid_call_is_only_said_to_be_cut_off():
    err = errors.connection_lost("machine.MachineService/Version", "10.5.0.4", "10.5.0.2:50000", "connection lost", True)
    assert err.message == ("machine.MachineService/Version on node 10.5.0.4 was interrupted through endpoint "
                           "10.5.0.2:50000 (connection lost).")
