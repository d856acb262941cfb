# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bootstrap (server-behaviour.md §6) and the etcd RPCs (§9)."""

import hashlib

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

M = "machine.MachineService/"


def _error(client, method, request=None, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + method, request, **options)
    return excinfo.value.status, excinfo.value.message


def _members(client, **options):
    return client.call(M + "EtcdMemberList", **options).messages[0].members


def test_bootstrap_then_already_exists(emulator, api):
    cluster = emulator(controlplanes=3)
    client = api(cluster)
    assert client.call(M + "Bootstrap").messages[0] == machine_pb2.Bootstrap()
    members = _members(client)
    assert sorted(member.hostname for member in members) == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert members[0].peer_urls == ["https://%s:2380" % cluster.nodes[0].address]
    assert all(node.etcd_data for node in cluster.nodes)
    assert _error(client, "Bootstrap") == (Status.ALREADY_EXISTS, "etcd data directory is not empty")
    assert _error(client, "Bootstrap", node=cluster.nodes[1].address) == (Status.ALREADY_EXISTS, "etcd data directory is not empty")
    assert [entry["code"] for entry in cluster.audit(method="Bootstrap")] == ["OK", "AlreadyExists", "AlreadyExists"]
    services = {s.id: s for s in client.call(M + "ServiceList", node=cluster.nodes[2].address).messages[0].services}
    assert services["etcd"].state == "Running" and services["etcd"].health.healthy


def test_bootstrap_preconditions(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster)
    assert _error(client, "Bootstrap", node=cluster.workers[0].address) == (
        Status.UNIMPLEMENTED, "bootstrap is only available on control plane nodes")
    cluster.nodes[0].time_synced = False
    assert _error(client, "Bootstrap") == (Status.FAILED_PRECONDITION, "time is not in sync yet")
    cluster.nodes[0].time_synced = True
    cluster.set_service_state(cluster.nodes[0], "cri", "Waiting", healthy=False)
    assert _error(client, "Bootstrap") == (Status.FAILED_PRECONDITION, "bootstrap is not available yet")
    assert not cluster.etcd.bootstrapped


def test_bootstrap_on_v112_worker_is_failed_precondition(emulator, api):
    cluster = emulator(workers=1, talos_version="v1.12.0")
    assert _error(api(cluster), "Bootstrap", node=cluster.workers[0].address) == (
        Status.FAILED_PRECONDITION, "bootstrap can only be performed on a control plane node")


def test_etcd_rpcs_are_control_plane_only(emulator, api):
    cluster = emulator(workers=1, bootstrapped=True)
    client = api(cluster)
    worker = cluster.workers[0].address
    for method, name in (("EtcdMemberList", "member list"), ("EtcdStatus", "etcd status"), ("EtcdLeaveCluster", "etcd leave"),
                         ("EtcdForfeitLeadership", "etcd forfeit leadership"), ("EtcdAlarmList", "etcd alarm list"),
                         ("EtcdAlarmDisarm", "etcd alarm disarm"), ("EtcdDefragment", "etcd defragment")):
        assert _error(client, method, node=worker) == (Status.UNIMPLEMENTED, "%s is only available on control plane nodes" % name)
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "EtcdSnapshot", node=worker)
    assert excinfo.value.message == "etcd snapshot is only available on control plane nodes"


def test_member_remove_leave_and_forfeit(emulator, api):
    cluster = emulator(controlplanes=3, bootstrapped=True)
    client = api(cluster)
    cp1, cp3 = cluster.nodes[0], cluster.nodes[2]
    assert cluster.etcd.leader().node is cp1
    reply = client.call(M + "EtcdForfeitLeadership").messages[0]
    assert reply.member in ("controlplane-2", "controlplane-3")
    assert client.call(M + "EtcdForfeitLeadership").messages[0].member == ""
    client.call(M + "EtcdLeaveCluster", node=cp3.address)
    assert sorted(member.hostname for member in _members(client)) == ["controlplane-1", "controlplane-2"]
    assert not cp3.etcd_data
    member_id = [member.id for member in _members(client) if member.hostname == "controlplane-2"][0]
    client.call(M + "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id))
    assert [member.hostname for member in _members(client)] == ["controlplane-1"]
    assert _error(client, "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=12345))[0] == Status.NOT_FOUND
    assert _error(client, "EtcdForfeitLeadership") == (Status.UNKNOWN, "cannot forfeit leadership, only one member")
    assert [entry["method"] for entry in cluster.audit(include_failed=False)] == [
        "machine.MachineService/EtcdForfeitLeadership", "machine.MachineService/EtcdForfeitLeadership",
        "machine.MachineService/EtcdLeaveCluster", "machine.MachineService/EtcdRemoveMemberByID"]


def test_status_alarms_and_defragment(emulator, api):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    client = api(cluster, role="reader")
    status = client.call(M + "EtcdStatus").messages[0].member_status
    assert status.member_id == cluster.etcd.members[0].id and status.leader == status.member_id
    assert status.storage_version == "3.6.0"
    cluster.raise_etcd_alarm(cluster.nodes[0], "NOSPACE")
    alarms = client.call(M + "EtcdAlarmList").messages[0].member_alarms
    assert [(alarm.member_id, alarm.alarm) for alarm in alarms] == [(status.member_id, machine_pb2.EtcdMemberAlarm.NOSPACE)]
    assert _error(client, "EtcdAlarmDisarm") == (Status.PERMISSION_DENIED, "not authorized")
    operator = api(cluster, role="operator")
    assert len(operator.call(M + "EtcdAlarmDisarm").messages[0].member_alarms) == 1
    assert operator.call(M + "EtcdAlarmList").messages[0].member_alarms == []
    operator.call(M + "EtcdDefragment")
    assert [entry["method"].rsplit("/", 1)[1] for entry in cluster.audit()] == ["EtcdAlarmDisarm", "EtcdDefragment"]


def test_the_model_makes_no_snapshot_and_says_how_to_start_members_that_do(emulator, api):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    client = api(cluster, talosconfig=cluster.talosconfig(roles=["os:etcd:backup"]))
    # As machined answers when its etcd client cannot read a snapshot: a plain error, gRPC's Unknown.
    assert _error(client, "EtcdSnapshot") == (Status.UNKNOWN, "failed reading etcd snapshot: the emulator's etcd model cannot "
                                              "make a snapshot; start real etcd members to take one: make demo with Go "
                                              "installed, or tests/talos-emulator up --etcd real")


def test_recover_restores_the_uploaded_snapshot(emulator, api):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    keyspace = b"a keyspace to come back " * 100
    snapshot = keyspace + hashlib.sha256(keyspace).digest()
    admin = api(cluster)
    chunks = [common_pb2.Data(bytes=snapshot[offset:offset + 1024]) for offset in range(0, len(snapshot), 1024)]
    admin.call(M + "EtcdRecover", chunks)
    assert cluster.nodes[0].etcd_snapshot == snapshot
    # A recovery starts from an empty data directory (after a reset of EPHEMERAL, for instance).
    cluster.call(cluster.nodes[0].leave_etcd)
    admin.call(M + "Bootstrap", machine_pb2.BootstrapRequest(recover_etcd=True))
    assert cluster.etcd.keyspace == keyspace
    assert [member.hostname for member in _members(admin)] == ["controlplane-1"]


def test_recover_with_corrupt_snapshot_fails_etcd_unless_hash_check_skipped(emulator, api):
    cluster = emulator(controlplanes=1)
    admin = api(cluster)
    admin.call(M + "EtcdRecover", [common_pb2.Data(bytes=b"raw data directory copy")])
    admin.call(M + "Bootstrap", machine_pb2.BootstrapRequest(recover_etcd=True))
    assert cluster.nodes[0].services["etcd"].state == "Failed"
    assert not cluster.etcd.bootstrapped
    admin.call(M + "EtcdRecover", [common_pb2.Data(bytes=b"raw data directory copy")])
    admin.call(M + "Bootstrap", machine_pb2.BootstrapRequest(recover_etcd=True, recover_skip_hash_check=True))
    assert cluster.etcd.keyspace == b"raw data directory copy"


def test_a_powered_off_member_stays_until_removed_and_leadership_moves(emulator, api):
    cluster = emulator(controlplanes=3, workers=1, bootstrapped=True)
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp1)
    # cp1 was the leader and the endpoint: ask through cp2.
    members = _members(client, endpoint=cp2.endpoint)
    assert sorted(member.hostname for member in members) == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert cluster.etcd.leader().node is cp2
    status = client.call(M + "EtcdStatus", endpoint=cp2.endpoint, node=cp3.address).messages[0].member_status
    assert status.leader == cluster.etcd.member_of(cp2).id and list(status.errors) == []
    members = client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace="cluster", type="Members.cluster.talos.dev"),
                          endpoint=cp2.endpoint)
    assert sorted(member.resource.metadata.id for member in members) == ["controlplane-1", "controlplane-2", "controlplane-3",
                                                                         "worker-1"]

    member_id = cluster.etcd.member_of(cp1).id
    client.call(M + "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id), endpoint=cp2.endpoint)
    assert sorted(member.hostname for member in _members(client, endpoint=cp2.endpoint)) == ["controlplane-2", "controlplane-3"]
    assert _error(client, "EtcdRemoveMemberByID", machine_pb2.EtcdRemoveMemberByIDRequest(member_id=member_id),
                  endpoint=cp2.endpoint) == (
        Status.NOT_FOUND, "failed to remove member %d: etcdserver: member not found" % member_id)


def test_remove_by_id_is_refused_as_etcd_refuses_it(emulator, api):
    cluster = emulator(controlplanes=3, bootstrapped=True)
    client = api(cluster)
    cp1, cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp3)
    # Removing a running member while another is down would leave 1 running of 2: etcd refuses.
    running = cluster.etcd.member_of(cp2).id
    request = machine_pb2.EtcdRemoveMemberByIDRequest(member_id=running)
    assert _error(client, "EtcdRemoveMemberByID", request) == (
        Status.UNKNOWN, "failed to remove member: failed to remove member %d: etcdserver: unhealthy cluster" % running)
    # Without quorum there is no leader to ask.
    cluster.power_off(cp2)
    assert _error(client, "EtcdRemoveMemberByID", request) == (
        Status.UNKNOWN, "failed to remove member: failed to remove member %d: etcdserver: no leader" % running)
    assert len(cluster.etcd.members) == 3


def test_defragment_shrinks_the_database_one_member_at_a_time(emulator, api):
    cluster = emulator(controlplanes=2, bootstrapped=True)
    client = api(cluster, role="operator")
    cp1, cp2 = cluster.controlplanes
    cluster.fragment_etcd(cp2, 1 << 20)

    def status(node):
        return client.call(M + "EtcdStatus", node=node.address).messages[0].member_status

    before = status(cp2)
    assert before.db_size - before.db_size_in_use == 1 << 20 and before.raft_applied_index == before.raft_index
    client.call(M + "EtcdDefragment", node=cp2.address)
    after = status(cp2)
    assert after.db_size == after.db_size_in_use == before.db_size_in_use
    assert status(cp1).db_size > status(cp1).db_size_in_use  # its own file is untouched
    assert cluster.etcd.most_concurrent_defragments == 1


@pytest.mark.parametrize("etcd", ["model", "real"])
def test_alarms_show_in_the_status_of_every_member(emulator, api, etcd):
    cluster = emulator(controlplanes=2, bootstrapped=True, etcd=etcd)
    client = api(cluster)
    cp1, cp2 = cluster.controlplanes
    cluster.raise_etcd_alarm(cp2, "CORRUPT")
    member_id = cluster.etcd.member_of(cp2).id
    for node in (cp1, cp2):
        errors = client.call(M + "EtcdStatus", node=node.address).messages[0].member_status.errors
        assert [" ".join(error.split()) for error in errors] == ["memberID:%d alarm:CORRUPT" % member_id]
