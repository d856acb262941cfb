# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_health through ansible-playbook against the emulator: healthy clusters, faults named, faults lifted in time."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading

import pytest

from module_plays import module_play


def health_play(cluster, node=None, **options):
    return module_play(cluster, "talos_health", dict({"poll_interval": 1}, **options), node, "health")


def lift_later(cluster, seconds, function, *args):
    """Call ``function(*args)`` ``seconds`` after the next playbook's module starts calling the cluster."""
    start = cluster.calls_served

    def lift():
        cluster.wait_until(lambda: cluster.calls_served > start, timeout=60)
        threading.Event().wait(seconds)
        function(*args)

    thread = threading.Thread(target=lift)
    thread.start()
    return thread


def test_healthy_cluster_passes_with_discovered_nodes(emulator, run_playbook):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True, reboot_seconds=0.1)
    run = run_playbook(health_play(cluster, wait_timeout=10), check=True)
    result = run.task("health")["result"]
    assert result["changed"] is False and result["node_source"] == "discovery"
    assert result["controlplane_nodes"] == sorted(node.address for node in cluster.controlplanes)
    assert result["worker_nodes"] == [cluster.workers[0].address]
    assert [check["name"] for check in result["checks"]] == [
        "etcd_healthy", "etcd_members_consistent", "etcd_members_are_control_planes", "apid_ready", "memory_sizes",
        "disk_sizes", "no_diagnostics", "kubelet_healthy", "boot_sequence_done"]
    assert {check["state"] for check in result["checks"]} == {"passed"}
    assert cluster.audit() == []


def _stop_etcd(cluster, node):
    cluster.set_service_state(node, "etcd", "Failed", healthy=False, message="etcd exited")


def _start_etcd(cluster, node):
    cluster.set_service_state(node, "etcd", "Running", healthy=True, message="Health check successful")


def _remove_member(cluster, node):
    cluster.call(cluster.etcd.remove, cluster.etcd.member_of(node))


def _add_member(cluster, node):
    cluster.call(node.join_etcd)


def _down(cluster, node):
    cluster.faults.make_unreachable(node)


def _up(cluster, node):
    cluster.faults.make_reachable(node)


def _diagnose(cluster, node):
    cluster.add_diagnostic(node, "address-overlap", "host and Kubernetes pod/service CIDR addresses overlap", ["overlap: 10.0.0.0/8"])


def _cure(cluster, node):
    cluster.add_diagnostic(node, "address-overlap", None)


@pytest.mark.parametrize("fault, lift, target, check", [
    (_stop_etcd, _start_etcd, "controlplane", "etcd_healthy"),
    (_remove_member, _add_member, "controlplane", "etcd_members_are_control_planes"),
    (_down, _up, "worker", "apid_ready"),
    (_diagnose, _cure, "worker", "no_diagnostics"),
])
def test_fault_is_named_then_lifted_within_the_wait(emulator, run_playbook, fault, lift, target, check):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True, reboot_seconds=0.1)
    node = cluster.controlplanes[1] if target == "controlplane" else cluster.workers[0]
    lists = dict(controlplane_nodes=[cp.address for cp in cluster.controlplanes], worker_nodes=[cluster.workers[0].address])
    fault(cluster, node)

    run = run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=2, **lists), expect_rc=2)
    assert run.task("health")["status"] == "failed"
    result = run.task("health")["result"]
    assert result["failed_check"] == check and result["node_source"] == "options"
    assert node.address in result["failed_nodes"]
    assert result["msg"].startswith("Cluster health check %s" % check) and node.address in result["msg"]
    states = dict((c["name"], c["state"]) for c in result["checks"])
    assert states[check] == "failed"
    names = [c["name"] for c in result["checks"]]
    assert all(states[name] == "passed" for name in names[:names.index(check)])
    assert all(states[name] == "pending" for name in names[names.index(check) + 1:])

    timer = lift_later(cluster, 2, lift, cluster, node)
    try:
        run = run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=60, **lists))
    finally:
        timer.join()
    result = run.task("health")["result"]
    assert {c["state"] for c in result["checks"]} == {"passed"}
    assert result["elapsed"] >= 1.5


def test_server_side_check_over_the_rpc(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    # Without a Kubernetes API the server-side check stops at its first Kubernetes check, as Talos's does.
    run = run_playbook(health_play(cluster, checks="all", wait_timeout=3), expect_rc=2)
    result = run.task("health")["result"]
    assert result["failed_check"] == "all_k8s_nodes_to_report" and "/api/v1/nodes" in result["msg"]
    # As with a Kubernetes API whose kubelets the nodes are (run_kubelets): the Kubernetes checks pass.
    cluster.model.kubernetes_api_serving = True
    run = run_playbook(health_play(cluster, checks="all", wait_timeout=10))
    result = run.task("health")["result"]
    names = [check["name"] for check in result["checks"]]
    assert names[:3] == ["etcd_healthy", "etcd_members_consistent", "etcd_members_are_control_planes"]
    assert "all_k8s_nodes_to_report_ready" in names and "coredns_to_report_ready" in names
    assert {check["state"] for check in result["checks"]} == {"passed"} and result["node_source"] == "discovery"

    worker = cluster.workers[0]
    _diagnose(cluster, worker)
    run = run_playbook(health_play(cluster, checks="all", wait_timeout=2), expect_rc=2)
    result = run.task("health")["result"]
    # Talos names each node with its diagnostics' messages ("active diagnostics: <node>: <message>").
    assert result["failed_check"] == "no_diagnostics"
    assert "active diagnostics: %s: host and Kubernetes pod/service CIDR" % worker.address in result["msg"]
    assert worker.address in result["msg"]
    assert [c["state"] for c in result["checks"]][-1] == "failed"

    timer = lift_later(cluster, 2, _cure, cluster, worker)
    try:
        run = run_playbook(health_play(cluster, checks="all", wait_timeout=60))
    finally:
        timer.join()
    result = run.task("health")["result"]
    assert {check["state"] for check in result["checks"]} == {"passed"} and result["elapsed"] >= 1.5


def test_a_long_wait_shows_its_progress(emulator, run_playbook):
    cluster = emulator(controlplanes=2, workers=1, bootstrapped=True, reboot_seconds=0.1)
    node = cluster.controlplanes[1]
    lists = dict(controlplane_nodes=[cp.address for cp in cluster.controlplanes], worker_nodes=[cluster.workers[0].address])
    _stop_etcd(cluster, node)
    timer = lift_later(cluster, 7, _start_etcd, cluster, node)
    try:
        # Progress is shown live only through the controller door.
        run = run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=60, **lists),
                           env={"TALOS_TEST_DOOR": ""})
    finally:
        timer.join()
    # The controller door prints each change of the check that holds the wait up, once it lasts 5 seconds.
    waiting = "\ncluster: waiting for etcd_healthy on %s" % node.address  # localhost stands for no node: no host name
    assert waiting + " (" in run.stdout
    assert waiting + " → all checks passed (" in run.stdout


def test_wait_timeout_0_checks_once_and_names_every_unhealthy_node(emulator, run_playbook):
    cluster = emulator(controlplanes=2, workers=2, bootstrapped=True, reboot_seconds=0.1)
    cp2, (diagnosed, off) = cluster.controlplanes[1], cluster.workers
    lists = dict(controlplane_nodes=[cp.address for cp in cluster.controlplanes],
                 worker_nodes=[worker.address for worker in cluster.workers])
    assert run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=0, **lists)).task(
        "health")["result"]["unhealthy_nodes"] == {}
    _stop_etcd(cluster, cp2)
    _diagnose(cluster, diagnosed)
    cluster.power_off(off.name)

    run = run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=0, **lists), check=True,
                       expect_rc=2)
    result = run.task("health")["result"]
    failed = dict((check["name"], check["nodes"]) for check in result["checks"] if check["state"] == "failed")
    assert failed == {"etcd_healthy": [cp2.address], "apid_ready": [off.address], "no_diagnostics": [diagnosed.address]}
    assert "pending" not in [check["state"] for check in result["checks"]]
    assert sorted(result["unhealthy_nodes"]) == sorted([cp2.address, diagnosed.address, off.address])
    assert result["unhealthy_nodes"][cp2.address] == ['etcd_healthy: service "etcd" is Failed: service is failed']
    assert result["unhealthy_nodes"][off.address][0].startswith("apid_ready: Node %s is unreachable" % off.address)
    assert len(result["unhealthy_nodes"][off.address]) == 1 and result["unreachable_nodes"] == [off.address]
    assert result["msg"].startswith("The cluster is not healthy: etcd_healthy (etcd to be healthy) failed - %s: " % cp2.address)
    assert result["failed_check"] == "etcd_healthy" and sorted(result["failed_nodes"]) == sorted(result["unhealthy_nodes"])
    assert result["elapsed"] < 10 and cluster.audit() == []

    # Nodes known to be down are left out, of a wait as of a single check.
    ignored = dict(lists, ignore_nodes=[cp2.address, diagnosed.address, off.address])
    for wait_timeout in (0, 5):
        result = run_playbook(health_play(cluster, cluster.controlplanes[0].address, wait_timeout=wait_timeout, **ignored)
                              ).task("health")["result"]
        assert {check["state"] for check in result["checks"]} == {"passed"}


@pytest.mark.parametrize("options, message", [
    (dict(wait_timeout=0), "wait_timeout 0 (check once) works with checks: talos only"),
    (dict(ignore_nodes=["10.5.0.9"]), "ignore_nodes works with checks: talos only"),
])
def test_the_server_side_check_neither_checks_once_nor_ignores_nodes(emulator, run_playbook, options, message):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    result = run_playbook(health_play(cluster, checks="all", **options), expect_rc=2).task("health")["result"]
    assert result["msg"].startswith(message)
