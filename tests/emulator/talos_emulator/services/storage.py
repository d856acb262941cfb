# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's disks: a system disk and one user disk, as storage.StorageService/Disks and the COSI
``Disks.block.talos.dev`` and ``SystemDisks.block.talos.dev`` resources report them."""

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_grpc, storage_pb2

SYSTEM_DISK = "/dev/sda"
USER_DISKS = ("/dev/sdb",)
# The disks every node has: id -> what Talos's block controllers read from sysfs.
DISKS = {
    "sda": {"size": 107374182400, "model": "QEMU HARDDISK", "serial": "QM00001", "rotational": False,
            "bus_path": "/pci0000:00/0000:00:07.0/virtio4/host0/target0:0:0/0:0:0:0", "type": storage_pb2.Disk.SSD},
    "sdb": {"size": 53687091200, "model": "QEMU HARDDISK", "serial": "QM00002", "rotational": True,
            "bus_path": "/pci0000:00/0000:00:08.0/virtio5/host1/target1:0:0/1:0:0:0", "type": storage_pb2.Disk.HDD},
}


def pretty_size(size):
    """go-humanize's Bytes (SI units), as Talos prints disk and volume sizes: 107 GB, 4.2 MB, 512 B."""
    if size < 10:
        return "%d B" % size
    units = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
    exponent = 0
    while size >= 1000 ** (exponent + 1) and exponent < len(units) - 1:
        exponent += 1
    value = int(size / 1000 ** exponent * 10 + 0.5) / 10
    return ("%.0f %s" if value >= 10 else "%.1f %s") % (value, units[exponent])


def disk_specs(node):
    """``[(id, Disks.block.talos.dev spec)]`` of the node's disks."""
    return [(disk_id, {
        "dev_path": "/dev/%s" % disk_id, "size": disk["size"], "pretty_size": pretty_size(disk["size"]), "io_size": 512,
        "sector_size": 512, "readonly": False, "cdrom": False, "model": disk["model"], "serial": disk["serial"],
        "bus_path": disk["bus_path"], "sub_system": "/sys/class/block", "transport": "virtio", "rotational": disk["rotational"],
    }) for disk_id, disk in DISKS.items()]


def system_disk(node):
    """``[(id, SystemDisks.block.talos.dev spec)]``: the disk Talos is installed on (none from a live ISO)."""
    return [("system-disk", {"diskID": SYSTEM_DISK[len("/dev/"):], "devPath": SYSTEM_DISK})] if node.installed else []


class StorageService(storage_grpc.StorageServiceBase):
    def __init__(self, node):
        self.node = node

    async def Disks(self, stream):
        await stream.recv_message()
        disks = [
            storage_pb2.Disk(
                size=disk["size"], model=disk["model"], device_name="/dev/%s" % disk_id, serial=disk["serial"], type=disk["type"],
                bus_path=disk["bus_path"], system_disk=self.node.installed and "/dev/%s" % disk_id == SYSTEM_DISK,
                subsystem="/sys/class/block",
            )
            for disk_id, disk in DISKS.items()
        ]
        await stream.send_message(storage_pb2.DisksResponse(messages=[storage_pb2.Disks(disks=disks)]))
