# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's etcd: membership, leader, alarms, database sizes and a keyspace to snapshot.

One instance is shared by every control plane of an emulated cluster; each
control plane's etcd service joins it once the cluster is bootstrapped.
A member stays in the cluster while its node is down (powered off, rebooting)
until it leaves or is removed, as in etcd; the leader's node going down hands
leadership to a running member while the running ones keep quorum.
A snapshot is the keyspace followed by its SHA-256, the layout of an etcd
snapshot file, so that recovery can check its integrity as etcd does.
"""

import hashlib
import os
import time

# Free pages a member's database file holds after the writes of a fresh cluster:
# what a defragmentation gives back (EtcdStatus db_size - db_size_in_use).
INITIAL_FREE_BYTES = 20480

# etcd's own errors (go.etcd.io/etcd/server/etcdserver/errors, api/v3rpc/rpctypes).
ERR_MEMBER_NOT_FOUND = "etcdserver: member not found"
ERR_NOT_ENOUGH_STARTED = "etcdserver: re-configuration failed due to not enough started members"
ERR_UNHEALTHY = "etcdserver: unhealthy cluster"


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

    def member_of(self, node):
        for member in self.members:
            if member.node is node:
                return member
        return None

    def bootstrap(self, node, keyspace=None):
        """Start a new single-member cluster on ``node``, optionally from recovered data."""
        self.members = []
        self.alarms = []
        self.keyspace = keyspace if keyspace is not None else self._fresh_keyspace(node)
        self.revision = 1
        member = self.join(node)
        self.leader_id = member.id
        return member

    def join(self, node):
        member = self.member_of(node)
        if member is None:
            member = EtcdMember(int.from_bytes(os.urandom(8), "big") >> 1, node)
            self.members.append(member)
            if self.leader_id is None:
                self.leader_id = member.id
        return member

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

    def snapshot(self):
        return self.keyspace + hashlib.sha256(self.keyspace).digest()

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
        # A few KiB so that a snapshot spans several 1 KiB frames.
        header = ("emulated etcd keyspace bootstrapped on %s at %f\n" % (node.hostname, time.time())).encode()
        return header + os.urandom(3000)
