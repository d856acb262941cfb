# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd snapshots on the controller: taking one from a healthy member, checking one as etcd does, backup directories.

A snapshot from EtcdSnapshot is etcd's bbolt database followed by the sha256
of it that the etcd server appends (its maintenance Snapshot call); etcd's
restore checks that hash whenever the size is 32 past a multiple of 512, as
``check`` does here. A copy of a data directory's ``member/snap/db`` has no
hash: it is accepted only with ``skip_hash_check`` (Talos's
``recover_skip_hash_check``). ``check`` then reads the database as etcdutl's
``snapshot status`` does - every bucket, every key - and reports its revision
(the newest of the ``key`` bucket), how many keys live at it, raft index and term (``meta``'s
consistent index and term) and storage version, without loading it whole.

Backups in a directory are named ``<prefix>-<UTC time>-r<revision>.snapshot``,
so that their name says when and up to which revision they hold the cluster;
``prune`` applies the retention, ``newest_backup`` finds the newest that
checks out.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import hashlib
import os
import re
import struct

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import status as etcd_status
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.common.durations import parse_duration
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError, short_label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import PrivateFile, check_destination, directory_problem, ensure_mode

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

HASH_SIZE = 32
_READ_BLOCK = 1024 * 1024

# The bbolt file format (go.etcd.io/bbolt): a 16-byte header starts every page; two meta pages come first.
_PAGE_HEADER = struct.Struct("<QHHI")  # id, flags, count, overflow
_BRANCH_ELEMENT = struct.Struct("<IIQ")  # pos (from the element), key size, child page
_LEAF_ELEMENT = struct.Struct("<IIII")  # flags, pos (from the element), key size, value size
_META = struct.Struct("<IIIIQQQQQ")  # magic, version, page size, flags, root page, root sequence, freelist, pages, txid
_CHECKSUM = struct.Struct("<Q")
# The first page's header, meta and checksum: what tells a bbolt database from anything else.
HEAD_SIZE = _PAGE_HEADER.size + _META.size + _CHECKSUM.size
_BUCKET_HEADER = struct.Struct("<QQ")  # root page (0: the bucket's page follows inline), sequence
_BRANCH_PAGE, _LEAF_PAGE, _META_PAGE = 0x01, 0x02, 0x04
_BUCKET_LEAF = 0x01
_MAGIC = 0xED0CDAED
_FNV64_OFFSET, _FNV64_PRIME = 0xCBF29CE484222325, 0x100000001B3

_STAMP = "%Y%m%dT%H%M%SZ"
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SnapshotInvalid(TalosConfigError):
    """A snapshot file that etcd would not restore, or that is not a snapshot at all."""


class _Corrupt(Exception):
    pass


def _fnv64a(data):
    value = _FNV64_OFFSET
    for byte in bytearray(data):
        value = ((value ^ byte) * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return value


def _meta_fields(raw):
    """The fields of a meta page's body ``raw`` (the meta and its checksum), or None unless it is a valid one."""
    if len(raw) < _META.size + _CHECKSUM.size:
        return None
    fields = _META.unpack_from(raw)
    (checksum,) = _CHECKSUM.unpack_from(raw, _META.size)
    if fields[0] != _MAGIC or fields[1] != 2 or checksum != _fnv64a(raw[:_META.size]):
        return None
    return fields


def begins_as_database(head):
    """Whether ``head``, the first HEAD_SIZE bytes of a snapshot or more, begin as a bbolt database: a valid meta page."""
    return _meta_fields(head[_PAGE_HEADER.size:HEAD_SIZE]) is not None


class _BoltFile:
    """The pages of a bbolt database in the first ``size`` bytes of an open file, read as they are visited."""

    def __init__(self, handle, size):
        self._handle = handle
        self._size = size
        first = self._meta_at(0)
        if first is None:
            raise _Corrupt("its first page is not a bbolt meta page")
        self.page_size = first[2]
        second = self._meta_at(self.page_size)
        self.root = max((meta for meta in (first, second) if meta is not None), key=lambda meta: meta[8])[4]

    def _read(self, offset, length):
        if offset + length > self._size:
            raise _Corrupt("a page at byte %d lies past its end at byte %d" % (offset, self._size))
        self._handle.seek(offset)
        return self._handle.read(length)

    def _meta_at(self, offset):
        """A valid meta page's fields at ``offset``, or None (bbolt keeps two and uses the newer valid one)."""
        if offset + HEAD_SIZE > self._size:
            return None
        return _meta_fields(self._read(offset + _PAGE_HEADER.size, _META.size + _CHECKSUM.size))

    def _page(self, page_id):
        header = self._read(page_id * self.page_size, _PAGE_HEADER.size)
        stored_id, flags, count, overflow = _PAGE_HEADER.unpack(header)
        if stored_id != page_id:
            raise _Corrupt("page %d is labelled page %d" % (page_id, stored_id))
        return flags, count, self._read(page_id * self.page_size, (overflow + 1) * self.page_size)

    def items(self, root=None, inline=None):
        """``(key, value, is_bucket)`` of a bucket in key order: the root bucket by default, else the bucket whose
        root page is ``root`` or whose page is ``inline`` (bytes)."""
        if inline is not None:
            if len(inline) < _PAGE_HEADER.size:
                raise _Corrupt("an inline bucket is cut short")
            unused_id, flags, count, unused_overflow = _PAGE_HEADER.unpack_from(inline)
            data = inline
        else:
            flags, count, data = self._page(self.root if root is None else root)
        for index in range(count):
            element = _PAGE_HEADER.size + index * _LEAF_ELEMENT.size
            if flags & _BRANCH_PAGE:
                unused_position, unused_key_size, child = _BRANCH_ELEMENT.unpack_from(data, element)
                yield from self.items(root=child)
            elif flags & _LEAF_PAGE:
                element_flags, position, key_size, value_size = _LEAF_ELEMENT.unpack_from(data, element)
                start = element + position
                if start + key_size + value_size > len(data):
                    raise _Corrupt("an element runs past the end of its page")
                yield data[start:start + key_size], data[start + key_size:start + key_size + value_size], bool(element_flags & _BUCKET_LEAF)
            else:
                raise _Corrupt("a page of flags %#x is neither a branch nor a leaf" % flags)

    def bucket(self, value):
        """The items of the nested bucket whose header is ``value``."""
        if len(value) < _BUCKET_HEADER.size:
            raise _Corrupt("a bucket header is cut short")
        root, unused_sequence = _BUCKET_HEADER.unpack_from(value)
        if root == 0:
            return self.items(inline=value[_BUCKET_HEADER.size:])
        return self.items(root=root)


def _varint(data, offset):
    value = shift = 0
    while True:
        if offset >= len(data):
            raise _Corrupt("a key-value record is cut short")
        byte = data[offset]
        value |= (byte & 0x7F) << shift
        offset += 1
        shift += 7
        if not byte & 0x80:
            return value, offset


def _record_key(record):
    """The key of an etcd key-value record (mvccpb.KeyValue, protobuf): its field 1."""
    record = bytearray(record)
    offset = 0
    while offset < len(record):
        tag, offset = _varint(record, offset)
        wire_type = tag & 7
        if wire_type == 0:
            unused_value, offset = _varint(record, offset)
        elif wire_type == 2:
            length, offset = _varint(record, offset)
            if tag >> 3 == 1:
                return bytes(record[offset:offset + length])
            offset += length
        else:
            raise _Corrupt("a key-value record has a field of wire type %d" % wire_type)
    raise _Corrupt("a key-value record has no key")


def _read_database(handle, size):
    """What etcdutl's ``snapshot status`` reports of the database in the first ``size`` bytes."""
    database = _BoltFile(handle, size)
    found = {"revision": 0, "total_keys": 0, "raft_index": None, "raft_term": None, "storage_version": ""}
    buckets = set()
    live_keys = set()
    for name, header, is_bucket in database.items():
        if not is_bucket:
            raise _Corrupt("its top level holds a key that is not a bucket")
        buckets.add(name)
        for key, value, unused_is_bucket in database.bucket(header):
            if name == b"key" and len(key) >= 17:
                # The ``key`` bucket maps a revision (8 bytes big-endian main revision, "_", 8 bytes sub revision, and
                # "t" for a deletion) to the key's record then; the keys alive at the newest revision are etcdutl's
                # total.
                found["revision"] = struct.unpack(">Q", key[:8])[0]
                if len(key) == 18 and key[17:] == b"t":
                    live_keys.discard(_record_key(value))
                else:
                    live_keys.add(_record_key(value))
            elif name == b"meta" and key in (b"consistent_index", b"term") and len(value) == 8:
                found["raft_index" if key == b"consistent_index" else "raft_term"] = struct.unpack(">Q", value)[0]
            elif name == b"meta" and key == b"storageVersion":
                found["storage_version"] = value.decode("utf-8", "replace")
    if not {b"key", b"meta"} <= buckets:
        raise _Corrupt("it has no etcd key and meta buckets")
    found["total_keys"] = len(live_keys)
    return found


class _Rejected(Exception):
    """What is wrong with a snapshot, before it is said for a file or a stream: ``kind`` (corrupt, no hash, not a
    database, unreadable) and its ``detail``."""

    def __init__(self, kind, detail=""):
        super(_Rejected, self).__init__(kind)
        self.kind = kind
        self.detail = detail


def _file_rejection(rejected, path, label="The etcd snapshot"):
    """The SnapshotInvalid of a snapshot file on the controller (what a restore checks)."""
    what = "%s %s" % (label, path)
    if rejected.kind == "corrupt":
        return SnapshotInvalid("%s is corrupt: the sha256 etcd appended does not match its content (a changed or truncated "
                               "file); take a new snapshot or use another backup." % what)
    if rejected.kind == "no hash":
        return SnapshotInvalid("%s has no sha256 appended by etcd, so it is truncated or a copy of a data directory's "
                               "database; use a snapshot taken with EtcdSnapshot, or set skip_hash_check=true to restore a "
                               "database copy." % what)
    if rejected.kind == "not a database":
        return SnapshotInvalid("%s is not an etcd database etcd can restore: %s." % (what, rejected.detail))
    return SnapshotInvalid("%s cannot be read: %s." % (what, rejected.detail))


def _stream_rejection(rejected, member):
    """The SnapshotInvalid of a snapshot just streamed from ``member``: never kept, it can only be taken again."""
    source = _source(member)
    if rejected.kind == "corrupt":
        return SnapshotInvalid("The etcd snapshot streamed from %s is corrupt: the sha256 etcd appended does not match its "
                               "content; nothing was kept - take the snapshot again." % source)
    if rejected.kind == "no hash":
        return SnapshotInvalid("The etcd snapshot streamed from %s has no sha256 appended by etcd, so the stream ended "
                               "early; nothing was kept - take the snapshot again." % source)
    if rejected.kind == "not a database":
        return SnapshotInvalid("The etcd snapshot streamed from %s is not an etcd database etcd can restore (%s); nothing "
                               "was kept." % (source, rejected.detail))
    return SnapshotInvalid("The etcd snapshot streamed from %s cannot be read back on the controller (%s); nothing was "
                           "kept." % (source, rejected.detail))


def _listed_rejection(rejected, path):
    """A backup in the list of those of a directory that none checks out."""
    if rejected.kind == "corrupt":
        return "%s is corrupt (the sha256 etcd appended does not match its content)" % os.path.basename(path)
    if rejected.kind == "no hash":
        return ("%s has no sha256 appended by etcd (truncated, or a copy of a data directory's database, which needs "
                "skip_hash_check=true)" % os.path.basename(path))
    if rejected.kind == "not a database":
        return "%s is not an etcd database etcd can restore (%s)" % (os.path.basename(path), rejected.detail)
    return "%s cannot be read (%s)" % (os.path.basename(path), rejected.detail)


def _examine(path, skip_hash_check):
    """The facts of the snapshot file at ``path`` as etcd's restore checks it, or _Rejected."""
    try:
        size = os.path.getsize(path)
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_READ_BLOCK), b""):
                digest.update(block)
            hash_appended = size % 512 == HASH_SIZE
            database_size = size - HASH_SIZE if hash_appended else size
            if hash_appended:
                handle.seek(database_size)
                appended = handle.read(HASH_SIZE)
                handle.seek(0)
                database_digest = hashlib.sha256()
                remaining = database_size
                while remaining:
                    block = handle.read(min(_READ_BLOCK, remaining))
                    database_digest.update(block)
                    remaining -= len(block)
                if database_digest.digest() != appended:
                    raise _Rejected(kind="corrupt")
            elif not skip_hash_check:
                raise _Rejected(kind="no hash")
            try:
                facts = _read_database(handle, database_size)
            except (_Corrupt, struct.error) as error:
                raise _Rejected(kind="not a database", detail=str(error))
    except (IOError, OSError) as error:
        raise _Rejected(kind="unreadable", detail=error.strerror or str(error))
    facts.update(path=path, size=size, sha256=digest.hexdigest(), hash_appended=hash_appended)
    return facts


def check(path, skip_hash_check=False, label="The etcd snapshot"):
    """Check the snapshot file at ``path`` as etcd restores it; its facts, or SnapshotInvalid with one sentence.

    Returns ``{path, size, sha256, hash_appended, revision, total_keys, raft_index, raft_term, storage_version}``.
    """
    try:
        return _examine(path, skip_hash_check)
    except _Rejected as rejected:
        raise _file_rejection(rejected, path, label)


def _check_streamed(staged_path, member):
    """Check a snapshot just streamed from ``member`` into ``staged_path``: its facts, or SnapshotInvalid naming the
    member, not the temporary file (which goes when the stream's file is dropped)."""
    try:
        return _examine(staged_path, skip_hash_check=False)
    except _Rejected as rejected:
        raise _stream_rejection(rejected, member)


# -- taking a snapshot -------------------------------------------------------------

def choose_source(client, node, source="auto", probe_seconds=etcd.HEALTH_PROBE_SECONDS):
    """The member to take the snapshot from, as ``{id, hostname, node, leader}``.

    ``auto``: a healthy member that does not lead when one does (a snapshot
    loads the member it is read from), else the healthy leader, among the
    members ``node`` lists. ``node``: the member of ``node`` itself, asked
    nothing more (an ``os:etcd:backup`` client of Talos v1.10 and older may
    read nothing else); a member that cannot serve fails the stream.
    """
    if source == "node":
        return {"id": None, "hostname": short_label(node), "node": node, "leader": None}
    view = etcd_membership.ClusterView.read(client, node, probe_seconds)
    leader = etcd_status.leader_id(view.statuses)
    healthy = [member for member in view.members if view.healthy(member) and not member["is_learner"]]
    if not healthy:
        unhealthy = etcd_quorum.unhealthy_text(view.members, view.statuses, [member["hostname"] for member in view.members])
        raise TalosError("Cannot take an etcd snapshot: no member of the cluster is healthy%s." % unhealthy, node=node)
    chosen = sorted(healthy, key=lambda member: member["id"] == leader)[0]
    return {"id": chosen["id"], "hostname": chosen["hostname"], "node": etcd.member_address(chosen),
            "leader": chosen["id"] == leader}


def _source(member):
    """The member a snapshot comes from as messages name it: ``controlplane-2 (10.5.0.3)``, or the node alone."""
    if member["hostname"] and member["hostname"] != short_label(member["node"]):
        return "%s (%s)" % (member["hostname"], member["node"])
    return short_label(member["node"])


def probe(client, member):
    """Find out that ``member`` streams a snapshot, without taking one: open its EtcdSnapshot stream, read until the
    first page is in, and close the stream - a read, nothing changes on the node.

    What the node refuses (a role that may not take snapshots, an etcd that
    cannot make one) is raised as the client reports it; a stream that does
    not begin as an etcd database raises TalosError.
    """
    head = bytearray()

    def read_head(message):
        head.extend(message.bytes)
        return len(head) >= HEAD_SIZE  # enough read: stop and close the stream

    client.stream(rpc.ETCD_SNAPSHOT, machine_pb2.EtcdSnapshotRequest(), node=member["node"], on_message=read_head)
    if not begins_as_database(bytes(head)):
        raise TalosError("Cannot take an etcd snapshot from %s: what it streams does not begin as an etcd database, so "
                         "it would not restore." % _source(member), node=member["node"])


def backup_name(prefix, taken_at, revision):
    return "%s-%s-r%d.snapshot" % (prefix, taken_at.strftime(_STAMP), revision)


def take(client, node, dest=None, directory=None, prefix="etcd", source="auto", force=False, keep=None, max_age=None,
         check_mode=False, progress=None):
    """Take an etcd snapshot onto the controller; returns the task's result.

    With ``dest`` the snapshot goes there, unless ``dest`` already holds a
    snapshot that checks out (``force`` takes a new one anyway; it replaces the
    file only when its bytes differ). With ``directory`` every run adds a
    backup named by ``backup_name`` and then applies the retention (``keep``
    newest, none older than ``max_age``). The destination is checked before
    the cluster is asked anything. The stream goes to a private file that is
    checked before it takes its name: nothing half-written, nothing that
    would not restore, is ever left. Check mode chooses the member and
    probes its stream (``probe``): what a run would fail on at its start, it
    fails on too.
    """
    max_age_seconds = parse_duration(max_age, "max_age").total_seconds() if max_age else None
    if dest is not None:
        dest = os.path.abspath(os.path.expanduser(dest))
        check_destination(dest, "the etcd snapshot", "dest")
        if os.path.isfile(dest) and not force:
            try:
                existing = check(dest, label="The existing etcd snapshot")
            except SnapshotInvalid:
                existing = None
            if existing is not None:
                existing["dest"] = existing.pop("path")
                return dict(existing, changed=ensure_mode(dest, "the etcd snapshot", check_mode), member=None, removed=[])
    else:
        if not _PREFIX.match(prefix or ""):
            raise TalosConfigError("prefix must start with a letter or digit and hold only letters, digits, '.', '_' and "
                                   "'-' (it names files in the backup directory), not %r." % prefix)
        directory = os.path.abspath(os.path.expanduser(directory))
        problem = directory_problem(directory, "etcd backups", "directory")
        if problem:
            raise TalosConfigError(problem)
    member = choose_source(client, node, source)
    if progress:
        progress("taking an etcd snapshot from %s" % _source(member))
    result = {"changed": True, "member": member, "dest": dest, "removed": []}
    if check_mode:
        probe(client, member)
        if directory is not None:
            result["removed"] = prune(directory, prefix, keep, max_age_seconds, check_mode=True, adding=1)
        return result
    taken_at = datetime.datetime.now(datetime.timezone.utc)
    if dest is not None:
        staged_file = PrivateFile(dest, "the etcd snapshot")
    else:
        # The backup's name needs the revision the snapshot holds: the file is named once it is checked.
        staged_file = PrivateFile(os.path.join(directory, prefix + ".snapshot"), "the etcd backup", where=directory)
    with staged_file as staged:
        def write_chunk(message):
            staged.write(message.bytes)
            return False  # keep reading: the stream ends with the snapshot

        client.stream(rpc.ETCD_SNAPSHOT, machine_pb2.EtcdSnapshotRequest(), node=member["node"], on_message=write_chunk)
        staged.flush()
        facts = _check_streamed(staged.temp_path, member)
        if dest is None:
            dest = os.path.join(directory, backup_name(prefix, taken_at, facts["revision"]))
        elif _file_sha256(dest) == facts["sha256"]:
            result["changed"] = ensure_mode(dest, "the etcd snapshot")
        if result["changed"] or not os.path.isfile(dest):
            staged.commit(dest)
    facts.pop("path", None)  # the staged file it was checked in
    result.update(facts, dest=dest, taken_at=taken_at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    result.update(_versions(client, member))
    if directory is not None:
        result["removed"] = prune(directory, prefix, keep, max_age_seconds, keep_path=dest)
    return result


def _versions(client, member):
    """The etcd version (the member's protocol version) and Talos version of the node the snapshot came from; None
    for what the client's role may not read (``os:etcd:backup`` may not ask Version)."""
    versions = {"etcd_version": None, "talos_version": None}
    for name, read in (("etcd_version", lambda: etcd_status.member_status(client, member["node"])["protocol_version"]),
                       ("talos_version", lambda: talos_node.read_version_tag(client, member["node"]))):
        try:
            versions[name] = read()
        except TalosError as error:
            if error.code != "PermissionDenied":
                raise
    return versions


def _file_sha256(path):
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_READ_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


# -- backup directories ------------------------------------------------------------

def backups(directory, prefix):
    """The backups of ``prefix`` in ``directory`` as ``(taken at, revision, path)``, newest first."""
    pattern = re.compile(r"^%s-(\d{8}T\d{6}Z)-r(\d+)\.snapshot$" % re.escape(prefix))
    found = []
    for name in os.listdir(directory):
        match = pattern.match(name)
        if match:
            taken_at = datetime.datetime.strptime(match.group(1), _STAMP).replace(tzinfo=datetime.timezone.utc)
            found.append((taken_at, int(match.group(2)), os.path.join(directory, name)))
    return sorted(found, reverse=True)


def prune(directory, prefix, keep=None, max_age_seconds=None, check_mode=False, keep_path=None, adding=0, now=None):
    """Remove the backups beyond the ``keep`` newest and those older than ``max_age_seconds`` (never ``keep_path``,
    the one just taken); the paths removed (would be, in check mode, with ``adding`` backups about to come)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    removed = []
    for index, (taken_at, unused_revision, path) in enumerate(backups(directory, prefix)):
        if path == keep_path:
            continue
        too_many = keep is not None and index + adding >= keep
        too_old = max_age_seconds is not None and (now - taken_at).total_seconds() > max_age_seconds
        if too_many or too_old:
            if not check_mode:
                try:
                    os.unlink(path)
                except (IOError, OSError) as error:
                    raise TalosError("Cannot remove the old etcd backup %s: %s." % (path, error.strerror or error))
            removed.append(path)
    return removed


def newest_backup(directory, prefix, skip_hash_check=False):
    """The facts (``check``) of the newest backup of ``prefix`` in ``directory`` that checks out, and the problems of
    the newer ones that did not; TalosConfigError when none does."""
    if not os.path.isdir(directory):
        raise TalosConfigError("The etcd backup directory %s does not exist." % directory)
    skipped, problems = [], []
    for unused_taken_at, unused_revision, path in backups(directory, prefix):
        try:
            return _examine(path, skip_hash_check), skipped
        except _Rejected as rejected:
            skipped.append(str(_file_rejection(rejected, path)))
            problems.append(_listed_rejection(rejected, path))
    raise TalosConfigError("No etcd backup named %s-<time>-r<revision>.snapshot in %s checks out%s." %
                           (prefix, directory, (": " + "; ".join(problems)) if problems else ""))
