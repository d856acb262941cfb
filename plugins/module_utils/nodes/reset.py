# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reset: what a reset wipes and how the node ends, the request talosctl sends, and the wait for a reset node to come back.

The primitive under talos_reset (lifecycle/actions.py adds the quorum guard
and the whole task) and under the etcd restore, which wipes etcd on every
control plane at once.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConfigError,
    TalosError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import read_machine_status
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.maintenance import in_maintenance

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by the task doors through missing_required_lib
    machine_pb2 = None

# The volumes a node reports (namespace, type): a Reset may name a volume only by the ID of its VolumeStatus
# (since Talos v1.9; the boot partitions EFI, BIOS and BOOT have none).
VOLUME_STATUSES = ("runtime", "VolumeStatuses.block.talos.dev")
STATE_VOLUME = "STATE"

WIPE_MODES = {"all": "ALL", "system_disk": "SYSTEM_DISK", "user_disks": "USER_DISKS"}


def reset_plan(wipe_mode, labels, user_disks, then_reboot):
    """What a reset wipes and how the node ends, from the module options; raises TalosConfigError on bad input.

    Returns ``{"system_disk", "labels", "user_disks", "partitions", "ends"}``:
    ``system_disk`` is True when the whole system disk is wiped, ``labels``
    the volumes named to be wiped (sorted; none for the whole disk),
    ``partitions`` the volumes the request names (in the given order), ``ends``
    one of ``maintenance`` (rebooted without its configuration: STATE wiped),
    ``configured`` (rebooted with its configuration) or ``off``. Whether the
    node has the volumes is checked against the node (``wipeable_volumes``).
    """
    labels = list(dict.fromkeys(str(name).strip() for name in labels or []))
    if wipe_mode == "system_disk" and user_disks:
        raise TalosConfigError("user_disks_to_wipe cannot be used with wipe_mode: system_disk, which wipes only the system "
                               "disk; use wipe_mode: all or user_disks to wipe user disks.")
    if wipe_mode == "user_disks" and labels:
        raise TalosConfigError("system_labels_to_wipe cannot be used with wipe_mode: user_disks, which leaves the system disk "
                               "alone; use wipe_mode: all or system_disk to wipe system volumes.")
    if wipe_mode == "user_disks" and not user_disks:
        raise TalosConfigError("wipe_mode: user_disks needs the devices to wipe in user_disks_to_wipe, for example [/dev/sdb].")
    system_disk = wipe_mode != "user_disks" and not labels
    return _with_ending({
        "system_disk": system_disk,
        "labels": sorted(labels),
        "user_disks": list(user_disks or []) if wipe_mode != "system_disk" else [],
        "partitions": labels,
    }, then_reboot)


def _with_ending(plan, then_reboot):
    """``plan`` with its ``ends``: wiping the whole disk or STATE takes the node's configuration along."""
    if not then_reboot:
        ends = "off"
    elif plan["system_disk"] or any(name.upper() == STATE_VOLUME for name in plan["labels"]):
        ends = "maintenance"
    else:
        ends = "configured"
    return dict(plan, ends=ends)


def wipeable_volumes(client, node):
    """The volumes a Reset of ``node`` may name, from its VolumeStatuses: ``{volume ID: None, or the volume it
    resides on}``; None when the node lists no volumes (a Talos release without them, a refused read).

    A volume with a block device of its own (``location``) may be wiped alone;
    one without (a directory under EPHEMERAL) only together with the volume it
    resides on, as Talos v1.14 checks (system.FindBackingVolume).
    """
    namespace, resource_type = VOLUME_STATUSES
    try:
        listed = client.list_resources(namespace, resource_type, node=node)
    except TalosError as err:
        if err.code in ("PermissionDenied", "NotFound", "Unimplemented"):
            return None
        raise
    specs = dict((resource["metadata"]["id"], resource["spec"] if isinstance(resource["spec"], dict) else {})
                 for resource in listed)
    volumes = {}
    for volume_id, spec in specs.items():
        if spec.get("location"):
            volumes[volume_id] = None
            continue
        backing = _backing_volume(specs, volume_id)
        if backing is not None:
            volumes[volume_id] = backing
    return volumes or None


def _backing_volume(specs, volume_id):
    """The nearest volume with a block device that ``volume_id`` resides on (its parent chain), or None."""
    seen = {volume_id}
    spec = specs[volume_id]
    while True:
        parent = spec.get("parentID") or (spec.get("mountSpec") or {}).get("parentId")
        if not parent or parent in seen or parent not in specs:
            return None
        if specs[parent].get("location"):
            return parent
        seen.add(parent)
        spec = specs[parent]


def resolve_labels(plan, volumes, node):
    """``plan`` with its labels spelled as ``node`` names its volumes (``wipeable_volumes``); raises TalosConfigError
    naming the volumes it has when a label is none of them, or names a directory without the volume it is on."""
    by_name = dict((volume_id.lower(), volume_id) for volume_id in volumes)
    resolved = [by_name.get(name.lower()) for name in plan["partitions"]]
    unknown = [name for name, volume_id in zip(plan["partitions"], resolved) if volume_id is None]
    if unknown:
        raise TalosConfigError("system_labels_to_wipe names %s, which %s does not have; its volumes are %s."
                               % (", ".join(unknown), label(node), _describe_volumes(volumes)))
    for volume_id in resolved:
        backing = volumes[volume_id]
        if backing is not None and backing not in resolved:
            raise TalosConfigError("system_labels_to_wipe names %s, which resides on %s of %s and is wiped only together with "
                                   "it; add %s to system_labels_to_wipe." % (volume_id, backing, label(node), backing))
    return dict(plan, labels=sorted(resolved), partitions=resolved)


def _describe_volumes(volumes):
    """``EPHEMERAL, META, STATE (and, together with EPHEMERAL: CRI, ETCD)``."""
    own = sorted(volume_id for volume_id, backing in volumes.items() if backing is None)
    nested = {}
    for volume_id, backing in volumes.items():
        if backing is not None:
            nested.setdefault(backing, []).append(volume_id)
    text = ", ".join(own)
    for backing in sorted(nested):
        text += " (and, together with %s: %s)" % (backing, ", ".join(sorted(nested[backing])))
    return text


def reset_request(plan, wipe_mode, graceful):
    """The ResetRequest talosctl sends for ``plan`` (reset_plan)."""
    return machine_pb2.ResetRequest(
        graceful=graceful, reboot=plan["ends"] != "off", mode=machine_pb2.ResetRequest.WipeMode.Value(WIPE_MODES[wipe_mode]),
        system_partitions_to_wipe=[machine_pb2.ResetPartitionSpec(label=volume, wipe=True) for volume in plan["partitions"]],
        user_disks_to_wipe=list(plan["user_disks"]),
    )


def wait_for_reset_reboot(client, node, previous_marker, waiter):
    """Wait until a node reset with ``reboot`` is back: in maintenance mode, or running with a new boot.

    Returns ``("maintenance", None)`` or ``("configured", new boot marker)``.
    """
    def poll():
        deadline = waiter.call_deadline()
        try:
            status = read_machine_status(client, node, deadline=deadline)
            if status.running_and_ready:
                marker = waits.read_boot_marker(client, node, deadline=deadline)
                if marker != previous_marker:
                    return Seen("running", done=True, value=("configured", marker), detail="running with a new boot")
                return Seen("running, not rebooted yet", detail="still running on the same boot")
            seen = Seen(status.state, detail=str(status))
        except TalosError as err:
            # A node that rebooted into maintenance mode refuses the cluster's certificates.
            seen = Seen("not answering with the cluster certificates", detail=err.message)
        if in_maintenance(client, node, deadline):
            return Seen("maintenance", done=True, value=("maintenance", None), detail="in maintenance mode")
        return seen

    return waiter.until(poll, "%s to come back from the reset, in maintenance mode or with a new boot" % label(node),
                        short_label(node), tolerate=lambda error: False, follow=waits.EventFollower(client, node))
