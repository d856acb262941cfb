# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's etcd: membership, leader, alarms and a keyspace to snapshot.

One instance is shared by every control plane of an emulated cluster; each
control plane's etcd service joins it once the cluster is bootstrapped.
A snapshot is the keyspace followed by its SHA-256, the layout of an etcd
snapshot file, so that recovery can check its integrity as etcd does.
"""

import hashlib
import os
import time


class EtcdMember:
    def __init__(self, member_id, node):
        self.id = member_id
        self.node = node

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

    def leader(self):
        for member in self.members:
            if member.id == self.leader_id:
                return member
        return None

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
