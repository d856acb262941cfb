# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The translation of transport failures (gRPC statuses, TLS, refused connections, timeouts) into the TalosError family.

Only the client calls it: what reaches domain code is already one TalosError whose ``message``
is a single sentence a platform engineer can act on.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import asyncio
import re
import ssl

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosError,
    TalosNodeError,
    TalosPermissionError,
    TalosRoutingError,
    TalosTimeoutError,
    TalosTLSError,
    TalosUnimplementedError,
    TalosUnreachableError,
    format_seconds,
    label,
)

try:
    from grpclib.const import Status
except ImportError:  # reported by task.execute through missing_required_lib
    Status = None


# How servers say that a service or method does not exist (Go gRPC, grpclib,
# the maintenance server of Talos v1.12 and earlier).
_MISSING_API = re.compile(r"unknown (service|method)|method not found|not implemented", re.I)

_CONNECTION_REFUSED_HINT = "endpoints must be control-plane nodes whose Talos API is reachable on port 50000"
# A node in maintenance mode serves its API on its own address only, so the endpoint is the node itself.
_MAINTENANCE_REFUSED_HINT = ("with insecure (maintenance mode) the endpoint must be the node's own address, where "
                             "its Talos API listens on port 50000: check that the node is up and the address and "
                             "port are right")

# How an endpoint relays that it could not connect to the node (Go's dialer in
# apid), e.g. 'connection error: desc = "transport: Error while dialing: dial
# tcp 10.5.0.3:50000: connect: connection refused"': the text, and the cause
# as messages name it.
_DIAL_FAILURES = (
    ("connection refused", "connection refused"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network is unreachable"),
    ("i/o timeout", "timed out connecting"),
    ("connection timed out", "timed out connecting"),
    ("no such host", "no such host"),
)
# How an endpoint relays that the node's API certificate is not signed by the cluster's CA (Go's TLS in apid):
# a node in maintenance mode serves a self-signed one; nothing changes that but configuring the node.
_UNTRUSTED_NODE = ("certificate signed by unknown authority", "failed to verify certificate")
_UNREACHABLE_NODE_HINTS = {
    "connection refused": "nothing answers on its Talos API port 50000; the node may be powered off or rebooting.",
    "no route to host": "the endpoint has no route to it; the node may be powered off or on a network the "
                        "control plane cannot reach.",
    "network is unreachable": "the endpoint has no route to its network; target the node by an address the "
                              "control plane can reach.",
    "timed out connecting": "it did not answer on its Talos API port 50000; the node may be powered off, or a "
                            "firewall drops the port.",
    "no such host": "the endpoint cannot resolve that name; target nodes by IP address.",
}


def status_name(status):
    """``Status.PERMISSION_DENIED`` or 7 -> ``"PermissionDenied"`` (the Go spelling Talos users see)."""
    if isinstance(status, int) and not hasattr(status, "name"):
        try:
            status = Status(status)
        except ValueError:
            return "Unknown"
    return "".join(part.capitalize() for part in status.name.split("_"))


def _join(items):
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def _sentence(text):
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def from_status(code, server_message, method, node, endpoint=None, client_roles=None):
    """Build the TalosError for a gRPC status ``code`` (a name such as ``"Unavailable"``)."""
    server_message = (server_message or "").strip()
    detail = server_message or "no details"
    if code == "PermissionDenied":
        if "forwarding" in server_message:
            return TalosRoutingError(
                "Endpoint %s refused to forward %s to node %s (%s): endpoints must be control-plane nodes, "
                "a worker endpoint only answers for itself." % (endpoint or "in use", method, node, server_message),
                code=code, node=node, server_message=server_message)
        if client_roles and set(client_roles) & set(rpc.configured_node_roles(method)):
            older_rule = _older_rule_refusing(method, client_roles)
            if older_rule:
                release, roles = older_rule
                return TalosPermissionError(
                    "Permission denied for %s on %s (%s): role %s may call it from Talos %s on; an older node needs role %s."
                    % (method, label(node), detail, ", ".join(client_roles), release, _join(roles)),
                    code=code, node=node, server_message=server_message)
            # The method-level rule passed: the refusal is about what was asked for.
            if method.startswith("cosi.resource.State/"):
                return TalosPermissionError(
                    "Permission denied for %s on %s (%s): role %s may read resources, but not this type or namespace; "
                    "sensitive resource types need os:admin." % (method, label(node), detail, ", ".join(client_roles)),
                    code=code, node=node, server_message=server_message)
            return TalosPermissionError(
                "Permission denied for %s on %s (%s) although the client certificate carries role %s, which this method accepts."
                % (method, label(node), detail, ", ".join(client_roles)),
                code=code, node=node, server_message=server_message)
        if client_roles is None:
            carried = "an insecure connection sends no client certificate (only os:reader in maintenance mode)"
        elif client_roles:
            carried = "the client certificate carries role " + ", ".join(client_roles)
        else:
            carried = "the client certificate carries no role"
        return TalosPermissionError(
            "Permission denied for %s on %s (%s): it needs role %s and %s."
            % (method, label(node), detail, _join(rpc.configured_node_roles(method)), carried),
            code=code, node=node, server_message=server_message)
    if code == "Unimplemented":
        version = rpc.first_version(method)
        missing_api = not server_message or (_MISSING_API.search(server_message) and "maintenance" not in server_message)
        if version and missing_api:
            message = ("%s does not implement %s (%s): this API appeared in Talos %s, the node must run %s or newer."
                       % (label(node, start=True), method, detail, version, version))
        else:
            message = "%s does not support %s: %s" % (label(node, start=True), method, _sentence(detail))
        return TalosUnimplementedError(message, code=code, node=node, server_message=server_message)
    if code == "InvalidArgument":
        return TalosApiError("%s rejected %s as invalid: %s" % (label(node, start=True), method, _sentence(detail)),
                             code=code, node=node, server_message=server_message)
    if code == "DeadlineExceeded":
        return TalosTimeoutError("%s on %s did not finish before its deadline: %s"
                                 % (method, label(node), _sentence(detail)),
                                 code=code, node=node, server_message=server_message)
    if code == "Unavailable":
        cause = _dial_failure(server_message) if node else None
        if cause:
            return TalosUnreachableError(
                "%s is unreachable through endpoint %s (%s): %s"
                % (label(node, start=True), endpoint or "in use", cause, _UNREACHABLE_NODE_HINTS[cause]),
                code=code, node=node, server_message=server_message)
        if node and any(text in server_message for text in _UNTRUSTED_NODE):
            # A TLS failure, final like the client's own: the node answers, with a certificate nothing will change.
            return TalosTLSError(
                "%s is unreachable through endpoint %s: the endpoint does not trust its certificate (%s), so the node is "
                "probably in maintenance mode (not configured yet, or reset) or belongs to another cluster; reach it "
                "directly with endpoints: [%s] and insecure: true."
                % (label(node, start=True), endpoint or "in use", _untrusted_detail(server_message), node),
                code=code, node=node, server_message=server_message)
        through = " through endpoint %s" % endpoint if endpoint and node else ""
        return TalosConnectionError("%s is unavailable%s for %s: %s"
                                    % (label(node, start=True), through, method, _sentence(detail)),
                                    code=code, node=node, server_message=server_message)
    return TalosApiError("%s failed on %s with %s: %s" % (method, label(node), code, _sentence(detail)),
                         code=code, node=node, server_message=server_message)


def _older_rule_refusing(method, client_roles):
    """``(release, roles)`` of the newest older rule that none of ``client_roles`` passes, or None."""
    for release, roles in reversed(rpc.role_history(method)):
        if not set(client_roles) & set(roles):
            return release, roles
    return None


def _dial_failure(server_message):
    """The cause when an endpoint relays that it could not connect to the node, else None."""
    if "dial" not in server_message:
        return None
    for text, cause in _DIAL_FAILURES:
        if text in server_message:
            return cause
    return None


def _untrusted_detail(server_message):
    """The x509 part of a relayed certificate failure: ``x509: certificate signed by unknown authority``."""
    start = server_message.find("x509:")
    return server_message[start:].rstrip('" ') if start >= 0 else "certificate verification failed"


def from_grpc_error(err, method, node, endpoint=None, client_roles=None):
    """Translate a grpclib GRPCError."""
    return from_status(status_name(err.status), err.message, method, node, endpoint=endpoint, client_roles=client_roles)


def tls_error(err, endpoint, host, ca_source):
    """Translate a failed TLS handshake with ``endpoint``.

    ``ca_source`` says where the trusted CA came from (a talosconfig context or
    the ``ca`` option); ``host`` is the name or address checked against the
    certificate's SANs.
    """
    if isinstance(err, ssl.SSLCertVerificationError):
        reason = err.verify_message or err.reason or "verification failed"
        return TalosTLSError(
            "Certificate verification of endpoint %s failed (%s): its server certificate must be signed by the CA from %s "
            "and list %s among its subject alternative names." % (endpoint, reason, ca_source, host))
    reason = getattr(err, "reason", None) or str(err)
    if "CERTIFICATE" in reason.upper() or "UNKNOWN_CA" in reason.upper():
        return client_certificate_refused(endpoint, reason)
    return TalosTLSError("The TLS handshake with endpoint %s failed (%s)." % (endpoint, reason))


def client_certificate_refused(endpoint, reason):
    """The server ended the connection over the client certificate (an alert, or silence after the handshake)."""
    return TalosTLSError(
        "Endpoint %s refused the client certificate (%s): crt and key must be a client certificate "
        "(extended key usage clientAuth only) issued by the cluster's OS CA." % (endpoint, reason))


def client_certificate_required(endpoint):
    """An insecure connection (no client certificate) ended by a node that asks for one: it is configured."""
    return TalosTLSError(
        "Endpoint %s requires a client certificate, so the node is configured (no longer in maintenance mode): "
        "connect with its talosconfig (mutual TLS) instead of insecure: true." % endpoint, code="Unauthenticated")


def unreachable_error(failures, insecure=False):
    """Translate a failure to connect to every endpoint; ``failures`` is [(endpoint, exception)].

    The code is Unavailable, as gRPC reports a refused connection. ``insecure``
    (a maintenance-mode connection) changes the hint: there the endpoint is the node itself.
    """
    parts = ["%s (%s)" % (endpoint, describe_os_error(err)) for endpoint, err in failures]
    if len(parts) == 1:
        text = "Talos endpoint %s is unreachable" % parts[0]
    else:
        text = "None of the Talos endpoints is reachable: %s" % "; ".join(parts)
    hint = _MAINTENANCE_REFUSED_HINT if insecure else _CONNECTION_REFUSED_HINT
    return TalosUnreachableError("%s; %s." % (text, hint), code="Unavailable")


def describe_os_error(err):
    """A short reason for a connection failure, without a traceback."""
    if isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        return "timed out connecting"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err) or type(err).__name__


def connection_lost(method, node, endpoint, reason, relayed):
    """The connection broke mid-call: ``relayed``, the endpoint's stream ended while it relayed the call (the endpoint
    itself went down, or restarted its API); else the connection to the endpoint was lost. A change may or may not
    have reached the node by then, and nothing repeats it blindly: the sentence says so."""
    target = label(node)
    if relayed:
        text = "%s on %s was interrupted through endpoint %s (%s)" % (method, target, endpoint, reason)
    else:
        text = "The connection to endpoint %s was lost during %s on %s (%s)" % (endpoint, method, target, reason)
    if not rpc.is_read(method):
        text += ", so whether %s took the request is unknown: check it before running the task again" % target
    return TalosConnectionError(text + ".", code="Unavailable", node=node)


def timeout_error(method, node, seconds, last_error=None, option=None):
    """An operation that ran out of time (including retries); ``option`` names the setting that gave the time."""
    tail = " (%s)" % option if option else ""
    if last_error is not None:
        tail += "; the last answer was: %s" % (last_error.message if isinstance(last_error, TalosError) else describe_os_error(last_error))
    return TalosTimeoutError(
        _sentence("%s on %s did not complete within %s seconds%s" % (method, label(node), format_seconds(seconds), tail)),
        code=getattr(last_error, "code", None) or "DeadlineExceeded", node=node,
        server_message=getattr(last_error, "server_message", None))


def node_error(metadata, node):
    """Translate a ``common.Metadata`` carrying a per-node error."""
    target = metadata.hostname or node
    code = status_name(metadata.status.code) if metadata.HasField("status") and metadata.status.code else "Unknown"
    message = (metadata.status.message if metadata.HasField("status") and metadata.status.message else metadata.error)
    return TalosNodeError("Node %s answered with an error (%s): %s" % (target, code, _sentence(message or "no details")),
                          code=code, node=target, server_message=message)
