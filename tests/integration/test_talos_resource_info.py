# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_resource_info through ansible-playbook against the emulator: list, get, aliases, labels, redaction, waits."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading
import time

from module_plays import module_play
from playbook_runner import when

from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED


def info_task(name, **options):
    return {"name": name, "talos_linux.talos.talos_resource_info": options}


def test_list_get_aliases_labels_and_redaction(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.set_resource_labels(cp, "NodeAddresses.net.talos.dev", "current", {"talos.dev/kind": "current"})
    cluster.set_resource_labels(cp, "NodeAddresses.net.talos.dev", "routed", {"talos.dev/kind": "routed"})
    play = module_play(cluster, "talos_resource_info", {"type": "members"}, cp.address, "members")
    play["tasks"] += [
        info_task("status of both", type="MachineStatus", id="machine", nodes=[cp.address, worker.address], node="{{ omit }}"),
        info_task("missing", type="MachineStatuses.runtime.talos.dev", id="nope"),
        info_task("labelled", type="nodeaddress", label_selectors=["talos.dev/kind in (current, other)"]),
        info_task("unlabelled", type="NodeAddress", label_selectors=["!talos.dev/kind"]),
        info_task("not routed", type="NodeAddress", label_selectors=["talos.dev/kind", "talos.dev/kind!=routed"]),
        info_task("config", type="mc", id="v1alpha1"),
    ]
    run = run_playbook(play, check=True)

    members = run.task("members")["result"]
    assert members["changed"] is False and members["type"] == "Members.cluster.talos.dev" and members["namespace"] == "cluster"
    assert sorted(item["spec"]["hostname"] for item in members["resources"]) == sorted([cp.hostname, worker.hostname])
    assert {item["node"] for item in members["resources"]} == {cp.address}
    statuses = run.task("status of both")["result"]
    assert "resources" not in statuses
    assert [(item["node"], item["metadata"]["id"], item["spec"]["stage"])
            for node in (cp.address, worker.address) for item in statuses["nodes"][node]["resources"]] == [
        (cp.address, "machine", "running"), (worker.address, "machine", "running")]
    assert run.task("missing")["result"]["resources"] == []
    assert [item["metadata"]["id"] for item in run.task("labelled")["result"]["resources"]] == ["current"]
    assert run.task("labelled")["result"]["resources"][0]["metadata"]["labels"] == {"talos.dev/kind": "current"}
    assert [item["metadata"]["id"] for item in run.task("unlabelled")["result"]["resources"]] == ["accumulative", "default"]
    assert [item["metadata"]["id"] for item in run.task("not routed")["result"]["resources"]] == ["current"]
    config = run.task("config")["result"]["resources"][0]["spec"]
    documents = config if isinstance(config, list) else [config]
    assert documents[0]["machine"]["token"] == REDACTED and documents[0]["machine"]["ca"]["key"] == REDACTED
    assert cp.config["machine"]["token"] not in run.stdout


def test_bad_type_and_selector_fail_clearly(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True, reboot_seconds=0.1)
    play = module_play(cluster, "talos_resource_info", {"type": "nosuchthing"}, cluster.controlplanes[0].address, "bad type",
                       ignore_errors=True)
    play["tasks"].append(dict(info_task("bad selector", type="members", label_selectors=["a = = b"]), ignore_errors=True))
    run = run_playbook(play)
    assert "'nosuchthing' is not a resource type" in run.task("bad type")["result"]["msg"]
    assert "label_selectors entry 'a = = b'" in run.task("bad selector")["result"]["msg"]


def test_wait_for_a_condition(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.add_diagnostic(worker, "address-overlap", "addresses overlap")
    start = cluster.calls_served

    def cure():
        cluster.wait_until(lambda: cluster.calls_served > start + 2, timeout=60)
        threading.Event().wait(1.5)
        cluster.add_diagnostic(worker, "address-overlap", None)
        cluster.set_service_state(worker, "kubelet", "Finished", healthy=False)

    thread = threading.Thread(target=cure)
    thread.start()
    play = module_play(cluster, "talos_resource_info", {
        "type": "Diagnostics", "wait": True, "wait_timeout": 60, "wait_condition": {"state": "absent"}}, worker.address, "gone")
    play["tasks"] += [
        info_task("kubelet stopped", type="Service", id="kubelet", wait=True, wait_timeout=30,
                  wait_condition={"field": "running", "value": False}),
        info_task("ready on both", type="MachineStatus", id="machine", nodes=[cp.address, worker.address], node="{{ omit }}", wait=True,
                  wait_condition={"field": "status.ready", "value": "true"}),
        dict(info_task("never", type="MachineStatus", id="machine", wait=True, wait_timeout=2,
                       wait_condition={"field": "stage", "value": "upgrading"}), ignore_errors=True),
        # The watch's first, empty reply ("established") must not read as "the resource is absent".
        dict(info_task("still there", type="MachineStatus", id="machine", wait=True, wait_timeout=2,
                       wait_condition={"state": "absent"}), ignore_errors=True),
    ]
    try:
        run = run_playbook(play)
    finally:
        thread.join()
    gone = run.task("gone")["result"]
    assert gone["resources"] == [] and gone["elapsed"] >= 1
    stopped = run.task("kubelet stopped")["result"]["resources"]
    assert stopped[0]["spec"]["running"] is False
    both = run.task("ready on both")["result"]
    assert "resources" not in both and [len(both["nodes"][node]["resources"]) for node in (cp.address, worker.address)] == [1, 1]
    never = run.task("never")["result"]
    assert run.task("never")["status"] == "failed"
    assert "waiting for MachineStatuses.runtime.talos.dev machine on node %s to be present with stage=upgrading" % worker.address in never["msg"]
    assert "stage=running" in never["msg"]
    assert run.task("still there")["status"] == "failed"


def test_a_wait_rides_out_an_endpoint_that_refuses_until_it_is_back(emulator, run_playbook, tmp_path):
    # The type is resolved inside the wait: an endpoint still booting does not fail the task at once.
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.faults.make_unreachable(cp)
    # The outage ends 3 s after the play reaches the wait, however long ansible-playbook took to start.
    started = tmp_path / "waiting"

    def back_after_3_seconds():
        time.sleep(3)
        cluster.faults.make_reachable(cp)

    back = when(started.exists, back_after_3_seconds, timeout=120)
    play = module_play(cluster, "talos_resource_info", {
        "type": "MachineStatus", "id": "machine", "wait": True, "wait_timeout": 60,
        "wait_condition": {"field": "stage", "value": "running"}}, worker.address, "through the outage")
    play["tasks"].insert(0, {"name": "reach the wait", "ansible.builtin.file": {"path": str(started), "state": "touch"}})
    try:
        run = run_playbook(play)
    finally:
        back.join()
    waited = run.task("through the outage")["result"]
    assert waited["resources"][0]["spec"]["stage"] == "running" and waited["elapsed"] >= 1
    assert waited["type"] == "MachineStatuses.runtime.talos.dev"
