# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd helpers shared by the bootstrap and etcd member modules.

Member lookup, quorum arithmetic, leader detection and snapshot files, on top
of the Talos etcd RPCs (EtcdMemberList, EtcdStatus, EtcdSnapshot).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import os
import re
import tempfile
from urllib.parse import urlparse

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

MEMBER_LIST = "machine.MachineService/EtcdMemberList"
STATUS = "machine.MachineService/EtcdStatus"
SNAPSHOT = "machine.MachineService/EtcdSnapshot"

_MEMBER_ID = re.compile(r"^[0-9a-fA-F]{1,16}$")


def format_member_id(member_id):
    """etcd member IDs as talosctl prints them: 16 lower-case hex digits."""
    return "%016x" % member_id


def parse_member_id(text):
    """The integer ID for a hex member ID such as ``"8e9e05c52164694d"``, or None when ``text`` is not one."""
    text = str(text).strip()
    if text.lower().startswith("0x"):
        text = text[2:]
    if not _MEMBER_ID.match(text):
        return None
    return int(text, 16)


def member_to_dict(member):
    """An ``EtcdMember`` message as the modules return it."""
    return {
        "id": format_member_id(member.id),
        "hostname": member.hostname,
        "peer_urls": list(member.peer_urls),
        "client_urls": list(member.client_urls),
        "is_learner": member.is_learner,
    }


def list_members(client, node):
    """The cluster's members as seen by ``node`` (EtcdMemberList with the cluster view)."""
    items = client.call(MEMBER_LIST, machine_pb2.EtcdMemberListRequest(query_local=False), node=node)
    return [member_to_dict(member) for item in items for member in item.members]


def find_member(members, ref):
    """The member named by ``ref`` (hostname first, else hex member ID), or None."""
    for member in members:
        if member["hostname"] == ref:
            return member
    member_id = parse_member_id(ref)
    if member_id is None:
        return None
    for member in members:
        if int(member["id"], 16) == member_id:
            return member
    return None


def member_address(member):
    """The address Talos can target for ``member``: the host of its client (else peer) URL, or None.

    Talos registers each control plane's node IP in its etcd URLs, and that
    address is what the ``node`` metadata of a call accepts.
    """
    for url in member["client_urls"] + member["peer_urls"]:
        host = urlparse(url).hostname
        if host:
            return host
    return None


def status_to_dict(status):
    """An ``EtcdMemberStatus`` message as the modules return it."""
    return {
        "member_id": format_member_id(status.member_id),
        "leader": format_member_id(status.leader) if status.leader else None,
        "is_learner": status.is_learner,
        "db_size": status.db_size,
        "db_size_in_use": status.db_size_in_use,
        "raft_term": status.raft_term,
        "raft_index": status.raft_index,
        "protocol_version": status.protocol_version,
        "storage_version": status.storage_version,
        "errors": list(status.errors),
    }


def member_status(client, node):
    """EtcdStatus of the local member of ``node`` as a dict."""
    items = client.call(STATUS, node=node)
    return status_to_dict(items[0].member_status)


def member_statuses(client, members, deadline=None):
    """EtcdStatus of every member, asked of each member's own node concurrently.

    Returns ``{member id: status dict}``; a member whose node cannot be reached
    or answers with an error maps to the TalosError instead. ``deadline``
    bounds the probe of a node that does not answer (default: the client's
    timeout).
    """
    addresses = {}
    for member in members:
        address = member_address(member)
        if address:
            addresses[member["id"]] = address
    answers = client.call_many(STATUS, nodes=sorted(set(addresses.values())), deadline=deadline) if addresses else {}
    statuses = {}
    for member in members:
        address = addresses.get(member["id"])
        if address is None:
            statuses[member["id"]] = TalosError("etcd member %s advertises no client or peer URL to reach it." % member["hostname"])
            continue
        answer = answers.get(address)
        if isinstance(answer, TalosError):
            statuses[member["id"]] = answer
        else:
            statuses[member["id"]] = status_to_dict(answer[0].member_status)
    return statuses


def is_healthy(status):
    """True for a status dict that the member's node returned without etcd errors."""
    return isinstance(status, dict) and not status["errors"]


def leader_id(statuses):
    """The leader's member ID as most healthy members report it, or None when none reports one."""
    votes = {}
    for status in statuses.values():
        if is_healthy(status) and status["leader"]:
            votes[status["leader"]] = votes.get(status["leader"], 0) + 1
    if not votes:
        return None
    return max(sorted(votes), key=lambda leader: votes[leader])


def quorum(voters):
    """Votes etcd needs to make progress with ``voters`` voting members."""
    return voters // 2 + 1


def removal_check(members, statuses, member):
    """Whether removing ``member`` keeps quorum.

    Learners do not vote, so removing one never affects quorum. Removing a
    voting member from a cluster of N voting members leaves N-1, whose quorum
    is (N-1)//2+1; the removal is safe only when at least that many of the
    remaining voting members are healthy.
    """
    voters_after = [m for m in members if not m["is_learner"] and m["id"] != member["id"]]
    return _quorum_check(voters_after, statuses, member)


def outage_check(members, statuses, member):
    """Whether etcd keeps quorum while ``member``'s node is down (a reboot, a shutdown, a wipe without leaving).

    The member stays in the cluster, so quorum stays (N//2+1 of the N voting
    members), but only the other members can provide it: at least that many
    of them must be healthy. A one-member cluster never keeps quorum.
    """
    voters = [m for m in members if not m["is_learner"]]
    return _quorum_check(voters, statuses, member)


def _quorum_check(voters_after, statuses, member):
    """The quorum of ``voters_after`` against its healthy members other than ``member``."""
    healthy_after = [m for m in voters_after if m["id"] != member["id"] and is_healthy(statuses.get(m["id"]))]
    needed = quorum(len(voters_after))
    return {
        "safe": member["is_learner"] or len(healthy_after) >= needed,
        "voters_after": len(voters_after),
        "quorum_after": needed,
        "healthy_after": len(healthy_after),
        "unhealthy": sorted(m["hostname"] or m["id"] for m in voters_after
                            if m["id"] != member["id"] and m not in healthy_after),
    }


def own_member_name(client, node):
    """The etcd member name of ``node``: Talos names members after the node's hostname."""
    return client.call("machine.MachineService/Hostname", node=node)[0].hostname


def save_snapshot(client, node, path, check_mode=False):
    """Stream an etcd snapshot of ``node`` to ``path``.

    The bytes go to a temporary file next to ``path`` (mode 0600) that replaces
    ``path`` only once the stream is complete, so an interrupted transfer never
    leaves a truncated snapshot behind. When ``path`` already holds the same
    bytes it is left alone. In check mode the snapshot is read and compared but
    not kept. Returns ``{path, size, sha256, changed}``.
    """
    path = os.path.abspath(os.path.expanduser(path))
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise TalosError("Cannot save the etcd snapshot to %s: directory %s does not exist." % (path, directory))
    try:
        return _save_snapshot(client, node, path, directory, check_mode)
    except (IOError, OSError) as err:
        raise TalosError("Cannot save the etcd snapshot to %s: %s." % (path, err.strerror or err))


def _save_snapshot(client, node, path, directory, check_mode):
    digest = hashlib.sha256()
    progress = {"size": 0}
    fd, temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as temp:
            def write_chunk(message):
                temp.write(message.bytes)
                digest.update(message.bytes)
                progress["size"] += len(message.bytes)
                return False

            client.stream(SNAPSHOT, machine_pb2.EtcdSnapshotRequest(), node=node, on_message=write_chunk)
            temp.flush()
            os.fsync(temp.fileno())
        sha256 = digest.hexdigest()
        changed = file_sha256(path) != sha256
        if changed and not check_mode:
            os.chmod(temp_path, 0o600)
            os.rename(temp_path, path)
        elif not changed and os.stat(path).st_mode & 0o777 != 0o600:
            changed = True
            if not check_mode:
                os.chmod(path, 0o600)
    finally:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
    return {"path": path, "size": progress["size"], "sha256": sha256, "changed": changed}


def file_sha256(path):
    """The sha256 of the file at ``path``, or None when there is no such file."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()
