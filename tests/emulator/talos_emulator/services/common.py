# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers shared by the service modules."""

import uuid

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2

CHUNK_SIZE = 1024
# The emulated machines' memory in kB, as /proc/meminfo reports it (Memory, the health check's memory sizes).
MEMTOTAL_KIB = 8148892


def new_actor_id():
    return str(uuid.uuid4())


async def send_chunks(stream, data, chunk_size=CHUNK_SIZE):
    """Stream bytes as ``common.Data`` frames of ``chunk_size`` bytes, as Talos's chunker does."""
    for offset in range(0, len(data), chunk_size):
        await stream.send_message(common_pb2.Data(bytes=data[offset:offset + chunk_size]))


def require_machine_type(node, api):
    """Talos's machinehelper check for APIs that need a configured node."""
    if node.machine_type is None:
        raise GRPCError(Status.UNIMPLEMENTED, "machine type is not set, cannot use %s API" % api)


def require_control_plane(node, api):
    require_machine_type(node, api)
    if not node.is_control_plane:
        raise GRPCError(Status.UNIMPLEMENTED, "%s is only available on control plane nodes" % api)


def go_duration(seconds):
    """Format seconds the way Go's time.Duration.String does (1m0s, 30s, 1.5s, 500ms)."""
    if seconds < 1:
        return "%gms" % round(seconds * 1000, 3) if seconds else "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = ("%.9f" % secs).rstrip("0").rstrip(".") + "s"
    if hours:
        return "%dh%dm%s" % (hours, minutes, text)
    if minutes:
        return "%dm%s" % (minutes, text)
    return text
