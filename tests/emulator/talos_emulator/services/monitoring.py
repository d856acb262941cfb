# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What talosctl time, stats and netstat read, which the collection does not call: ``time.TimeService`` (Time,
TimeCheck) and MachineService Stats and Netstat, on the messages of ``extra_api.py``.

As upstream (``v1alpha1_time.go``, ``v1alpha1_server.go`` of siderolabs/talos v1.14): Time asks the first time
server of the config (``machine.time.servers`` or a ``TimeSyncConfig`` document, else time.cloudflare.com) and
answers the node's and the server's time; the emulated network's time servers agree with the node. Stats lists the
containers of a containerd namespace with their memory and CPU use (the system namespace's are the services machined
runs as containers; the CRI ``k8s.io`` namespace's the control plane's static pods). Netstat lists the sockets of
the host network: the listeners of the node's services and the connections of its members to each other, filtered
as ``netstat.Netstat`` filters them.
"""

import time

from google.protobuf import empty_pb2
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2

from .. import configgen, extra_api
from ..runners import service_pid
from .image import boot_images
from .logs import container_ids

_DEFAULT_NTP_SERVER = "time.cloudflare.com"
# Sockets a node's services listen on: (service, protocol, local address or None for the node's, port or the etcd URL
# it is the port of, control planes only).
_LISTENERS = (
    ("apid", "tcp6", "::", 50000, False), ("trustd", "tcp6", "::", 50001, True), ("etcd", "tcp", None, "client", True),
    ("etcd", "tcp", None, "peer", True), ("kubelet", "tcp6", "::", 10250, False), ("kubelet", "tcp", "127.0.0.1", 10248, False),
    ("machined", "tcp", "127.0.0.53", 53, False), ("machined", "udp", "127.0.0.53", 53, False),
    ("kube-apiserver", "tcp6", "::", 6443, True),
)
# /proc/net's socket states: an unconnected UDP socket is CLOSE.
_UDP_CLOSE = 7


def _etcd_port(node, which):
    """The port of the node's etcd member: 2379 and 2380, or where a real member listens (real_etcd.py)."""
    etcd = node.cluster.etcd
    url_of = getattr(etcd, "client_url" if which == "client" else "peer_url", None)
    return int(url_of(node).rsplit(":", 1)[1]) if url_of is not None else {"client": 2379, "peer": 2380}[which]


def time_servers(node):
    """The time servers of the node's config, in order (Talos's NetworkTimeSyncConfig)."""
    if node.config is None:
        return []
    for document in configgen.parse_documents(node.config_bytes):
        if document.get("kind") == "TimeSyncConfig":
            return list((document.get("ntp") or {}).get("servers") or [])
    return list((((node.config.get("machine") or {}).get("time")) or {}).get("servers") or [])


def _time_reply(server):
    reply = extra_api.Time(server=server)
    now = time.time()
    reply.localtime.FromNanoseconds(int(now * 1e9))
    reply.remotetime.FromNanoseconds(int(now * 1e9))
    return extra_api.TimeResponse(messages=[reply])


class TimeService:
    """time.TimeService: Time and TimeCheck."""

    def __init__(self, node):
        self.node = node

    async def Time(self, stream):
        await stream.recv_message()
        await stream.send_message(_time_reply((time_servers(self.node) or [_DEFAULT_NTP_SERVER])[0]))

    async def TimeCheck(self, stream):
        request = await stream.recv_message()
        if not request.server:
            raise GRPCError(Status.INVALID_ARGUMENT, "ntp server is required")
        await stream.send_message(_time_reply(request.server))

    def __mapping__(self):
        return {
            "/time.TimeService/Time": Handler(self.Time, Cardinality.UNARY_UNARY, empty_pb2.Empty, extra_api.TimeResponse),
            "/time.TimeService/TimeCheck": Handler(self.TimeCheck, Cardinality.UNARY_UNARY, extra_api.TimeRequest,
                                                   extra_api.TimeResponse),
        }


def system_containers(node):
    """``[(id, image)]`` of the system namespace's containers: the services machined runs with containerd that run
    now. apid and trustd run from Talos's own root file system, so they have no image."""
    images = dict(zip(("kubelet", "etcd"), boot_images(node).get("NS_SYSTEM", [])))
    return [(service_id, images.get(service_id, "")) for service_id in ("apid", "etcd", "kubelet", "trustd")
            if service_id in node.services and node.services[service_id].running]


def _netstat_records(node):
    """Every socket of the host network namespace: ``(protocol, local ip, local port, remote ip, remote port, state,
    service)``."""
    records = []
    for service_id, protocol, local, port, control_plane_only in _LISTENERS:
        if control_plane_only and not node.is_control_plane:
            continue
        if service_id not in ("machined", "kube-apiserver") and not (service_id in node.services and node.services[service_id].running):
            continue
        if not isinstance(port, int):
            port = _etcd_port(node, port)
        records.append((protocol, local or node.address, port, "::" if protocol.endswith("6") else "0.0.0.0", 0,
                        _UDP_CLOSE if protocol.startswith("udp") else extra_api.TCP_LISTEN, service_id))
    # etcd's peers: a control plane whose member runs keeps a connection to every other running member.
    if node.is_control_plane and node.etcd_running:
        for other in node.cluster.controlplanes:
            if other is not node and other.etcd_running:
                records.append(("tcp", node.address, 40000 + int(other.address.rsplit(".", 1)[1]), other.address,
                                _etcd_port(other, "peer"), extra_api.TCP_ESTABLISHED, "etcd"))
    return records


class MonitoringRPCs:
    """MachineService Stats and Netstat, mixed into MachineService; their handlers join the generated mapping."""

    async def Stats(self, stream):
        request = await stream.recv_message()
        node = self.node
        if not request.namespace:
            raise GRPCError(Status.INVALID_ARGUMENT, "namespace can't be empty")
        stats = []
        uptime = time.time() - node.booted_at if node.booted_at else 0.0
        if request.namespace == "system" and request.driver == common_pb2.CONTAINERD:
            for service_id, _image in system_containers(node):
                stats.append(extra_api.Stat(namespace="system", id=service_id, pod_id="", name=service_id,
                                            memory_usage=30000000 + service_pid(service_id) * 1000,
                                            cpu_usage=int(uptime * 1e7) + service_pid(service_id)))
        elif request.namespace == "k8s.io" and request.driver == common_pb2.CRI:
            for index, container_id in enumerate(container_ids(node)):
                pod_id, name = container_id.split(":")
                stats.append(extra_api.Stat(namespace="k8s.io", id=container_id, pod_id=pod_id, name=name,
                                            memory_usage=200000000 + index * 10000000, cpu_usage=int(uptime * 5e7) + index))
        await stream.send_message(extra_api.StatsResponse(messages=[extra_api.Stats(stats=stats)]))

    async def Netstat(self, stream):
        request = await stream.recv_message()
        if request.filter not in (extra_api.NETSTAT_ALL, extra_api.NETSTAT_CONNECTED, extra_api.NETSTAT_LISTENING):
            raise GRPCError(Status.INVALID_ARGUMENT, "invalid filter: %d" % request.filter)
        wanted = {name for name in ("tcp", "tcp6", "udp", "udp6") if getattr(request.l4proto, name)}
        records = []
        if request.netns.hostnetwork or not (request.netns.netns or request.netns.allnetns):
            for protocol, local, local_port, remote, remote_port, state, service_id in _netstat_records(self.node):
                listening = remote_port == 0
                if protocol not in wanted or (request.filter == extra_api.NETSTAT_LISTENING and not listening) or (
                        request.filter == extra_api.NETSTAT_CONNECTED and listening):
                    continue
                record = extra_api.ConnectRecord(l4proto=protocol, localip=local, localport=local_port, remoteip=remote,
                                                 remoteport=remote_port, state=state, inode=10000 + local_port)
                record.process.CopyFrom(extra_api.ConnectRecordProcess(pid=service_pid(service_id), name=service_id)
                                        if request.feature.pid else extra_api.ConnectRecordProcess())
                records.append(record)
        await stream.send_message(extra_api.NetstatResponse(messages=[extra_api.Netstat(connectrecord=records)]))

    def monitoring_handlers(self):
        return {
            "/machine.MachineService/Stats": Handler(self.Stats, Cardinality.UNARY_UNARY, extra_api.StatsRequest,
                                                     extra_api.StatsResponse),
            "/machine.MachineService/Netstat": Handler(self.Netstat, Cardinality.UNARY_UNARY, extra_api.NetstatRequest,
                                                       extra_api.NetstatResponse),
        }
