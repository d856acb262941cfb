# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_apply_config: the decision from the dry run, modes per Talos version, redaction."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.config import machine_config
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits as talos_waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosConnectionError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_apply_config
from fake_talos import FakeTalos, cosi_state, fails_with, resource as fake_resource
from module_fakes import run_task

Mode = machine_pb2.ApplyConfigurationRequest.Mode

TOKEN = "wxyz12.abcdefghijklmnop"
CA_KEY = "b3MtY2Eta2V5LXByaXZhdGUtdmFsdWU="
CONFIG = """\
version: v1alpha1
machine:
  type: worker
  token: %s
  ca:
    crt: cHVibGljLWNlcnRpZmljYXRl
    key: %s
  network:
    hostname: worker-1
cluster:
  controlPlane:
    endpoint: https://10.5.0.2:6443
""" % (TOKEN, CA_KEY)

OLD_KEY = "b2xkLWNhLWtleS1wcml2YXRlLXZhbHVl"
DIFF = """--- old
+++ new
@@ -1,6 +1,6 @@
 machine:
   ca:
     crt: cHVibGljLWNlcnRpZmljYXRl
-    key: %s
+    key: %s
   network:
-    hostname: worker-0
+    hostname: worker-1""" % (OLD_KEY, CA_KEY)


def dry_run_details(diff, text="Applied configuration without a reboot"):
    return "Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s" % (text, diff)


def talos_node(version="v1.14.0", diff=DIFF, maintenance=False, apply_error=None, warnings=(), auto_reboots=False,
               members=None, active_config=None):
    """A node answering ApplyConfiguration like Talos ``version`` does.

    A worker, unless ``members`` ({hostname: healthy}, member i at 10.5.0.i)
    makes it control plane cp-3 (10.5.0.3) of those etcd members.
    ``active_config`` is the text of its active machine config.
    """
    v114 = version >= "v1.14"

    def apply(request, _node):
        if apply_error:
            return fails_with(*apply_error)
        mode = request.mode
        if mode == Mode.REBOOT and v114:
            if not maintenance:
                return fails_with("Unimplemented", "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
            mode = Mode.NO_REBOOT
        elif mode == Mode.AUTO:
            # Before v1.14, AUTO falls back to a reboot for changes that cannot be applied live.
            mode = Mode.REBOOT if auto_reboots and not v114 else Mode.NO_REBOOT
        if request.dry_run:
            return [machine_pb2.ApplyConfiguration(mode=mode, mode_details=dry_run_details(diff))]
        return [machine_pb2.ApplyConfiguration(mode=mode, mode_details="Applied configuration without a reboot",
                                               warnings=warnings)]

    client = FakeTalos(insecure=maintenance, answers={
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag=version))],
        rpc.APPLY_CONFIGURATION: apply,
        rpc.READ: b"boot-1\n",
        rpc.REBOOT: [machine_pb2.Reboot(actor_id="actor")],
        # Several nodes' applies take turns by machine type.
        rpc.COSI_GET: cosi_state(fake_resource("config", "MachineTypes.config.talos.dev", "machine-type", "worker"),
                                 fake_resource("config", "MachineConfigs.config.talos.dev", "v1alpha1", active_config or CONFIG)),
        rpc.ETCD_MEMBER_LIST: fails_with("Unimplemented", "member list is only available on control plane nodes"),
        rpc.HOSTNAME: [machine_pb2.Hostname(hostname="cp-3")],
    })
    if members is not None:
        client.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
            machine_pb2.EtcdMember(id=i, hostname=name, client_urls=["https://10.5.0.%d:2379" % i])
            for i, name in enumerate(members, 1)])])
        for i, healthy in enumerate(members.values(), 1):
            client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
                member_id=i, leader=1))] if healthy else TalosConnectionError("unreachable", code="Unavailable"),
                node="10.5.0.%d" % i)
    return client


def applies(client):
    return client.requests(rpc.APPLY_CONFIGURATION)


@pytest.fixture
def waits(monkeypatch):
    seen = []
    monkeypatch.setattr(talos_waits, "wait_for_reboot",
                        lambda client, node, boot_id, waiter: seen.append(("reboot", node, boot_id, waiter.timeout)) or "boot-2")
    monkeypatch.setattr(talos_waits, "wait_for_secure_api",
                        lambda client, node, waiter: seen.append(("secure_api", node, waiter.timeout)))
    return seen


def run(client, nodes=("10.5.0.3",), **kwargs):
    options = dict(config=CONFIG, wait_timeout=30)
    options.update(kwargs)
    return run_task(talos_apply_config, client, targets=nodes, **options)


class TestDecision:
    def test_changed_config_is_dry_run_then_applied(self, waits):
        client = talos_node()
        ok, result, _task = run(client)
        assert ok and result["changed"] is True and result["rebooted"] is False
        assert result["mode"] == "no_reboot" and result["node"] == "10.5.0.3"
        assert [request.dry_run for request in applies(client)] == [True, False]
        assert all(request.mode == Mode.AUTO and request.data == CONFIG.encode() for request in applies(client))
        assert "Reboot" not in client.names() and waits == []

    def test_apply_is_retried_on_concurrent_apply(self, waits):
        client = talos_node()
        run(client)
        assert all(call.kwargs["retry_codes"] == ("FailedPrecondition",) for call in client.calls_to(rpc.APPLY_CONFIGURATION))

    def test_no_changes_means_unchanged_and_nothing_applied(self, waits):
        client = talos_node(diff="No changes.")
        ok, result, _task = run(client, diff=True)
        assert ok and result["changed"] is False
        assert [request.dry_run for request in applies(client)] == [True]
        assert "diff" not in result

    def test_check_mode_stops_after_the_dry_run(self, waits):
        client = talos_node()
        ok, result, _task = run(client, check_mode=True, diff=True, mode="reboot")
        assert ok and result["changed"] is True and result["rebooted"] is False
        # The dry run, then the quorum guard's read (a worker: nothing to guard).
        assert client.names() == ["Version", "ApplyConfiguration", "EtcdMemberList"]
        assert applies(client)[0].dry_run is True
        assert "hostname: worker-0" in result["diff"]["before"] and "hostname: worker-1" in result["diff"]["after"]

    def test_invalid_config_fails_before_any_call(self, waits):
        client = talos_node()
        with pytest.raises(TalosError, match=r"^config_patches\[0\] is not valid YAML"):
            run(client, config_patches=["machine: [unclosed"])
        assert client.calls == []

    def test_server_refusal_is_raised(self, waits):
        client = talos_node(apply_error=("PermissionDenied", "not authorized"))
        with pytest.raises(TalosError) as raised:
            run(client)
        assert "os:admin" in raised.value.message
        assert [request.dry_run for request in applies(client)] == [True]

    def test_try_mode_sends_the_rollback_timeout(self, waits):
        client = talos_node()
        ok, result, _task = run(client, mode="try", try_timeout=120)
        assert ok and all(request.mode == Mode.TRY and request.try_mode_timeout.seconds == 120 for request in applies(client))

    def test_json_patch_on_a_multi_document_config_is_refused_before_any_call(self, waits):
        client = talos_node()
        multi = CONFIG + "---\napiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  rack: r1\n"
        with pytest.raises(TalosError, match=r"^config_patches\[0\] is a JSON patch \(RFC 6902\), which cannot be applied "
                                             r"to a multi-document machine config \(v1alpha1, KubeNodeConfig\): use a "
                                             r"strategic merge patch instead"):
            run(client, config=multi, config_patches=[[{"op": "replace", "path": "/machine/network/hostname", "value": "x"}]])
        assert client.calls == []

    def test_merge_patches_of_every_document_still_apply_to_a_multi_document_config(self, waits):
        client = talos_node()
        multi = CONFIG + "---\napiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  rack: r1\n"
        ok, result, _task = run(client, config=multi, config_patches=[
            {"machine": {"network": {"hostname": "patched"}}},
            {"apiVersion": "v1alpha1", "kind": "KubeNodeConfig", "labels": {"rack": "r2"}},
        ])
        assert ok and result["changed"] is True
        sent = applies(client)[1].data.decode()
        assert "hostname: patched" in sent and "rack: r2" in sent

    def test_patches_change_what_is_sent(self, waits):
        client = talos_node()
        run(client, config_patches=[{"machine": {"network": {"hostname": "patched"}}}])
        assert b"hostname: patched" in applies(client)[1].data


class TestRebootMode:
    def test_v114_applies_without_reboot_then_reboots_and_waits(self, waits):
        client = talos_node(version="v1.14.1")
        ok, result, _task = run(client, mode="reboot")
        assert ok and result["changed"] is True and result["rebooted"] is True and result["mode"] == "no_reboot"
        assert client.names() == ["Version", "ApplyConfiguration", "EtcdMemberList", "Read", "ApplyConfiguration", "Reboot"]
        assert all(request.mode == Mode.NO_REBOOT for request in applies(client))
        assert waits == [("reboot", "10.5.0.3", "boot-1", 30)]

    def test_older_versions_reboot_in_the_apply(self, waits):
        client = talos_node(version="v1.12.4")
        ok, result, _task = run(client, mode="reboot")
        assert ok and result["rebooted"] is True and result["mode"] == "reboot"
        assert all(request.mode == Mode.REBOOT for request in applies(client))
        assert "Reboot" not in client.names()
        assert waits == [("reboot", "10.5.0.3", "boot-1", 30)]

    def test_auto_mode_reboot_chosen_by_older_talos_is_waited_for(self, waits):
        client = talos_node(version="v1.13.2", auto_reboots=True)
        ok, result, _task = run(client)
        assert ok and result["rebooted"] is True and result["mode"] == "reboot"
        assert all(request.mode == Mode.AUTO for request in applies(client))
        assert "Reboot" not in client.names()
        assert waits == [("reboot", "10.5.0.3", "boot-1", 30)]

    def test_no_wait(self, waits):
        client = talos_node()
        ok, result, _task = run(client, mode="reboot", wait=False)
        assert ok and result["rebooted"] is True and "Reboot" in client.names() and waits == []

    def test_unchanged_config_is_not_rebooted(self, waits):
        client = talos_node(diff="No changes.")
        ok, result, _task = run(client, mode="reboot")
        assert ok and result["changed"] is False and result["rebooted"] is False
        assert "Reboot" not in client.names() and waits == []

    @pytest.mark.parametrize("mode, maintenance, tag, expected", [
        ("reboot", False, "v1.14.0", "no_reboot"),
        ("reboot", False, "v1.14.0-rc.1", "no_reboot"),
        ("reboot", False, "v1.15.2", "no_reboot"),
        ("reboot", False, "v1.13.4", "reboot"),
        ("reboot", False, "v1.9.6", "reboot"),
        ("reboot", False, "main", "no_reboot"),
        ("reboot", True, "", "reboot"),
        ("auto", False, "v1.12.0", "auto"),
        ("staged", False, "v1.14.0", "staged"),
    ])
    def test_request_mode(self, mode, maintenance, tag, expected):
        assert machine_config.request_mode(mode, maintenance, tag) == expected


def mutations(client):
    """What changed a node: the applies that were no dry run, and reboots."""
    return [call.method.rsplit("/", 1)[-1] for call in client.calls
            if call.method == rpc.REBOOT or (call.method == rpc.APPLY_CONFIGURATION and not call.request.dry_run)]


class TestQuorumGuard:
    """An apply that reboots a control plane passes the one etcd quorum guard, as talos_reboot does."""

    def test_a_reboot_etcd_cannot_spare_is_refused_before_anything_is_applied(self, waits):
        client = talos_node(members={"cp-1": True, "cp-2": False, "cp-3": True})
        with pytest.raises(etcd_quorum.QuorumLossRefused) as refused:
            run(client, mode="reboot")
        assert refused.value.message.startswith("Refusing to reboot control-plane node 10.5.0.3: etcd would keep 3 voting "
                                                "members and need 2 of them healthy for quorum, but only 1 member other "
                                                "than cp-3 is healthy (not healthy: cp-2 - ")
        assert refused.value.message.endswith("or set force_quorum_loss: true to go ahead anyway.")
        assert refused.value.to_result()["etcd_gate_open"] is False
        assert mutations(client) == [] and waits == []

    def test_check_mode_runs_the_guard_too(self, waits):
        client = talos_node(members={"cp-1": True, "cp-2": False, "cp-3": True})
        with pytest.raises(etcd_quorum.QuorumLossRefused):
            run(client, mode="reboot", check_mode=True)
        assert mutations(client) == []

    def test_a_reboot_etcd_can_spare_goes_ahead_with_the_findings(self, waits):
        client = talos_node(members={"cp-1": True, "cp-2": True, "cp-3": True})
        ok, result, _task = run(client, mode="reboot")
        assert ok and result["rebooted"] is True and result["etcd_gate_open"] is True
        assert result["quorum"]["safe"] is True and result["controlplane"] is True
        assert mutations(client) == ["ApplyConfiguration", "Reboot"]

    def test_force_quorum_loss_reboots_anyway(self, waits):
        client = talos_node(members={"cp-1": False, "cp-2": False, "cp-3": True})
        ok, result, _task = run(client, mode="reboot", force_quorum_loss=True)
        assert ok and result["rebooted"] is True and result["etcd_gate_open"] is False
        assert mutations(client) == ["ApplyConfiguration", "Reboot"]

    def test_a_reboot_older_talos_chooses_is_guarded(self, waits):
        client = talos_node(version="v1.13.2", auto_reboots=True, members={"cp-1": True, "cp-2": False, "cp-3": True})
        with pytest.raises(etcd_quorum.QuorumLossRefused):
            run(client)
        assert mutations(client) == []

    def test_an_apply_without_a_reboot_asks_no_guard(self, waits):
        client = talos_node(members={"cp-1": False, "cp-2": False, "cp-3": True})
        ok, result, _task = run(client)
        assert ok and result["changed"] is True and "etcd_gate_open" not in result
        assert "EtcdMemberList" not in client.names()

    def test_an_unchanged_config_asks_no_guard(self, waits):
        client = talos_node(diff="No changes.", members={"cp-1": False, "cp-2": False, "cp-3": True})
        ok, result, _task = run(client, mode="reboot")
        assert ok and result["changed"] is False and "EtcdMemberList" not in client.names()


INSTALLING = CONFIG.replace("  network:", """  install:
    disk: /dev/sda
    image: factory.talos.dev/metal-installer/abc:%s # the installer
  network:""")


class TestKeepNewerInstaller:
    def test_an_older_installer_is_applied_at_the_nodes_release(self, waits):
        client = talos_node(diff="No changes.", active_config=INSTALLING % "v1.14.1")
        ok, result, _task = run(client, config=INSTALLING % "v1.14.0", keep_newer_installer=True)
        assert ok and result["changed"] is False
        assert result["installer_kept"] == {"given": "factory.talos.dev/metal-installer/abc:v1.14.0",
                                            "applied": "factory.talos.dev/metal-installer/abc:v1.14.1"}
        (dry_run,) = applies(client)
        assert dry_run.data == (INSTALLING % "v1.14.1").encode()

    def test_without_the_option_the_config_is_applied_as_given(self, waits):
        client = talos_node(active_config=INSTALLING % "v1.14.1")
        ok, result, _task = run(client, config=INSTALLING % "v1.14.0")
        assert "installer_kept" not in result and applies(client)[0].data == (INSTALLING % "v1.14.0").encode()
        assert client.calls_to(rpc.COSI_GET) == []

    @pytest.mark.parametrize("given", ["v1.14.1", "v1.14.2"])
    def test_a_newer_or_equal_installer_is_applied_as_given(self, waits, given):
        client = talos_node(active_config=INSTALLING % "v1.14.1")
        ok, result, _task = run(client, config=INSTALLING % given, keep_newer_installer=True)
        assert "installer_kept" not in result and applies(client)[0].data == (INSTALLING % given).encode()

    def test_maintenance_mode_has_nothing_to_keep(self, waits):
        client = talos_node(maintenance=True)
        ok, result, _task = run(client, config=INSTALLING % "v1.14.0", insecure=True, keep_newer_installer=True)
        assert "installer_kept" not in result and applies(client)[0].data == (INSTALLING % "v1.14.0").encode()


V114_CONFIG = CONFIG + """---
apiVersion: v1alpha1
kind: KubeletConfig
image: ghcr.io/siderolabs/kubelet:v1.37.0
"""


class TestVersionGates:
    def test_a_document_the_node_s_release_does_not_know_is_refused_before_anything_is_sent(self, waits):
        client = talos_node(version="v1.13.4")
        with pytest.raises(TalosError) as raised:
            run(client, config=V114_CONFIG, mode="reboot")
        assert raised.value.message == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; node 10.5.0.3 "
                                        "runs v1.13.4.")
        assert raised.value.node == "10.5.0.3" and client.names() == ["Version"]

    def test_check_mode_is_refused_alike(self, waits):
        client = talos_node(version="v1.13.4")
        with pytest.raises(TalosError, match="needs Talos v1.14.0 or newer"):
            run(client, config=V114_CONFIG, check_mode=True, diff=True)
        assert client.names() == ["Version"]

    def test_a_node_that_knows_the_documents_gets_the_config_and_the_result_says_where_it_fits(self, waits):
        client = talos_node(version="v1.14.0-rc.1")
        ok, result, _task = run(client, config=V114_CONFIG)
        assert ok and result["changed"] is True and result["valid_for"] == {"min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}
        assert client.names() == ["Version", "ApplyConfiguration", "ApplyConfiguration"]

    def test_a_config_every_supported_release_knows_costs_no_version_read(self, waits):
        client = talos_node(version="v1.9.0")
        ok, result, _task = run(client)
        assert ok and result["valid_for"]["min"] == "v1.9.0" and "Version" not in client.names()

    def test_a_patch_is_checked_with_the_config(self, waits):
        client = talos_node(version="v1.11.6")
        with pytest.raises(TalosError) as raised:
            run(client, config_patches=[{"machine": {"install": {"grubUseUKICmdline": True}}}])
        assert raised.value.message == ("The config's v1alpha1 document sets machine.install.grubUseUKICmdline, which needs "
                                        "Talos v1.12.0 or newer; node 10.5.0.3 runs v1.11.6.")
        assert applies(client) == []

    def test_maintenance_mode_before_v1_13_tells_no_version_but_refuses_what_v1_12_lacks(self, waits):
        client = talos_node(maintenance=True)
        client.answer(rpc.VERSION, fails_with("Unimplemented", "API is not implemented in maintenance mode"))
        with pytest.raises(TalosError) as raised:
            run(client, config=V114_CONFIG, insecure=True)
        assert raised.value.message == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; node 10.5.0.3 "
                                        "runs Talos v1.12 or older (in maintenance mode it does not tell which).")
        assert applies(client) == []
        hostname = "---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: w-1\n"
        ok, result, _task = run(client, insecure=True, config=CONFIG + hostname)
        assert ok and result["changed"] is True and len(applies(client)) == 2

    def test_one_node_too_old_for_the_config_changes_no_node(self, waits):
        client = talos_node(version="v1.14.1")
        client.answer(rpc.VERSION, [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.13.9"))], node="10.5.0.4")
        with pytest.raises(TalosConfigError) as failed:
            run(client, config=V114_CONFIG, nodes=["10.5.0.3", "10.5.0.4", "10.5.0.5"])
        assert failed.value.message == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; "
                                        "node 10.5.0.4 runs v1.13.9.")
        assert client.calls_to(rpc.APPLY_CONFIGURATION) == []
        assert sorted(call.node for call in client.calls_to(rpc.VERSION)) == ["10.5.0.3", "10.5.0.4", "10.5.0.5"]

    def test_every_refused_node_is_named(self, waits):
        client = talos_node(version="v1.13.2")
        client.answer(rpc.VERSION, [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))], node="10.5.0.3")
        with pytest.raises(TalosConfigError) as failed:
            run(client, config=V114_CONFIG, nodes=["10.5.0.3", "10.5.0.4", "10.5.0.5", "10.5.0.6"])
        assert failed.value.message == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; node 10.5.0.4 "
                                        "runs v1.13.2, and 2 other nodes are refused too (10.5.0.5, 10.5.0.6).")
        assert client.calls_to(rpc.APPLY_CONFIGURATION) == []

    def test_the_versions_read_for_the_check_are_not_read_again(self, waits):
        client = talos_node(version="v1.14.1")
        ok, _result, _task = run(client, config=V114_CONFIG, nodes=["10.5.0.3", "10.5.0.4"])
        assert ok
        assert sorted(call.node for call in client.calls_to(rpc.VERSION)) == ["10.5.0.3", "10.5.0.4"]


class TestMaintenance:
    def test_always_changed_and_waits_for_the_secure_api(self, waits):
        client = talos_node(maintenance=True, diff="No changes.")
        ok, result, _task = run(client, insecure=True)
        assert ok and result["changed"] is True and result["mode"] == "no_reboot" and result["rebooted"] is True
        assert [request.dry_run for request in applies(client)] == [True, False]
        assert client.settings_changes == [{"insecure": False}]
        assert waits == [("secure_api", "10.5.0.3", 30)]

    def test_reboot_mode_is_sent_as_is_and_talos_applies_without_reboot(self, waits):
        client = talos_node(maintenance=True)
        ok, result, _task = run(client, insecure=True, mode="reboot")
        assert ok and result["mode"] == "no_reboot" and result["rebooted"] is True
        assert all(request.mode == Mode.REBOOT for request in applies(client))
        assert "Version" not in client.names() and "Reboot" not in client.names()

    def test_check_mode_in_maintenance(self, waits):
        client = talos_node(maintenance=True)
        ok, result, _task = run(client, insecure=True, check_mode=True)
        assert ok and result["changed"] is True and result["rebooted"] is False
        assert len(applies(client)) == 1 and waits == []


class TestRedaction:
    def test_diff_and_details_have_no_secret(self, waits):
        client = talos_node()
        ok, result, task = run(client, diff=True, check_mode=True)
        text = repr(result)
        for secret in (TOKEN, CA_KEY, OLD_KEY):
            assert secret not in text
        assert "key: <redacted>" in result["diff"]["before"] and "key: <redacted, changed>" in result["diff"]["after"]
        assert "-    key: <redacted>" in result["mode_details"]
        assert {TOKEN, CA_KEY} <= task.no_log_values

    def test_maintenance_diff_is_the_redacted_config(self, waits):
        client = talos_node(maintenance=True, diff="Node is running in maintenance mode")
        ok, result, _task = run(client, insecure=True, diff=True, check_mode=True)
        assert result["diff"]["before"] == ""
        assert "hostname: worker-1" in result["diff"]["after"] and TOKEN not in result["diff"]["after"]

    def test_show_secrets(self, waits):
        client = talos_node()
        ok, result, task = run(client, diff=True, check_mode=True, show_secrets=True)
        assert "key: %s" % OLD_KEY in result["diff"]["before"] and "key: %s" % CA_KEY in result["diff"]["after"]
        assert task.no_log_values == set()
        assert CA_KEY not in result["mode_details"]

    def test_server_warnings_are_redacted_and_shown(self, waits):
        client = talos_node(warnings=["token %s is deprecated" % TOKEN])
        ok, result, task = run(client)
        assert task.warnings == ["Node 10.5.0.3: token <redacted> is deprecated"]


class TestSeveralNodes:
    def test_each_node_has_its_result_keyed_by_node(self, waits):
        client = talos_node(warnings=["a warning"])
        ok, result, task = run(client, nodes=["10.5.0.3", "10.5.0.4"], diff=True)
        assert ok and result["changed"] is True and result["rebooted"] is False
        assert sorted(result["nodes"]) == ["10.5.0.3", "10.5.0.4"]
        assert all(result["nodes"][node]["node"] == node and result["nodes"][node]["mode"] == "no_reboot"
                   for node in ("10.5.0.3", "10.5.0.4"))
        assert "results" not in result
        assert sorted(call.node for call in client.calls_to(rpc.APPLY_CONFIGURATION)) == ["10.5.0.3"] * 2 + ["10.5.0.4"] * 2
        assert sorted(entry["before_header"] for entry in result["diff"]) == [
            "node 10.5.0.3: active machine configuration", "node 10.5.0.4: active machine configuration"]
        assert "mode" not in result
        assert sorted(result["warnings"]) == ["Node 10.5.0.3: a warning", "Node 10.5.0.4: a warning"]

    def test_one_node_keeps_its_keys_at_the_top(self, waits):
        ok, result, task = run(talos_node(warnings=["a warning"]), diff=True)
        assert ok and (result["node"], result["mode"]) == ("10.5.0.3", "no_reboot") and "results" not in result
        assert "nodes" not in result and result["changed"] is True and result["rebooted"] is False
        assert result["diff"]["before_header"].startswith("node 10.5.0.3")
        assert result["warnings"] == ["Node 10.5.0.3: a warning"]

    def test_a_list_of_one_node_keeps_its_keys_under_nodes_only(self, waits):
        ok, result, task = run(talos_node(warnings=["a warning"]), diff=True, nodes_listed=True)
        assert ok and set(result) == {"changed", "nodes", "diff", "rebooted", "warnings", "valid_for"}
        assert result["nodes"]["10.5.0.3"]["mode"] == "no_reboot" and "diff" not in result["nodes"]["10.5.0.3"]
        assert result["warnings"] == ["Node 10.5.0.3: a warning"]

    def test_a_failing_node_fails_the_task_once_the_others_are_done(self, waits):
        client = talos_node()
        for method in (rpc.VERSION, rpc.APPLY_CONFIGURATION, rpc.READ, rpc.REBOOT):
            client.answer(method, fails_with("Unavailable", "connection refused"), node="10.5.0.4")
        with pytest.raises(ActionFailed) as failed:
            run(client, nodes=["10.5.0.3", "10.5.0.4", "10.5.0.5"])
        assert failed.value.message.startswith("1 of 3 nodes failed (10.5.0.4): ")
        result = failed.value.to_result()
        assert result["changed"] is True and result["rebooted"] is False
        assert result["nodes"]["10.5.0.4"]["failed"] is True
        assert result["nodes"]["10.5.0.3"]["changed"] is True and result["nodes"]["10.5.0.5"]["changed"] is True
        assert sorted(call.node for call in client.calls_to(rpc.APPLY_CONFIGURATION) if call.node != "10.5.0.4") == (
            ["10.5.0.3"] * 2 + ["10.5.0.5"] * 2)
