# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiting for nodes: a generic poller and the waits talosctl performs after an action."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosConnectionError,
    TalosError,
    TalosPermissionError,
    TalosTimeoutError,
)

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

# Answers a node gives while it reboots or restarts its API: keep waiting.
TRANSIENT_CODES = ("Unavailable", "Canceled", "DeadlineExceeded")

# One poll may take at most this long, so that a node that hangs mid-reboot
# does not eat the whole wait.
POLL_CALL_TIMEOUT = 10.0


def wait_until(predicate, timeout, interval=2.0, description="the condition"):
    """Call ``predicate()`` until it reports done, at most ``timeout`` seconds.

    ``predicate`` returns ``(done, observed)``, where ``observed`` is a short
    description of the state it saw (used in the timeout message), or just a
    bool. Returns the last ``observed``; raises TalosTimeoutError naming
    ``description`` and the last observed state.
    """
    deadline = time.monotonic() + timeout
    observed = "nothing observed yet"
    while True:
        result = predicate()
        done, observed = result if isinstance(result, tuple) else (bool(result), observed)
        if done:
            return observed
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TalosTimeoutError("Timed out after %s seconds waiting for %s; last observed: %s."
                                    % (_seconds(timeout), description, str(observed).rstrip(".")))
        time.sleep(min(interval, remaining))


def _seconds(value):
    return ("%.1f" % value).rstrip("0").rstrip(".")


def _poll_deadline(deadline):
    return max(0.5, min(POLL_CALL_TIMEOUT, deadline - time.monotonic()))


def is_transient(error):
    """True for the errors a rebooting node or a restarting API server produces."""
    return isinstance(error, (TalosConnectionError, TalosTimeoutError)) or error.code in TRANSIENT_CODES


def read_boot_id(client, node, deadline=None):
    """The node's boot ID, or None when the certificate may not use Read (as talosctl, skip the check)."""
    try:
        data = client.read_bytes("machine.MachineService/Read", machine_pb2.ReadRequest(path=BOOT_ID_PATH),
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
    items = client.call("machine.MachineService/SystemStat", node=node, deadline=deadline)
    return "boot-time:%d" % items[0].boot_time


def list_services(client, node, deadline=None):
    """The ``ServiceInfo`` messages of ``node`` by service ID."""
    items = client.call("machine.MachineService/ServiceList", node=node, deadline=deadline)
    return dict((info.id, info) for item in items for info in item.services)


def machine_status(client, node, deadline=None):
    """The spec of MachineStatuses.runtime.talos.dev/machine: ``{"stage": ..., "status": {"ready": ...}}``."""
    resource = client.get_resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", node=node, deadline=deadline)
    return resource["spec"] or {}


def wait_for_reboot(client, node, previous_boot_id, timeout, interval=2.0):
    """Wait until ``node`` has rebooted and is running and ready again.

    Done when the machine status is stage ``running`` with ``status.ready``
    true and, when ``previous_boot_id`` is known, the boot ID has changed.
    ``previous_boot_id`` may also be a ``read_boot_marker`` value, which is
    then compared with the node's marker. Unreachable nodes and
    Unavailable/Canceled answers are expected meanwhile. Returns the new boot
    ID or marker (None when Read is not allowed and no marker was given).
    """
    end = time.monotonic() + timeout
    state = {"boot_id": None}

    def rebooted():
        try:
            status = machine_status(client, node, deadline=_poll_deadline(end))
            stage = status.get("stage", "unknown")
            ready = bool((status.get("status") or {}).get("ready"))
            if stage != "running" or not ready:
                return False, "stage %s, ready %s" % (stage, str(ready).lower())
            if previous_boot_id is None:
                return True, "stage running, ready true"
            read = read_boot_marker if str(previous_boot_id).startswith("boot-time:") else read_boot_id
            boot_id = read(client, node, deadline=_poll_deadline(end))
            state["boot_id"] = boot_id
            if boot_id is not None and boot_id == previous_boot_id:
                return False, "stage running, ready true, but the boot ID has not changed yet"
            return True, "stage running, ready true, new boot ID"
        except TalosError as error:
            if not is_transient(error):
                raise
            return False, error.message

    wait_until(rebooted, timeout, interval, "node %s to reboot and become ready" % (node or "(the endpoint)"))
    return state["boot_id"]


def wait_for_secure_api(client, node, timeout, interval=2.0):
    """Wait until ``node`` answers Version over mutual TLS with the configured CA (after a maintenance apply).

    ``client`` must be the secure client (``with_settings(insecure=False)``).
    Until the node restarts its API server with the cluster certificates, the
    handshake fails or the node is unreachable: both are waited out. Returns
    the Version reply item.
    """
    end = time.monotonic() + timeout
    reply = {}

    def answers():
        try:
            reply["version"] = client.call("machine.MachineService/Version", node=node, deadline=_poll_deadline(end))[0]
        except TalosError as error:
            if error.code in ("PermissionDenied", "Unimplemented", "InvalidArgument"):
                raise
            return False, error.message
        return True, "Version answered over mutual TLS"

    wait_until(answers, timeout, interval, "node %s to serve the Talos API with the cluster certificates" % (node or "(the endpoint)"))
    return reply["version"]


def wait_for_services(client, node, names, timeout, interval=2.0):
    """Wait until every service in ``names`` is Running and, when it has a health check, healthy.

    Returns ``{name: state}`` as last seen. A service the node does not define
    keeps the wait going (extensions appear once their system extension runs).
    """
    end = time.monotonic() + timeout
    seen = {}

    def ready():
        try:
            services = list_services(client, node, deadline=_poll_deadline(end))
        except TalosError as error:
            if not is_transient(error):
                raise
            return False, error.message
        waiting = []
        for name in names:
            info = services.get(name)
            if info is None:
                seen[name] = "not defined"
            else:
                health = "unknown" if info.health.unknown else ("healthy" if info.health.healthy else "unhealthy")
                seen[name] = "%s, %s" % (info.state, health)
            if info is None or info.state != "Running" or (not info.health.unknown and not info.health.healthy):
                waiting.append("%s (%s)" % (name, seen[name]))
        if waiting:
            return False, "waiting for " + ", ".join(waiting)
        return True, "every service is running"

    wait_until(ready, timeout, interval, "services %s on node %s to be running and healthy"
               % (", ".join(names), node or "(the endpoint)"))
    return dict(seen)


def wait_until_unreachable(client, node, timeout, interval=1.0):
    """Wait until ``node`` stops answering the API (after a shutdown or a reset without reboot).

    Done at the first Version call that fails the way a node that is going
    away or gone does (connection refused or lost, Unavailable through the
    endpoint). Nothing is retried inside a poll, so the wait ends promptly.
    """
    end = time.monotonic() + timeout

    def gone():
        try:
            client.call("machine.MachineService/Version", node=node, retry_codes=(), deadline=_poll_deadline(end))
        except TalosError as error:
            if not is_transient(error):
                raise
            return True, error.message
        return False, "the node still answers"

    wait_until(gone, timeout, interval, "node %s to stop answering" % (node or "(the endpoint)"))
