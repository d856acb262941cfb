# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_reset through ansible-playbook against the emulator: wipes, maintenance mode,
idempotence, refusals before any call, the etcd guard and a wait that times out."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def reset_play(cluster, node, **options):
    args = dict({"wait_timeout": 30}, **options)
    return module_play(cluster, "talos_reset", args, node, "reset", timeout=5, ignore_errors=True)


def test_reset_into_maintenance_then_nothing_to_do(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.2)
    worker = cluster.workers[0]
    options = dict(reboot=True, system_labels_to_wipe=["state", "EPHEMERAL"])

    check = run_playbook(reset_play(cluster, worker.address, **options), check=True).task("reset")
    assert check["status"] == "changed", check["result"]
    assert check["result"]["wiped"] == {"system_disk": False, "labels": ["EPHEMERAL", "STATE"], "user_disks": []}
    assert check["result"]["expected_state"] == "maintenance" and check["result"]["state"] is None
    assert cluster.audit() == [] and worker.reboots == 0

    result = run_playbook(reset_play(cluster, worker.address, **options)).task("reset")
    assert result["status"] == "changed", result["result"]
    assert result["result"]["state"] == "maintenance" and result["result"]["actor_id"]
    assert worker.maintenance and worker.reboots == 1
    (entry,) = cluster.audit()
    assert (entry["method"], entry["node"], entry["graceful"], entry["reboot"], entry["mode"]) == (
        "machine.MachineService/Reset", worker.name, True, True, "ALL")
    assert entry["system_partitions_to_wipe"] == ["STATE", "EPHEMERAL"]

    again = run_playbook(reset_play(cluster, worker.address, **options)).task("reset")
    assert again["status"] == "ok", again["result"]
    assert again["result"]["state"] == "maintenance"
    assert len(cluster.audit()) == 1

    refused = run_playbook(reset_play(cluster, worker.address, wipe_mode="user_disks",
                                      user_disks_to_wipe=["/dev/sdb"])).task("reset")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"].startswith("Node %s is in maintenance mode, where Talos refuses Reset" % worker.address)
    assert len(cluster.audit()) == 1


def test_reset_keeping_state_comes_back_configured(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.2)
    worker = cluster.workers[0]
    boot_id = worker.boot_id
    result = run_playbook(reset_play(cluster, worker.address, reboot=True, wipe_mode="system_disk",
                                     system_labels_to_wipe=["EPHEMERAL"])).task("reset")
    assert result["status"] == "changed", result["result"]
    assert result["result"]["state"] == result["result"]["expected_state"] == "configured"
    assert not worker.maintenance and worker.boot_id != boot_id
    assert cluster.audit()[0]["mode"] == "SYSTEM_DISK"


def test_bad_input_is_refused_before_any_call(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    node = cluster.workers[0].address
    play = module_play(cluster, "talos_reset", {"wipe_mode": "system_disk", "user_disks_to_wipe": ["/dev/sdb"]},
                       node, "disks with system_disk", ignore_errors=True)
    play["tasks"] += [
        {"name": "labels with user_disks", "ignore_errors": True,
         "talos_linux.talos.talos_reset": {"wipe_mode": "user_disks", "system_labels_to_wipe": ["STATE"],
                                           "user_disks_to_wipe": ["/dev/sdb"]}},
    ]
    run = run_playbook(play)
    assert run.task("disks with system_disk")["result"]["msg"].startswith(
        "user_disks_to_wipe cannot be used with wipe_mode: system_disk")
    assert run.task("labels with user_disks")["result"]["msg"].startswith(
        "system_labels_to_wipe cannot be used with wipe_mode: user_disks")
    assert cluster.audit() == []


def test_labels_are_the_nodes_volumes(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    volumes = ("EPHEMERAL, META, STATE (and, together with EPHEMERAL: CRI, ETCD, KUBELET, LOG)")
    for labels, message in (
            (["EFI", "STATE", "boot"], "system_labels_to_wipe names EFI, boot, which node %s does not have; its volumes "
                                       "are %s." % (worker.address, volumes)),
            (["etcd"], "system_labels_to_wipe names ETCD, which resides on EPHEMERAL of node %s and is wiped only "
                       "together with it; add EPHEMERAL to system_labels_to_wipe." % worker.address)):
        refused = run_playbook(reset_play(cluster, worker.address, system_labels_to_wipe=labels), check=True).task("reset")
        assert refused["status"] == "failed" and refused["result"]["msg"] == message
    assert cluster.audit() == []

    # A directory volume goes with the volume it resides on, as Talos v1.14 allows.
    result = run_playbook(reset_play(cluster, worker.address, reboot=True, wipe_mode="system_disk",
                                     system_labels_to_wipe=["etcd", "ephemeral"])).task("reset")
    assert result["status"] == "changed", result["result"]
    assert result["result"]["wiped"]["labels"] == ["EPHEMERAL", "ETCD"]
    assert cluster.audit()[0]["system_partitions_to_wipe"] == ["ETCD", "EPHEMERAL"] and cluster.audit()[0]["code"] == "OK"


def test_graceful_reset_of_a_control_plane_leaves_etcd_and_powers_off(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp3 = cluster.controlplanes[2]
    result = run_playbook(reset_play(cluster, cp3.address)).task("reset")
    assert result["status"] == "changed", result["result"]
    assert result["result"]["state"] == "off" and result["result"]["controlplane"] is True
    assert result["result"]["quorum"] == {"safe": True, "voters_after": 2, "quorum_after": 2, "healthy_after": 2,
                                          "unhealthy": []}
    assert not cp3.powered
    assert sorted(member.node.name for member in cluster.etcd.members) == ["controlplane-1", "controlplane-2"]


def test_etcd_guards(emulator, run_playbook):
    cluster = emulator(controlplanes=2, bootstrapped=True, etcd="real")
    cp1, cp2 = cluster.controlplanes
    cluster.power_off(cp2)
    refused = run_playbook(reset_play(cluster, cp1.address)).task("reset")
    assert refused["status"] == "failed"
    # Real etcd has lost its quorum with one of two members off: no member list to judge by, and the guard says so.
    message = refused["result"]["msg"]
    assert message.startswith("Refusing to gracefully reset control-plane node %s: its etcd member list cannot be read"
                              % cp1.address), message
    assert "etcd may have lost quorum already" in message
    assert cluster.audit() == []


def test_graceful_reset_of_the_last_member_is_refused_even_when_forced(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    cp1 = cluster.controlplanes[0]
    refused = run_playbook(reset_play(cluster, cp1.address, force_quorum_loss=True)).task("reset")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"] == (
        "Refusing to gracefully reset control-plane node %s: controlplane-1 is the last voting etcd member, and etcd "
        "cannot lose its last member whatever force_quorum_loss says; to wipe the cluster's last control plane, reset "
        "it with graceful: false and force_quorum_loss: true, which destroys the cluster's etcd data." % cp1.address)
    assert cluster.audit() == []


def test_wait_that_times_out_says_so(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, reboot_seconds=30)
    worker = cluster.workers[0]
    result = run_playbook(reset_play(cluster, worker.address, reboot=True, wait_timeout=3)).task("reset")
    assert result["status"] == "failed"
    assert result["result"]["msg"].startswith(
        "The reset of node %s was requested but did not complete as expected: Timed out after 3 seconds waiting for "
        "node %s to come back from the reset, in maintenance mode or with a new boot" % (worker.address, worker.address))
    assert len(cluster.audit(method="Reset")) == 1


def test_several_nodes_in_one_task_then_nothing_to_do(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True, reboot_seconds=0.2)
    workers = [worker.address for worker in cluster.workers]
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
        "name": "reset", "talos_linux.talos.talos_reset": {
            "talosconfig": cluster.talosconfig_path(), "nodes": workers, "reboot": True,
            "system_labels_to_wipe": ["STATE", "EPHEMERAL"], "wait_timeout": 20}}]}

    result = run_playbook(play).task("reset")
    assert result["status"] == "changed", result["result"]
    assert sorted(result["result"]["nodes"]) == sorted(workers)
    assert {entry["state"] for entry in result["result"]["nodes"].values()} == {"maintenance"}
    assert all(worker.maintenance and worker.reboots == 1 for worker in cluster.workers)
    assert sorted(entry["node"] for entry in cluster.audit(method="Reset")) == sorted(w.name for w in cluster.workers)

    # Both answer in maintenance mode now: nothing to do on either, and nothing is sent.
    again = run_playbook(play).task("reset")
    assert again["status"] == "ok", again["result"]
    assert {entry["state"] for entry in again["result"]["nodes"].values()} == {"maintenance"}
    assert len(cluster.audit(method="Reset")) == 2
