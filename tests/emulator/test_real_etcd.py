# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd RPCs on real etcd members (``etcd="real"``, ``talos_emulator/real_etcd.py``, ``tests/etcd_member``).

The tests share one three-member cluster, in file order: the ones that change
membership come last. The fixture's members form it together (etcd's static
bootstrap, about a second); Talos's way, the Bootstrap RPC and learners that
join one at a time, is the recovery test's.
"""

import asyncio
import hashlib
import json
import os
import socket
import ssl
import subprocess
import time

import pytest
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot

from etcd_member import EtcdMemberError, binary as member_binary
from talos_emulator import real_etcd
from talos_emulator.pki import to_standard_pem

M = "machine.MachineService/"
# The magic number of a bbolt meta page, after the 16-byte page header (little endian 0xED0CDAED).
BBOLT_MAGIC = bytes.fromhex("edda0ced")


@pytest.fixture(scope="module")
def cluster(module_emulator):
    return module_emulator(controlplanes=3, bootstrapped=True, etcd="real", name="real-etcd")


def _kv(cluster, node, op, timeout=5, **fields):
    return cluster.run(cluster.etcd.kv(node, op, timeout=timeout, **fields), timeout=timeout + 15)


def _put_eventually(cluster, node, key, within=30):
    """Write ``key`` as a client of etcd does: a write whose leader died before it committed is lost, and the
    client tries again once the members elected another. The revision it was written at."""
    started = time.monotonic()
    while True:
        try:
            return _kv(cluster, node, "put", key=key, value="ok", timeout=2)["revision"]
        except EtcdMemberError:
            assert time.monotonic() - started < within, "no write through %s within %ss" % (node.name, within)


def _members(client, node):
    return client.call(M + "EtcdMemberList", node=node.address).messages[0].members


def _status(client, node):
    return client.call(M + "EtcdStatus", node=node.address).messages[0].member_status


def _wait_voting_members(cluster, client, node, names, timeout=30):
    """Wait until the members are ``names``, none of them a learner still (a joining member is promoted once it
    caught up with the leader)."""
    cluster.wait_until(lambda: sorted((member.hostname, member.is_learner) for member in _members(client, node))
                       == [(name, False) for name in sorted(names)], timeout, interval=0.1)


def test_members_form_a_cluster_over_tls_from_the_bundles_etcd_ca(cluster, api):
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    _wait_voting_members(cluster, client, cp1, ["controlplane-1", "controlplane-2", "controlplane-3"])
    members = {member.hostname: member for member in _members(client, cp2)}
    for node in cluster.controlplanes:
        assert members[node.hostname].peer_urls == [cluster.etcd.peer_url(node)]
        assert members[node.hostname].client_urls == [cluster.etcd.client_url(node)]
        assert cluster.etcd.peer_url(node).startswith("https://%s:" % node.address)
    statuses = {node.name: _status(client, node) for node in cluster.controlplanes}
    assert {status.member_id for status in statuses.values()} == {member.id for member in members.values()}
    assert len({status.leader for status in statuses.values()} - {0}) == 1
    assert all(status.protocol_version.startswith("3.7.") for status in statuses.values())
    # The members serve clients with certificates of the bundle's etcd CA, for their own address.
    context = ssl.create_default_context(cadata=cluster.secrets.etcd_ca.crt_pem.decode())
    host, port = cluster.etcd.client_url(cp3)[len("https://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # A write through one member is read through another: raft replicated it.
    _kv(cluster, cp1, "put", key="/registry/test/written-on-1", value="hello")
    assert _kv(cluster, cp3, "get", key="/registry/test/written-on-1")["value"] == "hello"


def test_forfeit_leadership_moves_the_leader(cluster, api):
    client = api(cluster)
    leader_id = _status(client, cluster.controlplanes[0]).leader
    leader = next(node for node in cluster.controlplanes if _status(client, node).member_id == leader_id)
    follower = next(node for node in cluster.controlplanes if node is not leader)
    assert client.call(M + "EtcdForfeitLeadership", node=follower.address).messages[0].member == ""
    new_leader_name = client.call(M + "EtcdForfeitLeadership", node=leader.address).messages[0].member
    assert new_leader_name not in ("", leader.hostname)
    new_leader_id = next(member.id for member in _members(client, leader) if member.hostname == new_leader_name)
    cluster.wait_until(lambda: all(_status(client, node).leader == new_leader_id for node in cluster.controlplanes), 10)


def test_defragment_gives_back_the_space_of_deleted_keys(cluster, api):
    client = api(cluster)
    cp1 = cluster.controlplanes[0]
    for index in range(64):
        _kv(cluster, cp1, "put", key="/registry/bulk/%03d" % index, value="x" * 32768)
    _kv(cluster, cp1, "delete", key="/registry/bulk/")
    _kv(cluster, cp1, "compact")
    before = _status(client, cp1)
    assert before.db_size > 2 * 1024 * 1024 and before.db_size_in_use < before.db_size // 2
    client.call(M + "EtcdDefragment", node=cp1.address, timeout=60)
    after = _status(client, cp1)
    assert after.db_size < before.db_size // 2
    # Only the member asked was defragmented.
    assert _status(client, cluster.controlplanes[1]).db_size > 2 * 1024 * 1024


def test_snapshot_streams_the_bbolt_database_and_its_sha256(cluster, api):
    client = api(cluster, talosconfig=cluster.talosconfig(roles=["os:etcd:backup"]))
    frames = client.call(M + "EtcdSnapshot", node=cluster.controlplanes[1].address)
    assert len(frames) > 2 and all(len(frame.bytes) == 1024 for frame in frames[:-1])
    snapshot = b"".join(frame.bytes for frame in frames)
    assert snapshot[16:20] == BBOLT_MAGIC
    assert hashlib.sha256(snapshot[:-32]).digest() == snapshot[-32:]
    assert len(snapshot) % 512 == 32


def test_the_snapshot_check_reads_what_etcdutl_reads_and_refuses_what_restore_refuses(cluster, api, tmp_path):
    cp2 = cluster.controlplanes[1]
    revision = _kv(cluster, cp2, "put", key="/registry/test/checked", value="x")["revision"]
    client, path, taken = api(cluster), tmp_path / "etcd.snapshot", []

    def snapshot_holds_the_storage_version():
        taken.append(b"".join(frame.bytes for frame in client.call(M + "EtcdSnapshot", node=cp2.address)))
        path.write_bytes(taken[-1])
        return etcd_snapshot.check(str(path))["storage_version"]

    # etcd writes its storage version into its database some seconds after the cluster version is set (its status
    # infers one from the database before that): until then a snapshot holds none, and etcdutl says so too.
    cluster.wait_until(snapshot_holds_the_storage_version, 90, interval=1)
    snapshot = taken[-1]
    facts = etcd_snapshot.check(str(path))
    judge = json.loads(subprocess.check_output([member_binary(), "--snapshot-status", str(path)]))
    assert facts["revision"] == judge["revision"] == revision
    assert facts["total_keys"] == judge["total_keys"] > 0
    assert facts["storage_version"] == judge["version"] and facts["storage_version"].startswith("3.")
    assert facts["hash_appended"] is True and facts["sha256"] == hashlib.sha256(snapshot).hexdigest()
    status = _status(api(cluster), cp2)
    assert 0 < facts["raft_index"] <= status.raft_index and facts["raft_term"] == status.raft_term

    # The database alone is a data directory's copy: refused unless the hash check is skipped, then read the same.
    copy = tmp_path / "db"
    copy.write_bytes(snapshot[:-32])
    with pytest.raises(etcd_snapshot.SnapshotInvalid, match="has no sha256 appended by etcd"):
        etcd_snapshot.check(str(copy))
    assert etcd_snapshot.check(str(copy), skip_hash_check=True)["revision"] == revision
    # One flipped byte anywhere, or a cut, and it no longer restores.
    for damaged, problem in ((snapshot[:4096] + bytes([snapshot[4096] ^ 1]) + snapshot[4097:], "is corrupt"),
                             (snapshot[:len(snapshot) // 2], "has no sha256")):
        path.write_bytes(damaged)
        with pytest.raises(etcd_snapshot.SnapshotInvalid, match=problem):
            etcd_snapshot.check(str(path))
    # The unit tests' snapshot says what etcdutl reads of it.
    vector = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "unit", "plugins", "module_utils", "data", "etcd-v3.7.snapshot")
    with open(vector + ".status.json") as judged:
        assert json.loads(subprocess.check_output([member_binary(), "--snapshot-status", vector])) == json.load(judged)
    garbage = bytes(4096 * 4)
    path.write_bytes(garbage)
    with pytest.raises(etcd_snapshot.SnapshotInvalid, match="not an etcd database etcd can restore: its first page"):
        etcd_snapshot.check(str(path), skip_hash_check=True)


def test_the_kubernetes_api_server_stores_its_objects_in_the_control_planes_etcd(cluster, kube_apiserver_factory):
    secrets = cluster.secrets
    server = kube_apiserver_factory(secrets.k8s_ca.crt_pem, secrets.k8s_ca.key_pem, secrets.service_account_key_pem,
                                    etcd=(cluster.etcd.client_urls(), secrets.etcd_ca.crt_pem, to_standard_pem(secrets.etcd_ca.key_pem)))
    try:
        assert server.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    finally:
        server.stop()
    assert "Namespace" in _kv(cluster, cluster.controlplanes[2], "get", key="/registry/namespaces/default")["value"]


def test_recover_and_bootstrap_restore_the_snapshot_into_a_new_cluster(cluster, emulator, api):
    cp1 = cluster.controlplanes[0]
    _kv(cluster, cp1, "put", key="/registry/dr/before", value="kept")
    snapshot = b"".join(frame.bytes for frame in api(cluster).call(M + "EtcdSnapshot", node=cp1.address))
    _kv(cluster, cp1, "put", key="/registry/dr/after", value="lost")

    rebuilt = emulator(controlplanes=2, etcd="real", name="rebuilt")
    client = api(rebuilt)
    chunks = [common_pb2.Data(bytes=snapshot[offset:offset + 1024]) for offset in range(0, len(snapshot), 1024)]
    client.call(M + "EtcdRecover", chunks)
    client.call(M + "Bootstrap", machine_pb2.BootstrapRequest(recover_etcd=True))
    rebuilt.wait_etcd_running(60)
    first, second = rebuilt.controlplanes
    _wait_voting_members(rebuilt, client, first, ["controlplane-1", "controlplane-2"])
    # The restored data is the new cluster's, replicated to the members that joined.
    assert {member.hostname: list(member.peer_urls) for member in _members(client, first)}["controlplane-1"] == [rebuilt.etcd.peer_url(first)]
    assert _kv(rebuilt, second, "get", key="/registry/dr/before")["value"] == "kept"
    assert _kv(rebuilt, second, "get", key="/registry/dr/after")["value"] is None


def test_a_join_whose_add_was_applied_unanswered_takes_that_learner(emulator, api):
    # Under load the add of a joining member can be applied after its call timed out. Talos then finds a learner of
    # its peer URL that never started and takes it as itself; a second add would be refused for as long as it tries.
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real", name="real-etcd-join")
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    client.call(M + "EtcdLeaveCluster", node=cp3.address, timeout=30)
    listed = cluster.run(cluster.etcd._any(cp1).request("member_add_learner", peer_urls=[cluster.etcd.peer_url(cp3)],
                                                        endpoints=cluster.etcd.client_urls()), timeout=30)["members"]
    (unanswered,) = [member for member in listed if member["is_learner"]]
    cluster.etcd.join(cp3)
    _wait_voting_members(cluster, client, cp1, ["controlplane-1", "controlplane-2", "controlplane-3"], timeout=90)
    assert unanswered["id"] in [member.id for member in _members(client, cp1) if member.hostname == "controlplane-3"]


def test_a_member_ready_only_once_its_node_wipes_etcd_does_not_come_back_on_the_wiped_data(emulator, api, monkeypatch):
    # Under load a joining member can become ready just as its node is reset. Talos stops etcd before it wipes
    # EPHEMERAL, so the node comes back with an empty data directory and joins afresh as a new member; restarted from
    # the data of a learner not promoted yet, it would stay a learner for good.
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real", name="real-etcd-wipe", reboot_seconds=0.1)
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    client.call(M + "EtcdLeaveCluster", node=cp3.address, timeout=30)
    gated = []
    ready = real_etcd.MemberProcess.wait_ready

    async def ready_once_resetting(process, timeout=60):
        member_id = await ready(process, timeout)
        if process.name == cp3.hostname and not gated:
            gated.append(process)
        while process in gated and cp3.stage != "resetting":
            await asyncio.sleep(0.01)
        return member_id

    monkeypatch.setattr(real_etcd.MemberProcess, "wait_ready", ready_once_resetting)
    cluster.call(cluster.etcd.join, cp3)
    cluster.wait_until(lambda: gated and gated[0].member_id is not None, 90)
    cluster.wipe_etcd(cp3)

    def serving_as_a_new_member():
        try:
            return _status(client, cp3).member_id != gated[0].member_id
        except GRPCError:
            return False  # not serving yet
    cluster.wait_until(serving_as_a_new_member, 90, interval=0.1)
    _wait_voting_members(cluster, client, cp1, ["controlplane-1", "controlplane-2", "controlplane-3"], timeout=90)


def test_powered_off_members_stop_and_quorum_is_lost_with_the_second(cluster, api):
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp3)
    host, port = cluster.etcd.client_url(cp3)[len("https://"):].rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()
    assert _put_eventually(cluster, cp1, "/registry/quorum/two-of-three") > 0
    cluster.power_off(cp2)
    with pytest.raises(EtcdMemberError):
        _kv(cluster, cp1, "put", key="/registry/quorum/one-of-three", value="lost", timeout=3)
    # Without a leader the member list is refused, as Talos asks with WithRequireLeader.
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "EtcdMemberList", node=cp1.address, endpoint=cp1.endpoint)
    assert "no leader" in excinfo.value.message
    cluster.power_on(cp2)
    cluster.power_on(cp3)
    cluster.wait_etcd_running(60)
    assert _put_eventually(cluster, cp1, "/registry/quorum/back") > 0


def test_leave_and_remove_by_id_shrink_the_membership(cluster, api):
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    # Talos retries a leave that etcd refuses while the cluster is not yet healthy for 5 s.
    client.call(M + "EtcdLeaveCluster", node=cp3.address, timeout=30)
    assert sorted(member.hostname for member in _members(client, cp1)) == ["controlplane-1", "controlplane-2"]
    assert cp3 not in cluster.etcd.processes and not cp3.etcd_data
    assert cp3.services["etcd"].state == "Finished"
    member_id = next(member.id for member in _members(client, cp1) if member.hostname == "controlplane-2")
    client.call(M + "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id), node=cp1.address)
    assert [member.hostname for member in _members(client, cp1)] == ["controlplane-1"]
    assert cp2.services["etcd"].state == "Failed"
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id), node=cp1.address)
    assert "member not found" in excinfo.value.message
    # The one member left has quorum alone.
    assert _kv(cluster, cp1, "put", key="/registry/alone", value="ok")["revision"] > 0
