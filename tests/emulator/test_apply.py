# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ApplyConfiguration on configured nodes (server-behaviour.md §5)."""

import pytest
import yaml
from google.protobuf import duration_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

Mode = machine_pb2.ApplyConfigurationRequest.Mode
APPLY = "machine.MachineService/ApplyConfiguration"


def _request(data, mode=Mode.NO_REBOOT, **fields):
    return machine_pb2.ApplyConfigurationRequest(data=data if isinstance(data, bytes) else data.encode(), mode=mode, **fields)


def _changed(node, **machine_changes):
    document = yaml.safe_load(node.config_bytes)
    document["machine"].update(machine_changes)
    return yaml.safe_dump(document, sort_keys=False)


def _error(client, request, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(APPLY, request, **options)
    return excinfo.value.status, excinfo.value.message


def test_dry_run_of_identical_config_says_no_changes(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    client = api(cluster)
    # Same content, other key order: Talos compares re-encoded configs.
    reordered = yaml.safe_dump(yaml.safe_load(node.config_bytes), sort_keys=True)
    reply = client.call(APPLY, _request(reordered, dry_run=True)).messages[0]
    assert reply.mode == Mode.NO_REBOOT
    assert reply.mode_details == (
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\nNo changes.")
    assert [entry["dry_run"] for entry in cluster.audit(method="ApplyConfiguration")] == [True]
    assert cluster.audit(include_dry_run=False) == []


def test_dry_run_shows_a_unified_diff_and_applies_nothing(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    before = node.config_bytes
    changed = _changed(node, sysctls={"net.core.somaxconn": "65535"})
    reply = api(cluster).call(APPLY, _request(changed, mode=Mode.AUTO, dry_run=True)).messages[0]
    assert reply.mode == Mode.NO_REBOOT
    assert "--- old\n+++ new\n@@ " in reply.mode_details
    assert "+  sysctls:\n+    net.core.somaxconn: '65535'\n" in reply.mode_details
    assert node.config_bytes == before


def test_no_reboot_auto_and_staged_modes(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    client = api(cluster)
    first = _changed(node, sysctls={"a.b": "1"})
    reply = client.call(APPLY, _request(first, mode=Mode.AUTO)).messages[0]
    assert (reply.mode, reply.mode_details) == (Mode.NO_REBOOT, "Applied configuration without a reboot")
    assert node.config_bytes == first.encode() and node.persistent_config_bytes == first.encode()
    staged = _changed(node, sysctls={"a.b": "2"})
    reply = client.call(APPLY, _request(staged, mode=Mode.STAGED)).messages[0]
    assert (reply.mode, reply.mode_details) == (Mode.STAGED, "Staged configuration to be applied after the next reboot")
    assert node.config_bytes == first.encode() and node.staged_config_bytes == staged.encode()
    assert node.reboots == 0
    # The staged config becomes active with the next boot.
    client.call("machine.MachineService/Reboot")
    cluster.wait_until(lambda: node.reboots == 1)
    cluster.wait_ready(node)
    assert node.config_bytes == staged.encode() and node.staged_config_bytes is None


def test_reboot_mode_is_refused_on_v114(emulator, api):
    cluster = emulator()
    assert _error(api(cluster), _request(cluster.nodes[0].config_bytes, mode=Mode.REBOOT)) == (
        Status.UNIMPLEMENTED, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")


def test_try_mode_rolls_back_after_the_timeout(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    original = node.config_bytes
    trial = _changed(node, sysctls={"try.me": "1"})
    reply = api(cluster).call(APPLY, _request(trial, mode=Mode.TRY, try_mode_timeout=duration_pb2.Duration(nanos=300000000))).messages[0]
    assert reply.mode == Mode.TRY
    assert reply.mode_details == (
        "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in 300ms")
    assert node.config_bytes == trial.encode() and node.persistent_config_bytes == original
    cluster.wait_until(lambda: node.config_bytes == original, timeout=5)


def test_another_mode_cancels_the_try_rollback(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    client = api(cluster)
    trial = _changed(node, sysctls={"try.me": "1"})
    reply = client.call(APPLY, _request(trial, mode=Mode.TRY, try_mode_timeout=duration_pb2.Duration(seconds=90))).messages[0]
    assert reply.mode_details.endswith("reverted back in 1m30s")
    assert node.try_rollback is not None
    client.call(APPLY, _request(trial, mode=Mode.NO_REBOOT))
    assert node.try_rollback is None
    assert node.persistent_config_bytes == trial.encode()


def test_parse_and_validation_errors(emulator, api):
    cluster = emulator(workers=1)
    client = api(cluster)
    status, message = _error(client, _request(b"machine: [unclosed"))
    assert status == Status.INVALID_ARGUMENT and message.startswith("yaml:")
    assert _error(client, _request(b"apiVersion: v1alpha1\nkind: SideroLinkConfig\napiUrl: https://x\n")) == (
        Status.INVALID_ARGUMENT,
        "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
    status, message = _error(client, _request(_changed(cluster.nodes[0], type="database")))
    assert status == Status.INVALID_ARGUMENT and 'unknown machine type "database"' in message
    assert cluster.nodes[0].config["machine"]["type"] == "controlplane"


def test_operator_and_reader_may_not_apply_outside_maintenance(emulator, api):
    cluster = emulator()
    data = cluster.nodes[0].config_bytes
    assert _error(api(cluster, role="reader"), _request(data)) == (Status.PERMISSION_DENIED, "not authorized")
    assert _error(api(cluster, role="operator"), _request(data)) == (Status.PERMISSION_DENIED, "not authorized")
    # The reader passed the rules table (A, R) and was refused by the handler; the operator never got in.
    assert [(entry["roles"], entry["code"]) for entry in cluster.audit()] == [(["os:reader"], "PermissionDenied")]
    assert cluster.audit(include_failed=False) == []


def test_concurrent_apply_is_refused(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    client = api(cluster)
    cluster.faults.pause("ApplyConfiguration", 0.5)
    first = client.call_async(APPLY, _request(node.config_bytes))
    second = client.call_async(APPLY, _request(node.config_bytes))
    results = client.wait(first, second)
    errors = [result for result in results if isinstance(result, GRPCError)]
    assert len(errors) == 1
    assert (errors[0].status, errors[0].message) == (Status.FAILED_PRECONDITION, "another apply configuration is already in progress")
    codes = sorted(entry["code"] for entry in cluster.audit(method="ApplyConfiguration"))
    assert codes == ["FailedPrecondition", "OK"]


def test_v113_semantics_reboot_and_immediate_checks(emulator, api):
    cluster = emulator(talos_version="v1.13.0", reboot_seconds=0.1)
    node = cluster.nodes[0]
    client = api(cluster)
    needs_reboot = _changed(node, token="a.b")
    status, message = _error(client, _request(needs_reboot, mode=Mode.NO_REBOOT))
    assert status == Status.INVALID_ARGUMENT
    assert message.startswith("this config change can't be applied in immediate mode\ndiff:\n--- old\n+++ new\n")
    reply = client.call(APPLY, _request(needs_reboot, mode=Mode.AUTO, dry_run=True)).messages[0]
    assert reply.mode == Mode.REBOOT
    assert reply.mode_details.startswith(
        "Dry run summary:\nApplied configuration with a reboot: this config change can't be applied in immediate mode\ndiff:\n")
    reply = client.call(APPLY, _request(_changed(node, sysctls={"x.y": "1"}), mode=Mode.AUTO)).messages[0]
    assert (reply.mode, reply.mode_details) == (Mode.NO_REBOOT, "Applied configuration without a reboot")
    reply = client.call(APPLY, _request(needs_reboot, mode=Mode.REBOOT)).messages[0]
    assert (reply.mode, reply.mode_details) == (Mode.REBOOT, "Applied configuration with a reboot")
    cluster.wait_until(lambda: node.reboots == 1)
    cluster.wait_ready(node)
    assert node.config["machine"]["token"] == "a.b"
