# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fault injection, the audit log and the tests/talos-emulator command."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from emulator_client import ApiClient

M = "machine.MachineService/"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fail_a_named_rpc_n_times(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster)
    worker = cluster.workers[0].address
    cluster.faults.fail("Version", "Unavailable", message="node is busy", times=2, node="worker-1")
    assert client.call(M + "Version").messages[0].version.tag == "v1.14.0"
    for _attempt in range(2):
        with pytest.raises(GRPCError) as excinfo:
            client.call(M + "Version", node=worker)
        assert (excinfo.value.status, excinfo.value.message) == (Status.UNAVAILABLE, "node is busy")
    assert client.call(M + "Version", node=worker).messages[0].version.tag == "v1.14.0"


def test_an_action_runs_before_the_node_answers_the_named_rpc(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster)
    worker = cluster.workers[0]
    seen = []
    cluster.faults.on_call("Hostname", lambda node: seen.append((node.name, node.stage)), times=2, node="worker-1")
    client.call(M + "Version", node=worker.address)
    client.call(M + "Hostname")
    assert seen == []
    for _attempt in range(3):
        client.call(M + "Hostname", node=worker.address)
    assert seen == [("worker-1", "running")] * 2


def test_a_node_powered_off_when_a_change_is_seen_loses_the_call_that_meets_it(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster)
    worker = cluster.workers[0]
    changed = []
    cluster.faults.power_off_when("worker-1", lambda node: bool(changed))
    assert client.call(M + "Hostname", node=worker.address).messages
    changed.append(True)
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + "Hostname", node=worker.address)
    assert (excinfo.value.status, excinfo.value.message) == (Status.UNAVAILABLE, "error reading from server: EOF")
    cluster.wait_until(lambda: not worker.powered, 5)
    cluster.power_on(worker)
    assert client.call(M + "Hostname", node=worker.address).messages, "the node is powered off once only"


def test_latency_makes_a_short_deadline_expire(emulator, api):
    cluster = emulator()
    client = api(cluster)
    cluster.faults.set_latency(cluster.nodes[0], 2)
    # grpclib reports its own deadline as TimeoutError("Deadline exceeded").
    with pytest.raises(TimeoutError):
        client.call(M + "Version", timeout=0.3)
    cluster.faults.set_latency(cluster.nodes[0], 0)
    assert client.call(M + "Version").messages


def test_cut_stream_after_k_frames(emulator, api):
    cluster = emulator(bootstrapped=True)
    client = api(cluster)
    cluster.call(cluster.nodes[0].place_file, "/var/lib/streamed.bin", size=5000)
    read = machine_pb2.ReadRequest(path="/var/lib/streamed.bin")
    cluster.faults.cut_stream("Read", after_frames=2)
    with pytest.raises((StreamTerminatedError, GRPCError)):
        client.call(M + "Read", read)
    assert len(client.call(M + "Read", read)) > 2


def test_relayed_stream_breaks_when_the_target_reboots(emulator, api):
    cluster = emulator(workers=1, reboot_seconds=0.5)
    worker = cluster.workers[0]
    client = api(cluster)
    events = client.call_async(M + "Events", machine_pb2.EventsRequest(), node=worker.address, timeout=5)
    client.call(M + "Reboot", node=worker.address)
    result = client.wait(events)[0]
    assert isinstance(result, GRPCError)
    assert (result.status, result.message) == (Status.UNAVAILABLE, "error reading from server: EOF")


def test_audit_log_is_written_as_json_lines(emulator, api):
    cluster = emulator()
    client = api(cluster)
    client.call(M + "ServiceRestart", machine_pb2.ServiceRestartRequest(id="kubelet"))
    with open(os.path.join(cluster.state_dir, "audit.jsonl")) as log:
        entries = [json.loads(line) for line in log]
    assert entries == cluster.audit()
    assert entries[0]["method"] == "machine.MachineService/ServiceRestart"
    assert entries[0]["node"] == "controlplane-1" and entries[0]["roles"] == ["os:admin"]
    assert cluster.audit(method="Reboot") == [] and cluster.audit(node="controlplane-1") == entries


def test_state_files_match_the_cluster(emulator):
    cluster = emulator(controlplanes=2, workers=1)
    files = set(os.listdir(cluster.state_dir))
    assert {"talosconfig", "talosconfig-operator", "talosconfig-reader", "controlplane.yaml", "worker.yaml", "secrets.yaml",
            "inventory.yml", "audit.jsonl", "state.json"} <= files
    with open(cluster.talosconfig_path()) as config:
        talosconfig = yaml.safe_load(config)
    assert talosconfig["contexts"]["emulated"]["endpoints"] == [node.endpoint for node in cluster.controlplanes]
    with open(os.path.join(cluster.state_dir, "inventory.yml")) as inventory_file:
        inventory = yaml.safe_load(inventory_file)
    hosts = inventory["all"]["children"]["workers"]["hosts"]
    assert hosts == {"worker-1": {"ansible_host": cluster.workers[0].address}}
    assert inventory["all"]["vars"]["talosconfig"] == cluster.talosconfig_path()
    with open(os.path.join(cluster.state_dir, "state.json")) as state_file:
        state = json.load(state_file)
    assert [node["endpoint"] for node in state["nodes"]] == [node.endpoint for node in cluster.nodes]


def test_command_line_up_status_down(tmp_path):
    state_dir = str(tmp_path / "cli")
    command = [sys.executable, os.path.join(REPO, "tests", "talos-emulator")]
    up = subprocess.run(command + ["up", "--state-dir", state_dir, "--controlplanes", "1", "--workers", "1", "--reboot-seconds", "0.2"],
                        capture_output=True, text=True, check=False, timeout=60)
    assert up.returncode == 0, up.stderr
    try:
        with open(os.path.join(state_dir, "state.json")) as state_file:
            state = json.load(state_file)
        status = subprocess.run(command + ["status", "--state-dir", state_dir], capture_output=True, text=True, check=False, timeout=30)
        assert status.returncode == 0 and status.stdout.count("listening") == 2
        with open(os.path.join(state_dir, "talosconfig")) as config:
            talosconfig = config.read()
        client = ApiClient(endpoint=state["endpoint"], talosconfig=talosconfig)
        try:
            reply = client.call(M + "Hostname", node=state["nodes"][1]["address"])
        finally:
            client.close()
        assert reply.messages[0].hostname == "worker-1"
        fault = subprocess.run(command + ["fault", "--state-dir", state_dir, "fail", "Hostname", "PermissionDenied", "times=1"],
                               capture_output=True, text=True, check=False, timeout=30)
        assert fault.returncode == 0, fault.stderr
        client = ApiClient(endpoint=state["endpoint"], talosconfig=talosconfig)
        try:
            with pytest.raises(GRPCError) as excinfo:
                client.call(M + "Hostname")
            assert (excinfo.value.status, excinfo.value.message) == (Status.PERMISSION_DENIED, "injected failure")
            assert client.call(M + "Hostname").messages[0].hostname == "controlplane-1"
        finally:
            client.close()
        bad = subprocess.run(command + ["fault", "--state-dir", state_dir, "make_unreachable", "nobody"],
                             capture_output=True, text=True, check=False, timeout=30)
        assert bad.returncode != 0 and "KeyError" in bad.stderr
    finally:
        down = subprocess.run(command + ["down", "--state-dir", state_dir], capture_output=True, text=True, check=False, timeout=30)
    assert down.returncode == 0
    assert not os.path.exists(os.path.join(state_dir, "state.json"))
