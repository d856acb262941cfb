# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The log RPCs of machine.MachineService: Logs (Talos services and CRI containers) and Dmesg.

Service logs are read from the ``system`` namespace (one line per service
event, after a few start-up lines), in 1 KiB chunks; containers of the
``k8s.io`` namespace (the control-plane static pods) need the CRI driver.
Dmesg sends one kernel message per frame, "facility: priority: [time]: text".
"""

import datetime

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2

from .common import send_chunks

_STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_STARTUP_LINES = 20


def _rfc3339(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def service_log(node, service_id):
    """The log lines of a Talos service on this boot."""
    service = node.services[service_id]
    start = node.booted_at or 0
    lines = ["%s %s: start-up message %d" % (_rfc3339(start + index / 1000.0), service_id, index + 1) for index in range(_STARTUP_LINES)]
    lines += ["%s %s: [%s] %s" % (_rfc3339(stamp), service_id, state, message) for message, state, stamp in service.events]
    return lines


# Logs machined writes of its own beside the services' (talosctl logs controller-runtime, dns-resolve-cache).
_MACHINED_LOGS = ("controller-runtime", "dns-resolve-cache")


def machined_log(node, log_id):
    """The log of machined's controller runtime or DNS cache on this boot: one line a controller or resolver event."""
    start = node.booted_at or 0
    if log_id == "controller-runtime":
        controllers = ("config.MachineTypeController", "etcd.SpecController", "k8s.NodenameController",
                       "network.AddressStatusController")
        events = ["controller starting %s" % name for name in controllers]
        events.append("machine stage %s, boot id %s" % (node.stage, node.boot_id))
    else:
        events = ["dns cache listening on 127.0.0.53:53", "resolved %s.%s" % (node.hostname, "cluster.local")]
    return ["%s %s: %s" % (_rfc3339(start + index / 1000.0), log_id, text) for index, text in enumerate(events)]


def container_ids(node):
    """CRI container IDs as talosctl names them: ``<namespace>/<pod>:<container>``."""
    if not node.is_control_plane or not node.powered:
        return []
    return ["kube-system/%s-%s:%s" % (name, node.hostname, name) for name in _STATIC_PODS]


def container_log(node, container_id):
    name = container_id.rsplit(":", 1)[-1]
    start = node.booted_at or 0
    return ["%s stderr F I0000 %s started, line %d" % (_rfc3339(start + index / 1000.0), name, index + 1) for index in range(_STARTUP_LINES)]


def kernel_log(node):
    start = node.booted_at or 0
    messages = ["Linux version 6.12.0-talos (emulated)", "Command line: talos.platform=metal"]
    messages += ["emulated kernel message %d" % index for index in range(1, 29)]
    messages.append("talos: booted %s, boot id %s" % (node.talos_version, node.boot_id))
    return ["kern:    info: [%s]: %s" % (_rfc3339(start + index / 100.0), text) for index, text in enumerate(messages)]


class LogRPCs:
    async def Logs(self, stream):
        request = await stream.recv_message()
        node = self.node
        if not request.namespace:
            raise GRPCError(Status.INVALID_ARGUMENT, "namespace can't be empty")
        if request.namespace == "system" and request.id in _MACHINED_LOGS:
            lines = machined_log(node, request.id)
        elif request.namespace == "system" or request.id == "kubelet":
            if request.id not in node.services:
                raise GRPCError(Status.UNKNOWN, "open /var/log/%s.log: no such file or directory" % request.id)
            lines = service_log(node, request.id)
        elif request.namespace == "k8s.io" and request.driver == common_pb2.CRI:
            if request.id not in container_ids(node):
                raise GRPCError(Status.UNKNOWN, 'container "%s" not found' % request.id)
            lines = container_log(node, request.id)
        else:
            raise GRPCError(Status.UNKNOWN, 'container "%s" not found' % request.id)
        if request.tail_lines >= 0:
            lines = lines[-request.tail_lines:] if request.tail_lines else []
        await send_chunks(stream, "".join(line + "\n" for line in lines).encode())

    async def Dmesg(self, stream):
        request = await stream.recv_message()
        if request.tail:
            return
        for line in kernel_log(self.node):
            await stream.send_message(common_pb2.Data(bytes=(line + "\n").encode()))
