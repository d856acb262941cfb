# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A minimal synchronous gRPC client for the emulator's own tests.

It talks to the emulator the way the collection does — grpclib over stdlib
``ssl`` with the talosconfig's Ed25519 client certificate, ``node``/``nodes``
metadata for targeting — but stays independent of the collection's client so
that the emulator can be checked on its own.
"""

import asyncio
import base64
import os
import socket
import ssl
import tempfile

import yaml
from google.protobuf import empty_pb2
from grpclib.client import Channel
from grpclib.const import Cardinality

from talos_emulator import pki
from talos_emulator.services import machined_handlers

# Cardinality and message types of every method, read from the services' generated mappings.
_TYPES = {
    path: (handler.cardinality, handler.request_type, handler.reply_type)
    for path, handler in machined_handlers(None).items()
}


def client_context(ca_pem=None, crt_pem=None, key_pem=None, insecure=False):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cadata=ca_pem.decode())
    if crt_pem:
        with tempfile.TemporaryDirectory() as scratch:
            crt_path, key_path = os.path.join(scratch, "c.crt"), os.path.join(scratch, "c.key")
            with open(crt_path, "wb") as crt_file:
                crt_file.write(crt_pem)
            with open(key_path, "wb") as key_file:
                key_file.write(pki.to_standard_pem(key_pem))
            context.load_cert_chain(crt_path, key_path)
    return context


def peer_certificate(node, context):
    """The DER certificate a node presents in the TLS handshake."""
    with socket.create_connection((node.address, node.port)) as raw:
        with context.wrap_socket(raw, server_hostname=node.address) as tls:
            return tls.getpeercert(binary_form=True)


def talosconfig_credentials(text):
    document = yaml.safe_load(text)
    context = document["contexts"][document["context"]]
    return tuple(base64.b64decode(context[key]) for key in ("ca", "crt", "key"))


class ApiClient:
    """Calls one emulated cluster; each call may pick an endpoint and node targeting metadata."""

    def __init__(self, cluster=None, role="admin", talosconfig=None, insecure=False, context=None, endpoint=None):
        """``cluster`` is an EmulatedCluster, or None with ``endpoint`` and ``talosconfig`` for a cluster run by the command."""
        self.cluster = cluster
        self.endpoint = endpoint or cluster.endpoint
        if context is None:
            if insecure:
                context = client_context(insecure=True)
            else:
                context = client_context(*talosconfig_credentials(talosconfig or cluster.talosconfig(role)))
        self.context = context
        self.loop = asyncio.new_event_loop()
        self._channels = {}

    def close(self):
        for channel in self._channels.values():
            channel.close()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _channel(self, endpoint):
        endpoint = endpoint or self.endpoint
        node = self.cluster.find_node(endpoint) if self.cluster is not None else None
        endpoint = node.endpoint if node is not None else endpoint
        if endpoint not in self._channels:
            host, port = endpoint.rsplit(":", 1)
            self._channels[endpoint] = Channel(host, int(port), ssl=self.context)
        return self._channels[endpoint]

    def reset(self, endpoint=None):
        """Forget a channel (after the node rebooted with other credentials)."""
        channel = self._channels.pop(endpoint or self.endpoint, None)
        if channel is not None:
            channel.close()

    @staticmethod
    def _metadata(node, nodes, metadata):
        pairs = list(metadata or [])
        if node is not None:
            pairs.append(("node", node))
        for target in nodes or ():
            pairs.append(("nodes", target))
        return pairs

    def call(self, method, request=None, endpoint=None, node=None, nodes=None, metadata=None, timeout=10, limit=None):
        """Unary or server-streaming call. Unary returns the reply; streams return the list of replies."""
        return self.loop.run_until_complete(self._call(method, request, endpoint, node, nodes, metadata, timeout, limit))

    async def _call(self, method, request, endpoint, node, nodes, metadata, timeout, limit):
        cardinality, request_type, reply_type = _TYPES["/" + method.lstrip("/")]
        if request is None:
            request = request_type() if request_type is not empty_pb2.Empty else empty_pb2.Empty()
        # The loop only runs during calls: let it notice connections the server dropped meanwhile.
        for _tick in range(3):
            await asyncio.sleep(0)
        channel = self._channel(endpoint)
        path = "/" + method.lstrip("/")
        async with channel.request(path, cardinality, request_type, reply_type, timeout=timeout,
                                   metadata=self._metadata(node, nodes, metadata)) as stream:
            if cardinality in (Cardinality.STREAM_UNARY, Cardinality.STREAM_STREAM):
                for message in request:
                    await stream.send_message(message)
                await stream.end()
            else:
                await stream.send_message(request, end=True)
            if cardinality in (Cardinality.UNARY_UNARY, Cardinality.STREAM_UNARY):
                return await stream.recv_message()
            replies = []
            async for reply in stream:
                replies.append(reply)
                if limit is not None and len(replies) >= limit:
                    await stream.cancel()
                    break
            return replies

    def call_async(self, method, request=None, **options):
        """Start a call without waiting (for concurrency tests); finish it with ``wait``."""
        return self.loop.create_task(self._call(method, request, options.get("endpoint"), options.get("node"), options.get("nodes"),
                                                options.get("metadata"), options.get("timeout", 10), options.get("limit")))

    def wait(self, *tasks):
        return self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
