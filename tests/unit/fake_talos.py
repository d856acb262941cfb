# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""FakeTalos: the one fake Talos client of the unit tests, answering by RPC path.

A test says what each RPC answers, for every node or for one
(``fake.answer(rpc.VERSION, [reply], node="10.5.0.2")``),
runs the code under test and reads what was asked (``fake.calls``). The fake
has TalosClient's public surface with the same signatures and return shapes
(client.py; test_fake_talos.py holds it to that) and refuses what the real
client refuses: a path that is not in the RPC catalogue (rpc.py), a call of the
wrong cardinality, a request of the wrong type; and an answer whose messages
are not the ones the RPC replies with. It never retries and never waits:
retries, deadlines and connections are the real client's business, tested
against the emulator.

An answer is one of:

- a list of reply messages: what ``call`` returns and what a stream delivers;
  an error in the list (``fails_with(...)`` or an exception) ends a stream
  there, after the messages before it; a message whose ``metadata.error`` is
  set is a per-node error, raised as TalosNodeError (or, in a stream, ending
  it for Canceled and DeadlineExceeded) as TalosClient does;
- bytes, for ``common.Data`` streams (Read, Kubeconfig, EtcdSnapshot);
- ``fails_with(code, server_message)``: the TalosError transport_errors.from_status
  builds for that gRPC status on the call's method and node;
- an exception to raise as it is (a TalosTLSError, a TalosConfigError...);
- a callable ``(request, node) -> answer`` (``upload`` passes the uploaded
  bytes as the request); ``in_turn(...)`` and ``cosi_state(...)`` build two.

``ActionRecorder`` stands for one node's action in tests of several nodes in
one task.
"""

from collections import namedtuple
import copy
import threading
import time

import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import transport_errors as errors
from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import DEFAULT_MAX_CONCURRENCY, METHODS, resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosApiError,
    TalosError,
    label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings


class _EveryNode(object):
    """The node key of an answer given to every node (None is the endpoint node itself)."""

    def __repr__(self):
        return "every node"


EVERY_NODE = _EveryNode()

# One RPC the code under test made. ``via`` is the client method it used (call, call_many, stream,
# stream_many, read_bytes, upload, get_resource, list_resources); ``kwargs`` the client method's other
# keyword arguments (retry_codes, deadline, max_concurrency...), defaults included; ``request`` is the
# request message (for upload, the uploaded bytes).
Call = namedtuple("Call", "via method node request kwargs")

# Per-node stream frames with these codes end the stream rather than fail it, as in TalosClient.
_END_OF_STREAM_CODES = ("Canceled", "DeadlineExceeded")

# Settings need client credentials unless insecure; the fake never uses them.
_PLACEHOLDER_CREDENTIALS = dict(ca="fake CA", crt="fake certificate", key="fake key")


class _Status(object):
    """An answer that fails with a gRPC status, made into a TalosError for the call it answers."""

    def __init__(self, code, server_message, endpoint, client_roles):
        self.code = code
        self.server_message = server_message
        self.endpoint = endpoint
        self.client_roles = client_roles

    def error(self, method, node):
        return errors.from_status(self.code, self.server_message, method, node, endpoint=self.endpoint,
                                  client_roles=self.client_roles)


def fails_with(code, server_message="", endpoint=None, client_roles=None):
    """An answer failing with gRPC status ``code`` (``"Unavailable"``), as the client reports it (transport_errors.from_status)."""
    return _Status(code, server_message, endpoint, client_roles)


def in_turn(*answers):
    """An answer that is each of ``answers`` in turn, one per call; the last one repeats."""
    script = list(answers)

    def next_answer(_request, _node):
        return script.pop(0) if len(script) > 1 else script[0]
    return next_answer


def resource(namespace, resource_type, resource_id, spec, labels=None, version="1"):
    """A COSI resource message; ``spec`` is its YAML text, or a structure written as YAML."""
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(namespace=namespace, type=resource_type, id=resource_id, version=version,
                                       labels=labels or {}),
        spec=resource_pb2.Spec(yaml_spec=spec if isinstance(spec, str) else yaml.safe_dump(spec)))


def cosi_state(*resources):
    """An answer to State/Get and State/List serving ``resources`` (resource messages) as a node's COSI state does.

    Get of a resource that is not there fails with NotFound, in the words of
    Talos; List does not filter by labels (a request with a label query fails
    the test: answer that List with the resources the query selects).
    """
    def answer(request, _node):
        if isinstance(request, state_pb2.GetRequest):
            for item in resources:
                if (item.metadata.namespace, item.metadata.type, item.metadata.id) == (request.namespace, request.type, request.id):
                    return [state_pb2.GetResponse(resource=item)]
            return fails_with("NotFound", "resource %s(%s/%s@undefined) doesn't exist"
                              % (request.type, request.namespace, request.id))
        if isinstance(request, state_pb2.ListRequest):
            if request.options.label_query:
                raise AssertionError("cosi_state does not filter by labels: answer %s with what the query selects" % rpc.COSI_LIST)
            return [state_pb2.ListResponse(resource=item) for item in resources
                    if (item.metadata.namespace, item.metadata.type) == (request.namespace, request.type)]
        raise AssertionError("cosi_state answers Get and List, not %s" % type(request).__name__)
    return answer


class _CallbackError(Exception):
    """An ``on_message`` callback raised ``original``: it ends the call unchanged, as in TalosClient."""

    def __init__(self, original):
        super(_CallbackError, self).__init__(str(original))
        self.original = original


def _reply_item_type(method):
    """The full name of the messages the client returns for ``method``: the envelope's items, or the reply itself."""
    reply = METHODS[method].reply_type.DESCRIPTOR
    if rpc.cardinality(method) != rpc.SERVER_STREAM and "messages" in reply.fields_by_name:
        return reply.fields_by_name["messages"].message_type.full_name
    return reply.full_name


class FakeTalos(object):
    """A TalosClient that answers from registered answers and records every RPC; see the module docstring."""

    def __init__(self, nodes=None, answers=None, insecure=False, settings=None, nodes_listed=None):
        """Target ``nodes`` (default: the endpoint node) through endpoint 10.5.0.2, or as ``settings`` say.

        ``nodes_listed`` says whether they came as the nodes option (default: when there are several).
        """
        self.settings = settings or self._settings(dict(endpoints=["10.5.0.2"], nodes=nodes, insecure=insecure, timeout=60,
                                                        nodes_listed=nodes_listed))
        self._answers = {}
        self.calls = []
        # The overrides of every with_settings call, in order.
        self.settings_changes = []
        self.closed = False
        for method, answer in (answers or {}).items():
            self.answer(method, answer)

    @staticmethod
    def _settings(options):
        credentials = {} if options["insecure"] else _PLACEHOLDER_CREDENTIALS
        return ConnectionSettings(options["endpoints"], nodes=options["nodes"], insecure=options["insecure"],
                                  timeout=options["timeout"], nodes_listed=options.get("nodes_listed"), **credentials)

    # -- what the test says and reads ------------------------------------------------

    def answer(self, method, answer, node=EVERY_NODE):
        """Answer ``method`` with ``answer`` on ``node`` (default: every node without an answer of its own)."""
        if method not in METHODS:
            raise ValueError("unknown Talos API method %r: it is not in the RPC catalogue (rpc.py)" % method)
        self._answers.setdefault(method, {})[node] = answer
        return self

    def names(self):
        """The method names of the calls made, in order (``["Version", "ServiceList"]``)."""
        return [call.method.rsplit("/", 1)[-1] for call in self.calls]

    def calls_to(self, method):
        """The calls of ``method``, in order."""
        return [call for call in self.calls if call.method == method]

    def requests(self, method):
        """The requests sent to ``method``, in order."""
        return [call.request for call in self.calls_to(method)]

    # -- TalosClient ------------------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        self.closed = True

    @property
    def nodes(self):
        return list(self.settings.nodes)

    @property
    def active_endpoint(self):
        return self.settings.endpoints[0]

    def with_settings(self, **overrides):
        """A client with some connection options replaced, sharing this one's answers and call records."""
        self.settings_changes.append(overrides)
        options = dict(endpoints=self.settings.endpoints, nodes=self.settings.nodes, insecure=self.settings.insecure,
                       timeout=self.settings.timeout, nodes_listed=self.settings.nodes_listed)
        for name, value in overrides.items():
            if name == "node":
                options["nodes"], options["nodes_listed"] = ([value] if value else None), False
            elif name in options:
                options[name] = value
            else:
                raise TypeError("FakeTalos.with_settings cannot change %s" % name)
        derived = copy.copy(self)
        derived.settings = self._settings(options)
        derived.closed = False
        return derived

    def call(self, method, request=None, node=None, retry_codes=None, deadline=None, retry_unreachable=False):
        request = self._record("call", method, rpc.UNARY, request, node,
                               dict(retry_codes=retry_codes, deadline=deadline, retry_unreachable=retry_unreachable))
        return list(self._replies(method, request, node))

    def call_many(self, method, request=None, nodes=None, retry_codes=None, deadline=None, max_concurrency=None,
                  retry_unreachable=False):
        return self.call_batch([(method, request, nodes)], retry_codes, deadline, max_concurrency, retry_unreachable)[0]

    def call_batch(self, calls, retry_codes=None, deadline=None, max_concurrency=None, retry_unreachable=False):
        kwargs = dict(retry_codes=retry_codes, deadline=deadline, max_concurrency=max_concurrency,
                      retry_unreachable=retry_unreachable)
        outcomes = []
        for method, request, nodes in calls:
            def one(node, method=method, request=request):
                return list(self._replies(method, self._record("call_many", method, rpc.UNARY, request, node, kwargs), node))
            outcomes.append(self._many(one, nodes, max_concurrency))
        return outcomes

    def stream(self, method, request=None, node=None, on_message=None, retry_codes=None, deadline=None,
               retry_unreachable=False):
        request = self._record("stream", method, rpc.SERVER_STREAM, request, node,
                               dict(on_message=on_message, retry_codes=retry_codes, deadline=deadline,
                                    retry_unreachable=retry_unreachable))
        try:
            return self._deliver(method, request, node, on_message)
        except _CallbackError as failure:
            raise failure.original

    def stream_many(self, method, request=None, nodes=None, retry_codes=None, deadline=None, max_concurrency=None,
                    on_message=None, retry_unreachable=False):
        kwargs = dict(retry_codes=retry_codes, deadline=deadline, max_concurrency=max_concurrency, on_message=on_message,
                      retry_unreachable=retry_unreachable)

        def one(node):
            callback = None if on_message is None else (lambda message: on_message(node, message))
            return self._deliver(method, self._record("stream_many", method, rpc.SERVER_STREAM, request, node, kwargs),
                                 node, callback)
        try:
            return self._many(one, nodes, max_concurrency)
        except _CallbackError as failure:
            raise failure.original

    def read_bytes(self, method, request=None, node=None, deadline=None, retry_unreachable=False):
        if method in METHODS and METHODS[method].reply_type is not common_pb2.Data:
            raise ValueError("%s does not stream common.Data" % method)
        request = self._record("read_bytes", method, rpc.SERVER_STREAM, request, node,
                               dict(deadline=deadline, retry_unreachable=retry_unreachable))
        return self._deliver(method, request, node, None)

    def upload(self, method, chunks, node=None, deadline=None):
        data = b"".join(chunk.bytes if isinstance(chunk, common_pb2.Data) else chunk for chunk in chunks)
        self._record("upload", method, rpc.CLIENT_STREAM, data, node, dict(deadline=deadline))
        return list(self._replies(method, data, node))

    def get_resource(self, namespace, resource_type, resource_id, node=None, deadline=None, retry_unreachable=False):
        request = self._record("get_resource", rpc.COSI_GET, rpc.UNARY,
                               state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id), node,
                               dict(deadline=deadline, retry_unreachable=retry_unreachable))
        return resource_to_dict(list(self._replies(rpc.COSI_GET, request, node))[0].resource)

    def list_resources(self, namespace, resource_type, node=None, deadline=None, label_query=None,
                       retry_unreachable=False):
        request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
        if label_query is not None and label_query.terms:
            request.options.label_query.add().CopyFrom(label_query)
        self._record("list_resources", rpc.COSI_LIST, rpc.SERVER_STREAM, request, node,
                     dict(deadline=deadline, retry_unreachable=retry_unreachable))
        return [resource_to_dict(reply.resource) for reply in self._replies(rpc.COSI_LIST, request, node)]

    # -- machinery -------------------------------------------------------------------

    def _record(self, via, method, cardinality, request, node, kwargs):
        """Check the call as TalosClient would, record it, and return its request (the default one for None)."""
        spec = METHODS.get(method)
        if spec is None:
            raise ValueError("unknown Talos API method %r: it is not in the RPC catalogue (rpc.py)" % method)
        if rpc.cardinality(method) != cardinality:
            raise ValueError("%s is a %s call" % (method, rpc.cardinality(method).lower().replace("_", "-")))
        if cardinality != rpc.CLIENT_STREAM:
            if request is None:
                request = spec.request_type()
            elif not isinstance(request, spec.request_type):
                raise TypeError("%s expects %s, got %s" % (method, spec.request_type.__name__, type(request).__name__))
        self.calls.append(Call(via, method, node, request, kwargs))
        return request

    def _replies(self, method, request, node):
        """The reply messages the answer gives, one at a time; an error in them is raised when reached."""
        by_node = self._answers.get(method, {})
        if node in by_node:
            answer = by_node[node]
        elif EVERY_NODE in by_node:
            answer = by_node[EVERY_NODE]
        else:
            raise AssertionError("FakeTalos has no answer for %s on %s" % (method, label(node)))
        if callable(answer):
            answer = answer(request, node)
        if isinstance(answer, bytes):
            if METHODS[method].reply_type is not common_pb2.Data:
                raise TypeError("%s does not stream common.Data: answer it with messages" % method)
            answer = [common_pb2.Data(bytes=answer)]
        if isinstance(answer, (_Status, BaseException)):
            answer = [answer]
        if not isinstance(answer, list):
            raise TypeError("an answer is a list of messages, bytes, an error or a callable; %s got %r" % (method, answer))
        expected = _reply_item_type(method)
        streaming = rpc.cardinality(method) == rpc.SERVER_STREAM
        for item in answer:
            if isinstance(item, _Status):
                raise item.error(method, node)
            if isinstance(item, BaseException):
                raise item
            if getattr(getattr(item, "DESCRIPTOR", None), "full_name", None) != expected:
                raise TypeError("%s replies with %s messages, not %r" % (method, expected, item))
            metadata = getattr(item, "metadata", None)
            if isinstance(metadata, common_pb2.Metadata) and metadata.error:
                error = errors.node_error(metadata, node)
                if streaming and error.code in _END_OF_STREAM_CODES:
                    return
                raise error
            yield item

    def _deliver(self, method, request, node, on_message):
        """What ``stream`` returns: the messages, their bytes for a common.Data stream, or None with ``on_message``."""
        kept = []
        for message in self._replies(method, request, node):
            if on_message is None:
                kept.append(message)
                continue
            try:
                stop = on_message(message)
            except Exception as exc:  # the caller's own failure
                raise _CallbackError(exc)
            if stop:
                break
        if on_message is not None:
            return None
        if METHODS[method].reply_type is common_pb2.Data:
            return b"".join(message.bytes for message in kept)
        return kept

    def _many(self, one, nodes, max_concurrency):
        """``one(node)`` for every node: ``{node: result or TalosError}``, as TalosClient's concurrent calls return."""
        targets = self.nodes if nodes is None else list(nodes)
        limit = DEFAULT_MAX_CONCURRENCY if max_concurrency is None else max_concurrency
        if limit < 1:
            raise ValueError("max_concurrency must be at least 1, got %r" % (limit,))
        results = {}
        for node in targets:
            try:
                results[node] = one(node)
            except TalosError as error:
                results[node] = error
        return results


class ActionRecorder(object):
    """A node's action (``act(client, node)``) that records which nodes acted at the same time and on which client.

    ``changed`` names the nodes it changes, ``fail`` those it fails on.
    """

    def __init__(self, changed=(), fail=()):
        self.changed = changed
        self.fail = fail
        self.acting = set()
        self.overlaps = []
        self.clients = []
        self.lock = threading.Lock()

    def __call__(self, client, node):
        with self.lock:
            self.acting.add(node)
            self.overlaps.append(sorted(self.acting))
            self.clients.append(client)
        time.sleep(0.05)
        with self.lock:
            self.acting.discard(node)
        if node in self.fail:
            raise ActionFailed("The reboot of node %s failed." % node, {"changed": True}, TalosApiError("x", code="Unknown"))
        return {"changed": node in self.changed, "node_was": node}
