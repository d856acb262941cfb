# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""TalosClient: the synchronous client every module uses.

One private asyncio loop drives grpclib; each endpoint gets one Channel (one
HTTP/2 connection) that all calls share. Nodes are targeted with the ``node``
metadata key, one call per node, as talosctl v1.14 does. Every failure leaves
this module as a TalosError (see transport_errors.py).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import asyncio
import random
import ssl

try:
    import grpclib.client
    from grpclib.config import Configuration
    from grpclib.const import Cardinality
    from grpclib.exceptions import GRPCError, StreamTerminatedError
    from grpclib.protocol import H2Protocol
    from h2.exceptions import StreamClosedError
except ImportError:  # reported by task.execute through missing_required_lib
    HAS_GRPCLIB = False
else:
    HAS_GRPCLIB = True

try:
    import yaml
except ImportError:  # reported by task.execute through missing_required_lib
    yaml = None

try:
    # The services' generated modules are imported by rpc.service_stub, when a call needs them.
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
except ImportError:  # grpclib, protobuf or googleapis-common-protos missing
    HAS_TALOS_API = False
else:
    HAS_TALOS_API = True

from ansible_collections.talos_linux.talos.plugins.module_utils.client import transport_errors as errors
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosError,
    TalosTLSError,
    TalosUnreachableError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import split_endpoint

# Talos's own limit (constants.GRPCMaxMessageSize). grpclib sets no receive
# limit of its own, so Talos-sized replies arrive whole; the HTTP/2 windows are
# widened to this size so a large reply is not throttled by flow control.
MAX_MESSAGE_SIZE = 32 * 1024 * 1024

# Connecting may take this long for all endpoints together (each gets an even
# share of what is left), so that a task whose endpoints are all dead fails
# well within 15 s, whatever the timeout option says.
CONNECT_TIMEOUT = 10.0

# After a round in which no endpoint answered, calls within this many seconds
# get that answer instead of dialling again: the nodes of one call_many share
# one round even when they cannot all start at once.
REDIAL_INTERVAL = 1.0

# How many calls of one call_many are in flight at once: every call is an
# HTTP/2 stream on the endpoint's connection that the endpoint relays to its
# node, so a task on a thousand nodes must not open a thousand at a time.
DEFAULT_MAX_CONCURRENCY = 32

# Why a connection ended when the server closed it before saying anything.
CLOSED_AFTER_HANDSHAKE = ConnectionAbortedError("closed by the server right after the TLS handshake")

_BACKOFF_FIRST = 0.2
_BACKOFF_MAX = 5.0

# Per-node stream frames with these codes end the stream rather than fail it,
# as the Go client's ReadStream does.
_END_OF_STREAM_CODES = ("Canceled", "DeadlineExceeded")


class _Method:
    """One RPC: its path, cardinality and message classes."""

    def __init__(self, path, cardinality, request_type, reply_type):
        self.path = path
        self.cardinality = cardinality
        self.request_type = request_type
        self.reply_type = reply_type


class _MethodTable:
    """Every RPC of the catalogue (rpc.py) with its generated message types; a service is read on first use."""

    def __init__(self):
        self._services = {}

    def _service(self, service):
        if service not in self._services:
            stub_class = rpc.service_stub(service) if HAS_GRPCLIB and HAS_TALOS_API else None
            methods = {}
            # A stub only records its channel; the methods' types are what we want.
            for method in vars(stub_class(None)).values() if stub_class else ():
                path = getattr(method, "name", "").lstrip("/")
                if path in rpc.RPCS:
                    methods[path] = _Method(method.name, Cardinality[rpc.cardinality(path)],
                                            method.request_type, method.reply_type)
            self._services[service] = methods
        return self._services[service]

    def get(self, method, default=None):
        return self._service(method.rpartition("/")[0]).get(method, default)

    def load_all(self):
        """Read every service of the catalogue now (its generated code included)."""
        for service in sorted(set(method.rpartition("/")[0] for method in rpc.RPCS)):
            self._service(service)

    def __getitem__(self, method):
        spec = self.get(method)
        if spec is None:
            raise KeyError(method)
        return spec

    def __contains__(self, method):
        return self.get(method) is not None


METHODS = _MethodTable()


if HAS_GRPCLIB:
    class _TrackingProtocol(H2Protocol):
        """grpclib's HTTP/2 protocol, keeping the reason its connection was lost on the channel."""

        def __init__(self, channel, *args):
            super(_TrackingProtocol, self).__init__(*args)
            self._channel = channel
            self._heard_from_server = False

        def connection_made(self, transport):
            self._channel.connection_closed = asyncio.get_running_loop().create_future()
            self._channel.transport = transport
            super(_TrackingProtocol, self).connection_made(transport)

        def data_received(self, data):
            self._heard_from_server = True
            super(_TrackingProtocol, self).data_received(data)

        def connection_lost(self, exc):
            # Every HTTP/2 server speaks first (its SETTINGS frame): silence
            # until the connection ends (closed, or reset while the request was
            # still being written) means the handshake was refused.
            if not self._heard_from_server and not isinstance(exc, ssl.SSLError) and (
                    exc is None or isinstance(exc, (ConnectionResetError, BrokenPipeError))):
                exc = CLOSED_AFTER_HANDSHAKE
            self._channel.lost_reason = exc
            if self._channel.connection_closed is not None and not self._channel.connection_closed.done():
                self._channel.connection_closed.set_result(None)
            super(_TrackingProtocol, self).connection_lost(exc)

    class _Channel(grpclib.client.Channel):
        """A grpclib Channel that remembers why its last connection was lost.

        With TLS 1.3 a server that refuses the client certificate says so with
        an alert after the handshake; grpclib only reports "Connection lost",
        the alert is what makes the error message useful.
        """

        lost_reason = None
        connection_closed = None
        transport = None

        def _protocol_factory(self):
            self.lost_reason = None
            self.connection_closed = None
            self.transport = None
            return _TrackingProtocol(self, grpclib.client.Handler(), self._config, self._h2_config)


def _certificate_required(reason):
    """Whether a connection ended with the TLS 1.3 alert a server sends when no client certificate came."""
    return isinstance(reason, ssl.SSLError) and "CERTIFICATE_REQUIRED" in (reason.reason or "").upper()


def _backoff(attempt):
    """Exponential backoff with jitter: 0.1-0.2 s, 0.2-0.4 s, ... capped at 5 s."""
    delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * (2 ** attempt))
    return random.uniform(delay / 2, delay)


def _parse_yaml_spec(text):
    """A resource's yaml_spec: one document as itself, several (MachineConfigs) as a list; timestamps as Talos wrote
    them."""
    try:
        documents = [doc for doc in go_yaml.load_all(text) if doc is not None] if text else []
    except yaml.YAMLError as exc:
        raise TalosError("The node returned a resource spec that is not valid YAML: %s." % exc)
    if not documents:
        return None
    return documents[0] if len(documents) == 1 else documents


def resource_metadata_to_dict(resource):
    """The metadata of a COSI resource as a dict (its spec is not read)."""
    meta = resource.metadata
    return {
        "namespace": meta.namespace,
        "type": meta.type,
        "id": meta.id,
        "version": meta.version,
        "owner": meta.owner,
        "phase": meta.phase,
        "created": meta.created.ToJsonString() if meta.HasField("created") else None,
        "updated": meta.updated.ToJsonString() if meta.HasField("updated") else None,
        "finalizers": list(meta.finalizers),
        "labels": dict(meta.labels),
        "annotations": dict(meta.annotations),
    }


def resource_to_dict(resource):
    """A COSI resource as ``{"metadata": {...}, "spec": <parsed yaml_spec>}``."""
    return {"metadata": resource_metadata_to_dict(resource), "spec": _parse_yaml_spec(resource.spec.yaml_spec)}


class _CallbackError(Exception):
    """Internal: an ``on_message`` callback raised ``original``; passed through untouched."""

    def __init__(self, original):
        super(_CallbackError, self).__init__(str(original))
        self.original = original


class _Retryable(Exception):
    """Internal: an attempt failed with ``error`` and may be repeated."""

    def __init__(self, error):
        super(_Retryable, self).__init__(error.message)
        self.error = error


class TalosClient:
    """Synchronous Talos API client over grpclib; see docs/architecture.md for the contract.

    Nothing is dialled until the first call. Use it as a context manager (or
    call ``close()``) so the connections and the loop are released.
    """

    def __init__(self, settings):
        self.settings = settings
        self._loop = None
        self._ssl_context = None
        self._channels = {}
        self._active = 0
        self._connect_lock = None
        # (loop time, TalosUnreachableError) of the last round in which no endpoint answered.
        self._connect_failure = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Close every connection and the private loop (a later call starts afresh)."""
        if self._loop is None:
            return
        closing = [channel.connection_closed for channel in self._channels.values()
                   if channel.connection_closed is not None and not channel.connection_closed.done()]
        for channel in self._channels.values():
            transport = channel.transport
            channel.close()  # sends TLS close_notify
            if transport is not None:
                # Waiting for the node's own close_notify would cost every task a round trip to it.
                transport.abort()
        self._channels = {}
        self._connect_lock = None
        self._connect_failure = None
        if closing:
            # The sockets close on the loop's next turn; do not leave them behind.
            self._loop.run_until_complete(asyncio.wait(closing, timeout=1))
        self._loop.close()
        self._loop = None

    @property
    def nodes(self):
        """Target nodes: the node/nodes options, else the talosconfig nodes, else [None] (the endpoint itself)."""
        return list(self.settings.nodes)

    @property
    def active_endpoint(self):
        """The endpoint calls go to first: the last one that answered."""
        return self.settings.endpoints[self._active]

    def with_settings(self, **overrides):
        """A new client for the same cluster with some connection options replaced (e.g. ``insecure=False``)."""
        return TalosClient(self.settings.replace(**overrides))

    # -- public calls ------------------------------------------------------

    def call(self, method, request=None, node=None, retry_codes=None, deadline=None, retry_unreachable=False):
        """Unary call to one node; returns the reply envelope's ``messages`` items.

        An endpoint or node that cannot be reached (refused, no route, timed
        out connecting) fails the call at once; a wait for a node to come back
        passes ``retry_unreachable=True`` to keep trying until ``deadline``.
        """
        spec = self._method(method, Cardinality.UNARY_UNARY)
        return self._run(self._call(spec, request, node, retry_codes, deadline, retry_unreachable))

    def call_many(self, method, request=None, nodes=None, retry_codes=None, deadline=None, max_concurrency=None,
                  retry_unreachable=False):
        """The same unary call to several nodes at once: ``{node: items or TalosError}``.

        At most ``max_concurrency`` calls (default DEFAULT_MAX_CONCURRENCY) are
        in flight at a time; a node's ``deadline`` starts when its call does.
        """
        return self.call_batch([(method, request, nodes)], retry_codes, deadline, max_concurrency, retry_unreachable)[0]

    def call_batch(self, calls, retry_codes=None, deadline=None, max_concurrency=None, retry_unreachable=False):
        """Several unary calls, each ``(method, request, nodes)``, all in flight together: one ``{node: items or
        TalosError}`` per call, in order.

        Reads that do not depend on each other go out at once, not in rounds
        that each wait for their slowest node. At most ``max_concurrency``
        calls of the whole batch are in flight at a time.
        """
        batches = []
        for method, request, nodes in calls:
            spec = self._method(method, Cardinality.UNARY_UNARY)
            batches.append((lambda node, spec=spec, request=request:
                            self._call(spec, request, node, retry_codes, deadline, retry_unreachable), nodes))
        return self._many_batches(batches, max_concurrency)

    def stream_many(self, method, request=None, nodes=None, retry_codes=None, deadline=None, max_concurrency=None,
                    on_message=None, retry_unreachable=False):
        """The same server-streaming call to several nodes at once: ``{node: messages or TalosError}``.

        Each value is what ``stream`` returns for that node (bytes for
        ``common.Data`` streams); concurrency is bounded as in ``call_many``.
        With ``on_message(node, message)`` every message goes to the callback
        as in ``stream`` and a node's value is None unless its call failed.
        """
        spec = self._method(method, Cardinality.UNARY_STREAM)

        async def read(node):
            callback = None if on_message is None else (lambda message: on_message(node, message))
            messages = await self._stream(spec, request, node, callback, retry_codes, deadline, retry_unreachable)
            if callback is not None:
                return None
            if spec.reply_type is common_pb2.Data:
                return b"".join(message.bytes for message in messages)
            return messages

        try:
            return self._many(read, nodes, max_concurrency)
        except _CallbackError as failure:
            raise failure.original

    def _many(self, call, nodes, max_concurrency):
        """``call(node)`` for every node, at most ``max_concurrency`` at a time: ``{node: result or TalosError}``."""
        return self._many_batches([(call, nodes)], max_concurrency)[0]

    def _many_batches(self, batches, max_concurrency):
        """``call(node)`` for every node of every ``(call, nodes)``, all at most ``max_concurrency`` at a time:
        one ``{node: result or TalosError}`` per batch."""
        targets = [self.nodes if nodes is None else list(nodes) for _call, nodes in batches]
        limit = DEFAULT_MAX_CONCURRENCY if max_concurrency is None else max_concurrency
        if limit < 1:
            raise ValueError("max_concurrency must be at least 1, got %r" % (limit,))

        async def gather():
            slots = asyncio.Semaphore(limit)

            async def bounded(call, node):
                async with slots:
                    return await call(node)

            results = await asyncio.gather(*[bounded(call, node) for (call, _nodes), nodes in zip(batches, targets)
                                             for node in nodes], return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, TalosError):
                    raise result
            outcomes, position = [], 0
            for nodes in targets:
                outcomes.append(dict(zip(nodes, results[position:position + len(nodes)])))
                position += len(nodes)
            return outcomes

        return self._run(gather())

    def stream(self, method, request=None, node=None, on_message=None, retry_codes=None, deadline=None,
               retry_unreachable=False):
        """Server-streaming call.

        Returns the list of reply messages, or for ``common.Data`` streams the
        concatenated bytes. With ``on_message(message)`` every message goes to
        the callback as it arrives and nothing is kept (a snapshot may be
        large); returning True from it stops reading (for Watch and Events),
        and an exception it raises (a full disk) ends the call unchanged.
        ``retry_unreachable`` as in ``call``.
        """
        spec = self._method(method, Cardinality.UNARY_STREAM)
        try:
            messages = self._run(self._stream(spec, request, node, on_message, retry_codes, deadline, retry_unreachable))
        except _CallbackError as failure:
            raise failure.original
        if on_message is not None:
            return None
        if spec.reply_type is common_pb2.Data:
            return b"".join(message.bytes for message in messages)
        return messages

    def read_bytes(self, method, request=None, node=None, deadline=None, retry_unreachable=False):
        """A ``common.Data`` stream (Read, Kubeconfig, EtcdSnapshot) as bytes."""
        spec = self._method(method, Cardinality.UNARY_STREAM)
        if spec.reply_type is not common_pb2.Data:
            raise ValueError("%s does not stream common.Data" % method)
        return self.stream(method, request, node=node, deadline=deadline, retry_unreachable=retry_unreachable)

    def upload(self, method, chunks, node=None, deadline=None):
        """Client-streaming call of ``common.Data`` chunks (bytes or Data messages); returns the reply items."""
        spec = self._method(method, Cardinality.STREAM_UNARY)
        messages = (chunk if isinstance(chunk, common_pb2.Data) else common_pb2.Data(bytes=chunk) for chunk in chunks)
        return self._run(self._upload(spec, messages, node, deadline))

    def get_resource(self, namespace, resource_type, resource_id, node=None, deadline=None, retry_unreachable=False):
        """One COSI resource as a dict; a missing one raises TalosApiError with code NotFound."""
        request = self._method(rpc.COSI_GET, Cardinality.UNARY_UNARY).request_type(
            namespace=namespace, type=resource_type, id=resource_id)
        items = self.call(rpc.COSI_GET, request, node=node, deadline=deadline,
                          retry_unreachable=retry_unreachable)
        return resource_to_dict(items[0].resource)

    def list_resources(self, namespace, resource_type, node=None, deadline=None, label_query=None,
                       retry_unreachable=False):
        """Every COSI resource of a type in a namespace (matching ``label_query``, a LabelQuery), as dicts."""
        request = self._method(rpc.COSI_LIST, Cardinality.UNARY_STREAM).request_type(
            namespace=namespace, type=resource_type)
        if label_query is not None and label_query.terms:
            request.options.label_query.add().CopyFrom(label_query)
        replies = self.stream(rpc.COSI_LIST, request, node=node, deadline=deadline,
                              retry_unreachable=retry_unreachable)
        return [resource_to_dict(reply.resource) for reply in replies]

    # -- machinery ---------------------------------------------------------

    def _method(self, method, cardinality):
        spec = METHODS.get(method)
        if spec is None:
            raise ValueError("unknown Talos API method %r" % method)
        if spec.cardinality != cardinality:
            raise ValueError("%s is a %s call" % (method, spec.cardinality.name.lower().replace("_", "-")))
        return spec

    def _run(self, coroutine):
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coroutine)

    def _metadata(self, node):
        # `runtime` is what the Go client sends; no `node` key makes the endpoint answer itself.
        metadata = [("runtime", "Talos")]
        if self.settings.cluster:
            metadata.append(("context", self.settings.cluster))
        if node:
            metadata.append(("node", node))
        return metadata

    def _request(self, spec, request):
        if request is None:
            return spec.request_type()
        if not isinstance(request, spec.request_type):
            raise TypeError("%s expects %s, got %s" % (spec.path, spec.request_type.__name__, type(request).__name__))
        return request

    def _new_channel(self, endpoint):
        if self._ssl_context is None:
            self._ssl_context = self.settings.ssl_context()
        host, port = split_endpoint(endpoint)
        config = Configuration(http2_connection_window_size=MAX_MESSAGE_SIZE, http2_stream_window_size=MAX_MESSAGE_SIZE)
        return _Channel(host, port, ssl=self._ssl_context, config=config)

    async def _channel(self, remaining):
        """The channel of the first reachable endpoint, starting with the one that worked last.

        Connecting to all endpoints takes at most CONNECT_TIMEOUT (or
        ``remaining``, if shorter); a round that failed is reused for
        REDIAL_INTERVAL.
        """
        active = self.settings.endpoints[self._active]
        channel = self._channels.get(active)
        if channel is not None and channel._connected:
            return channel, active  # the usual case: no lock, no timer (a task's calls share one connection)
        loop = asyncio.get_running_loop()
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._connect_failure is not None and loop.time() - self._connect_failure[0] < REDIAL_INTERVAL:
                raise self._connect_failure[1]
            endpoints = self.settings.endpoints
            budget_end = loop.time() + min(remaining, CONNECT_TIMEOUT)
            failures = []
            for offset in range(len(endpoints)):
                index = (self._active + offset) % len(endpoints)
                endpoint = endpoints[index]
                channel = self._channels.get(endpoint)
                if channel is None:
                    channel = self._channels[endpoint] = self._new_channel(endpoint)
                share = (budget_end - loop.time()) / (len(endpoints) - offset)
                try:
                    await asyncio.wait_for(channel.__connect__(), timeout=max(0.01, share))
                except ssl.SSLError as err:
                    channel.close()
                    raise errors.tls_error(err, endpoint, split_endpoint(endpoint)[0], self.settings.ca_source)
                except (OSError, asyncio.TimeoutError) as err:
                    channel.close()
                    failures.append((endpoint, err))
                    continue
                self._active = index
                self._connect_failure = None
                return channel, endpoint
            error = errors.unreachable_error(failures, insecure=self.settings.insecure)
            self._connect_failure = (loop.time(), error)
            raise error

    def _translate(self, err, spec, node, channel, endpoint):
        method = spec.path.lstrip("/")
        if isinstance(err, GRPCError):
            return errors.from_grpc_error(err, method, node, endpoint=endpoint, client_roles=self.settings.client_roles)
        if channel.lost_reason is CLOSED_AFTER_HANDSHAKE or _certificate_required(channel.lost_reason):
            if self.settings.insecure:
                return errors.client_certificate_required(endpoint)
            return errors.client_certificate_refused(endpoint, "the connection was closed right after the TLS handshake")
        if isinstance(channel.lost_reason, ssl.SSLError):
            err = channel.lost_reason
        if isinstance(err, ssl.SSLError):
            return errors.tls_error(err, endpoint, split_endpoint(endpoint)[0], self.settings.ca_source)
        if isinstance(err, StreamTerminatedError):
            return errors.connection_lost(method, node, endpoint, str(err).lower() or "stream terminated", relayed=True)
        return errors.connection_lost(method, node, endpoint, errors.describe_os_error(err), relayed=False)

    async def _attempt(self, spec, node, remaining, exchange):
        """One try: connect (with failover), run ``exchange(stream, progress)``, translate failures.

        ``exchange`` sets ``progress["committed"]`` once a reply arrived or
        input was consumed: from then on a failure is final, never retried.
        """
        try:
            channel, endpoint = await self._channel(remaining)
        except TalosUnreachableError as error:  # nothing was sent
            raise _Retryable(error)
        progress = {"committed": False}
        try:
            async with channel.request(spec.path, spec.cardinality, spec.request_type, spec.reply_type,
                                       timeout=remaining, metadata=self._metadata(node)) as stream:
                return await exchange(stream, progress)
        except asyncio.TimeoutError:  # an OSError on Python 3.11+: the deadline, not a lost connection
            raise
        except (GRPCError, StreamTerminatedError, OSError) as err:
            error = self._translate(err, spec, node, channel, endpoint)
            if progress["committed"] or isinstance(error, TalosTLSError):
                raise error
            raise _Retryable(error)

    async def _with_retries(self, spec, node, retry_codes, deadline, retry_unreachable, exchange):
        """Run ``exchange`` until it succeeds, fails for good or the deadline passes.

        A read is repeated on Unavailable (a mutation on the codes its caller
        names), but not when the endpoints or the node cannot be reached at all
        (refused, no route, timed out connecting): that fails at once, unless
        the caller waits for a node and asks for ``retry_unreachable``.
        """
        method = spec.path.lstrip("/")
        if retry_codes is None:
            retry_codes = ("Unavailable",) if rpc.is_read(method) else ()
        seconds = float(deadline if deadline is not None else self.settings.timeout)
        option = "the timeout option" if deadline is None else None
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        attempt = 0
        last_error = None
        while True:
            remaining = end - loop.time()
            if remaining <= 0:
                raise errors.timeout_error(method, node, seconds, last_error, option)
            try:
                return await self._attempt(spec, node, remaining, exchange)
            except asyncio.TimeoutError:
                raise errors.timeout_error(method, node, seconds, last_error, option)
            except _Retryable as retryable:
                error = retryable.error
                if isinstance(error, TalosUnreachableError):
                    if not retry_unreachable:
                        raise error
                elif error.code not in retry_codes:
                    raise error
                last_error = error
            delay = _backoff(attempt)
            attempt += 1
            if loop.time() + delay >= end:
                raise errors.timeout_error(method, node, seconds, last_error, option)
            await asyncio.sleep(delay)

    async def _call(self, spec, request, node, retry_codes, deadline, retry_unreachable=False):
        request = self._request(spec, request)

        async def exchange(stream, progress):
            await stream.send_message(request, end=True)
            reply = await stream.recv_message()
            progress["committed"] = True
            return reply

        reply = await self._with_retries(spec, node, retry_codes, deadline, retry_unreachable, exchange)
        return _unpack(reply, node)

    async def _stream(self, spec, request, node, on_message, retry_codes, deadline, retry_unreachable=False):
        request = self._request(spec, request)

        async def exchange(stream, progress):
            await stream.send_message(request, end=True)
            messages = []
            async for message in stream:
                progress["committed"] = True
                metadata = getattr(message, "metadata", None)
                if isinstance(metadata, common_pb2.Metadata) and metadata.error:
                    error = errors.node_error(metadata, node)
                    if error.code in _END_OF_STREAM_CODES:
                        break
                    raise error
                if on_message is None:
                    messages.append(message)
                    continue
                try:
                    stop = on_message(message)
                except Exception as exc:  # the caller's own failure, not the transport's
                    raise _CallbackError(exc)
                if stop:
                    try:
                        await stream.cancel()
                    except StreamClosedError:  # the server had ended the stream already: nothing to cancel
                        pass
                    break
            return messages

        return await self._with_retries(spec, node, retry_codes, deadline, retry_unreachable, exchange)

    async def _upload(self, spec, messages, node, deadline):
        async def exchange(stream, progress):
            # The chunks are read as they are sent (a snapshot may be large);
            # once the first one is gone the upload cannot be repeated.
            progress["committed"] = True
            await stream.send_request()
            for message in messages:
                await stream.send_message(message)
            await stream.end()
            return await stream.recv_message()

        reply = await self._with_retries(spec, node, (), deadline, False, exchange)
        return _unpack(reply, node)


def _unpack(reply, node):
    """The ``messages`` items of a reply envelope; an item with ``metadata.error`` raises TalosNodeError."""
    if "messages" not in reply.DESCRIPTOR.fields_by_name:
        return [reply]
    items = list(reply.messages)
    for item in items:
        if "metadata" in item.DESCRIPTOR.fields_by_name and item.metadata.error:
            raise errors.node_error(item.metadata, node)
    return items
