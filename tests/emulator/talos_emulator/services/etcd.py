# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd RPCs of machine.MachineService (Talos ``v1alpha1_server.go``, ``internal/pkg/etcd``).

Every one checks first that the node is a control plane. The membership is
the cluster's (``membership.EtcdCluster``); "local" RPCs need this node's own
etcd member to be running.
"""

import asyncio

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from ..context import current_call
from ..membership import ERR_MEMBER_NOT_FOUND
from .common import require_control_plane, send_chunks

_ETCD_VERSION = "3.6.5"
# How long one defragmentation holds its member.
DEFRAGMENT_SECONDS = 0.05


class EtcdRPCs:
    def _local_member(self):
        node = self.node
        member = node.cluster.etcd.member_of(node)
        etcd = node.services.get("etcd")
        if member is None or etcd is None or not etcd.running:
            raise GRPCError(Status.UNKNOWN, "etcd is not running on this node")
        return member

    async def _local_call(self, stream, api):
        """The start of every RPC served by this node's own etcd member: the member."""
        await stream.recv_message()
        require_control_plane(self.node, api)
        return self._local_member()

    async def EtcdMemberList(self, stream):
        request = await stream.recv_message()
        node = self.node
        require_control_plane(node, "member list")
        etcd = node.cluster.etcd
        if request.query_local:
            self._local_member()
        elif etcd.leader() is None:
            raise GRPCError(Status.UNKNOWN, "etcd is not running on this node")
        # A member whose node is down keeps its name: etcd names a member once it has started.
        members = [
            machine_pb2.EtcdMember(
                id=member.id, hostname=member.name, peer_urls=member.peer_urls, client_urls=member.client_urls,
                is_learner=False,
            )
            for member in etcd.members
        ]
        reply = machine_pb2.EtcdMembers(legacy_members=[member.hostname for member in members], members=members)
        await stream.send_message(machine_pb2.EtcdMemberListResponse(messages=[reply]))

    async def EtcdRemoveMemberByID(self, stream):
        """Talos asks etcd through any control plane (NewClientFromControlPlaneIPs) and requires a leader;
        etcd's strict reconfiguration check may refuse (membership.removal_refusal)."""
        request = await stream.recv_message()
        node = self.node
        current_call().audit.update(member_id=request.member_id)
        require_control_plane(node, "etcd remove member")
        etcd = node.cluster.etcd
        failure = "failed to remove member %d: %%s" % request.member_id
        if etcd.leader() is None:
            raise GRPCError(Status.UNKNOWN, "failed to remove member: " + failure % "etcdserver: no leader")
        member = next((member for member in etcd.members if member.id == request.member_id), None)
        if member is None:
            raise GRPCError(Status.NOT_FOUND, failure % ERR_MEMBER_NOT_FOUND)
        refusal = etcd.removal_refusal(member)
        if refusal is not None:
            raise GRPCError(Status.UNKNOWN, "failed to remove member: " + failure % refusal)
        node.cluster.remove_etcd_member(member)
        await stream.send_message(machine_pb2.EtcdRemoveMemberByIDResponse(messages=[machine_pb2.EtcdRemoveMemberByID()]))

    async def EtcdLeaveCluster(self, stream):
        await stream.recv_message()
        node = self.node
        require_control_plane(node, "etcd leave")
        etcd = node.cluster.etcd
        member = etcd.member_of(node)
        if member is not None and len(etcd.members) == 1:
            # etcd's own reconfiguration check refuses to remove the last voting member.
            raise GRPCError(Status.UNKNOWN, "failed to leave cluster: etcdserver: re-configuration failed due to not enough started members")
        node.leave_etcd()
        await stream.send_message(machine_pb2.EtcdLeaveClusterResponse(messages=[machine_pb2.EtcdLeaveCluster()]))

    async def EtcdForfeitLeadership(self, stream):
        member = await self._local_call(stream, "etcd forfeit leadership")
        node = self.node
        etcd = node.cluster.etcd
        if len(etcd.members) == 1:
            raise GRPCError(Status.UNKNOWN, "cannot forfeit leadership, only one member")
        new_leader = ""
        if etcd.leader_id == member.id:
            for candidate in etcd.members:
                if candidate is not member and candidate.node.etcd_running:
                    etcd.leader_id = candidate.id
                    new_leader = candidate.name
                    break
        current_call().audit.update(new_leader=new_leader)
        reply = machine_pb2.EtcdForfeitLeadership(member=new_leader)
        await stream.send_message(machine_pb2.EtcdForfeitLeadershipResponse(messages=[reply]))

    async def EtcdStatus(self, stream):
        member = await self._local_call(stream, "etcd status")
        node = self.node
        etcd = node.cluster.etcd
        leader = etcd.leader()
        # etcd lists its alarms as AlarmMember text; this emulator keeps each alarm on its own member's status.
        errors = ["memberID:%d alarm:%s" % (member_id, machine_pb2.EtcdMemberAlarm.AlarmType.Name(alarm))
                  for member_id, alarm in etcd.alarms if member_id == member.id]
        if leader is None:
            errors.insert(0, "etcdserver: no leader")
        status = machine_pb2.EtcdMemberStatus(
            protocol_version=_ETCD_VERSION, db_size=etcd.db_size(member), db_size_in_use=etcd.db_size_in_use(),
            leader=leader.id if leader else 0, raft_index=etcd.revision + 10, raft_term=2,
            raft_applied_index=etcd.revision + 10, errors=errors, is_learner=False, member_id=member.id,
            storage_version="3.6.0",
        )
        await stream.send_message(machine_pb2.EtcdStatusResponse(messages=[machine_pb2.EtcdStatus(member_status=status)]))

    async def EtcdSnapshot(self, stream):
        await self._local_call(stream, "etcd snapshot")
        node = self.node
        await send_chunks(stream, node.cluster.etcd.snapshot())

    async def EtcdRecover(self, stream):
        node = self.node
        chunks = [message.bytes async for message in stream]
        require_control_plane(node, "etcd recover")
        if not node.installed:
            raise GRPCError(Status.FAILED_PRECONDITION, "etcd service is not ready for recovery yet")
        node.etcd_snapshot = b"".join(chunks)
        current_call().audit.update(size=len(node.etcd_snapshot))
        await stream.send_message(machine_pb2.EtcdRecoverResponse(messages=[machine_pb2.EtcdRecover()]))

    async def EtcdAlarmList(self, stream):
        await self._local_call(stream, "etcd alarm list")
        node = self.node
        alarms = [machine_pb2.EtcdMemberAlarm(member_id=member_id, alarm=alarm) for member_id, alarm in node.cluster.etcd.alarms]
        await stream.send_message(machine_pb2.EtcdAlarmListResponse(messages=[machine_pb2.EtcdAlarm(member_alarms=alarms)]))

    async def EtcdAlarmDisarm(self, stream):
        await self._local_call(stream, "etcd alarm disarm")
        node = self.node
        etcd = node.cluster.etcd
        alarms = [machine_pb2.EtcdMemberAlarm(member_id=member_id, alarm=alarm) for member_id, alarm in etcd.alarms]
        etcd.alarms = []
        reply = machine_pb2.EtcdAlarmDisarm(member_alarms=alarms)
        await stream.send_message(machine_pb2.EtcdAlarmDisarmResponse(messages=[reply]))

    async def EtcdDefragment(self, stream):
        """Rewrites the member's database without its free pages; the member blocks meanwhile, as etcd's does."""
        member = await self._local_call(stream, "etcd defragment")
        etcd = self.node.cluster.etcd
        etcd.defragmenting += 1
        etcd.most_concurrent_defragments = max(etcd.most_concurrent_defragments, etcd.defragmenting)
        try:
            await asyncio.sleep(DEFRAGMENT_SECONDS)
            member.free_bytes = 0
        finally:
            etcd.defragmenting -= 1
        await stream.send_message(machine_pb2.EtcdDefragmentResponse(messages=[machine_pb2.EtcdDefragment()]))
