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

from .storage import DISKS, SYSTEM_DISK, pretty_size
from ..versions import older_than

_MIB = 1048576
# The EFI partition of a UKI install (quirks.PartitionSizes: 100 MiB EFI, 1 MiB BIOS, 2000 MiB boot).
_EFI_SIZE = 2101 * _MIB
# ID -> (partition index, mount point, filesystem, size) of the volumes on partitions of their own; EPHEMERAL takes
# what the others and the GPT (1 MiB at either end) leave of the system disk.
PARTITIONS = {
    "META": (2, None, None, _MIB),
    "STATE": (3, "/system/state", "xfs", 100 * _MIB),
    "EPHEMERAL": (4, "/var", "xfs", DISKS["sda"]["size"] - _EFI_SIZE - _MIB - 100 * _MIB - 2 * _MIB),
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
    for volume_id, (index, mount_point, filesystem, size) in PARTITIONS.items():
        spec = {"phase": "ready", "type": "partition", "location": "%s%d" % (SYSTEM_DISK, index), "partitionIndex": index,
                "parentLocation": SYSTEM_DISK, "size": size, "prettySize": pretty_size(size), "filesystem": filesystem or "none"}
        if mount_point:
            spec["mountSpec"] = {"targetPath": mount_point, "selinuxLabel": "", "projectQuotaSupport": False}
        statuses.append((volume_id, spec))
    for volume_id, mount_point in DIRECTORIES.items():
        statuses.append((volume_id, {"phase": "ready", "type": "directory", "mountSpec": {
            "targetPath": mount_point, "selinuxLabel": "", "projectQuotaSupport": False, "parentId": BACKING_VOLUME}}))
    return statuses


def mounts(node):
    """``[(device, mount point, size, bytes used)]`` of the node's mounted partitions (STATE and EPHEMERAL)."""
    if not node.installed:
        return []
    found = []
    for volume_id, (index, mount_point, _filesystem, size) in PARTITIONS.items():
        if mount_point:
            used = size // 100 * (1 if volume_id == "STATE" else 6)
            found.append(("%s%d" % (SYSTEM_DISK, index), mount_point, size, used))
    return found


def discovered_volumes(node):
    """``[(id, DiscoveredVolumes.block.talos.dev spec)]``: what blkid finds on the disks (an installed node's system
    disk is a GPT with the EFI, META, STATE and EPHEMERAL partitions; the user disk is blank)."""
    volumes = []
    for disk_id, disk in DISKS.items():
        installed = node.installed and "/dev/%s" % disk_id == SYSTEM_DISK
        volumes.append((disk_id, {"dev_path": "/dev/%s" % disk_id, "type": "disk", "device_path": disk["bus_path"], "offset": 0,
                                  "size": disk["size"], "pretty_size": pretty_size(disk["size"]), "sector_size": 512, "io_size": 512,
                                  "name": "gpt" if installed else "", "block_size": 512 if installed else 0}))
    if node.installed:
        parent = SYSTEM_DISK[len("/dev/"):]
        partitions = [("EFI", 1, "vfat", _EFI_SIZE, 2 * _MIB)]
        offset = 2 * _MIB + _EFI_SIZE
        for label, (index, _mount, filesystem, size) in PARTITIONS.items():
            partitions.append((label, index, filesystem, size, offset))
            offset += size
        for label, index, filesystem, size, start in partitions:
            volumes.append(("%s%d" % (parent, index), {
                "dev_path": "%s%d" % (SYSTEM_DISK, index), "type": "partition", "device_path": DISKS[parent]["bus_path"],
                "parent": parent, "parent_dev_path": SYSTEM_DISK, "offset": start, "size": size, "pretty_size": pretty_size(size),
                "sector_size": 512, "io_size": 512, "name": filesystem or "talosmeta", "label": label if filesystem else "",
                "partition_label": label, "partition_index": index,
            }))
    return volumes


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
