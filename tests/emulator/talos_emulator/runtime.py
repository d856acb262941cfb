# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server runtime of an emulated cluster: its event loop thread, addresses, port and control channel.

In tests the cluster runs its own asyncio loop in a daemon thread
(``EmulatedCluster.start``); ``tests/talos-emulator`` runs the same code as a
background process (``serve_forever``), which also applies the requests of
``talos-emulator fault`` (the control channel). Every node listens on its own
loopback address (127.0.0.11 onwards, see ``_reserve_addresses``); all nodes
of one cluster share one port, chosen free at start. The configs' Kubernetes
API endpoint is the first node's address and Kubernetes's port, 6443, or a
free port where another process (another cluster on the same address) has
6443 there; the runtime holds it bound until the API server takes it
(``release_kubernetes_port``), so that no other cluster takes it meanwhile.
"""

import asyncio
import errno
import ipaddress
import json
import os
import signal
import socket
import threading

# What ``talos-emulator fault`` may ask of a running cluster: the fault injection API and the cluster's own calls.
_CLUSTER_CALLS = frozenset(["power_on", "power_off", "add_node", "raise_etcd_alarm", "fragment_etcd", "run_kubernetes"])
KUBERNETES_PORT = 6443
CONTROL_CALLS = frozenset([
    "make_unreachable", "make_reachable", "set_latency", "fail", "cut_stream", "pause", "fail_installer",
    "mark_image_unavailable", "clear",
]) | _CLUSTER_CALLS

# Loopback addresses handed out to the clusters of this process, so that they
# never share one: 127.0.0.11 onwards, in order, skipping .0-.10 and .255 of
# every /24 (127.0.0.1 is localhost, 127.0.1.1 often the machine's host name).
# Each pytest-xdist worker (gw0, gw1, ...) takes its own /10 of the loopback range.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
_next_address = [int(ipaddress.IPv4Address("127.0.0.11")) + (int(_WORKER) if _WORKER.isdigit() else 0) % 4 * (1 << 22)]
_addresses_lock = threading.Lock()


def _reserve_addresses(count):
    """``count`` loopback addresses nobody else in this process uses."""
    addresses = []
    with _addresses_lock:
        current = _next_address[0]
        while len(addresses) < count:
            if 11 <= current & 0xFF <= 254:
                addresses.append(str(ipaddress.IPv4Address(current)))
            current += 1
        _next_address[0] = current
    return addresses


def _free_port(address):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _hold_kubernetes_port(address):
    """A socket bound (not listening) to Kubernetes's port on ``address``, else to a free one there."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.bind((address, KUBERNETES_PORT))
    except OSError:
        held.bind((address, 0))
    return held


class ClusterRuntime:
    """Serves the nodes of one cluster: ``capacity`` reserved addresses, one port, one loop thread."""

    def __init__(self, name, capacity):
        self.name = name
        self.addresses = _reserve_addresses(capacity)
        self._kubernetes_port_held = _hold_kubernetes_port(self.addresses[0])
        self.kubernetes_port = self._kubernetes_port_held.getsockname()[1]
        self.port = None
        self.loop = None
        self._thread = None
        self._tasks = set()

    def start_loop(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="talos-emulator-%s" % self.name, daemon=True)
        self._thread.start()

    async def boot(self, nodes):
        """Boot every node on one free port (another one when a node's address already has it taken)."""
        for _attempt in range(20):
            self.port = _free_port(nodes[0].address)
            for node in nodes:
                node.port = self.port
            try:
                for node in nodes:
                    await node.boot()
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                for node in nodes:
                    await node.power_off()
                continue
            return
        raise RuntimeError("no free port for the emulated cluster")

    def release_kubernetes_port(self):
        """Let the Kubernetes API server bind the configs' endpoint port. Safe to call twice."""
        self._kubernetes_port_held.close()

    def stop(self, nodes):
        """Stop every node and the event loop. Safe to call twice."""
        self.release_kubernetes_port()
        if self.loop is None or not self.loop.is_running():
            return
        try:
            self.run(self._power_off_all(nodes), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()

    async def _power_off_all(self, nodes):
        for task in list(self._tasks):
            task.cancel()
        for node in nodes:
            await node.power_off()

    def run(self, coroutine, timeout=30):
        """Run a coroutine on the loop from another thread and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function, *args, **kwargs):
        """Call a plain function on the loop (where node state changes) and return its result."""
        async def invoke():
            return function(*args, **kwargs)
        return self.run(invoke())

    def spawn(self, coroutine):
        """Start background work on the loop (reboots, rollbacks) from a handler."""
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # The control channel of the ``talos-emulator up`` background process.

    def serve_forever(self, cluster):
        """Block until SIGTERM or SIGINT, then stop ``cluster`` (an EmulatedCluster).

        Meanwhile, requests that ``talos-emulator fault`` appends to ``control.jsonl``
        are applied in order and acknowledged in ``control.done``.
        """
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        handled = 0
        while not stopped.wait(0.1):
            handled = self._apply_control_requests(cluster, handled)
        cluster.stop()

    @staticmethod
    def _apply_control_requests(cluster, handled):
        path = os.path.join(cluster.state_dir, "control.jsonl")
        if not os.path.exists(path):
            return handled
        with open(path) as control:
            requests = [json.loads(line) for line in control if line.strip()]
        for request in requests[handled:]:
            try:
                if request["call"] not in CONTROL_CALLS:
                    raise ValueError("unknown control call %r" % request["call"])
                target = cluster if request["call"] in _CLUSTER_CALLS else cluster.faults
                getattr(target, request["call"])(*request.get("args", []), **request.get("kwargs", {}))
                outcome = {"ok": True}
            except Exception as error:  # reported to the command line, which exits non-zero
                outcome = {"ok": False, "error": "%s: %s" % (type(error).__name__, error)}
            with open(os.path.join(cluster.state_dir, "control.done"), "a") as done:
                done.write(json.dumps(outcome) + "\n")
        return len(requests)
