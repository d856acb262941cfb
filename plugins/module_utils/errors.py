# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The TalosError family and the translation of transport failures into it.

Every failure a module can meet ends up as one TalosError whose ``message``
is a single sentence a platform engineer can act on. Messages never carry key
material and never a Python traceback.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import asyncio
import re
import ssl

try:
    from grpclib.const import Status
except ImportError:  # reported by TalosModule through missing_required_lib
    Status = None


class TalosError(Exception):
    """Base of every error the collection reports.

    ``code`` is the gRPC status name (``"PermissionDenied"``) or None for local
    errors, ``node`` the target node (None for the endpoint itself) and
    ``server_message`` the server's own text when there is one.
    """

    def __init__(self, message, code=None, node=None, server_message=None):
        super(TalosError, self).__init__(message)
        self.message = message
        self.code = code
        self.node = node
        self.server_message = server_message

    def __str__(self):
        return self.message

    def to_result(self):
        """Fields for fail_json besides ``msg``."""
        result = {}
        if self.code:
            result["code"] = self.code
        if self.node:
            result["node"] = self.node
        if self.server_message:
            result["server_message"] = self.server_message
        return result


class TalosConfigError(TalosError):
    """The talosconfig file or the connection options are unusable."""


class TalosConnectionError(TalosError):
    """No endpoint (or, through an endpoint, no node) could be reached."""


class TalosTLSError(TalosError):
    """The TLS handshake failed: certificate verification or a refused client certificate."""


class TalosPermissionError(TalosError):
    """The server refused the call for lack of a role (or refused to forward it)."""


class TalosRoutingError(TalosPermissionError):
    """The endpoint refused to forward the call to the node: it is no control plane, or routing is off."""


class TalosUnimplementedError(TalosError):
    """The node does not offer the API: too old a Talos version, or the wrong node type."""


class TalosTimeoutError(TalosError):
    """An operation or a wait did not finish in time."""


class TalosNodeError(TalosError):
    """A per-node error item (``metadata.error``) inside an otherwise successful reply."""


class TalosApiError(TalosError):
    """Any other gRPC error, with its code and the server's message."""


# Roles that may call each RPC (any one suffices), from the machined rules
# table of Talos v1.14. Methods not listed need os:admin, as on the server.
_ADMIN = "os:admin"
_OPERATOR = "os:operator"
_READER = "os:reader"
_ETCD_BACKUP = "os:etcd:backup"

METHOD_ROLES = {
    "machine.MachineService/ApplyConfiguration": (_ADMIN,),
    "machine.MachineService/Bootstrap": (_ADMIN,),
    "machine.MachineService/Upgrade": (_ADMIN,),
    "machine.MachineService/Reboot": (_ADMIN, _OPERATOR),
    "machine.MachineService/Reset": (_ADMIN,),
    "machine.MachineService/Shutdown": (_ADMIN, _OPERATOR),
    "machine.MachineService/Version": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Hostname": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Kubeconfig": (_ADMIN,),
    "machine.MachineService/ServiceList": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/ServiceStart": (_ADMIN, _OPERATOR),
    "machine.MachineService/ServiceStop": (_ADMIN, _OPERATOR),
    "machine.MachineService/ServiceRestart": (_ADMIN, _OPERATOR),
    "machine.MachineService/EtcdMemberList": (_ADMIN, _OPERATOR, _READER, _ETCD_BACKUP),
    "machine.MachineService/EtcdRemoveMemberByID": (_ADMIN,),
    "machine.MachineService/EtcdLeaveCluster": (_ADMIN,),
    "machine.MachineService/EtcdForfeitLeadership": (_ADMIN,),
    "machine.MachineService/EtcdStatus": (_ADMIN, _OPERATOR, _READER, _ETCD_BACKUP),
    "machine.MachineService/EtcdSnapshot": (_ADMIN, _OPERATOR, _ETCD_BACKUP),
    "machine.MachineService/EtcdRecover": (_ADMIN,),
    "machine.MachineService/EtcdAlarmList": (_ADMIN, _OPERATOR, _READER, _ETCD_BACKUP),
    "machine.MachineService/EtcdAlarmDisarm": (_ADMIN, _OPERATOR),
    "machine.MachineService/EtcdDefragment": (_ADMIN, _OPERATOR),
    "machine.MachineService/Memory": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Mounts": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/LoadAvg": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/SystemStat": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/CPUInfo": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Read": (_ADMIN,),
    "machine.MachineService/Events": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Logs": (_ADMIN, _OPERATOR, _READER),
    "machine.MachineService/Dmesg": (_ADMIN, _OPERATOR, _READER),
    "cluster.ClusterService/HealthCheck": (_ADMIN, _OPERATOR, _READER),
    "storage.StorageService/Disks": (_ADMIN, _OPERATOR, _READER),
    "machine.LifecycleService/Upgrade": (_ADMIN,),
    "machine.ImageService/Pull": (_ADMIN, _OPERATOR),
    "cosi.resource.State/Get": (_ADMIN, _OPERATOR, _READER),
    "cosi.resource.State/List": (_ADMIN, _OPERATOR, _READER),
    "cosi.resource.State/Watch": (_ADMIN, _OPERATOR, _READER),
}

# First Talos release that serves an API, for APIs newer than Talos v1.0.
# A method entry wins over its service's entry.
API_INTRODUCED_IN = {
    "machine.LifecycleService": "v1.13",
    "machine.ImageService": "v1.13",
    "cosi.resource.State": "v1.2",
    "machine.MachineService/EtcdRemoveMemberByID": "v1.3",
    "machine.MachineService/EtcdStatus": "v1.4",
    "machine.MachineService/EtcdAlarmList": "v1.4",
    "machine.MachineService/EtcdAlarmDisarm": "v1.4",
    "machine.MachineService/EtcdDefragment": "v1.4",
}

# How servers say that a service or method does not exist (Go gRPC, grpclib,
# the maintenance server of Talos v1.12 and earlier).
_MISSING_API = re.compile(r"unknown (service|method)|method not found|not implemented", re.I)

_CONNECTION_REFUSED_HINT = "endpoints must be control-plane nodes whose Talos API is reachable on port 50000"


def role_requirement(method):
    """The roles that may call ``method``; os:admin for methods the table does not list."""
    return METHOD_ROLES.get(method, (_ADMIN,))


def introduced_in(method):
    """The Talos version that introduced ``method`` (or its service), or None when older than v1.0."""
    if method in API_INTRODUCED_IN:
        return API_INTRODUCED_IN[method]
    return API_INTRODUCED_IN.get(method.split("/")[0])


def status_name(status):
    """``Status.PERMISSION_DENIED`` or 7 -> ``"PermissionDenied"`` (the Go spelling Talos users see)."""
    if isinstance(status, int) and not hasattr(status, "name"):
        try:
            status = Status(status)
        except ValueError:
            return "Unknown"
    return "".join(part.capitalize() for part in status.name.split("_"))


def _target(node):
    return "node %s" % node if node else "the endpoint"


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
        if client_roles and set(client_roles) & set(role_requirement(method)):
            # The method-level rule passed: the refusal is about what was asked for.
            if method.startswith("cosi.resource.State/"):
                return TalosPermissionError(
                    "Permission denied for %s on %s (%s): role %s may read resources, but not this type or namespace; "
                    "sensitive resource types need os:admin." % (method, _target(node), detail, ", ".join(client_roles)),
                    code=code, node=node, server_message=server_message)
            return TalosPermissionError(
                "Permission denied for %s on %s (%s) although the client certificate carries role %s, which this method accepts."
                % (method, _target(node), detail, ", ".join(client_roles)),
                code=code, node=node, server_message=server_message)
        if client_roles is None:
            carried = "an insecure connection sends no client certificate (only os:reader in maintenance mode)"
        elif client_roles:
            carried = "the client certificate carries role " + ", ".join(client_roles)
        else:
            carried = "the client certificate carries no role"
        return TalosPermissionError(
            "Permission denied for %s on %s (%s): it needs role %s and %s."
            % (method, _target(node), detail, _join(role_requirement(method)), carried),
            code=code, node=node, server_message=server_message)
    if code == "Unimplemented":
        version = introduced_in(method)
        missing_api = not server_message or (_MISSING_API.search(server_message) and "maintenance" not in server_message)
        if version and missing_api:
            message = ("%s does not implement %s (%s): this API appeared in Talos %s, the node must run %s or newer."
                       % (_target(node).capitalize(), method, detail, version, version))
        else:
            message = "%s does not support %s: %s" % (_target(node).capitalize(), method, _sentence(detail))
        return TalosUnimplementedError(message, code=code, node=node, server_message=server_message)
    if code == "InvalidArgument":
        return TalosApiError("%s rejected %s as invalid: %s" % (_target(node).capitalize(), method, _sentence(detail)),
                             code=code, node=node, server_message=server_message)
    if code == "DeadlineExceeded":
        return TalosTimeoutError("%s on %s did not finish before its deadline: %s"
                                 % (method, _target(node), _sentence(detail)),
                                 code=code, node=node, server_message=server_message)
    if code == "Unavailable":
        through = " through endpoint %s" % endpoint if endpoint and node else ""
        return TalosConnectionError("%s is unavailable%s for %s: %s"
                                    % (_target(node).capitalize(), through, method, _sentence(detail)),
                                    code=code, node=node, server_message=server_message)
    return TalosApiError("%s failed on %s with %s: %s" % (method, _target(node), code, _sentence(detail)),
                         code=code, node=node, server_message=server_message)


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


def unreachable_error(failures):
    """Translate a failure to connect to every endpoint; ``failures`` is [(endpoint, exception)].

    The code is Unavailable, as gRPC reports a refused connection.
    """
    parts = ["%s (%s)" % (endpoint, describe_os_error(err)) for endpoint, err in failures]
    if len(parts) == 1:
        text = "Talos endpoint %s is unreachable" % parts[0]
    else:
        text = "None of the Talos endpoints is reachable: %s" % "; ".join(parts)
    return TalosConnectionError("%s; %s." % (text, _CONNECTION_REFUSED_HINT), code="Unavailable")


def describe_os_error(err):
    """A short reason for a connection failure, without a traceback."""
    if isinstance(err, (asyncio.TimeoutError, TimeoutError)):
        return "timed out connecting"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err) or type(err).__name__


def timeout_error(method, node, seconds, last_error=None, option=None):
    """An operation that ran out of time (including retries); ``option`` names the setting that gave the time."""
    tail = " (%s)" % option if option else ""
    if last_error is not None:
        tail += "; the last answer was: %s" % (last_error.message if isinstance(last_error, TalosError) else describe_os_error(last_error))
    return TalosTimeoutError(
        _sentence("%s on %s did not complete within %s seconds%s" % (method, _target(node), _format_seconds(seconds), tail)),
        code=getattr(last_error, "code", None) or "DeadlineExceeded", node=node,
        server_message=getattr(last_error, "server_message", None))


def _format_seconds(seconds):
    return ("%.1f" % seconds).rstrip("0").rstrip(".")


def node_error(metadata, node):
    """Translate a ``common.Metadata`` carrying a per-node error."""
    target = metadata.hostname or node
    code = status_name(metadata.status.code) if metadata.HasField("status") and metadata.status.code else "Unknown"
    message = (metadata.status.message if metadata.HasField("status") and metadata.status.message else metadata.error)
    return TalosNodeError("Node %s answered with an error (%s): %s" % (target, code, _sentence(message or "no details")),
                          code=code, node=target, server_message=message)
