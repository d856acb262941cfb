# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the etcd restore (etcd_recovery) against a scripted client: what check mode verifies, what a run
refuses, and the sentences of its messages (the restore drill on real etcd members is in the integration tests)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import os
import re

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common import waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import recovery as etcd_recovery
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot
from ansible_collections.talos_linux.talos.plugins.module_utils.common import files
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
with open(os.path.join(DATA, "etcd-v3.7.snapshot"), "rb") as _vector:
    SNAPSHOT = _vector.read()
NODES = ["10.5.0.1", "10.5.0.2", "10.5.0.3"]
# Punctuation that joined sentences leave behind: "..", ".;", ";.", ". ." and the like.
DOUBLED = re.compile(r"[.;:,]\s*[.;:,]|\s[.;:,]")


def control_planes(etcd_state="Running", leader=1, down=()):
    """A FakeTalos of three control planes whose etcd runs (a leader: quorum) or waits to join (``Preparing``)."""
    client = FakeTalos(nodes=list(NODES))
    for index, node in enumerate(NODES, 1):
        if node in down:
            client.answer(rpc.SERVICE_LIST, fails_with("Unavailable", "connection refused"), node=node)
            client.answer(rpc.ETCD_STATUS, fails_with("Unavailable", "connection refused"), node=node)
            continue
        client.answer(rpc.SERVICE_LIST, [machine_pb2.ServiceList(services=[
            machine_pb2.ServiceInfo(id="etcd", state=etcd_state)])], node=node)
        if etcd_state == "Running":
            client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
                member_id=index, leader=leader))], node=node)
        else:
            client.answer(rpc.ETCD_STATUS, fails_with("Unknown", "etcd is not running on this node"), node=node)
    return client


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "etcd.snapshot"
    path.write_bytes(SNAPSHOT)
    return str(path)


def sent(client):
    """The calls that would change a node (the survey only reads)."""
    return [call.method for call in client.calls if call.method not in (rpc.SERVICE_LIST, rpc.ETCD_STATUS)]


def test_check_mode_verifies_a_backup_of_a_healthy_cluster_and_says_a_run_would_be_refused(snapshot):
    client = control_planes()
    result = etcd_recovery.restore(client, NODES, snapshot=snapshot, check_mode=True)
    revision = etcd_snapshot.check(snapshot)["revision"]
    assert result["changed"] is False and result["wiped"] == [] and result["joined"] == []
    assert result["snapshot"]["revision"] == revision
    assert result["plan"] == [
        "refuse, since etcd still has quorum (10.5.0.1, 10.5.0.2, 10.5.0.3 answer with leader 0000000000000001), and a "
        "restore rolls the whole cluster back to revision %d of the snapshot; with allow_quorum=true a run goes on with the "
        "steps below" % revision,
        "wipe etcd on 10.5.0.1, 10.5.0.2, 10.5.0.3 (reset of EPHEMERAL, not graceful, reboot)",
        "upload the snapshot (revision %d) to 10.5.0.1 and bootstrap etcd from it" % revision,
        "wait until 10.5.0.2, 10.5.0.3 joined the restored etcd as voting members"]
    assert sent(client) == [] and not os.path.exists(result["record"])


def test_a_run_on_a_healthy_cluster_is_refused_before_anything_is_sent(snapshot):
    client = control_planes()
    with pytest.raises(ActionFailed) as refused:
        etcd_recovery.restore(client, NODES, snapshot=snapshot)
    assert refused.value.message.startswith("Refusing to restore etcd: it still has quorum (10.5.0.1, 10.5.0.2, 10.5.0.3 "
                                            "answer with leader 0000000000000001)")
    assert refused.value.message.endswith("; set allow_quorum=true to wipe etcd on every control plane and restore anyway.")
    assert sent(client) == []


def test_check_mode_with_allow_quorum_plans_the_wipe_and_changes(snapshot):
    client = control_planes()
    result = etcd_recovery.restore(client, NODES, snapshot=snapshot, allow_quorum=True, check_mode=True)
    assert result["changed"] is True and result["wiped"] == NODES and result["joined"] == NODES[1:]
    assert result["plan"][0] == "wipe etcd on 10.5.0.1, 10.5.0.2, 10.5.0.3 (reset of EPHEMERAL, not graceful, reboot)"
    assert sent(client) == []


def test_check_mode_after_etcd_was_lost_plans_the_bootstrap_without_a_refusal(snapshot):
    client = control_planes(etcd_state="Preparing")
    result = etcd_recovery.restore(client, NODES, snapshot=snapshot, check_mode=True)
    assert result["changed"] is True and result["wiped"] == []
    assert result["plan"][0].startswith("upload the snapshot (revision ")
    assert sent(client) == []


def corrupt_backup(directory, revision, days_ago=1):
    taken_at = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days_ago)
    path = directory / etcd_snapshot.backup_name("prod", taken_at, revision)
    path.write_bytes(SNAPSHOT[:5000] + bytes([SNAPSHOT[5000] ^ 0xFF]) + SNAPSHOT[5001:])
    return path


def restore_failure(client, **options):
    with pytest.raises(TalosError) as failed:
        etcd_recovery.restore(client, NODES, **options)
    return failed.value.message


def test_every_message_is_one_sentence_without_doubled_punctuation(tmp_path):
    (tmp_path / "only-corrupt").mkdir()
    corrupt_backup(tmp_path / "only-corrupt", 9)
    (tmp_path / "two-corrupt").mkdir()
    corrupt_backup(tmp_path / "two-corrupt", 9)
    corrupt_backup(tmp_path / "two-corrupt", 10, days_ago=0)
    (tmp_path / "empty").mkdir()
    cut = tmp_path / "cut.snapshot"
    cut.write_bytes(SNAPSHOT[:4096])
    good = tmp_path / "good.snapshot"
    good.write_bytes(SNAPSHOT)
    messages = [
        restore_failure(control_planes(etcd_state="Preparing"), directory=str(tmp_path / "only-corrupt"), prefix="prod"),
        restore_failure(control_planes(etcd_state="Preparing"), directory=str(tmp_path / "two-corrupt"), prefix="prod"),
        restore_failure(control_planes(etcd_state="Preparing"), directory=str(tmp_path / "empty"), prefix="prod"),
        restore_failure(control_planes(etcd_state="Preparing"), directory=str(tmp_path / "missing"), prefix="prod"),
        restore_failure(control_planes(etcd_state="Preparing"), snapshot=str(cut)),
        restore_failure(control_planes(etcd_state="Preparing"), snapshot=str(tmp_path / "missing.snapshot")),
        restore_failure(control_planes(), snapshot=str(good)),
        restore_failure(control_planes(down=NODES), snapshot=str(good)),
        restore_failure(control_planes(etcd_state="Preparing"), snapshot=str(good), bootstrap_node="10.5.0.9"),
    ]
    assert messages[0].startswith("No etcd backup named prod-<time>-r<revision>.snapshot in %s checks out: prod-"
                                  % (tmp_path / "only-corrupt"))
    assert messages[7].startswith("Cannot restore etcd: no control plane in nodes answers (10.5.0.1: ")
    for message in messages:
        assert message.endswith(".") and not DOUBLED.search(message), message


def test_a_join_that_stops_moving_is_reported_with_where_the_restore_stopped(snapshot, monkeypatch):
    # The record says this snapshot's restore runs on 10.5.0.1: the rerun waits for the joins only.
    client = control_planes()
    client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=1, leader=1, raft_index=40, raft_applied_index=40))], node=NODES[0])
    client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=2, leader=1, is_learner=True, raft_index=40, raft_applied_index=40))], node=NODES[1])
    client.answer(rpc.HOSTNAME, lambda _request, node: [
        machine_pb2.Hostname(hostname="cp-%s" % node.rsplit(".", 1)[1])])
    client.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=1, hostname="cp-1", client_urls=["https://10.5.0.1:2379"]),
        machine_pb2.EtcdMember(id=2, hostname="cp-2", is_learner=True, client_urls=["https://10.5.0.2:2379"])])])
    facts = etcd_snapshot.check(snapshot)
    files.write_private(etcd_recovery.record_path(snapshot), '{"sha256": "%s", "member_id": "%016x"}' % (
        facts["sha256"], 1), "the record")
    now = {"t": 0.0}
    monkeypatch.setattr(waiter.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(waiter.time, "sleep", lambda seconds: now.update(t=now["t"] + seconds))
    with pytest.raises(ActionFailed) as stopped:
        etcd_recovery.restore(client, NODES[:2], snapshot=snapshot, wait_timeout=30)
    assert stopped.value.message == (
        "The etcd restore stopped while waiting for node 10.5.0.2 to join the restored etcd: Timed out waiting for cp-2 "
        "to be a voting etcd member: no progress in 30 seconds (30 seconds in all); last observed: cp-2 is a learner that "
        "caught up with the cluster and has not been promoted by its node's etcd service; so far etcd runs restored on "
        "node 10.5.0.1; none joined - run the restore again to continue.")
    assert not DOUBLED.search(stopped.value.message)
    assert set(sent(client)) == {rpc.HOSTNAME, rpc.ETCD_MEMBER_LIST}
