# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fault injection: the failures tests need that a healthy cluster never shows.

Faults apply on the node that serves a call (the target, not the endpoint
that relays it). ``method`` may be the RPC name (``"Version"``) or the full
path (``"machine.MachineService/Version"``); ``node`` a node name or address,
or None for every node.
"""

import asyncio
import threading

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from .audit import method_matches


class _Rule:
    def __init__(self, method, node, times, **values):
        self.method = method
        self.node = node
        self.remaining = times
        self.__dict__.update(values)

    def matches(self, method, node):
        return (
            self.remaining != 0
            and method_matches(method, self.method)
            and (self.node is None or self.node in (node.name, node.address))
        )

    def consume(self):
        if self.remaining > 0:
            self.remaining -= 1


class Faults:
    def __init__(self, cluster):
        self._cluster = cluster
        self._lock = threading.Lock()
        self._latency = {}
        self._failures = []
        self._cuts = []
        self._pauses = []

    def make_unreachable(self, node):
        """Stop the node's API listener and drop its connections (connection refused)."""
        self._cluster.run(self._cluster.node(node).set_unreachable())

    def make_reachable(self, node):
        """Serve the node's API again after ``make_unreachable``."""
        self._cluster.run(self._cluster.node(node).set_reachable())

    def set_latency(self, node, seconds):
        """Delay every call the node serves by ``seconds`` (0 removes the delay)."""
        with self._lock:
            self._latency[self._cluster.node(node).name] = seconds

    def fail(self, method, code, message="injected failure", times=1, node=None):
        """Answer the next ``times`` calls of ``method`` with gRPC ``code`` (a Status or its name); -1 = always."""
        status = code if isinstance(code, Status) else Status[_status_name(code)]
        with self._lock:
            self._failures.append(_Rule(method, node, times, status=status, message=message))

    def cut_stream(self, method, after_frames, times=1, node=None):
        """Reset the HTTP/2 stream of the next ``times`` ``method`` streams after ``after_frames`` frames."""
        with self._lock:
            self._cuts.append(_Rule(method, node, times, after_frames=after_frames))

    def pause(self, method, seconds, times=1, node=None):
        """Hold ``method`` for ``seconds`` inside its handler, after its concurrency guard is taken."""
        with self._lock:
            self._pauses.append(_Rule(method, node, times, seconds=seconds))

    def clear(self):
        with self._lock:
            self._latency.clear()
            self._failures = []
            self._cuts = []
            self._pauses = []

    async def before_call(self, node, method):
        """Latency and injected failures, applied by the serving node before anything else."""
        delay = self._latency.get(node.name, 0)
        if delay:
            await asyncio.sleep(delay)
        rule = self._take(self._failures, method, node)
        if rule is not None:
            raise GRPCError(rule.status, rule.message)

    def stream_cut_after(self, node, method):
        """Frames to send before cutting this stream, or None."""
        rule = self._take(self._cuts, method, node)
        return None if rule is None else rule.after_frames

    async def hold(self, node, method):
        rule = self._take(self._pauses, method, node)
        if rule is not None:
            await asyncio.sleep(rule.seconds)

    def _take(self, rules, method, node):
        with self._lock:
            for rule in rules:
                if rule.matches(method, node):
                    rule.consume()
                    return rule
        return None


def _status_name(code):
    """``"PermissionDenied"``, ``"PERMISSION_DENIED"`` or ``"permission_denied"`` -> ``"PERMISSION_DENIED"``."""
    if "_" in code or code.isupper():
        return code.upper()
    name = ""
    for char in code:
        if char.isupper() and name:
            name += "_"
        name += char.upper()
    return name
