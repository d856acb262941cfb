# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared by talos_reboot, talos_shutdown, talos_reset and talos_rollback.

The etcd quorum guard a control plane passes before it goes down, the reset
plan (what a Reset request wipes and where the node ends), maintenance-mode
detection and the wait after a reset. The waits themselves are in waiters.py.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.talos_linux.talos.plugins.module_utils import etcd, waiters
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError, TalosUnimplementedError
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import split_endpoint

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

VERSION = "machine.MachineService/Version"

# A member whose node does not answer EtcdStatus within this many seconds counts as unhealthy.
HEALTH_PROBE_SECONDS = 10

# The system volumes a Reset may name (talosctl reset --system-labels-to-wipe).
SYSTEM_LABELS = ("BOOT", "EFI", "EPHEMERAL", "META", "STATE")

WIPE_MODES = {"all": "ALL", "system_disk": "SYSTEM_DISK", "user_disks": "USER_DISKS"}


def describe(node, start=False):
    """``node 10.5.0.2`` or ``the endpoint node``; capitalised to ``start`` a sentence."""
    text = "node %s" % node if node else "the endpoint node"
    return text[0].upper() + text[1:] if start else text


# -- the etcd quorum guard ---------------------------------------------------

def etcd_guard(client, node, leaves_etcd=False, probe_seconds=HEALTH_PROBE_SECONDS):
    """What taking ``node`` down (``leaves_etcd``: out of etcd for good) does to etcd quorum.

    Returns ``{"controlplane", "member", "safe", "problem", "quorum"}``:
    ``controlplane`` is False for a worker or a node without a machine type
    (they answer EtcdMemberList with Unimplemented; nothing to guard);
    ``member`` is the node's etcd member name, or None when it is no member;
    ``quorum`` is the etcd.outage_check / etcd.removal_check result;
    ``problem`` says why going ahead would cost etcd its quorum, or is None.
    An unreadable member list (no raft leader) is itself a problem.
    """
    guard = {"controlplane": False, "member": None, "safe": True, "problem": None, "quorum": None, "last_member": False}
    try:
        members = etcd.list_members(client, node)
    except TalosUnimplementedError:
        return guard
    except TalosError as err:
        guard.update(controlplane=True, safe=False,
                     problem="its etcd member list cannot be read (%s), so etcd may have lost quorum already"
                     % err.message.rstrip("."))
        return guard
    guard["controlplane"] = True
    member = etcd.find_member(members, etcd.own_member_name(client, node))
    if member is None:
        return guard
    guard["member"] = member["hostname"]
    voters = [m for m in members if not m["is_learner"]]
    if leaves_etcd and not member["is_learner"] and len(voters) == 1:
        guard.update(safe=False, last_member=True,
                     problem="it is the last etcd member, and Talos cannot make the last member leave etcd")
        return guard
    statuses = etcd.member_statuses(client, members, deadline=probe_seconds)
    check = (etcd.removal_check if leaves_etcd else etcd.outage_check)(members, statuses, member)
    guard.update(quorum=check, safe=check["safe"])
    if not check["safe"]:
        unhealthy = " (not healthy: %s)" % ", ".join(check["unhealthy"]) if check["unhealthy"] else ""
        guard["problem"] = ("etcd would keep %d voting member(s) and need %d of them healthy for quorum, but only %d "
                            "other than this node are healthy%s" % (check["voters_after"], check["quorum_after"],
                                                                    check["healthy_after"], unhealthy))
    return guard


def refuse_unless_forced(module, guard, action, node, **result):
    """fail_json before any change when the guard is closed and force_quorum_loss is not set."""
    if guard["safe"] or (module.params["force_quorum_loss"] and not guard.get("last_member")):
        return
    if guard.get("last_member"):
        hint = ("a graceful reset cannot remove it; use graceful: false with force_quorum_loss: true to wipe the "
                "cluster's last control plane, which destroys the cluster's etcd data")
    else:
        hint = "fix the unhealthy members first, or set force_quorum_loss: true to go ahead anyway"
    module.fail_json(msg="Refusing to %s control-plane %s: %s; %s." % (action, describe(node), guard["problem"], hint),
                     **result)


# -- reset plans -------------------------------------------------------------

def reset_plan(wipe_mode, labels, user_disks, reboot):
    """What a reset wipes and how the node ends, from the module options; raises ValueError on bad input.

    Returns ``{"system_disk", "labels", "user_disks", "ends"}``: ``system_disk``
    is True when the whole system disk is wiped, ``labels`` the system volumes
    wiped, ``ends`` one of ``maintenance`` (rebooted without its configuration:
    STATE wiped), ``configured`` (rebooted with its configuration) or ``off``.
    """
    labels = [str(label).upper() for label in labels or []]
    unknown = sorted(set(labels) - set(SYSTEM_LABELS))
    if unknown:
        raise ValueError("system_labels_to_wipe has unknown volume label(s) %s: Talos system volumes are %s."
                         % (", ".join(unknown), ", ".join(SYSTEM_LABELS)))
    if wipe_mode == "system_disk" and user_disks:
        raise ValueError("user_disks_to_wipe cannot be used with wipe_mode: system_disk, which wipes only the system "
                         "disk; use wipe_mode: all or user_disks to wipe user disks.")
    if wipe_mode == "user_disks" and labels:
        raise ValueError("system_labels_to_wipe cannot be used with wipe_mode: user_disks, which leaves the system disk "
                         "alone; use wipe_mode: all or system_disk to wipe system volumes.")
    if wipe_mode == "user_disks" and not user_disks:
        raise ValueError("wipe_mode: user_disks needs the devices to wipe in user_disks_to_wipe, for example [/dev/sdb].")
    if wipe_mode == "user_disks":
        wiped_labels = []
    else:
        wiped_labels = sorted(set(labels)) if labels else list(SYSTEM_LABELS)
    if not reboot:
        ends = "off"
    else:
        ends = "maintenance" if "STATE" in wiped_labels else "configured"
    return {
        "system_disk": wipe_mode != "user_disks" and not labels,
        "labels": wiped_labels,
        "user_disks": list(user_disks or []) if wipe_mode != "system_disk" else [],
        "ends": ends,
    }


def reset_request(graceful, reboot, wipe_mode, labels, user_disks):
    """The ResetRequest talosctl sends for these options (labels are wiped, none means the whole system disk)."""
    return machine_pb2.ResetRequest(
        graceful=graceful, reboot=reboot, mode=machine_pb2.ResetRequest.WipeMode.Value(WIPE_MODES[wipe_mode]),
        system_partitions_to_wipe=[machine_pb2.ResetPartitionSpec(label=label.upper(), wipe=True) for label in labels or []],
        user_disks_to_wipe=list(user_disks or []),
    )


# -- maintenance mode ----------------------------------------------------------

def maintenance_client(client, node):
    """An insecure client that talks to ``node`` directly: a node in maintenance mode forwards nothing,
    and an endpoint cannot forward to it (its certificate is not from the cluster CA)."""
    if node is None:
        return client.with_settings(insecure=True)
    port = split_endpoint(client.active_endpoint)[1]
    host = "[%s]" % node if ":" in node else node
    return client.with_settings(insecure=True, endpoints=["%s:%d" % (host, port)], node=None)


def in_maintenance(client, node, deadline):
    """True when ``node`` answers Version over an insecure connection (or, up to v1.12, Unimplemented).

    A configured node requires a client certificate, so only a node in
    maintenance mode answers at all.
    """
    probe = maintenance_client(client, node)
    try:
        probe.call(VERSION, retry_codes=(), deadline=deadline)
    except TalosUnimplementedError:
        return True
    except TalosError:
        return False
    finally:
        probe.close()
    return True


def wait_for_reset_reboot(client, node, previous_marker, timeout, interval=2.0):
    """Wait until a node reset with ``reboot`` is back: in maintenance mode, or running with a new boot.

    Returns ``("maintenance", None)`` or ``("configured", new boot marker)``.
    """
    end = time.monotonic() + timeout
    outcome = {}

    def back():
        poll = max(0.5, min(waiters.POLL_CALL_TIMEOUT, end - time.monotonic()))
        try:
            status = waiters.machine_status(client, node, deadline=poll)
            ready = bool((status.get("status") or {}).get("ready"))
            if status.get("stage") == "running" and ready:
                marker = waiters.read_boot_marker(client, node, deadline=poll)
                if marker != previous_marker:
                    outcome.update(state="configured", marker=marker)
                    return True, "running with a new boot"
                return False, "still running on the same boot"
            observed = "stage %s, ready %s" % (status.get("stage", "unknown"), str(ready).lower())
        except TalosError as err:
            observed = err.message
        if in_maintenance(client, node, poll):
            outcome.update(state="maintenance", marker=None)
            return True, "in maintenance mode"
        return False, observed

    waiters.wait_until(back, timeout, interval, "%s to come back from the reset, in maintenance mode or with a new boot"
                       % describe(node))
    return outcome["state"], outcome["marker"]
