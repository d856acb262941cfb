# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Services (server-behaviour.md §10), Reboot/Reset/Shutdown (§11), Events and boot ID (§7.3)."""

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

M = "machine.MachineService/"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _error(client, method, request=None, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + method, request, **options)
    return excinfo.value.status, excinfo.value.message


def _boot_id(client, **options):
    frames = client.call(M + "Read", machine_pb2.ReadRequest(path=BOOT_ID), **options)
    return b"".join(frame.bytes for frame in frames).decode().strip()


def _unpack(event):
    name = event.data.type_url.rsplit(".", 1)[-1]
    message = getattr(machine_pb2, name)()
    message.ParseFromString(event.data.value)
    return name, message


def test_service_sets_per_node_type(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster)
    cp = {s.id for s in client.call(M + "ServiceList").messages[0].services}
    worker = {s.id for s in client.call(M + "ServiceList", node=cluster.workers[0].address).messages[0].services}
    assert cp - worker == {"etcd", "trustd"}
    assert {"apid", "containerd", "cri", "kubelet", "machined", "udevd"} <= worker


def test_only_kubelet_and_extensions_are_controllable(emulator, api):
    cluster = emulator()
    cluster.add_extension_service(cluster.nodes[0], "ext-iscsid")
    client = api(cluster, role="operator")
    assert _error(client, "ServiceStop", machine_pb2.ServiceStopRequest(id="kubelet")) == (
        Status.UNKNOWN, 'service "kubelet" doesn\'t support stop operation via API')
    assert _error(client, "ServiceRestart", machine_pb2.ServiceRestartRequest(id="etcd")) == (
        Status.UNKNOWN, 'service "etcd" doesn\'t support restart operation via API')
    assert _error(client, "ServiceStart", machine_pb2.ServiceStartRequest(id="nope")) == (Status.UNKNOWN, 'service "nope" not defined')
    reply = client.call(M + "ServiceRestart", machine_pb2.ServiceRestartRequest(id="kubelet")).messages[0]
    assert reply.resp == 'Service "kubelet" restarted'
    assert client.call(M + "ServiceStop", machine_pb2.ServiceStopRequest(id="ext-iscsid")).messages[0].resp == 'Service "ext-iscsid" stopped'
    assert cluster.nodes[0].services["ext-iscsid"].state == "Finished"
    # Stopping a stopped service is a silent no-op with the same answer.
    assert client.call(M + "ServiceStop", machine_pb2.ServiceStopRequest(id="ext-iscsid")).messages[0].resp == 'Service "ext-iscsid" stopped'
    assert client.call(M + "ServiceStart", machine_pb2.ServiceStartRequest(id="ext-iscsid")).messages[0].resp == 'Service "ext-iscsid" started'
    assert cluster.nodes[0].services["ext-iscsid"].state == "Running"
    assert [(e["method"].rsplit("/", 1)[1], e["service"], e["code"]) for e in cluster.audit()] == [
        ("ServiceStop", "kubelet", "Unknown"), ("ServiceRestart", "etcd", "Unknown"), ("ServiceStart", "nope", "Unknown"),
        ("ServiceRestart", "kubelet", "OK"), ("ServiceStop", "ext-iscsid", "OK"), ("ServiceStop", "ext-iscsid", "OK"),
        ("ServiceStart", "ext-iscsid", "OK")]


def test_reboot_changes_boot_id_and_reports_events(emulator, api):
    cluster = emulator(reboot_seconds=0.3)
    node = cluster.nodes[0]
    client = api(cluster)
    before = _boot_id(client)
    assert before == node.boot_id
    assert client.call(M + "Reboot").messages[0].actor_id
    cluster.wait_until(lambda: not node.reachable)
    with pytest.raises((ConnectionError, StreamTerminatedError)):
        client.call(M + "Version", timeout=1)
    cluster.wait_until(lambda: node.reboots == 1)
    cluster.wait_ready(node)
    client.reset()
    assert _boot_id(client) != before
    history = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=-1), limit=3, timeout=5)
    assert history[0] == machine_pb2.Event()
    statuses = [_unpack(event)[1] for event in history[1:] if _unpack(event)[0] == "MachineStatusEvent"]
    assert statuses[0].stage == machine_pb2.MachineStatusEvent.BOOTING
    assert [entry["mode"] for entry in cluster.audit(method="Reboot")] == ["DEFAULT"]


def test_events_before_reboot_carry_the_actor_id(emulator, api):
    cluster = emulator(reboot_seconds=5)
    client = api(cluster)
    actor_id = client.call(M + "Reboot").messages[0].actor_id
    events = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=-1, with_actor_id=actor_id), limit=4, timeout=2)
    assert events[0] == machine_pb2.Event()
    kinds = [_unpack(event)[0] for event in events[1:]]
    assert kinds == ["SequenceEvent", "MachineStatusEvent", "TaskEvent"]
    assert all(event.actor_id == actor_id for event in events[1:])
    assert _unpack(events[2])[1].stage == machine_pb2.MachineStatusEvent.REBOOTING


def test_shutdown_and_power_on(emulator, api):
    cluster = emulator(workers=1)
    worker = cluster.workers[0]
    client = api(cluster, role="operator")
    client.call(M + "Shutdown", machine_pb2.ShutdownRequest(force=True), node=worker.address)
    cluster.wait_until(lambda: not worker.powered)
    assert _error(client, "Version", node=worker.address)[0] == Status.UNAVAILABLE
    cluster.power_on(worker)
    assert client.call(M + "Version", node=worker.address).messages[0].version.tag == "v1.14.0"


def test_reset_validation_messages(emulator, api):
    cluster = emulator()
    client = api(cluster)
    mode = machine_pb2.ResetRequest.WipeMode
    cases = [
        (dict(mode=mode.SYSTEM_DISK, user_disks_to_wipe=["/dev/sdb"]),
         "reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter"),
        (dict(mode=mode.USER_DISKS, system_partitions_to_wipe=[machine_pb2.ResetPartitionSpec(label="STATE", wipe=True)]),
         "reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter"),
        (dict(user_disks_to_wipe=["/dev/sdz"]), "reset user disk failed: device /dev/sdz wasn't found"),
        (dict(user_disks_to_wipe=["/dev/sda"]), "reset user disk failed: device /dev/sda is the system disk"),
        (dict(system_partitions_to_wipe=[machine_pb2.ResetPartitionSpec(label="DATA", wipe=True)]),
         'failed to get volume status with label "DATA": resource VolumeStatuses.block.talos.dev(runtime/DATA@undefined) '
         "doesn't exist"),
    ]
    for fields, message in cases:
        assert _error(client, "Reset", machine_pb2.ResetRequest(**fields)) == (Status.UNKNOWN, message)
    assert cluster.nodes[0].powered and cluster.nodes[0].reboots == 0


def test_graceful_reset_of_state_leaves_etcd_and_returns_to_maintenance(emulator, api):
    cluster = emulator(controlplanes=2, bootstrapped=True, reboot_seconds=0.1)
    cp2 = cluster.nodes[1]
    client = api(cluster)
    request = machine_pb2.ResetRequest(graceful=True, reboot=True, system_partitions_to_wipe=[
        machine_pb2.ResetPartitionSpec(label="STATE", wipe=True), machine_pb2.ResetPartitionSpec(label="EPHEMERAL", wipe=True)])
    assert client.call(M + "Reset", request, node=cp2.address).messages[0].actor_id
    cluster.wait_until(lambda: cp2.reboots == 1)
    cluster.wait_ready(cp2)
    assert cp2.maintenance and not cp2.etcd_data
    assert [member.node.name for member in cluster.etcd.members] == ["controlplane-1"]
    assert api(cluster, insecure=True).call("storage.StorageService/Disks", endpoint=cp2.endpoint).messages[0].disks


def test_graceful_reset_of_last_etcd_member_fails_in_the_sequence(emulator, api):
    cluster = emulator(bootstrapped=True)
    client = api(cluster)
    actor_id = client.call(M + "Reset", machine_pb2.ResetRequest(graceful=True)).messages[0].actor_id
    events = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=-1, with_actor_id=actor_id), limit=3, timeout=2)
    name, sequence = _unpack(events[-1])
    assert name == "SequenceEvent" and sequence.error.message.startswith("failed to leave cluster:")
    assert cluster.nodes[0].powered and not cluster.nodes[0].maintenance


def test_a_second_sequence_is_not_started_while_one_runs(emulator, api):
    cluster = emulator(reboot_seconds=0.3)
    node = cluster.nodes[0]
    client = api(cluster)
    client.call(M + "Reboot")
    second = client.call(M + "Shutdown").messages[0].actor_id
    events = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=-1, with_actor_id=second), limit=2, timeout=2)
    name, sequence = _unpack(events[1])
    assert name == "SequenceEvent" and sequence.error.code == common_pb2.LOCKED and sequence.error.message.startswith("sequence not started:")
    cluster.wait_until(lambda: node.reboots == 1)
    cluster.wait_ready(node)
    assert node.powered


def test_forced_reboot_skips_the_graceful_stop(emulator, api):
    cluster = emulator(reboot_seconds=5)
    client = api(cluster)
    actor_id = client.call(M + "Reboot", machine_pb2.RebootRequest(mode=machine_pb2.RebootRequest.FORCE)).messages[0].actor_id
    events = client.call(M + "Events", machine_pb2.EventsRequest(tail_events=-1, with_actor_id=actor_id), limit=3, timeout=2)
    assert [_unpack(event)[0] for event in events[1:]] == ["SequenceEvent", "MachineStatusEvent"]
    assert [entry["mode"] for entry in cluster.audit(method="Reboot")] == ["FORCE"]


def test_rollback_returns_to_the_previous_installation(emulator, api):
    cluster = emulator(workers=1, reboot_seconds=0.1)
    worker = cluster.workers[0]
    client = api(cluster)
    assert _error(client, "Rollback", node=worker.address) == (Status.UNKNOWN, 'cannot rollback to "B", label does not exist')
    assert worker.reboots == 0

    client.call(M + "Upgrade", machine_pb2.UpgradeRequest(image="ghcr.io/siderolabs/installer:v1.14.1"), node=worker.address)
    cluster.wait_until(lambda: worker.reboots == 1)
    cluster.wait_ready(worker)
    assert (worker.talos_version, worker.previous_version) == ("v1.14.1", "v1.14.0")
    boot_id = worker.boot_id

    client.reset()
    assert client.call(M + "Rollback", node=worker.address).messages[0] == machine_pb2.Rollback()
    cluster.wait_until(lambda: worker.reboots == 2)
    cluster.wait_ready(worker)
    assert (worker.talos_version, worker.previous_version) == ("v1.14.0", "v1.14.1")
    assert worker.boot_id != boot_id
    assert [(entry["method"], entry["code"]) for entry in cluster.audit(method="Rollback")] == [
        ("machine.MachineService/Rollback", "Unknown"), ("machine.MachineService/Rollback", "OK")]
    assert _error(api(cluster, role="operator"), "Rollback", node=worker.address)[0] == Status.PERMISSION_DENIED


def test_reset_keeping_state_comes_back_configured(emulator, api):
    cluster = emulator(workers=1, bootstrapped=True, reboot_seconds=0.1)
    worker = cluster.workers[0]
    client = api(cluster)
    request = machine_pb2.ResetRequest(graceful=True, reboot=True, mode=machine_pb2.ResetRequest.SYSTEM_DISK,
                                       system_partitions_to_wipe=[machine_pb2.ResetPartitionSpec(label="EPHEMERAL", wipe=True)])
    client.call(M + "Reset", request, node=worker.address)
    cluster.wait_until(lambda: worker.reboots == 1)
    cluster.wait_ready(worker)
    assert not worker.maintenance and worker.stage == "running"
    (entry,) = cluster.audit(method="Reset")
    assert entry["mode"] == "SYSTEM_DISK" and entry["system_partitions_to_wipe"] == ["EPHEMERAL"] and entry["graceful"]
