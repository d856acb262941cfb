# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The waits on a node, each over a ``common.waiter.Waiter`` (the one wait loop).

Between two polls a wait follows the node's event stream where the node
offers it (``EventFollower``: MachineService.Events), so that the next poll
looks as soon as the node reports a change - a stage, a service, a sequence,
its API going down - rather than after the waiter's whole interval; a node
that does not answer is looked at again every UNREACHABLE_RECHECK_SECONDS,
one without Events at the interval.

The waits after an action, as talosctl does them, each over a Waiter (so
that waits in a row share one deadline and one progress): ``wait_for_reboot``
(a new boot ID, or boot time, and the node running and ready),
``wait_for_secure_api`` (the API up with the cluster certificates after a
maintenance apply), ``wait_for_services`` (services up), ``wait_for_service``
(one service settled after a start, stop or restart) and
``wait_until_unreachable`` (the node gone after a shutdown).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosError,
    TalosPermissionError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, is_transient

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by the doors through missing_required_lib
    machine_pb2 = None

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


# A node that cannot be followed because it does not answer (rebooting, starting its API) comes back
# unannounced: it is looked at again this often.
UNREACHABLE_RECHECK_SECONDS = 0.5


class EventFollower:
    """Follows one node's runtime events (MachineService.Events) between the polls of a wait.

    Called with the pause before the next poll, it returns as soon as the
    node reports an event (a stage, a service or a sequence changed) or its
    stream ends (the node going down, its API restarting), at the latest
    when the pause is over. A node that does not answer is looked at again
    after UNREACHABLE_RECHECK_SECONDS; one that does not offer Events (too
    old a release, a role without it) makes the follower sleep the whole
    pause from then on. Each stream resumes after the last event seen, so
    that no change between two streams goes unnoticed.
    """

    def __init__(self, client, node):
        self.client = client
        self.node = node
        self.offered = True
        self.last_event_id = None

    def __call__(self, seconds):
        started = time.monotonic()
        if self.offered and self._follow(seconds):
            return
        rest = seconds - (time.monotonic() - started)
        if rest > 0:
            time.sleep(rest if not self.offered else min(rest, UNREACHABLE_RECHECK_SECONDS))

    def _follow(self, seconds):
        """Read events for up to ``seconds``; True when the stream was established (whatever ended it)."""
        stream = {"established": False}

        def on_event(event):
            if not event.id:
                # Talos first sends an empty event: the stream is established.
                stream["established"] = True
                return False
            self.last_event_id = event.id
            return True

        request = machine_pb2.EventsRequest(tail_id=self.last_event_id or "")
        try:
            self.client.stream(rpc.EVENTS, request, node=self.node, on_message=on_event, retry_codes=(),
                               deadline=max(0.1, seconds))
        except TalosError as error:
            if error.code in ("PermissionDenied", "Unimplemented"):
                self.offered = False
            return stream["established"]
        return True


# -- the waits after an action -----------------------------------------------------


def read_boot_id(client, node, deadline=None):
    """The node's boot ID, or None when the certificate may not use Read (as talosctl, skip the check)."""
    try:
        data = client.read_bytes(rpc.READ, machine_pb2.ReadRequest(path=BOOT_ID_PATH),
                                 node=node, deadline=deadline)
    except TalosPermissionError:
        return None
    return data.decode("utf-8", "replace").strip()


def read_boot_marker(client, node, deadline=None):
    """What identifies the node's current boot: its boot ID, or ``boot-time:<seconds>`` when Read is not allowed.

    The boot time (SystemStat, open to os:reader and os:operator) changes on
    every boot too, so a certificate without os:admin still tells a rebooted
    node from one that has not gone down yet.
    """
    boot_id = read_boot_id(client, node, deadline=deadline)
    if boot_id is not None:
        return boot_id
    items = client.call(rpc.SYSTEM_STAT, node=node, deadline=deadline)
    return "boot-time:%d" % items[0].boot_time


def wait_for_reboot(client, node, previous_boot_id, waiter):
    """Wait until ``node`` is running and ready on a boot other than ``previous_boot_id``; returns the new boot ID
    (or marker; None when Read is not allowed and no marker was given).

    ``previous_boot_id`` may be a ``read_boot_marker`` value, compared with the
    node's marker then. Unreachable nodes and Unavailable/Canceled answers are
    expected meanwhile.
    """
    def poll():
        status = talos_node.read_machine_status(client, node, deadline=waiter.call_deadline())
        if not status.running_and_ready:
            return Seen(status.state, detail=str(status))
        if previous_boot_id is None:
            return Seen(status.state, done=True, detail=str(status))
        read = read_boot_marker if str(previous_boot_id).startswith("boot-time:") else read_boot_id
        boot_id = read(client, node, deadline=waiter.call_deadline())
        if boot_id is not None and boot_id == previous_boot_id:
            return Seen("running, not rebooted yet", detail="stage running, ready true, but the boot ID has not changed yet")
        return Seen(status.state, done=True, value=boot_id, detail="stage running, ready true, new boot ID")

    return waiter.until(poll, "%s to reboot and become ready" % label(node), short_label(node),
                        follow=EventFollower(client, node))


def wait_for_secure_api(client, node, waiter):
    """Wait until ``node`` answers Version over mutual TLS with the configured CA (after a maintenance apply).

    ``client`` must be the secure client (``with_settings(insecure=False)``).
    Until the node restarts its API server with the cluster certificates, the
    handshake fails or the node is unreachable: both are waited out. Returns
    the Version reply item.
    """
    def poll():
        version = client.call(rpc.VERSION, node=node, deadline=waiter.call_deadline())[0]
        return Seen("serving with the cluster certificates", done=True, value=version,
                    detail="Version answered over mutual TLS")

    return waiter.until(poll, "%s to serve the Talos API with the cluster certificates" % label(node),
                        short_label(node),
                        tolerate=lambda error: error.code not in ("PermissionDenied", "Unimplemented", "InvalidArgument"))


def wait_for_services(client, node, names, waiter, machine_type=None):
    """Wait until every service in ``names`` is up on ``node`` (``node.is_up``); returns ``{name: state}``.

    A service a node of ``machine_type`` never runs (etcd on a worker) is not
    waited for: its state is ``not run on worker nodes``. Any other service
    the node does not define keeps the wait going (extensions appear once
    their system extension runs).
    """
    skipped = [name for name in names if not talos_node.runs_service(machine_type, name)]
    awaited = [name for name in names if name not in skipped]

    def poll():
        services = talos_node.list_services(client, node, deadline=waiter.call_deadline())
        states, waiting = dict((name, "not run on %s nodes" % machine_type) for name in skipped), []
        for name in awaited:
            info = services.get(name)
            states[name] = talos_node.service_state(info) if info is not None else "not defined"
            if info is None or not talos_node.is_up(info):
                waiting.append("%s (%s)" % (name, states[name]))
        if waiting:
            return Seen("waiting for " + ", ".join(waiting))
        return Seen("services up", done=True, value=states, detail="every service is running")

    return waiter.until(poll, "services %s on %s to be running and healthy" % (", ".join(awaited), label(node)),
                        short_label(node), follow=EventFollower(client, node))


def wait_for_service(client, node, name, goal, waiter, restarted_after=0):
    """Wait until service ``name`` has settled in ``goal`` after a request (``node.has_settled``); returns its
    ``ServiceInfo``."""
    def poll():
        info = talos_node.list_services(client, node, deadline=waiter.call_deadline()).get(name)
        if info is None:
            return Seen("not listed", detail="the service is not listed")
        return Seen(talos_node.service_state(info), done=talos_node.has_settled(info, goal, restarted_after), value=info,
                    detail="state %s, health %s" % (info.state, talos_node.health_word(info)))

    return waiter.until(poll, "service %s on %s to be %s" % (name, label(node), goal),
                        "%s %s" % (short_label(node), name), follow=EventFollower(client, node))


def wait_until_unreachable(client, node, waiter):
    """Wait until ``node`` stops answering the API (after a shutdown or a reset without reboot).

    Done at the first Version call that fails the way a node that is going
    away or gone does (connection refused or lost, Unavailable through the
    endpoint). Nothing is retried inside a poll, so the wait ends promptly.
    """
    def poll():
        try:
            client.call(rpc.VERSION, node=node, retry_codes=(), deadline=waiter.call_deadline())
        except TalosError as error:
            if not is_transient(error):
                raise
            return Seen("gone", done=True, detail=error.message)
        return Seen("answering", detail="the node still answers")

    waiter.until(poll, "%s to stop answering" % label(node), short_label(node),
                 tolerate=lambda error: False, follow=EventFollower(client, node))
