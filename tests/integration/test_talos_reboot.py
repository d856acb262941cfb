# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_reboot through ansible-playbook against the emulator: check mode, the wait, modes,
the etcd quorum guard and a wait that times out."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def reboot_play(cluster, node, role="admin", **options):
    args = dict({"wait_timeout": 30}, **options)
    return module_play(cluster, "talos_reboot", args, node, "reboot", role=role, ignore_errors=True)


def test_check_mode_sends_nothing_then_reboot_waits_for_new_boot_and_services(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.3)
    worker = cluster.workers[0]
    boot_id = worker.boot_id

    check = run_playbook(reboot_play(cluster, worker.address), check=True).task("reboot")
    assert check["status"] == "changed", check["result"]
    assert check["result"]["boot_id_before"] == boot_id and check["result"]["boot_id_after"] is None
    assert check["result"]["controlplane"] is False
    assert cluster.audit() == [] and worker.reboots == 0

    result = run_playbook(reboot_play(cluster, worker.address, wait_for_services=["kubelet", "cri"])).task("reboot")
    assert result["status"] == "changed", result
    assert result["result"]["boot_id_before"] == boot_id
    assert result["result"]["boot_id_after"] == worker.boot_id != boot_id
    assert result["result"]["elapsed"] >= 0.3
    assert result["result"]["services"] == {"kubelet": "Running, healthy", "cri": "Running, healthy"}
    assert worker.reboots == 1
    assert [(e["method"], e["node"], e["mode"]) for e in cluster.audit()] == [
        ("machine.MachineService/Reboot", worker.name, "DEFAULT")]


def test_modes_and_operator_role(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, reboot_seconds=1.2)
    worker = cluster.workers[0]
    before = int(worker.booted_at)

    result = run_playbook(reboot_play(cluster, worker.address, role="operator", mode="powercycle")).task("reboot")
    assert result["status"] == "changed", result
    assert result["result"]["boot_id_before"] == "boot-time:%d" % before
    assert result["result"]["boot_id_after"] == "boot-time:%d" % int(worker.booted_at)
    assert worker.reboots == 1

    result = run_playbook(reboot_play(cluster, worker.address, mode="force", wait=False)).task("reboot")
    assert result["status"] == "changed" and result["result"]["actor_id"]
    assert [e["mode"] for e in cluster.audit(method="Reboot")] == ["POWERCYCLE", "FORCE"]


def test_force_mode_is_refused_before_talos_v1_12(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, talos_version="v1.11.3")
    result = run_playbook(reboot_play(cluster, cluster.workers[0].address, mode="force")).task("reboot")
    assert result["status"] == "failed"
    assert result["result"]["msg"] == ("mode: force needs Talos v1.12 or newer, but node %s runs v1.11.3; use mode: "
                                       "default or powercycle." % cluster.workers[0].address)
    assert cluster.audit() == []


def test_quorum_guard_refuses_then_force_quorum_loss(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, reboot_seconds=0.3, etcd="real")
    cp1, _cp2, cp3 = cluster.controlplanes
    cluster.faults.make_unreachable(cp3)

    refused = run_playbook(reboot_play(cluster, cp1.address, timeout=5)).task("reboot")
    assert refused["status"] == "failed"
    message = refused["result"]["msg"]
    assert message.startswith("Refusing to reboot control-plane node %s: etcd would keep 3 voting members and need 2 "
                              "of them healthy for quorum, but only 1 member other than controlplane-1 is healthy (not "
                              "healthy: controlplane-3 - " % cp1.address), message
    assert message.endswith("or set force_quorum_loss: true to go ahead anyway.")
    assert refused["result"]["quorum"]["unhealthy"] == ["controlplane-3"]
    assert refused["result"]["etcd_gate_open"] is False
    assert cluster.audit() == [] and cp1.reboots == 0

    forced = run_playbook(reboot_play(cluster, cp1.address, timeout=5, force_quorum_loss=True, wait=False)).task("reboot")
    assert forced["status"] == "changed", forced
    assert forced["result"]["etcd_gate_open"] is False
    assert [e["node"] for e in cluster.audit(method="Reboot")] == [cp1.name]


def test_single_control_plane_needs_force_quorum_loss(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    refused = run_playbook(reboot_play(cluster, cluster.controlplanes[0].address), check=True).task("reboot")
    assert refused["status"] == "failed"
    assert "etcd would keep 1 voting member and need 1 of them healthy for quorum, but only 0 members" in refused["result"]["msg"]
    assert cluster.audit() == []


def test_wait_that_times_out_says_so(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, reboot_seconds=30)
    worker = cluster.workers[0]
    result = run_playbook(reboot_play(cluster, worker.address, wait_timeout=3)).task("reboot")
    assert result["status"] == "failed"
    message = result["result"]["msg"]
    assert message.startswith("The reboot of node %s was requested but the node is not back as expected: Timed out "
                              "after 3 seconds waiting for node %s to reboot and become ready" % (worker.address, worker.address)), message
    assert len(cluster.audit(method="Reboot")) == 1


def test_several_nodes_in_one_task_control_planes_one_at_a_time(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.3, etcd="real")
    nodes = [node.address for node in cluster.nodes]
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
        "name": "reboot", "talos_linux.talos.talos_reboot": {
            "talosconfig": cluster.talosconfig_path(), "nodes": nodes, "quorum_wait_timeout": 30, "wait_timeout": 30}}]}

    result = run_playbook(play).task("reboot")
    assert result["status"] == "changed", result
    per_node = result["result"]["nodes"]
    assert sorted(per_node) == sorted(nodes)
    assert all(r["boot_id_after"] and r["boot_id_after"] != r["boot_id_before"] for r in per_node.values())
    assert [per_node[node.address]["controlplane"] for node in cluster.nodes] == [True, True, True, False, False]
    assert all(node.reboots == 1 for node in cluster.nodes)
