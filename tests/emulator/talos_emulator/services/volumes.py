# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's volumes as Talos's volume manager reports them (``VolumeStatuses.block.talos.dev``, namespace runtime).

A UEFI install (systemd-boot) has the partitions EFI, META, STATE and
EPHEMERAL on the system disk; only the volumes Talos manages get a
VolumeStatus: META, STATE and EPHEMERAL, plus the directory volumes under
EPHEMERAL (ETCD, CRI, KUBELET, LOG). The boot partitions (EFI,
and BIOS and BOOT of a GRUB install) have none, so a Reset cannot name them:
Talos answers "failed to get volume status with label ..." (``v1alpha1_server.go``).
"""

from .storage import SYSTEM_DISK
from ..versions import older_than

# ID -> (partition index, mount point, filesystem) of the volumes on partitions of their own.
PARTITIONS = {
    "META": (2, None, None),
    "STATE": (3, "/system/state", "xfs"),
    "EPHEMERAL": (4, "/var", "xfs"),
}
# ID -> mount point of the directory volumes that reside on EPHEMERAL.
DIRECTORIES = {
    "ETCD": "/var/lib/etcd",
    "CRI": "/var/lib/containerd",
    "KUBELET": "/var/lib/kubelet",
    "LOG": "/var/log",
}
# Where a directory volume resides.
BACKING_VOLUME = "EPHEMERAL"


def volume_statuses(node):
    """``[(id, VolumeStatus spec)]`` of an installed node; none in maintenance mode from a live ISO."""
    if not node.installed:
        return []
    statuses = []
    for volume_id, (index, mount_point, filesystem) in PARTITIONS.items():
        spec = {"phase": "ready", "type": "partition", "location": "%s%d" % (SYSTEM_DISK, index), "partitionIndex": index,
                "parentLocation": SYSTEM_DISK, "filesystem": filesystem or "none"}
        if mount_point:
            spec["mountSpec"] = {"targetPath": mount_point, "selinuxLabel": "", "projectQuotaSupport": False}
        statuses.append((volume_id, spec))
    for volume_id, mount_point in DIRECTORIES.items():
        statuses.append((volume_id, {"phase": "ready", "type": "directory", "mountSpec": {
            "targetPath": mount_point, "selinuxLabel": "", "projectQuotaSupport": False, "parentId": BACKING_VOLUME}}))
    return statuses


def reset_refusal(node, labels):
    """Why Talos refuses to reset the volumes ``labels`` of ``node``, or None (its Reset handler's checks)."""
    known = dict(volume_statuses(node))
    for label in labels:
        if label not in known:
            return ('failed to get volume status with label "%s": resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) '
                    "doesn't exist" % (label, label))
        if "location" in known[label]:
            continue
        # Before v1.14 only a volume with a block device of its own could be named.
        if older_than(node.talos_version, "v1.14.0"):
            return 'failed to reset: volume "%s" is not located' % label
        if BACKING_VOLUME not in labels:
            return ('failed to reset: volume "%s" resides on volume "%s", and therefore "%s" cannot be wiped without wiping '
                    '"%s"' % (label, BACKING_VOLUME, label, BACKING_VOLUME))
    return None
