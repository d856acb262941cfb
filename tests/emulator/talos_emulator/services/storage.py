# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage.StorageService/Disks: every node has a system disk and one user disk."""

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_grpc, storage_pb2

SYSTEM_DISK = "/dev/sda"
USER_DISKS = ("/dev/sdb",)


class StorageService(storage_grpc.StorageServiceBase):
    def __init__(self, node):
        self.node = node

    async def Disks(self, stream):
        await stream.recv_message()
        disks = [
            storage_pb2.Disk(
                size=107374182400, model="QEMU HARDDISK", device_name=SYSTEM_DISK, serial="QM00001", type=storage_pb2.Disk.SSD,
                bus_path="/pci0000:00/0000:00:07.0/virtio4/host0/target0:0:0/0:0:0:0", system_disk=self.node.installed,
                subsystem="/sys/class/block",
            ),
            storage_pb2.Disk(
                size=53687091200, model="QEMU HARDDISK", device_name=USER_DISKS[0], serial="QM00002", type=storage_pb2.Disk.HDD,
                bus_path="/pci0000:00/0000:00:08.0/virtio5/host1/target1:0:0/1:0:0:0", subsystem="/sys/class/block",
            ),
        ]
        await stream.send_message(storage_pb2.DisksResponse(messages=[storage_pb2.Disks(disks=disks)]))
