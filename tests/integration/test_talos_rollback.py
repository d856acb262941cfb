# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_rollback through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def rollback_play(cluster, node, **options):
    args = dict({"wait_timeout": 30}, **options)
    return module_play(cluster, "talos_rollback", args, node, "rollback", ignore_errors=True)


def test_nothing_to_roll_back_to_then_rollback_after_an_upgrade(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.2)
    worker = cluster.workers[0]

    nothing = run_playbook(rollback_play(cluster, worker.address)).task("rollback")
    assert nothing["status"] == "failed"
    assert nothing["result"]["msg"].startswith("Node %s cannot roll back from v1.14.0: " % worker.address)
    assert 'cannot rollback to "B", label does not exist' in nothing["result"]["msg"]
    assert nothing["result"]["msg"].endswith("the node was not changed.")
    assert worker.reboots == 0

    upgrade = module_play(cluster, "talos_upgrade", {"version": "v1.14.1", "wait_timeout": 30}, worker.address, "upgrade")
    run_playbook(upgrade)
    assert worker.talos_version == "v1.14.1"
    cluster.audit_log.clear()

    check = run_playbook(rollback_play(cluster, worker.address), check=True, diff=True).task("rollback")
    assert check["status"] == "changed", check["result"]
    assert check["result"]["from_version"] == "v1.14.1" and check["result"]["current_version"] is None
    assert cluster.audit() == []

    result = run_playbook(rollback_play(cluster, worker.address)).task("rollback")
    assert result["status"] == "changed", result["result"]
    assert (result["result"]["from_version"], result["result"]["current_version"]) == ("v1.14.1", "v1.14.0")
    assert result["result"]["boot_id_after"] == worker.boot_id != result["result"]["boot_id_before"]
    assert worker.talos_version == "v1.14.0"
    assert [(e["method"], e["node"]) for e in cluster.audit()] == [("machine.MachineService/Rollback", worker.name)]


def test_rollback_on_a_control_plane_honours_the_quorum_guard(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    refused = run_playbook(rollback_play(cluster, cluster.controlplanes[0].address)).task("rollback")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"].startswith("Refusing to roll back control-plane node")
    assert cluster.audit() == []
