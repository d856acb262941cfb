# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waits follow the node's event stream (issue 26): a wait ends within about a second of the node reaching the
state, not at the next turn of its poll interval."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play
from test_talos_health import lift_later

# How late a wait may notice the state: about a second, well below the poll intervals (2 s for reboots, 5 s below).
LATE = 1.0
# The emulator's pause between a Reboot or Shutdown request and the node going down.
GOING_DOWN = 0.1


def test_a_reboot_wait_ends_as_the_node_is_back(emulator, run_playbook):
    reboot_seconds = 2.5
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=reboot_seconds)
    worker = cluster.workers[0]
    run = run_playbook(module_play(cluster, "talos_reboot", {"wait_timeout": 30}, worker.address, "reboot"))
    elapsed = run.task("reboot")["result"]["elapsed"]
    # Polling every 2 s would look at 0, 2 and 4 s: the node is back at about 2.6 s.
    assert reboot_seconds < elapsed < reboot_seconds + GOING_DOWN + LATE, elapsed


def test_a_shutdown_wait_ends_as_the_node_goes(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    run = run_playbook(module_play(cluster, "talos_shutdown", {"wait_timeout": 20}, worker.address, "shutdown"))
    elapsed = run.task("shutdown")["result"]["elapsed"]
    assert not worker.powered and elapsed < GOING_DOWN + 0.8, elapsed


def test_a_health_wait_ends_as_the_failing_service_recovers(emulator, run_playbook):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True)
    node = cluster.controlplanes[1]
    cluster.set_service_state(node, "etcd", "Failed", healthy=False, message="etcd exited")
    lists = dict(controlplane_nodes=[cp.address for cp in cluster.controlplanes], worker_nodes=[cluster.workers[0].address])
    lift = 2.0

    timer = lift_later(cluster, lift, cluster.set_service_state, node, "etcd", "Running", True, "Health check successful")
    try:
        run = run_playbook(module_play(cluster, "talos_health", dict(lists, poll_interval=5, wait_timeout=60),
                                       cluster.controlplanes[0].address, "health"))
    finally:
        timer.join()
    elapsed = run.task("health")["result"]["elapsed"]
    # Polling every 5 s would notice the recovery at 5 s.
    assert lift <= elapsed < lift + LATE + 0.5, elapsed
