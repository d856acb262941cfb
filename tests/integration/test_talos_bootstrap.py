# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_bootstrap through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading

import pytest

from module_plays import module_play


def bootstrap_play(cluster, node, role="admin", timeout=20, **options):
    task = dict({"wait_timeout": 30}, **options)
    return module_play(cluster, "talos_bootstrap", task, node, "bootstrap", role=role, timeout=timeout)


def test_bootstrap_once_then_idempotent(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=1, etcd="real")
    first = cluster.controlplanes[0]

    run = run_playbook(bootstrap_play(cluster, first.address))
    result = run.task("bootstrap")
    assert result["status"] == "changed"
    assert result["result"]["bootstrapped"] is True and result["result"]["etcd_state"] == "Running"
    # The other control planes join etcd one by one once it runs: the result lists those added by then, a member
    # that has not started yet without a name.
    members = [m["hostname"] for m in result["result"]["members"]]
    assert first.hostname in members and set(members) - {""} <= set(n.hostname for n in cluster.controlplanes)
    assert [(e["method"], e["node"], e["code"]) for e in cluster.audit()] == [
        ("machine.MachineService/Bootstrap", first.name, "OK")]
    cluster.wait_etcd_running()
    assert cluster.etcd_leader() is first

    run = run_playbook(bootstrap_play(cluster, first.address))
    assert run.task("bootstrap")["status"] == "ok"
    assert run.task("bootstrap")["result"]["bootstrapped"] is True
    assert len(cluster.audit()) == 1


def test_a_control_plane_joining_a_bootstrapped_cluster_is_left_alone(emulator, run_playbook):
    cluster = emulator(controlplanes=2, bootstrapped=True, etcd="real")
    first, second = cluster.controlplanes
    cluster.set_service_state(second, "etcd", "Preparing", healthy=False)

    run = run_playbook(bootstrap_play(cluster, second.address))
    result = run.task("bootstrap")["result"]
    assert result["changed"] is False and result["bootstrapped"] is True and result["etcd_state"] == "Preparing"
    assert first.hostname in [m["hostname"] for m in result["members"]]
    assert cluster.audit() == [] and cluster.etcd_leader() is first


def test_check_mode_changes_nothing(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    run = run_playbook(bootstrap_play(cluster, cluster.controlplanes[0].address), check=True)
    result = run.task("bootstrap")
    assert result["status"] == "changed" and result["result"]["bootstrapped"] is False
    assert cluster.audit() == [] and not cluster.etcd.bootstrapped

    cluster.bootstrap()
    run = run_playbook(bootstrap_play(cluster, cluster.controlplanes[0].address), check=True)
    assert run.task("bootstrap")["status"] == "ok" and cluster.audit() == []


def test_not_ready_answers_are_retried_until_bootstrap_succeeds(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    node = cluster.controlplanes[0]
    cluster.faults.fail("Bootstrap", "FailedPrecondition", message="bootstrap is not available yet", times=2, node=node.name)
    cluster.faults.fail("Bootstrap", "Unavailable", message="connection refused", times=1, node=node.name)

    run = run_playbook(bootstrap_play(cluster, node.address))
    assert run.task("bootstrap")["status"] == "changed"
    # Injected failures never reach the handler; the one call that did succeeded.
    assert [(e["method"], e["code"]) for e in cluster.audit()] == [("machine.MachineService/Bootstrap", "OK")]
    assert cluster.etcd.bootstrapped


def test_clock_not_in_sync_is_retried_as_the_server_answers_it(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    node = cluster.controlplanes[0]
    cluster.call(setattr, node, "time_synced", False)

    def sync_clock_after_two_refusals():
        cluster.wait_until(lambda: len(cluster.audit(method="Bootstrap")) >= 2, timeout=30)
        cluster.call(setattr, node, "time_synced", True)

    syncer = threading.Thread(target=sync_clock_after_two_refusals, daemon=True)
    syncer.start()
    run = run_playbook(bootstrap_play(cluster, node.address))
    syncer.join(timeout=5)
    assert run.task("bootstrap")["status"] == "changed"
    codes = [e["code"] for e in cluster.audit(method="Bootstrap")]
    assert codes[-1] == "OK" and set(codes[:-1]) == {"FailedPrecondition"} and len(codes) >= 3


def test_not_ready_beyond_timeout_fails_with_the_servers_reason(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    node = cluster.controlplanes[0]
    cluster.faults.fail("Bootstrap", "FailedPrecondition", message="time is not in sync yet", times=-1)

    run = run_playbook(bootstrap_play(cluster, node.address, timeout=3), expect_rc=2)
    result = run.task("bootstrap")
    assert result["status"] == "failed"
    assert "did not complete within 3 seconds (the timeout option)" in result["result"]["msg"]
    assert "time is not in sync yet" in result["result"]["msg"]
    assert not cluster.etcd.bootstrapped


@pytest.mark.parametrize("talos_version", ["v1.14.0", "v1.12.0"])
@pytest.mark.parametrize("bootstrapped", [False, True])
def test_worker_is_refused_at_once_on_every_version(emulator, run_playbook, talos_version, bootstrapped):
    cluster = emulator(controlplanes=1, workers=1, talos_version=talos_version, bootstrapped=bootstrapped, etcd="real")
    worker = cluster.workers[0]
    run = run_playbook(bootstrap_play(cluster, worker.address), expect_rc=2)
    result = run.task("bootstrap")["result"]
    assert result["msg"] == ("Cannot bootstrap node %s: it is a worker node, and only a control-plane node can bootstrap "
                             "etcd; target one of the cluster's control planes." % worker.address)
    # Refused from the node's machine type: Bootstrap is never sent.
    assert cluster.audit() == [] and cluster.etcd.bootstrapped is bootstrapped


def test_reader_and_operator_get_the_role_they_need(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    for role in ("reader", "operator"):
        run = run_playbook(bootstrap_play(cluster, cluster.controlplanes[0].address, role=role), expect_rc=2)
        message = run.task("bootstrap")["result"]["msg"]
        assert "it needs role os:admin and the client certificate carries role os:%s" % role in message
    assert cluster.audit() == [] and not cluster.etcd.bootstrapped


def test_recover_from_a_snapshot(emulator, run_playbook, tmp_path):
    source = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    source.run(source.etcd.kv(source.controlplanes[0], "put", key="/registry/backed-up", value="yes"))
    snapshot = tmp_path / "etcd.snapshot"
    snapshot.write_bytes(source.run(source.etcd.snapshot_bytes(source.controlplanes[0])))

    cluster = emulator(controlplanes=1, etcd="real")
    node = cluster.controlplanes[0]
    run = run_playbook(bootstrap_play(cluster, node.address, snapshot=str(snapshot)))
    result = run.task("bootstrap")
    assert result["status"] == "changed" and result["result"]["recovered"] is True
    assert [(e["method"], e["code"]) for e in cluster.audit()] == [
        ("machine.MachineService/EtcdRecover", "OK"), ("machine.MachineService/Bootstrap", "OK")]
    assert cluster.audit(method="EtcdRecover")[0]["size"] == len(snapshot.read_bytes())
    assert cluster.audit(method="Bootstrap")[0]["recover_etcd"] is True
    cluster.wait_etcd_running()
    assert cluster.run(cluster.etcd.kv(node, "get", key="/registry/backed-up"))["value"] == "yes"

    run = run_playbook(bootstrap_play(cluster, node.address, snapshot=str(snapshot)))
    assert run.task("bootstrap")["status"] == "ok" and len(cluster.audit()) == 2
