# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real etcd member for tests: one embedded etcd (``main.go`` here) per emulated control plane.

``binary()`` builds it once per process with ``./build`` (Go modules; a missing
Go toolchain is an error, never a skip). ``EtcdMember.start`` runs one member on
an event loop: it listens on the node's own address with a certificate that the
cluster's etcd CA signs for that address (serverAuth and clientAuth, as Talos's
peer certificate), and bootstraps a new cluster, restores a snapshot into a new
one-member cluster, or joins the cluster through its members' client URLs.
``request`` asks the member what machined asks etcd through clientv3 (member
list and removal, status, leadership, defragmentation, alarms, snapshots) and
what a client of the keyspace does (put, get, delete, compact).
"""

import asyncio
import ipaddress
import json
import os
import shutil
import socket

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from harness_files import HarnessBuild, issue_certificate, log_tail, write_private

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUILD = os.path.join(_HERE, "build")
# The ports Talos's etcd listens on.
CLIENT_PORT = 2379
PEER_PORT = 2380


class EtcdMemberError(RuntimeError):
    """The member could not be built or started, or etcd refused a request (the message is etcd's)."""


_build = HarnessBuild(_BUILD, "the test etcd member", EtcdMemberError)


def binary():
    """The path of the etcd member harness, built by ``./build`` on the first call of the process."""
    return _build.binary()


def _port_is_free(address, port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def _free_port(address):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def choose_ports(address):
    """``(client port, peer port)`` for a member on ``address``: Talos's 2379 and 2380 when they are free there (another
    test process may use the same loopback address), else two free ports."""
    if _port_is_free(address, CLIENT_PORT) and _port_is_free(address, PEER_PORT):
        return CLIENT_PORT, PEER_PORT
    client = _free_port(address)
    peer = _free_port(address)
    while peer == client:
        peer = _free_port(address)
    return client, peer


def issue_member_certificate(ca_crt_pem, ca_key_pem, name, address):
    """A certificate and key (PEM) for the member ``name`` on ``address``, signed by the etcd CA: Talos's peer
    certificate, which its control planes serve clients and peers with and present as a client."""
    sans = [x509.DNSName(name), x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address(address)), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    return issue_certificate(ca_crt_pem, ca_key_pem, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
                             [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], sans, key_agreement=True)


class EtcdMember:
    """A running member process: ``name``, ``client_url``, ``peer_url``, ``data_dir``; ``wait_ready()``,
    ``request(op, ...)``, ``stop()`` (graceful) and ``kill()`` (a power cut). Used on one event loop."""

    def __init__(self, name, address, client_port, peer_port, state_dir, process, log_path):
        self.name = name
        self.client_url = "https://%s:%d" % (address, client_port)
        self.peer_url = "https://%s:%d" % (address, peer_port)
        self.state_dir = state_dir
        self.data_dir = os.path.join(state_dir, "data")
        self.process = process
        self.log_path = log_path
        self.member_id = None
        self._ready = asyncio.get_running_loop().create_future()
        self._pending = {}
        self._next_id = 0
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, state_dir, name, address, ports, etcd_ca_crt_pem, etcd_ca_key_pem, initial_cluster=None, join=(),
                    restore_from=None, skip_hash_check=False, wipe=False, quota_backend_bytes=0):
        """Start the member whose data directory is ``state_dir/data`` (emptied first with ``wipe``): a new cluster of
        ``initial_cluster`` (``name=peer URL,...``), ``restore_from`` a snapshot file into a new one-member cluster, or
        ``join`` the cluster through those client URLs; a data directory that holds a member restarts that member.
        ``ports`` is ``(client port, peer port)`` (``choose_ports``); ``quota_backend_bytes`` the database size at
        which etcd raises NOSPACE (0: etcd's default)."""
        state_dir = os.path.abspath(state_dir)
        data_dir = os.path.join(state_dir, "data")
        if wipe:
            shutil.rmtree(data_dir, ignore_errors=True)
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        cert_pem, key_pem = issue_member_certificate(etcd_ca_crt_pem, etcd_ca_key_pem, name, address)
        command = [
            binary(), "--name", name, "--data-dir", data_dir, "--address", address,
            "--client-port", str(ports[0]), "--peer-port", str(ports[1]),
            "--ca", write_private(os.path.join(state_dir, "ca.crt"), etcd_ca_crt_pem),
            "--cert", write_private(os.path.join(state_dir, "member.crt"), cert_pem),
            "--key", write_private(os.path.join(state_dir, "member.key"), key_pem),
        ]
        if initial_cluster:
            command += ["--initial-cluster", initial_cluster]
        if join:
            command += ["--join", ",".join(join)]
        if restore_from:
            command += ["--restore-from", restore_from] + (["--skip-hash-check"] if skip_hash_check else [])
        if quota_backend_bytes:
            command += ["--quota-backend-bytes", str(quota_backend_bytes)]
        log_path = os.path.join(state_dir, "etcd.log")
        with open(log_path, "ab") as log:
            process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                           stderr=log, start_new_session=True, limit=1 << 20)
        return cls(name, address, ports[0], ports[1], state_dir, process, log_path)

    async def _read(self):
        async for line in self.process.stdout:
            message = json.loads(line)
            if "id" in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    if "error" in message:
                        future.set_exception(EtcdMemberError(message["error"]))
                    else:
                        future.set_result(message["result"])
            elif message.get("event") == "ready":
                self.member_id = message["member_id"]
                if not self._ready.done():
                    self._ready.set_result(self.member_id)
            elif message.get("event") == "failed" and not self._ready.done():
                self._ready.set_exception(EtcdMemberError(message["error"]))
        await self.process.wait()
        gone = EtcdMemberError("the etcd member %s exited with %s" % (self.name, self.process.returncode))
        if not self._ready.done():
            self._ready.set_exception(EtcdMemberError("%s before it was ready; log tail (%s):\n%s"
                                                      % (gone, self.log_path, log_tail(self.log_path))))
            # A member stopped before it was ready may have nobody waiting for it: asyncio would log the error.
            self._ready.exception()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(gone)
        self._pending.clear()

    @property
    def running(self):
        return self.process.returncode is None

    @property
    def serving(self):
        """Whether the member serves requests: it runs and was ready once (one waiting to join serves nothing)."""
        return self.running and self.member_id is not None

    async def wait_ready(self, timeout=60):
        """The member's ID once it serves clients (a joining member serves as a learner until it is promoted); None
        waits for as long as it takes."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except asyncio.TimeoutError:
            raise EtcdMemberError("the etcd member %s was not ready within %ss; log tail (%s):\n%s"
                                  % (self.name, timeout, self.log_path, log_tail(self.log_path))) from None

    async def request(self, op, timeout=5, **fields):
        """Ask the member; ``endpoints`` (client URLs) asks the cluster through them instead of this member alone.
        Returns the result's dict; etcd's refusal raises EtcdMemberError with etcd's message."""
        if not self.running:
            raise EtcdMemberError("the etcd member %s is not running" % self.name)
        self._next_id += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        self.process.stdin.write(json.dumps(dict(fields, id=self._next_id, op=op, timeout=timeout)).encode() + b"\n")
        await self.process.stdin.drain()
        # The member's own deadline answers first; this one only guards against a member that hangs.
        try:
            return await asyncio.wait_for(future, timeout + 10)
        except asyncio.TimeoutError:
            raise EtcdMemberError("the etcd member %s did not answer %s within %ss" % (self.name, op, timeout + 10)) from None

    async def stop(self, timeout=15):
        """Stop the member gracefully (the data directory stays). Safe to call twice."""
        if self.running:
            # The end of its input is the member's signal to stop (main.go); one still joining the cluster does not
            # read it yet and is killed after ``timeout``.
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except asyncio.TimeoutError:
                await self.kill()
        await self._reader

    async def kill(self):
        """Cut the member off at once, as a machine that loses power (the data directory stays)."""
        if self.running:
            self.process.kill()
            await self.process.wait()
        await self._reader
