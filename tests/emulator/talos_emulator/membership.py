# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's etcd: membership, leader, alarms, database sizes and a keyspace to recover.

One instance is shared by every control plane of an emulated cluster; each
control plane's etcd service joins it once the cluster is bootstrapped.
A member stays in the cluster while its node is down (powered off, rebooting)
until it leaves or is removed, as in etcd; the leader's node going down hands
leadership to a running member while the running ones keep quorum.
The model holds no etcd database, so it makes no snapshot: EtcdSnapshot fails
as a node whose etcd cannot stream one does, saying how to start real
members. Recovery takes what EtcdRecover uploaded and checks the SHA-256
etcd appends to a snapshot, as etcd does.

The asynchronous methods are what machined asks of etcd for the etcd RPCs
(``services/etcd.py``); ``real_etcd.RealEtcdCluster`` answers the same ones from
real etcd members.
"""

import asyncio
import hashlib
import os
import time

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

# Free pages a member's database file holds after the writes of a fresh cluster:
# what a defragmentation gives back (EtcdStatus db_size - db_size_in_use).
INITIAL_FREE_BYTES = 20480

# etcd's own errors (go.etcd.io/etcd/server/etcdserver/errors, api/v3rpc/rpctypes).
ERR_MEMBER_NOT_FOUND = "etcdserver: member not found"
ERR_NOT_ENOUGH_STARTED = "etcdserver: re-configuration failed due to not enough started members"
ERR_UNHEALTHY = "etcdserver: unhealthy cluster"
ERR_NO_LEADER = "etcdserver: no leader"
_ETCD_VERSION = "3.6.5"
# How long one defragmentation holds its member.
DEFRAGMENT_SECONDS = 0.05
# Why EtcdSnapshot fails on the model, after machined's "failed reading etcd snapshot: " (its code: Unknown).
NO_SNAPSHOT = ("the emulator's etcd model cannot make a snapshot; start real etcd members to take one: make demo with Go "
               "installed, or tests/talos-emulator up --etcd real")


class EtcdMember:
    def __init__(self, member_id, node):
        self.id = member_id
        self.node = node
        # Bytes of the member's database file that a defragmentation would give back.
        self.free_bytes = INITIAL_FREE_BYTES

    @property
    def name(self):
        return self.node.hostname

    @property
    def peer_urls(self):
        return ["https://%s:2380" % self.node.address]

    @property
    def client_urls(self):
        return ["https://%s:2379" % self.node.address]


class SnapshotError(Exception):
    pass


class EtcdCluster:
    def __init__(self):
        self.members = []
        self.leader_id = None
        self.alarms = []
        self.revision = 0
        self.keyspace = b""
        # Defragmentations running now, and the most that ever ran at once (tests check one at a time).
        self.defragmenting = 0
        self.most_concurrent_defragments = 0

    @property
    def bootstrapped(self):
        return bool(self.members)

    def serves(self, node):
        """Whether ``node``'s etcd answers its clients (the model: whenever its service runs)."""
        return node.etcd_running

    def member_of(self, node):
        for member in self.members:
            if member.node is node:
                return member
        return None

    def bootstrap(self, node, snapshot=None, skip_hash_check=False):
        """Start a new single-member cluster on ``node``, from ``snapshot`` bytes when given (SnapshotError when its
        integrity check fails)."""
        keyspace = self.keyspace_from_snapshot(snapshot, skip_hash_check) if snapshot is not None else self._fresh_keyspace(node)
        self.members = []
        self.alarms = []
        self.keyspace = keyspace
        self.revision = 1
        member = self._add_member(node)
        self.leader_id = member.id
        node.etcd_data = True
        node.etcd_ready()

    def bootstrap_together(self, nodes):
        """The fixture shortcut of a bootstrapped cluster: ``nodes`` form it, the first bootstrapping it."""
        self.bootstrap(nodes[0])
        for node in nodes[1:]:
            node.join_etcd()

    def join(self, node):
        """The node's etcd starts as a member (a new one unless it is one): at once here."""
        self._add_member(node)
        node.etcd_ready()

    def _add_member(self, node):
        member = self.member_of(node)
        if member is None:
            member = EtcdMember(int.from_bytes(os.urandom(8), "big") >> 1, node)
            self.members.append(member)
            if self.leader_id is None:
                self.leader_id = member.id
        return member

    async def stop_member(self, node):
        """The node's machine stops: here a member is running while its node is (``running_members``)."""

    def remove(self, member):
        self.members.remove(member)
        if self.leader_id == member.id:
            self.leader_id = self.members[0].id if self.members else None

    def running_members(self):
        return [member for member in self.members if member.node.etcd_running]

    def has_quorum(self):
        """Whether the members whose machine is on are a quorum (one whose etcd is still joining counts, as a learner
        would not stand in the way)."""
        return len([member for member in self.members if member.node.powered]) >= len(self.members) // 2 + 1

    def leader(self):
        """The leader while the members keep quorum (None otherwise): the current one while its node runs etcd, else
        a running member elected in its place."""
        running = self.running_members()
        if not running or not self.has_quorum():
            return None
        for member in running:
            if member.id == self.leader_id:
                return member
        self.leader_id = running[0].id
        return running[0]

    def removal_refusal(self, member):
        """Why etcd's strict reconfiguration check refuses to remove ``member`` (etcdserver mayRemoveMember), or None.

        The members left must keep enough started members (every member here
        has started once) for their quorum; a member that is down may then
        always go, a running one only when the other running members keep the
        quorum of the members left.
        """
        remaining = [other for other in self.members if other is not member]
        if len(remaining) < len(remaining) // 2 + 1:
            return ERR_NOT_ENOUGH_STARTED
        running = [other for other in remaining if other.node.etcd_running]
        if member.node.etcd_running and len(running) < len(remaining) // 2 + 1:
            return ERR_UNHEALTHY
        return None

    def db_size_in_use(self):
        return len(self.keyspace)

    def db_size(self, member):
        return self.db_size_in_use() + member.free_bytes

    @staticmethod
    def keyspace_from_snapshot(snapshot, skip_hash_check):
        if skip_hash_check:
            return snapshot
        keyspace, digest = snapshot[:-32], snapshot[-32:]
        if len(snapshot) < 32 or hashlib.sha256(keyspace).digest() != digest:
            raise SnapshotError("snapshot file integrity check failed: sha256 mismatch")
        return keyspace

    @staticmethod
    def _fresh_keyspace(node):
        # What makes one bootstrap's keyspace another's: a recovery test tells them apart.
        header = ("emulated etcd keyspace bootstrapped on %s at %f\n" % (node.hostname, time.time())).encode()
        return header + os.urandom(3000)

    # What machined asks of etcd, per RPC (on the loop; errors as Talos answers them).

    async def member_list(self, node, query_local):
        if not query_local and self.leader() is None:
            raise GRPCError(Status.UNKNOWN, "etcd is not running on this node")
        # A member whose node is down keeps its name: etcd names a member once it has started.
        return [machine_pb2.EtcdMember(id=member.id, hostname=member.name, peer_urls=member.peer_urls,
                                       client_urls=member.client_urls, is_learner=False)
                for member in self.members]

    async def remove_member(self, node, member_id):
        """Talos asks etcd through any control plane (NewClientFromControlPlaneIPs) and requires a leader;
        etcd's strict reconfiguration check may refuse (``removal_refusal``)."""
        failure = "failed to remove member %d: %%s" % member_id
        if self.leader() is None:
            raise GRPCError(Status.UNKNOWN, "failed to remove member: " + failure % ERR_NO_LEADER)
        member = next((member for member in self.members if member.id == member_id), None)
        if member is None:
            raise GRPCError(Status.NOT_FOUND, failure % ERR_MEMBER_NOT_FOUND)
        refusal = self.removal_refusal(member)
        if refusal is not None:
            raise GRPCError(Status.UNKNOWN, "failed to remove member: " + failure % refusal)
        node.cluster.remove_etcd_member(member)

    async def leave(self, node):
        """This node's member leaves, its etcd stops and its data directory is emptied (EtcdLeaveCluster, graceful
        reset)."""
        if self.member_of(node) is not None and len(self.members) == 1:
            # etcd's own reconfiguration check refuses to remove the last voting member.
            raise GRPCError(Status.UNKNOWN, "failed to leave cluster: " + ERR_NOT_ENOUGH_STARTED)
        node.leave_etcd()

    async def forfeit_leadership(self, node, member):
        """The member that takes over leadership from ``member``, or "" when ``member`` is not the leader."""
        if len(self.members) == 1:
            raise GRPCError(Status.UNKNOWN, "cannot forfeit leadership, only one member")
        if self.leader_id == member.id:
            for candidate in self.members:
                if candidate is not member and candidate.node.etcd_running:
                    self.leader_id = candidate.id
                    return candidate.name
        return ""

    async def status(self, node, member):
        leader = self.leader()
        # etcd lists every alarm of the cluster in every member's status, as AlarmMember's protobuf text, whose
        # spacing Go's encoder varies on purpose from one build to another (one space between fields or two; here two).
        errors = ["memberID:%d  alarm:%s" % (member_id, machine_pb2.EtcdMemberAlarm.AlarmType.Name(alarm))
                  for member_id, alarm in self.alarms]
        if leader is None:
            errors.insert(0, ERR_NO_LEADER)
        return machine_pb2.EtcdMemberStatus(
            protocol_version=_ETCD_VERSION, db_size=self.db_size(member), db_size_in_use=self.db_size_in_use(),
            leader=leader.id if leader else 0, raft_index=self.revision + 10, raft_term=2,
            raft_applied_index=self.revision + 10, errors=errors, is_learner=False, member_id=member.id,
            storage_version="3.6.0",
        )

    async def make_leader(self, node):
        """Hand leadership to the node's member."""
        self.leader_id = self.member_of(node).id

    def fragment(self, node, free_bytes):
        """Give the node's database ``free_bytes`` of free pages, until a defragmentation."""
        self.member_of(node).free_bytes = free_bytes

    async def leader_node(self):
        """The node whose member leads, or None."""
        leader = self.leader()
        return leader.node if leader is not None else None

    async def snapshot_bytes(self, node):
        """machined's EtcdSnapshot fails with its etcd client's error, a plain error: gRPC's Unknown."""
        raise GRPCError(Status.UNKNOWN, "failed reading etcd snapshot: " + NO_SNAPSHOT)

    async def alarm_list(self, node):
        return [machine_pb2.EtcdMemberAlarm(member_id=member_id, alarm=alarm) for member_id, alarm in self.alarms]

    async def alarm_disarm(self, node):
        """Every alarm is cleared; the ones cleared are returned."""
        alarms = await self.alarm_list(node)
        self.alarms = []
        return alarms

    async def raise_alarm(self, node, alarm):
        self.alarms.append((self.member_of(node).id, machine_pb2.EtcdMemberAlarm.AlarmType.Value(alarm)))

    async def defragment(self, node, member):
        """Rewrites the member's database without its free pages; the member blocks meanwhile, as etcd's does."""
        self.defragmenting += 1
        self.most_concurrent_defragments = max(self.most_concurrent_defragments, self.defragmenting)
        try:
            await asyncio.sleep(DEFRAGMENT_SECONDS)
            member.free_bytes = 0
        finally:
            self.defragmenting -= 1
