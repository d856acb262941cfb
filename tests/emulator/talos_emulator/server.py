# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's API listener: grpclib over stdlib ssl on the node's own address.

Normal mode is mutual TLS against the node's OS CA. OpenSSL rejects, during
the handshake, a client certificate from another CA and one whose EKU lacks
clientAuth (its TLS-client purpose check). Talos also refuses a certificate
whose EKU is anything but exactly ``[clientAuth]`` or has none; OpenSSL lets
those through, so the listener checks the verified peer certificate as soon
as the handshake completes and aborts the connection before any HTTP/2 frame
is exchanged. Maintenance mode is server-only TLS with a fresh self-signed
certificate and no client certificate requested.

Client certificates are verified against the node's accepted CAs
(``pki.accepted_client_cas``: ``machine.acceptedCAs`` and ``machine.ca``). A
config applied without a reboot that changes them, the issuing CA or the SANs
gets new TLS material at once, as Talos's secrets controllers issue new
certificates: every handshake passes through the context's server-name
callback, which hands OpenSSL the context of the node's current config (a
context switched there also brings its own client CA store). Connections
already open keep theirs, as on Talos. A certificate from a CA that is not
accepted fails the handshake: Go's apid sends the alert ``bad certificate``,
here asyncio ends the connection before its alert is out, so the client sees
the stream end right after its side of the handshake; either way no call is
made and the collection reports a refused client certificate.
"""

import asyncio
import os
import ssl
import tempfile

from grpclib.protocol import H2Protocol
from grpclib.server import Server

from . import pki
from .routing import Apid


# Talos's API port (constants.ApidPort).
API_PORT = 50000


class _CheckedH2Protocol(H2Protocol):
    """grpclib's HTTP/2 protocol with Talos's client-certificate EKU check and connection tracking."""

    def __init__(self, listener, *args):
        super(_CheckedH2Protocol, self).__init__(*args)
        self._listener = listener
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        if self._listener.mutual:
            ssl_object = transport.get_extra_info("ssl_object")
            peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if not peer or not pki.client_certificate_has_client_auth(peer):
                transport.abort()
                return
        self._listener.connections.add(self)
        super(_CheckedH2Protocol, self).connection_made(transport)

    def connection_lost(self, exc):
        self._listener.connections.discard(self)
        if hasattr(self, "processor"):
            super(_CheckedH2Protocol, self).connection_lost(exc)


class _Listener(Server):
    def __init__(self, apid, mutual):
        super(_Listener, self).__init__([apid])
        # Apid's own mapping, which answers every path (grpclib copies mappings into a plain dict).
        self._mapping = apid.__mapping__()
        self.mutual = mutual
        self.connections = set()

    def _protocol_factory(self):
        protocol = super(_Listener, self)._protocol_factory()
        return _CheckedH2Protocol(self, protocol.handler, protocol.config, protocol.h2_config)


class _SilentProtocol(asyncio.Protocol):
    """Accepts a connection and never says a word: a client's TLS handshake times out."""

    def __init__(self, transports):
        self._transports = transports
        self._transport = None

    def connection_made(self, transport):
        self._transport = transport
        self._transports.add(transport)

    def connection_lost(self, exc):
        self._transports.discard(self._transport)


class NodeServer:
    """Starts and stops the API listener of one node, with the TLS material of the current boot."""

    def __init__(self, node):
        self.node = node
        self._listeners = []
        self._silent = None
        self._silent_transports = set()
        self.ca_pem = None
        self.maintenance_fingerprint = None
        self._inputs = None
        self._current = None

    def _ssl_context(self):
        inputs = self.node.server_tls_inputs()
        ca_pem, crt_pem, key_pem, client_ca_pem = self.node.server_tls_material()
        self._inputs = inputs
        self.ca_pem = ca_pem
        self.maintenance_fingerprint = pki.spki_fingerprint(crt_pem) if client_ca_pem is None else None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        # ssl loads a certificate chain only from a file: one private file holding both, removed at once.
        handle, pem_path = tempfile.mkstemp(prefix="talos-emulator-", suffix=".pem")
        try:
            with os.fdopen(handle, "wb") as pem_file:
                pem_file.write(crt_pem)
                pem_file.write(pki.to_standard_pem(key_pem))
            context.load_cert_chain(pem_path)
        finally:
            os.unlink(pem_path)
        if client_ca_pem is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=client_ca_pem.decode())
        return context, client_ca_pem is not None

    def _context_for_handshake(self, ssl_object, _server_name, _context):
        """Give a new connection the TLS material of the node's current config, issued anew when its inputs changed."""
        inputs = self.node.server_tls_inputs()
        if inputs is not None and inputs != self._inputs:
            try:
                self._current = self._ssl_context()[0]
            except KeyError:
                # A worker whose new issuing CA no control plane holds yet: trustd cannot sign, the old material stays.
                pass
        ssl_object.context = self._current

    async def start(self):
        context, mutual = self._ssl_context()
        if mutual:
            self._current = context
            context.sni_callback = self._context_for_handshake
        listener = _Listener(Apid(self.node), mutual)
        await listener.start(self.node.address, self.node.port, ssl=context, reuse_address=True)
        self._listeners = [listener]
        if self.node.port != API_PORT:
            # Also where Talos listens, where a client with a bare address dials (talosctl --insecure in maintenance
            # mode, an endpoint without a port), while that port of the node's address is free on this machine.
            on_api_port = _Listener(Apid(self.node), mutual)
            try:
                await on_api_port.start(self.node.address, API_PORT, ssl=context, reuse_address=True)
            except OSError:
                return
            self._listeners.append(on_api_port)

    @property
    def on_api_port(self):
        """Whether the node also listens on port 50000 of its address (free on this machine when it booted)."""
        return len(self._listeners) > 1

    async def listen_silently(self):
        """Accept connections on the node's address and never answer them (an API that hangs or a dropping firewall)."""
        loop = asyncio.get_running_loop()
        self._silent = await loop.create_server(lambda: _SilentProtocol(self._silent_transports),
                                                self.node.address, self.node.port, reuse_address=True)

    async def stop_listening_silently(self):
        silent, self._silent = self._silent, None
        if silent is None:
            return
        silent.close()
        for transport in list(self._silent_transports):
            transport.abort()
        await silent.wait_closed()

    async def stop(self):
        """Stop listening and drop every open connection, as a powered-off node does."""
        await self.stop_listening_silently()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            await _close(listener)


async def _close(listener):
    listener.close()
    # From Python 3.12 the server waits for every connection to end, also one still in its TLS handshake when
    # the node went down (not yet tracked here): those are aborted as they appear, and on 3.13 by asyncio itself.
    closed = asyncio.ensure_future(listener.wait_closed())
    while True:
        for protocol in list(listener.connections):
            if protocol.transport is not None:
                protocol.transport.abort()
        abort_clients = getattr(listener._server, "abort_clients", None)  # grpclib's asyncio server
        if abort_clients is not None:
            abort_clients()
        done, _pending = await asyncio.wait({closed}, timeout=0.5)
        if done:
            return closed.result()
