# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_service through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def service_play(cluster, node, name, state, role="admin", **options):
    task = dict({"name": name, "state": state, "wait_timeout": 20}, **options)
    return module_play(cluster, "talos_service", task, node, "service", role=role)


def test_extension_service_stop_and_start_are_idempotent(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    cluster.add_extension_service(worker, "ext-tailscale")

    run = run_playbook(service_play(cluster, worker.address, "ext-tailscale", "stopped"), diff=True)
    result = run.task("service")
    assert result["status"] == "changed"
    assert result["result"]["before"]["state"] == "Running" and result["result"]["state"] == "Finished"
    assert result["result"]["response"] == 'Service "ext-tailscale" stopped'
    assert worker.services["ext-tailscale"].state == "Finished"
    assert [(e["method"], e["node"], e["service"]) for e in cluster.audit()] == [
        ("machine.MachineService/ServiceStop", worker.name, "ext-tailscale")]

    run = run_playbook(service_play(cluster, worker.address, "ext-tailscale", "stopped"))
    assert run.task("service")["status"] == "ok" and len(cluster.audit()) == 1

    run = run_playbook(service_play(cluster, worker.address, "ext-tailscale", "started"))
    assert run.task("service")["status"] == "changed" and run.task("service")["result"]["state"] == "Running"
    run = run_playbook(service_play(cluster, worker.address, "ext-tailscale", "started"))
    assert run.task("service")["status"] == "ok"
    assert [e["method"].rsplit("/", 1)[1] for e in cluster.audit()] == ["ServiceStop", "ServiceStart"]


def test_check_mode_changes_nothing(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    cluster.add_extension_service(node, "ext-foo")
    run = run_playbook(service_play(cluster, node.address, "ext-foo", "stopped"), check=True)
    result = run.task("service")
    assert result["status"] == "changed" and result["result"]["state"] == "Finished"
    assert node.services["ext-foo"].state == "Running" and cluster.audit() == []

    run = run_playbook(service_play(cluster, node.address, "kubelet", "restarted"), check=True)
    assert run.task("service")["status"] == "changed" and cluster.audit() == []


def test_kubelet_restart_waits_for_the_restarted_service(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    events_before = len(node.services["kubelet"].events)
    run = run_playbook(service_play(cluster, node.address, "kubelet", "restarted", wait=True))
    result = run.task("service")["result"]
    assert result["changed"] is True and result["state"] == "Running" and result["health"]["healthy"] is True
    assert result["after"]["events"][-1]["msg"] == "Service restarted via API"
    assert len(node.services["kubelet"].events) == events_before + 2
    assert [e["method"] for e in cluster.audit()] == ["machine.MachineService/ServiceRestart"]


def test_services_talos_manages_are_refused_before_any_call(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0].address
    run = run_playbook(service_play(cluster, node, "etcd", "restarted"), expect_rc=2)
    assert run.task("service")["result"]["msg"] == (
        "Service etcd cannot be controlled through the Talos API: Talos only lets the API start and restart kubelet "
        "and start, stop and restart system extension services (ext-<name>); every other service is managed by Talos itself.")
    run = run_playbook(service_play(cluster, node, "kubelet", "stopped"), expect_rc=2)
    assert run.task("service")["result"]["msg"] == (
        "Talos does not let the API stop service kubelet: it can only be started or restarted through the API, "
        "because Talos keeps managing it itself.")
    assert cluster.audit() == []


def test_unknown_extension_service_names_the_ones_there(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    run = run_playbook(service_play(cluster, cluster.controlplanes[0].address, "ext-missing", "started"), expect_rc=2)
    message = run.task("service")["result"]["msg"]
    assert message.startswith("Service ext-missing is not defined on node %s (its services are: apid, " % cluster.controlplanes[0].address)
    assert cluster.audit() == []


def test_operator_may_restart_reader_gets_the_roles_needed(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    run = run_playbook(service_play(cluster, node.address, "kubelet", "restarted", role="operator"))
    assert run.task("service")["status"] == "changed"
    assert cluster.audit()[0]["roles"] == ["os:operator"]

    run = run_playbook(service_play(cluster, node.address, "kubelet", "restarted", role="reader"), expect_rc=2)
    assert ("it needs role os:admin or os:operator and the client certificate carries role os:reader"
            in run.task("service")["result"]["msg"])
    assert len(cluster.audit()) == 1


def test_kubelet_restart_on_several_nodes_in_one_task(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2)
    nodes = [node.address for node in cluster.nodes]
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
        "name": "service", "talos_linux.talos.talos_service": {
            "talosconfig": cluster.talosconfig_path(), "nodes": nodes, "name": "kubelet", "state": "restarted",
            "wait_timeout": 20}}]}
    result = run_playbook(play, diff=True).task("service")
    assert result["status"] == "changed", result["result"]
    assert sorted(result["result"]["nodes"]) == sorted(nodes)
    assert {entry["state"] for entry in result["result"]["nodes"].values()} == {"Running"}
    assert sorted(result["result"]["diff"]["after"]) == sorted(nodes)
    assert sorted(entry["node"] for entry in cluster.audit(method="ServiceRestart")) == sorted(n.name for n in cluster.nodes)
