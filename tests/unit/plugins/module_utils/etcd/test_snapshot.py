# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd snapshot files: the check etcd's restore makes, taking one from a healthy member, backups.

``data/etcd-v3.7.snapshot`` is a snapshot a real etcd v3.7 member streamed
(three keys put); ``data/etcd-v3.7.snapshot.status.json`` is what etcdutl's
``snapshot status`` reads of it (tests/emulator/test_real_etcd.py holds both
to etcdutl).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import hashlib
import json
import os
import re
import stat

import pytest

from google.rpc import status_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot
from ansible_collections.talos_linux.talos.plugins.module_utils.common import files
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosConnectionError, TalosError, TalosNodeError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
VECTOR = os.path.join(DATA, "etcd-v3.7.snapshot")
with open(VECTOR + ".status.json") as _status:
    JUDGED = json.load(_status)
with open(VECTOR, "rb") as _vector:
    SNAPSHOT = _vector.read()


def snapshot_cluster(healthy=(True, True, True), leader=1, data=SNAPSHOT, fail_after=None):
    """A FakeTalos of three control planes (member i at 10.5.0.i, member ``leader`` leading) streaming ``data`` as
    EtcdSnapshot in 1 KiB frames; after ``fail_after`` frames the node answers with an error frame instead."""
    client = FakeTalos(answers={rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))]})
    client.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=index, hostname="cp-%d" % index, client_urls=["https://10.5.0.%d:2379" % index])
        for index in (1, 2, 3)])])
    for index, up in enumerate(healthy, 1):
        client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
            member_id=index, leader=leader, protocol_version="3.7.3"))]
            if up else TalosConnectionError("unreachable", code="Unavailable"), node="10.5.0.%d" % index)
    frames = [common_pb2.Data(bytes=data[offset:offset + 1024]) for offset in range(0, len(data), 1024)]
    if fail_after is not None:
        frames[fail_after:] = [common_pb2.Data(metadata=common_pb2.Metadata(
            error="stream cut", status=status_pb2.Status(code=14)))]  # 14: Unavailable
    client.answer(rpc.ETCD_SNAPSHOT, frames)
    return client


def snapshot_calls(client):
    return [call.node for call in client.calls if call.method == rpc.ETCD_SNAPSHOT]


# Checking a snapshot as etcd's restore does

def test_the_check_reads_what_etcdutl_reads():
    facts = etcd_snapshot.check(VECTOR)
    assert (facts["revision"], facts["total_keys"], facts["storage_version"]) == (
        JUDGED["revision"], JUDGED["total_keys"], JUDGED["version"])
    assert facts["hash_appended"] is True and facts["size"] == len(SNAPSHOT) == JUDGED["total_size"] + 32
    assert facts["sha256"] == hashlib.sha256(SNAPSHOT).hexdigest()
    assert facts["raft_index"] > 0 and facts["raft_term"] > 0


@pytest.mark.parametrize("damage, problem", [
    (lambda data: data[:8192] + bytes([data[8192] ^ 0x10]) + data[8193:], "is corrupt: the sha256 etcd appended does not match"),
    (lambda data: data[:-32][:-1] + bytes([data[-33] ^ 1]) + data[-32:], "is corrupt"),
    (lambda data: data[:len(data) // 2], "has no sha256 appended by etcd, so it is truncated or a copy"),
    (lambda data: data[:-32], "has no sha256 appended by etcd"),
    (lambda data: b"", "has no sha256 appended by etcd"),
])
def test_a_damaged_snapshot_is_refused_in_one_sentence(tmp_path, damage, problem):
    path = tmp_path / "etcd.snapshot"
    path.write_bytes(damage(SNAPSHOT))
    with pytest.raises(etcd_snapshot.SnapshotInvalid, match=problem) as raised:
        etcd_snapshot.check(str(path))
    assert str(raised.value).startswith("The etcd snapshot %s " % path) and str(raised.value).count(". ") == 0


def test_a_database_copy_restores_only_without_the_hash_check(tmp_path):
    path = tmp_path / "db"
    path.write_bytes(SNAPSHOT[:-32])
    assert etcd_snapshot.check(str(path), skip_hash_check=True)["revision"] == JUDGED["revision"]
    assert etcd_snapshot.check(str(path), skip_hash_check=True)["hash_appended"] is False


@pytest.mark.parametrize("content, problem", [
    (bytes(4096 * 4), "its first page is not a bbolt meta page"),
    (SNAPSHOT[:-32][:4096 * 2], "past its end"),
])
def test_what_is_no_etcd_database_is_refused(tmp_path, content, problem):
    path = tmp_path / "db"
    path.write_bytes(content)
    with pytest.raises(etcd_snapshot.SnapshotInvalid, match="is not an etcd database etcd can restore: .*" + problem):
        etcd_snapshot.check(str(path), skip_hash_check=True)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(etcd_snapshot.SnapshotInvalid, match=r"missing.snapshot cannot be read: No such file or directory\.$"):
        etcd_snapshot.check(str(tmp_path / "missing.snapshot"))


# Taking one

def test_taken_from_a_healthy_follower_checked_private_and_complete(tmp_path):
    path = tmp_path / "etcd.snapshot"
    client = snapshot_cluster()
    taken = etcd_snapshot.take(client, "10.5.0.1", dest=str(path))
    assert snapshot_calls(client) == ["10.5.0.2"]
    assert taken["member"] == {"id": "%016x" % 2, "hostname": "cp-2", "node": "10.5.0.2", "leader": False}
    assert path.read_bytes() == SNAPSHOT and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(str(tmp_path)) == ["etcd.snapshot"]
    assert (taken["changed"], taken["revision"], taken["sha256"], taken["etcd_version"], taken["talos_version"]) == (
        True, JUDGED["revision"], hashlib.sha256(SNAPSHOT).hexdigest(), "3.7.3", "v1.14.0")


def test_the_leader_serves_only_when_no_follower_is_healthy_and_none_healthy_fails():
    assert etcd_snapshot.choose_source(snapshot_cluster(healthy=(True, False, False)), None)["node"] == "10.5.0.1"
    with pytest.raises(TalosError, match=r"^Cannot take an etcd snapshot: no member of the cluster is healthy \(not healthy: cp-1"):
        etcd_snapshot.choose_source(snapshot_cluster(healthy=(False, False, False), leader=0), None)
    # Asked for the node's own member, the node is asked nothing else.
    client = snapshot_cluster(healthy=(False, False, False))
    assert etcd_snapshot.choose_source(client, "10.5.0.3", source="node")["node"] == "10.5.0.3" and client.calls == []


def test_a_backup_client_that_may_not_read_versions_still_gets_its_snapshot(tmp_path):
    client = snapshot_cluster()
    client.answer(rpc.VERSION, TalosError("denied", code="PermissionDenied"))
    taken = etcd_snapshot.take(client, "10.5.0.1", dest=str(tmp_path / "etcd.snapshot"), source="node")
    assert snapshot_calls(client) == ["10.5.0.1"] and taken["talos_version"] is None and taken["etcd_version"] == "3.7.3"


def test_an_existing_good_snapshot_stays_and_check_mode_streams_nothing(tmp_path):
    path = tmp_path / "etcd.snapshot"
    path.write_bytes(SNAPSHOT)
    os.chmod(str(path), 0o600)
    client = snapshot_cluster()
    kept = etcd_snapshot.take(client, "10.5.0.1", dest=str(path))
    assert kept["changed"] is False and kept["member"] is None and client.calls == []
    forced = etcd_snapshot.take(snapshot_cluster(), "10.5.0.1", dest=str(path), force=True)
    assert forced["changed"] is False and forced["member"]["hostname"] == "cp-2"

    other = tmp_path / "other.snapshot"
    client = snapshot_cluster()
    planned = etcd_snapshot.take(client, "10.5.0.1", dest=str(other), check_mode=True)
    assert planned["changed"] is True and planned["member"]["hostname"] == "cp-2"
    assert sorted(os.listdir(str(tmp_path))) == ["etcd.snapshot"]


def test_check_mode_reads_only_the_first_page_of_the_members_stream(tmp_path):
    client = snapshot_cluster()
    seen = []
    client.answer(rpc.ETCD_SNAPSHOT, [common_pb2.Data(bytes=SNAPSHOT[offset:offset + 32]) for offset in range(0, 1024, 32)]
                  + [fails_with("Unknown", "read past the first page")])
    etcd_snapshot.take(client, "10.5.0.1", dest=str(tmp_path / "etcd.snapshot"), check_mode=True)
    (call,) = [call for call in client.calls if call.method == rpc.ETCD_SNAPSHOT]
    assert call.node == "10.5.0.2" and os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("answer, problem", [
    # What the emulator's etcd model answers, as machined does when its etcd client cannot read a snapshot.
    (fails_with("Unknown", "failed reading etcd snapshot: no snapshot here; start real members"),
     r"EtcdSnapshot failed on node 10.5.0.2 with Unknown: failed reading etcd snapshot: no snapshot here; start real "
     r"members\.$"),
    (fails_with("PermissionDenied", "not authorized"), r"^Permission denied for machine.MachineService/EtcdSnapshot"),
    ([common_pb2.Data(bytes=b"keyspace of something else" * 100)],
     r"^Cannot take an etcd snapshot from cp-2 \(10.5.0.2\): what it streams does not begin as an etcd database, so it "
     r"would not restore\.$"),
    ([], r"^Cannot take an etcd snapshot from cp-2 \(10.5.0.2\): what it streams does not begin as an etcd database"),
])
@pytest.mark.parametrize("check_mode", [True, False], ids=["check-mode", "run"])
def test_a_member_that_cannot_stream_a_snapshot_fails_at_once_in_both_modes(tmp_path, answer, problem, check_mode):
    client = snapshot_cluster()
    client.answer(rpc.ETCD_SNAPSHOT, answer)
    with pytest.raises(TalosError) as raised:
        etcd_snapshot.take(client, "10.5.0.1", directory=str(tmp_path), check_mode=check_mode)
    if check_mode or not isinstance(answer, list):
        assert re.search(problem, raised.value.message), raised.value.message
    assert ".part" not in raised.value.message and "skip_hash_check" not in raised.value.message
    assert os.listdir(str(tmp_path)) == []


def test_an_interrupted_or_bad_stream_leaves_the_previous_file_and_no_partial_file(tmp_path):
    path = tmp_path / "etcd.snapshot"
    path.write_bytes(b"previous snapshot")
    with pytest.raises(TalosNodeError):
        etcd_snapshot.take(snapshot_cluster(fail_after=5), None, dest=str(path))
    for data, problem in (
            (SNAPSHOT[:-1] + b"\0", "is corrupt: the sha256 etcd appended does not match its content; nothing was kept - "
                                    "take the snapshot again."),
            # Talos ends the stream without an error when its etcd client's read fails: the snapshot is cut short.
            (SNAPSHOT[:len(SNAPSHOT) // 2], "has no sha256 appended by etcd, so the stream ended early; nothing was kept - "
                                            "take the snapshot again.")):
        with pytest.raises(etcd_snapshot.SnapshotInvalid) as raised:
            etcd_snapshot.take(snapshot_cluster(data=data), None, dest=str(path))
        # The temporary file is gone, and a snapshot streamed is never restored with skip_hash_check.
        assert str(raised.value) == "The etcd snapshot streamed from cp-2 (10.5.0.2) " + problem
    assert path.read_bytes() == b"previous snapshot"
    assert os.listdir(str(tmp_path)) == ["etcd.snapshot"]


@pytest.mark.parametrize("check_mode", [True, False], ids=["check-mode", "run"])
def test_the_destination_is_checked_before_the_cluster_is_asked(tmp_path, monkeypatch, check_mode):
    (tmp_path / "in-the-way").mkdir()
    (tmp_path / "a-file").write_text("")
    cases = [
        (dict(dest=str(tmp_path / "missing" / "etcd.snapshot")), "Cannot write the etcd snapshot to %s: directory %s does "
         "not exist." % (tmp_path / "missing" / "etcd.snapshot", tmp_path / "missing")),
        (dict(dest=str(tmp_path / "in-the-way")), "Cannot write the etcd snapshot to %s: it is a directory; set dest to a "
         "file path." % (tmp_path / "in-the-way")),
        (dict(directory=str(tmp_path / "missing")), "Cannot write etcd backups to %s: it does not exist; create it or set "
         "directory to an existing directory." % (tmp_path / "missing")),
        (dict(directory=str(tmp_path / "a-file")), "Cannot write etcd backups to %s: it is not a directory; set directory "
         "to a directory." % (tmp_path / "a-file")),
    ]
    for options, message in cases:
        client = snapshot_cluster()
        with pytest.raises(TalosConfigError) as raised:
            etcd_snapshot.take(client, None, check_mode=check_mode, **options)
        assert raised.value.message == message and client.calls == []

    def read_only(**kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "TemporaryFile", read_only)
    client = snapshot_cluster()
    for options, message in ((dict(directory=str(tmp_path)), "Cannot write etcd backups to %s: Read-only file system."
                              % tmp_path),
                             (dict(dest=str(tmp_path / "etcd.snapshot")), "Cannot write the etcd snapshot to %s: Read-only "
                              "file system." % (tmp_path / "etcd.snapshot"))):
        with pytest.raises(TalosConfigError) as raised:
            etcd_snapshot.take(client, None, check_mode=check_mode, **options)
        assert raised.value.message == message and client.calls == []
    assert sorted(os.listdir(str(tmp_path))) == ["a-file", "in-the-way"]


def test_a_full_disk_names_the_file_or_the_backup_directory_written(tmp_path, monkeypatch):
    (tmp_path / "in-the-way").mkdir()

    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(TalosError) as raised:
        etcd_snapshot.take(snapshot_cluster(), None, dest=str(tmp_path / "etcd.snapshot"))
    assert raised.value.message == "Cannot write the etcd snapshot to %s: No space left on device." % (tmp_path / "etcd.snapshot")
    # A backup is named once its revision is known: until then the directory is what is written to.
    with pytest.raises(TalosError) as raised:
        etcd_snapshot.take(snapshot_cluster(), None, directory=str(tmp_path), prefix="prod")
    assert raised.value.message == "Cannot write the etcd backup to %s: No space left on device." % tmp_path
    assert sorted(os.listdir(str(tmp_path))) == ["in-the-way"]


# Backup directories

def backup(directory, prefix, days_ago, revision, now):
    name = etcd_snapshot.backup_name(prefix, now - datetime.timedelta(days=days_ago), revision)
    path = directory / name
    path.write_bytes(SNAPSHOT)
    return str(path)


def test_a_backup_is_named_by_time_and_revision_and_the_retention_applies(tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc)
    old = [backup(tmp_path, "prod", days, 1, now) for days in (1, 2, 40)]
    other_cluster = backup(tmp_path, "staging", 50, 1, now)
    (tmp_path / "notes.txt").write_text("kept")

    client = snapshot_cluster()
    planned = etcd_snapshot.take(client, None, directory=str(tmp_path), prefix="prod", keep=2, max_age="30d", check_mode=True)
    assert planned["removed"] == [old[1], old[2]] and planned["dest"] is None
    assert len(os.listdir(str(tmp_path))) == 5

    taken = etcd_snapshot.take(snapshot_cluster(), None, directory=str(tmp_path), prefix="prod", keep=2, max_age="30d")
    assert os.path.basename(taken["dest"]).startswith("prod-") and taken["dest"].endswith("-r%d.snapshot" % JUDGED["revision"])
    assert taken["removed"] == [old[1], old[2]]
    assert sorted(os.listdir(str(tmp_path))) == sorted([os.path.basename(taken["dest"]), os.path.basename(old[0]),
                                                        os.path.basename(other_cluster), "notes.txt"])
    assert stat.S_IMODE(os.stat(taken["dest"]).st_mode) == 0o600


def test_the_newest_backup_that_checks_out_is_found(tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc)
    good = backup(tmp_path, "prod", 2, 4, now)
    corrupt = backup(tmp_path, "prod", 1, 9, now)
    with open(corrupt, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\xff")
    facts, skipped = etcd_snapshot.newest_backup(str(tmp_path), "prod")
    assert facts["path"] == good and skipped == [
        "The etcd snapshot %s is corrupt: the sha256 etcd appended does not match its content (a changed or truncated "
        "file); take a new snapshot or use another backup." % corrupt]
    with pytest.raises(TalosConfigError, match=r"^No etcd backup named staging-<time>-r<revision>.snapshot in .* checks out\.$"):
        etcd_snapshot.newest_backup(str(tmp_path), "staging")


def test_a_directory_whose_backups_all_fail_names_each_and_what_is_wrong_in_one_sentence(tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc)
    corrupt = backup(tmp_path, "prod", 1, 9, now)
    with open(corrupt, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\xff")
    with pytest.raises(TalosConfigError) as raised:
        etcd_snapshot.newest_backup(str(tmp_path), "prod")
    assert raised.value.message == (
        "No etcd backup named prod-<time>-r<revision>.snapshot in %s checks out: %s is corrupt (the sha256 etcd appended "
        "does not match its content)." % (tmp_path, os.path.basename(corrupt)))
    cut = backup(tmp_path, "prod", 0, 10, now)
    with open(cut, "r+b") as handle:
        handle.truncate(4096)
    with pytest.raises(TalosConfigError) as raised:
        etcd_snapshot.newest_backup(str(tmp_path), "prod")
    assert raised.value.message.endswith(
        "checks out: %s has no sha256 appended by etcd (truncated, or a copy of a data directory's database, which needs "
        "skip_hash_check=true); %s is corrupt (the sha256 etcd appended does not match its content)."
        % (os.path.basename(cut), os.path.basename(corrupt)))
