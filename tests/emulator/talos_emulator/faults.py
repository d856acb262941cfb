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

from grpclib.exceptions import GRPCError

from .audit import method_matches
from .codes import status_from_name
from .routing import node_went_away

# How Go's dialer in an endpoint's apid says it could not connect to a node,
# per cause of make_unreachable (relayed as Unavailable "connection error: desc
# = "transport: Error while dialing: dial tcp <node>:50000: <this>"").
DIAL_ERRORS = {
    "refused": "connect: connection refused",
    "no-route": "connect: no route to host",
    "timeout": "i/o timeout",
}


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
        self._installer_failures = []
        self._boot_rollbacks = []
        self._actions = []
        self._unreachable = {}

    def make_unreachable(self, node, cause="refused"):
        """Cut the node's API off: its listener stops and its connections drop.

        ``cause`` is how clients and the endpoints relaying to it see it:
        ``refused`` (powered off; the default): connecting is refused;
        ``no-route``: an endpoint relays "no route to host" (direct connections
        are refused: loopback cannot answer "no route"); ``timeout``: connections
        are accepted and never answered, so connecting times out, and an
        endpoint relays "i/o timeout" at once (a real one gives up dialling
        after about 20 s).
        """
        if cause not in DIAL_ERRORS:
            raise ValueError("cause must be one of %s, got %r" % (", ".join(sorted(DIAL_ERRORS)), cause))
        target = self._cluster.node(node)
        with self._lock:
            self._unreachable[target.name] = cause
        self._cluster.run(self._unplug(target, cause))

    def make_reachable(self, node):
        """Serve the node's API again after ``make_unreachable``."""
        target = self._cluster.node(node)
        with self._lock:
            self._unreachable.pop(target.name, None)
        self._cluster.run(self._plug(target))

    @staticmethod
    async def _unplug(node, cause):
        await node.set_unreachable()
        if cause == "timeout":
            await node.server.listen_silently()

    @staticmethod
    async def _plug(node):
        await node.server.stop_listening_silently()
        await node.set_reachable()

    def dial_error(self, node):
        """What an endpoint's dialer says about a node it cannot reach (None: an unknown address)."""
        with self._lock:
            cause = self._unreachable.get(node.name, "refused") if node is not None else "refused"
        return DIAL_ERRORS[cause]

    def set_latency(self, node, seconds):
        """Delay every call the node serves by ``seconds`` (0 removes the delay)."""
        with self._lock:
            self._latency[self._cluster.node(node).name] = seconds

    def fail(self, method, code, message="injected failure", times=1, node=None):
        """Answer the next ``times`` calls of ``method`` with gRPC ``code`` (a Status or its name); -1 = always."""
        status = status_from_name(code)
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

    def on_call(self, method, action, times=1, node=None):
        """Run ``action(node)`` as the serving node receives the next ``times`` calls of ``method`` (-1 = every call),
        before it answers them: a change of the node's state that a client meets between two of its calls."""
        with self._lock:
            self._actions.append(_Rule(method, node, times, action=action))

    def power_off_when(self, node, predicate):
        """Cut ``node``'s power as it serves its first call once ``predicate(node)`` holds (a change a task just
        applied, say): that call is lost with the node, as a client meets a machine that died right after the change,
        however slowly the test's own thread would have noticed it."""
        fired = []

        def power_off(served):
            if not fired and predicate(served):
                fired.append(served)
                served.cluster.spawn(served.power_off())
                raise node_went_away()

        self.on_call("*", power_off, times=-1, node=node)

    def fail_installer(self, exit_code=1, times=1, node=None):
        """Make the next ``times`` installer runs (LifecycleService) end with ``exit_code``."""
        with self._lock:
            self._installer_failures.append(_Rule("*", node, times, exit_code=exit_code))

    def roll_back_next_boot(self, times=1, node=None):
        """The next ``times`` boots into a newly installed version fail and the node comes
        back on the version it ran before, as Talos's A/B boot fallback does."""
        with self._lock:
            self._boot_rollbacks.append(_Rule("*", node, times))

    def mark_image_unavailable(self, image_ref):
        """The registry no longer has ``image_ref``: pulls and legacy upgrades of it fail."""
        with self._lock:
            self._cluster.unavailable_images.add(image_ref)

    def clear(self):
        """Remove every fault (unreachable nodes stay so until ``make_reachable``)."""
        with self._lock:
            self._latency.clear()
            self._failures = []
            self._cuts = []
            self._pauses = []
            self._installer_failures = []
            self._boot_rollbacks = []
            self._actions = []
            self._cluster.unavailable_images.clear()

    async def before_call(self, node, method):
        """Latency and injected failures, applied by the serving node before anything else."""
        delay = self._latency.get(node.name, 0)
        if delay:
            await asyncio.sleep(delay)
        rule = self._take(self._actions, method, node)
        if rule is not None:
            rule.action(node)
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

    def installer_exit_code(self, node):
        rule = self._take(self._installer_failures, "*", node)
        return 0 if rule is None else rule.exit_code

    def boot_rolls_back(self, node):
        return self._take(self._boot_rollbacks, "*", node) is not None

    def _take(self, rules, method, node):
        with self._lock:
            for rule in rules:
                if rule.matches(method, node):
                    rule.consume()
                    return rule
        return None
