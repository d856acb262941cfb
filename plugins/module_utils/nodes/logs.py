# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Service, container and kernel logs of a node (MachineService Logs and Dmesg), read to the end
without following, keeping only the last lines and those since a point in time."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import json
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.durations import parse_time
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED, is_secret_value

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    common_pb2 = machine_pb2 = None

# containerd namespaces by the names users give (talosctl image --namespace) -> the name Talos logs them under.
NAMESPACES = {"system": "system", "cri": "k8s.io"}

_LEADING_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)")
_DMESG_TIME = re.compile(r"^[^:\[]*:\s*[^:\[]*:\s*\[([^\]]+)\]")


def line_time(line):
    """The time a log line starts with: RFC 3339 (CRI logs), the ``[time]`` of a dmesg line, or the ``ts``/``time``
    field of a JSON line (etcd); None when the line carries none."""
    match = _LEADING_TIME.match(line) or _DMESG_TIME.match(line)
    if match:
        return parse_time(match.group(1))
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        stamp = record.get("ts") or record.get("time") if isinstance(record, dict) else None
        return parse_time(stamp) if isinstance(stamp, str) else None
    return None


class LineCollector:
    """Splits a byte stream into lines and keeps the last ``limit`` of those not older than ``since``.

    A line without a time of its own goes with the line before it (a
    continuation), so a multi-line message is kept or dropped whole. A line
    that holds a secret by its shape is replaced by REDACTED.
    """

    def __init__(self, limit, since):
        self.lines = collections.deque(maxlen=limit if limit > 0 else None)
        self.since = since
        self._pending = b""
        self._keeping = since is None

    def feed(self, data):
        self._pending += data
        complete = self._pending.split(b"\n")
        self._pending = complete.pop()
        for raw in complete:
            self._add(raw)
        return False

    def close(self):
        if self._pending:
            self._add(self._pending)
            self._pending = b""
        return list(self.lines)

    def _add(self, raw):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self.since is not None:
            stamp = line_time(line)
            if stamp is not None:
                self._keeping = stamp >= self.since
        if self._keeping:
            # A line that holds a secret by its shape (a private key, a URL with a password) is not returned.
            self.lines.append(REDACTED if is_secret_value(line) else line)


def read_logs(client, node, service, namespace, lines, since):
    """The last ``lines`` lines (0 = all) since ``since`` of a Talos service (``system``) or a CRI container (``cri``)."""
    driver = common_pb2.CRI if namespace == "cri" else common_pb2.CONTAINERD
    # The server cuts the tail when no time filter needs the older lines.
    tail = lines if lines > 0 and since is None else -1
    request = machine_pb2.LogsRequest(namespace=NAMESPACES[namespace], id=service, driver=driver, follow=False, tail_lines=tail)
    collector = LineCollector(lines, since)
    client.stream(rpc.LOGS, request, node=node, on_message=lambda message: collector.feed(message.bytes))
    return collector.close()


def read_kernel_log(client, node, lines, since):
    """The last ``lines`` lines (0 = all) since ``since`` of the node's kernel log."""
    collector = LineCollector(lines, since)
    client.stream(rpc.DMESG, machine_pb2.DmesgRequest(follow=False, tail=False), node=node,
                  on_message=lambda message: collector.feed(message.bytes if message.bytes.endswith(b"\n") else message.bytes + b"\n"))
    return collector.close()
