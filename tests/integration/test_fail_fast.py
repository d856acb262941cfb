# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Dead endpoints and unreachable nodes fail a task within 15 s, naming them and the cause (issue 26)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

FACTS = "talos_linux.talos.talos_facts"
# What the tasks may take at most with the default options (timeout: 60).
FAIL_FAST_SECONDS = 15


def timed_play(talosconfig, facts_options):
    """talos_facts between two clock readings; the second task reports how long it took."""
    return [{
        "name": "fail fast",
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}},
        "tasks": [
            {"name": "start", "ansible.builtin.set_fact": {"started": "{{ now().timestamp() }}"}},
            {"name": "gather", FACTS: facts_options, "ignore_errors": True, "register": "gathered"},
            {"name": "elapsed", "ansible.builtin.set_fact": {"elapsed": "{{ now().timestamp() - started | float }}"}},
        ],
    }]


def elapsed(run):
    return float(run.task("elapsed")["result"]["ansible_facts"]["elapsed"])


def test_a_powered_off_endpoint_fails_the_task_at_once_naming_it(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    cluster.faults.make_unreachable(node)
    run = run_playbook(timed_play(cluster.talosconfig_path(), {"node": node.address}))

    gather = run.task("gather")
    assert gather["status"] == "failed"
    assert gather["result"]["msg"] == (
        "Talos endpoint %s (connection refused) is unreachable; endpoints must be control-plane nodes whose Talos API "
        "is reachable on port 50000." % node.endpoint)
    assert gather["result"]["code"] == "Unavailable"
    assert elapsed(run) < 5, "a refused connection is not retried (took %.1f s)" % elapsed(run)


def test_an_endpoint_that_never_answers_fails_the_task_within_15_seconds(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    cluster.faults.make_unreachable(node, cause="timeout")
    run = run_playbook(timed_play(cluster.talosconfig_path(), {"node": node.address}))

    gather = run.task("gather")
    assert gather["status"] == "failed"
    assert gather["result"]["msg"].startswith("Talos endpoint %s (timed out connecting) is unreachable" % node.endpoint)
    assert elapsed(run) < FAIL_FAST_SECONDS, "took %.1f s" % elapsed(run)


def test_several_nodes_through_a_healthy_endpoint_report_the_unreachable_one(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=3, bootstrapped=True)
    dead, no_route = cluster.workers[0], cluster.workers[1]
    cluster.faults.make_unreachable(dead)
    cluster.faults.make_unreachable(no_route, cause="no-route")
    addresses = [node.address for node in cluster.nodes]
    run = run_playbook(timed_play(cluster.talosconfig_path(), {"nodes": addresses}))

    gather = run.task("gather")
    assert gather["status"] == "failed" and gather["result"]["msg"].startswith(
        "2 of 4 nodes failed (%s, %s): " % (dead.address, no_route.address))
    nodes = gather["result"]["nodes"]
    for node in cluster.nodes:
        if node in (dead, no_route):
            continue
        assert nodes[node.address]["hostname"] == node.hostname and "failed" not in nodes[node.address]
    for node, cause in ((dead, "connection refused"), (no_route, "no route to host")):
        assert nodes[node.address]["failed"] is True
        assert nodes[node.address]["msg"].startswith("Node %s is unreachable through endpoint %s (%s): "
                                                     % (node.address, cluster.controlplanes[0].endpoint, cause))
    assert elapsed(run) < 5, "unreachable nodes are not retried (took %.1f s)" % elapsed(run)


def test_one_unreachable_node_fails_its_task_naming_it(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    cluster.faults.make_unreachable(worker)
    run = run_playbook(timed_play(cluster.talosconfig_path(), {"node": worker.address}))

    gather = run.task("gather")
    assert gather["status"] == "failed"
    assert gather["result"]["msg"] == (
        "Node %s is unreachable through endpoint %s (connection refused): nothing answers on its Talos API port 50000; "
        "the node may be powered off or rebooting." % (worker.address, cluster.controlplanes[0].endpoint))
    assert gather["result"]["node"] == worker.address
    assert elapsed(run) < 5, "took %.1f s" % elapsed(run)


def test_a_node_in_maintenance_mode_behind_the_endpoint_fails_at_once_saying_how_to_reach_it(emulator, run_playbook):
    """The endpoint relays that it does not trust the node's self-signed maintenance certificate: permanent, so
    not retried for the whole timeout, and the message says how to reach the node instead (issue 31)."""
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    worker = cluster.workers[0]
    cluster.call(lambda: setattr(worker, "config", None))  # reset: back in maintenance mode
    run = run_playbook(timed_play(cluster.talosconfig_path(), {"node": worker.address}))

    gather = run.task("gather")
    assert gather["status"] == "failed"
    assert gather["result"]["msg"] == (
        "Node %s is unreachable through endpoint %s: the endpoint does not trust its certificate (x509: certificate "
        "signed by unknown authority), so the node is probably in maintenance mode (not configured yet, or reset) or "
        "belongs to another cluster; reach it directly with endpoints: [%s] and insecure: true."
        % (worker.address, cluster.controlplanes[0].endpoint, worker.address))
    assert elapsed(run) < 5, "a relayed certificate failure is not retried (took %.1f s)" % elapsed(run)
