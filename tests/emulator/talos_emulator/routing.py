# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apid: how the node a client connected to routes a call, and machined's entry.

``Apid`` is what a node's listener serves. It decides, from the ``node`` and
``nodes`` metadata, which node answers (Talos ``director.go`` rules, checked in
the same order) and relays the call in-process to that node's ``Machined``,
with the roles of the caller's certificate. ``Machined`` applies faults,
authorization and the audit log, then runs the RPC handler.
"""

import asyncio
import ipaddress

from google.protobuf import empty_pb2
from google.rpc import status_pb2
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc

from . import authz
from .audit import MUTATING_METHODS
from .codes import status_name
from .context import CallContext, enter_call, leave_call
from .services import machined_handlers
from .services.cosi import discovery_members, resolves_member_names
from .versions import older_than

_ONE_TO_MANY_PREFIXES = (
    "/machine.MachineService/",
    "/cluster.ClusterService/",
    "/inspect.InspectService/",
    "/storage.StorageService/",
    "/time.TimeService/",
)

# The v1.12 maintenance server: what it registers and how it answers the rest.
_V112_MAINTENANCE_ADMIN_ONLY = ("/machine.MachineService/Version", "/machine.MachineService/Upgrade", "/machine.MachineService/Reset")
_V112_MAINTENANCE_SERVED = ("/machine.MachineService/ApplyConfiguration", "/storage.StorageService/", "/cosi.resource.State/")


def go_error_string(error):
    """How a status error prints in Go, as apid puts it into ``metadata.error``."""
    return "rpc error: code = %s desc = %s" % (status_name(error.status), error.message)


class _RelayedStream:
    """Stand-in for a grpclib server stream when apid relays one leg of a one-to-many call."""

    def __init__(self, requests, send, peer, metadata):
        self._requests = list(requests)
        self._send = send
        self.peer = peer
        self.metadata = metadata

    async def recv_message(self):
        return self._requests.pop(0) if self._requests else None

    async def send_message(self, message):
        await self._send(message)

    async def cancel(self):
        raise _StreamCut()

    def __aiter__(self):
        return self

    async def __anext__(self):
        message = await self.recv_message()
        if message is None:
            raise StopAsyncIteration()
        return message


def node_went_away():
    """What an endpoint reports when the node it relays to goes away mid-call."""
    return GRPCError(Status.UNAVAILABLE, "error reading from server: EOF")


class _StreamCut(Exception):
    pass


class _CuttingStream:
    """Wraps a server stream so that it is reset after a number of frames (fault injection)."""

    def __init__(self, stream, after_frames):
        self._stream = stream
        self._left = after_frames
        self.peer = stream.peer
        self.metadata = stream.metadata

    async def recv_message(self):
        return await self._stream.recv_message()

    async def send_message(self, message):
        if self._left <= 0:
            await self._stream.cancel()
            raise _StreamCut()
        self._left -= 1
        await self._stream.send_message(message)

    def __aiter__(self):
        return self._stream.__aiter__()


class Machined:
    """The serving side of one node: faults, authorization, audit, then the RPC handler."""

    def __init__(self, node):
        self.node = node
        self.handlers = machined_handlers(node)
        self._calls = set()
        self._dropped = set()

    def drop_calls(self):
        """The node went away: end every call it is serving, including ones relayed through other nodes."""
        for task in list(self._calls):
            self._dropped.add(task)
            task.cancel()

    async def serve(self, method, stream, roles):
        task = asyncio.current_task()
        self._calls.add(task)
        try:
            await self._serve(method, stream, roles)
        except asyncio.CancelledError:
            if task not in self._dropped:
                raise
            raise node_went_away()
        finally:
            self._calls.discard(task)
            self._dropped.discard(task)

    async def _serve(self, method, stream, roles):
        node = self.node
        node.cluster.calls_served += 1
        await node.cluster.faults.before_call(node, method)
        handler = self._handler(method)
        if not (node.maintenance and older_than(node.talos_version, "v1.13.0")):
            authz.authorize(method, roles, node.talos_version)
        cut_after = node.cluster.faults.stream_cut_after(node, method)
        if cut_after is not None:
            stream = _CuttingStream(stream, cut_after)
        context = CallContext(node, method, roles, stream.metadata)
        token = enter_call(context)
        code = "OK"
        try:
            await handler.func(stream)
        except GRPCError as error:
            code = status_name(error.status)
            raise
        except _StreamCut:
            code = "Cancelled"
        except asyncio.CancelledError:
            code = "Cancelled"
            raise
        except Exception:
            code = "Unknown"
            raise
        finally:
            leave_call(token)
            if method.lstrip("/") in MUTATING_METHODS:
                node.cluster.audit_log.record(method, node, roles, code, **context.audit)

    def _handler(self, method):
        node = self.node
        path = method.lstrip("/")
        introduced = rpc.first_version(path)
        if introduced and older_than(node.talos_version, introduced):
            raise GRPCError(Status.UNIMPLEMENTED, _unknown_api(path, node.talos_version))
        if node.maintenance and older_than(node.talos_version, "v1.13.0"):
            if method in _V112_MAINTENANCE_ADMIN_ONLY:
                raise GRPCError(Status.UNIMPLEMENTED, "API is not implemented in maintenance mode")
            if not method.startswith(_V112_MAINTENANCE_SERVED):
                raise GRPCError(Status.UNIMPLEMENTED, "method %s not implemented" % method.rsplit("/", 1)[1])
        handler = self.handlers.get(method)
        if handler is None:
            raise GRPCError(Status.UNIMPLEMENTED, _unknown_path(path, self.handlers))
        return handler


class Apid:
    """The API front of one node: routing of every call it receives."""

    def __init__(self, node):
        self.node = node

    def __mapping__(self):
        return _EveryPath({
            method: Handler(self._route_function(method), handler.cardinality, handler.request_type, handler.reply_type)
            for method, handler in self.node.machined.handlers.items()
        }, self._unknown_path_handler)

    def _unknown_path_handler(self, method):
        # Routed like any call: the node that would serve it answers Unimplemented (Machined._handler).
        return Handler(self._route_function(method), Cardinality.UNARY_UNARY, empty_pb2.Empty, empty_pb2.Empty)

    def _route_function(self, method):
        async def route(stream):
            await self.route(method, stream)
        return route

    def caller_roles(self, stream):
        if self.node.maintenance:
            # No client certificate in maintenance mode: everyone is a reader.
            return [authz.READER]
        return authz.roles_from_peer_certificate(stream.peer.cert())

    async def route(self, method, stream):
        node = self.node
        roles = self.caller_roles(stream)
        metadata = stream.metadata
        if node.maintenance or "proxyfrom" in metadata:
            return await node.machined.serve(method, stream, roles)
        targets = metadata.getall("node", [])
        many = metadata.getall("nodes", [])
        if targets and len(targets) != 1:
            raise GRPCError(Status.INVALID_ARGUMENT, "node metadata must be single-valued")
        if not node.is_control_plane and (targets or many):
            # Workers hold no client certificate, so they cannot forward.
            wanted = targets or many
            if len(wanted) == 1 and self._is_self(wanted[0]):
                return await node.machined.serve(method, stream, roles)
            raise GRPCError(Status.PERMISSION_DENIED, "no request forwarding")
        if many:
            self._check_one_to_many(method)
            if method not in node.machined.handlers:
                raise GRPCError(Status.UNIMPLEMENTED, _unknown_path(method.lstrip("/"), node.machined.handlers))
            return await self._one_to_many(method, stream, roles, many)
        if targets:
            return await self.resolve_target(targets[0]).machined.serve(method, stream, roles)
        return await node.machined.serve(method, stream, roles)

    def _is_self(self, target):
        node = self.node
        return target in [node.address, node.hostname, node.name, node.cluster.dns_name(node)] + node.extra_addresses

    def _check_one_to_many(self, method):
        if older_than(self.node.talos_version, "v1.13.0"):
            if method.startswith("/cosi."):
                raise GRPCError(Status.INVALID_ARGUMENT, "one-2-many proxying is not supported for COSI methods")
        elif not method.startswith(_ONE_TO_MANY_PREFIXES):
            raise GRPCError(Status.INVALID_ARGUMENT, "one-2-many proxying is not supported for method %s" % method)

    def resolve_target(self, target):
        """The node a target string names, as apid would reach it on port 50000."""
        if self._is_self(target) or target in ("127.0.0.1", "localhost"):
            # apid dials <target>:50000, which for a loopback target is itself.
            return self.node
        if target.count(":") == 1:
            # apid accepts a bare host or IP only; it adds the API port itself.
            raise GRPCError(Status.INTERNAL, 'invalid target "%s": a node is addressed without a port' % target)
        node = self.node.cluster.node_at(target)
        if node is None and not _looks_like_ip(target):
            # apid dials the name: the network's DNS resolves the names it registers, not other nodes' bare names.
            node = self.node.cluster.resolve(target)
        if node is None and not _looks_like_ip(target):
            node = self._member_named(target)
        if node is None and not _looks_like_ip(target):
            raise GRPCError(
                Status.UNAVAILABLE,
                'connection error: desc = "transport: Error while dialing: dial tcp: lookup %s: no such host"' % target,
            )
        if node is None or not node.reachable:
            raise GRPCError(
                Status.UNAVAILABLE,
                'connection error: desc = "transport: Error while dialing: dial tcp %s:50000: %s"'
                % (target, self.node.cluster.faults.dial_error(node)),
            )
        if node.maintenance:
            raise GRPCError(
                Status.UNAVAILABLE,
                'connection error: desc = "transport: authentication handshake failed: '
                'tls: failed to verify certificate: x509: certificate signed by unknown authority"',
            )
        return node

    def _member_named(self, target):
        """The cluster member a bare name resolves to through this node's host DNS, which answers the members'
        hostnames when the config says so (``resolveMemberNames``); None otherwise."""
        if not resolves_member_names(self.node):
            return None
        for member_id, spec in discovery_members(self.node):
            if target in (member_id, spec["hostname"]):
                return self.node.cluster.node_at(spec["addresses"][0])
        return None

    async def _one_to_many(self, method, stream, roles, targets):
        handler = self.node.machined.handlers[method]
        if handler.cardinality in (Cardinality.UNARY_UNARY, Cardinality.UNARY_STREAM):
            requests = [await stream.recv_message()]
        else:
            requests = [message async for message in stream]
        if handler.cardinality in (Cardinality.UNARY_UNARY, Cardinality.STREAM_UNARY):
            replies = await asyncio.gather(*[self._unary_leg(method, handler, stream, roles, target, requests) for target in targets])
            response = handler.reply_type()
            for items in replies:
                response.messages.extend(items)
            await stream.send_message(response)
        else:
            lock = asyncio.Lock()
            await asyncio.gather(*[self._stream_leg(method, handler, stream, roles, target, requests, lock) for target in targets])

    async def _unary_leg(self, method, handler, stream, roles, target, requests):
        replies = []

        async def collect(message):
            replies.append(message)

        leg = _RelayedStream(requests, collect, stream.peer, stream.metadata)
        try:
            await self.resolve_target(target).machined.serve(method, leg, roles)
        except GRPCError as error:
            item = handler.reply_type().messages.add()
            _set_error(item.metadata, target, error)
            return [item]
        items = []
        for reply in replies:
            for item in reply.messages:
                item.metadata.hostname = target
                items.append(item)
        return items

    async def _stream_leg(self, method, handler, stream, roles, target, requests, lock):
        async def relay(message):
            if "metadata" in message.DESCRIPTOR.fields_by_name:
                message.metadata.hostname = target
            async with lock:
                await stream.send_message(message)

        leg = _RelayedStream(requests, relay, stream.peer, stream.metadata)
        try:
            await self.resolve_target(target).machined.serve(method, leg, roles)
        except GRPCError as error:
            frame = handler.reply_type()
            if "metadata" in frame.DESCRIPTOR.fields_by_name:
                _set_error(frame.metadata, target, error)
            async with lock:
                await stream.send_message(frame)


def _unknown_api(path, talos_version):
    """How Go gRPC answers an RPC that the node's release does not serve yet."""
    service, name = path.split("/")
    siblings = [other for other in rpc.RPCS if other.startswith(service + "/")]
    if all(rpc.first_version(other) and older_than(talos_version, rpc.first_version(other)) for other in siblings):
        return "unknown service %s" % service
    return "unknown method %s for service %s" % (name, service)


class _EveryPath(dict):
    """The paths a node serves, and a handler for any other: grpclib answers a path it does not know without the
    content-type header, which grpc-go rejects ("malformed header: missing HTTP content-type"); a grpc-go server
    answers Unimplemented as a normal gRPC response."""

    def __init__(self, handlers, unknown):
        super(_EveryPath, self).__init__(handlers)
        self._unknown = unknown

    def get(self, path, default=None):
        handler = super(_EveryPath, self).get(path)
        return handler if handler is not None else self._unknown(path)


def _unknown_path(path, handlers):
    """grpc-go's answer to a path its server does not register: an unknown service, or a service's unknown method."""
    service, _slash, name = path.partition("/")
    if any(served.startswith("/%s/" % service) for served in handlers):
        return "unknown method %s for service %s" % (name, service)
    return "unknown service %s" % service


def _looks_like_ip(target):
    try:
        ipaddress.ip_address(target)
    except ValueError:
        return False
    return True


def _set_error(metadata, target, error):
    metadata.hostname = target
    metadata.error = go_error_string(error)
    metadata.status.CopyFrom(status_pb2.Status(code=error.status.value, message=error.message))
