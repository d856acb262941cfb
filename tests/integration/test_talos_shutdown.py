# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_shutdown through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def shutdown_play(cluster, node, role="admin", **options):
    args = dict({"wait_timeout": 20}, **options)
    return module_play(cluster, "talos_shutdown", args, node, "shutdown", role=role, timeout=5, ignore_errors=True)


def test_check_mode_then_shutdown_waits_until_the_node_is_gone(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]

    check = run_playbook(shutdown_play(cluster, worker.address), check=True).task("shutdown")
    assert check["status"] == "changed", check["result"]
    assert cluster.audit() == [] and worker.powered

    result = run_playbook(shutdown_play(cluster, worker.address, role="operator", graceful=False)).task("shutdown")
    assert result["status"] == "changed", result["result"]
    assert result["result"]["actor_id"] and result["result"]["elapsed"] is not None
    assert not worker.powered
    assert [(e["method"], e["node"], e["force"]) for e in cluster.audit()] == [
        ("machine.MachineService/Shutdown", worker.name, True)]

    # Off until powered on out of band; the module then cannot reach it.
    again = run_playbook(shutdown_play(cluster, worker.address)).task("shutdown")
    assert again["status"] == "failed" and len(cluster.audit()) == 1
    cluster.power_on(worker)
    assert worker.powered and worker.reachable


def test_quorum_guard_refuses_shutdown_of_a_needed_control_plane(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, cp2, _cp3 = cluster.controlplanes
    cluster.power_off(cp2)
    refused = run_playbook(shutdown_play(cluster, cp1.address)).task("shutdown")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"].startswith("Refusing to shut down control-plane node %s: etcd would keep 3 voting "
                                               "members" % cp1.address)
    assert cluster.audit() == [] and cp1.powered


def test_wait_that_times_out_says_so(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    cluster.call(setattr, worker, "sequence", "upgrade")  # a running sequence: Talos does not start the shutdown
    result = run_playbook(shutdown_play(cluster, worker.address, wait_timeout=2)).task("shutdown")
    assert result["status"] == "failed"
    assert ("The shutdown of node %s was requested but the node still answers: Timed out after 2 seconds waiting for "
            "node %s to stop answering" % (worker.address, worker.address)) in result["result"]["msg"]
    assert worker.powered


def test_several_nodes_in_one_task_each_behind_the_quorum_guard(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=1, bootstrapped=True, etcd="real")
    cp1, cp2, cp3 = cluster.controlplanes
    worker = cluster.workers[0]

    def play(nodes):
        return {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
            "name": "shutdown", "ignore_errors": True, "talos_linux.talos.talos_shutdown": {
                "talosconfig": cluster.talosconfig_path(), "nodes": nodes, "wait_timeout": 20, "timeout": 5}}]}

    done = run_playbook(play([cp3.address, worker.address])).task("shutdown")
    assert done["status"] == "changed", done["result"]
    assert sorted(done["result"]["nodes"]) == sorted([cp3.address, worker.address])
    assert not cp3.powered and not worker.powered

    # With the third member gone, neither of the last two may go: each is refused on its own, nothing is sent.
    refused = run_playbook(play([cp1.address, cp2.address])).task("shutdown")
    assert refused["status"] == "failed"
    per_node = refused["result"]["nodes"]
    assert all(per_node[node.address]["failed"] and per_node[node.address]["msg"].startswith(
        "Refusing to shut down control-plane node %s" % node.address) for node in (cp1, cp2)), per_node
    assert cp1.powered and cp2.powered
    assert sorted(entry["node"] for entry in cluster.audit(method="Shutdown")) == sorted([cp3.name, worker.name])
