# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd RPCs of machine.MachineService (Talos ``v1alpha1_server.go``, ``internal/pkg/etcd``).

Every one checks first that the node is a control plane. What etcd answers
comes from the cluster's etcd (``node.cluster.etcd``): the model
(``membership.EtcdCluster``) or real members (``real_etcd.RealEtcdCluster``);
"local" RPCs need this node's own etcd member to be running.
"""

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from ..context import current_call
from .common import require_control_plane, send_chunks


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
        if request.query_local:
            self._local_member()
        members = await node.cluster.etcd.member_list(node, request.query_local)
        reply = machine_pb2.EtcdMembers(legacy_members=[member.hostname for member in members], members=members)
        await stream.send_message(machine_pb2.EtcdMemberListResponse(messages=[reply]))

    async def EtcdRemoveMemberByID(self, stream):
        request = await stream.recv_message()
        node = self.node
        current_call().audit.update(member_id=request.member_id)
        require_control_plane(node, "etcd remove member")
        await node.cluster.etcd.remove_member(node, request.member_id)
        await stream.send_message(machine_pb2.EtcdRemoveMemberByIDResponse(messages=[machine_pb2.EtcdRemoveMemberByID()]))

    async def EtcdLeaveCluster(self, stream):
        await stream.recv_message()
        node = self.node
        require_control_plane(node, "etcd leave")
        await node.cluster.etcd.leave(node)
        await stream.send_message(machine_pb2.EtcdLeaveClusterResponse(messages=[machine_pb2.EtcdLeaveCluster()]))

    async def EtcdForfeitLeadership(self, stream):
        member = await self._local_call(stream, "etcd forfeit leadership")
        new_leader = await self.node.cluster.etcd.forfeit_leadership(self.node, member)
        current_call().audit.update(new_leader=new_leader)
        reply = machine_pb2.EtcdForfeitLeadership(member=new_leader)
        await stream.send_message(machine_pb2.EtcdForfeitLeadershipResponse(messages=[reply]))

    async def EtcdStatus(self, stream):
        member = await self._local_call(stream, "etcd status")
        status = await self.node.cluster.etcd.status(self.node, member)
        await stream.send_message(machine_pb2.EtcdStatusResponse(messages=[machine_pb2.EtcdStatus(member_status=status)]))

    async def EtcdSnapshot(self, stream):
        await self._local_call(stream, "etcd snapshot")
        await send_chunks(stream, await self.node.cluster.etcd.snapshot_bytes(self.node))

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
        alarms = await self.node.cluster.etcd.alarm_list(self.node)
        await stream.send_message(machine_pb2.EtcdAlarmListResponse(messages=[machine_pb2.EtcdAlarm(member_alarms=alarms)]))

    async def EtcdAlarmDisarm(self, stream):
        await self._local_call(stream, "etcd alarm disarm")
        alarms = await self.node.cluster.etcd.alarm_disarm(self.node)
        reply = machine_pb2.EtcdAlarmDisarm(member_alarms=alarms)
        await stream.send_message(machine_pb2.EtcdAlarmDisarmResponse(messages=[reply]))

    async def EtcdDefragment(self, stream):
        member = await self._local_call(stream, "etcd defragment")
        await self.node.cluster.etcd.defragment(self.node, member)
        await stream.send_message(machine_pb2.EtcdDefragmentResponse(messages=[machine_pb2.EtcdDefragment()]))
