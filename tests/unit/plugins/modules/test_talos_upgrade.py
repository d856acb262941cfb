# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for talos_upgrade: version and image logic, the etcd gate rule and the step flow."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import upgrade
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosUnimplementedError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, lifecycle_pb2, machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_upgrade


# Versions and image references

@pytest.mark.parametrize("image, tag", [
    ("ghcr.io/siderolabs/installer:v1.14.0", "v1.14.0"),
    ("registry.local:5000/siderolabs/installer:v1.13.2", "v1.13.2"),
    ("factory.talos.dev/installer/abc123:v1.14.0@sha256:" + "0" * 64, "v1.14.0"),
    ("registry.local:5000/siderolabs/installer", None),
    ("ghcr.io/siderolabs/installer@sha256:" + "0" * 64, None),
])
def test_image_tag(image, tag):
    assert upgrade.image_tag(image) == tag


def test_resolve_target_from_version_adds_v_and_repository():
    assert upgrade.resolve_target(version="1.14.0") == ("ghcr.io/siderolabs/installer:v1.14.0", "v1.14.0")
    assert upgrade.resolve_target(version="v1.13.0", image_repository="registry.local/installer/") == (
        "registry.local/installer:v1.13.0", "v1.13.0")


def test_resolve_target_from_image_uses_its_tag():
    assert upgrade.resolve_target(image="factory.talos.dev/installer/abc:v1.14.0-rc.1") == (
        "factory.talos.dev/installer/abc:v1.14.0-rc.1", "v1.14.0-rc.1")


@pytest.mark.parametrize("kwargs, words", [
    (dict(image="ghcr.io/siderolabs/installer"), "has no tag"),
    (dict(image="ghcr.io/siderolabs/installer:latest"), "not a Talos version"),
    (dict(version="latest"), "not a Talos version"),
])
def test_resolve_target_rejects_unusable_targets(kwargs, words):
    with pytest.raises(ValueError, match=words):
        upgrade.resolve_target(**kwargs)


def test_parse_version_orders_prereleases_before_releases():
    tags = ["v1.14.0", "v1.13.0", "v1.13.0-rc.1", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "v1.9.5"]
    ordered = sorted(tags, key=upgrade.parse_version)
    assert ordered == ["v1.9.5", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "v1.13.0-rc.1", "v1.13.0", "v1.14.0"]
    assert upgrade.parse_version("not-a-version") is None


@pytest.mark.parametrize("api, stage, preserve, chosen", [
    ("auto", False, False, "lifecycle"),
    ("auto", True, False, "legacy"),
    ("auto", False, True, "legacy"),
    ("legacy", False, False, "legacy"),
    ("lifecycle", False, False, "lifecycle"),
])
def test_choose_api(api, stage, preserve, chosen):
    assert upgrade.choose_api(api, stage=stage, preserve=preserve) == chosen


def test_choose_api_refuses_legacy_options_on_lifecycle():
    with pytest.raises(ValueError, match="stage apply only to the legacy upgrade API"):
        upgrade.choose_api("lifecycle", stage=True)


@pytest.mark.parametrize("tag, expected", [
    ("v1.12.6", False), ("v1.13.0-alpha.2", True), ("v1.13.0", True), ("v1.14.0", True), ("custom", None),
])
def test_has_lifecycle_api(tag, expected):
    assert upgrade.has_lifecycle_api(tag) is expected


# The etcd gate rule

def _member(name, member_id, learner=False):
    return {"id": member_id, "hostname": name, "is_learner": learner,
            "client_urls": ["https://10.5.0.%s:2379" % member_id[-1]], "peer_urls": []}


def _status(errors=()):
    return {"errors": list(errors), "leader": "0000000000000001"}


def test_gate_open_with_three_healthy_members():
    members = [_member("cp-1", "01"), _member("cp-2", "02"), _member("cp-3", "03")]
    assert upgrade.gate_problem(members, {m["id"]: _status() for m in members}) is None


def test_gate_closed_by_unhealthy_unreachable_learner_and_unstarted_members():
    members = [_member("cp-1", "01"), _member("cp-2", "02"), _member("cp-3", "03", learner=True), _member("", "04")]
    statuses = {"01": _status(["memberID:1 alarm:NOSPACE"]),
                "02": TalosConnectionError("Node 10.5.0.2 is unavailable."),
                "03": _status(), "04": _status()}
    problem = upgrade.gate_problem(members, statuses)
    assert "member cp-1 is not healthy (memberID:1 alarm:NOSPACE)" in problem
    assert "member cp-2 is not healthy (Node 10.5.0.2 is unavailable)" in problem
    assert "member cp-3 is still a learner" in problem
    assert "member 04 has not started" in problem


@pytest.mark.parametrize("count", [1, 2])
def test_gate_closed_without_quorum_to_spare(count):
    members = [_member("cp-%d" % i, "0%d" % i) for i in range(1, count + 1)]
    problem = upgrade.gate_problem(members, {m["id"]: _status() for m in members})
    assert "keeps no quorum" in problem


def test_gate_closed_when_the_member_list_cannot_be_read():
    client = ScriptedClient(**{"machine.MachineService/EtcdMemberList": TalosApiError(
        "machine.MachineService/EtcdMemberList failed on node 10.5.0.2 with Unknown: etcdserver: no leader.")})
    controlplane, problem = upgrade.etcd_gate(client, "10.5.0.2")
    assert controlplane is True
    assert problem == ("its etcd member list cannot be read (machine.MachineService/EtcdMemberList failed on node 10.5.0.2 "
                       "with Unknown: etcdserver: no leader)")


def test_gate_skipped_on_a_worker():
    client = ScriptedClient(**{"machine.MachineService/EtcdMemberList": TalosUnimplementedError(
        "Node 10.5.0.9 does not support machine.MachineService/EtcdMemberList: member list is only available on control plane nodes.")})
    assert upgrade.etcd_gate(client, "10.5.0.9") == (False, None)


# The step flow, against a scripted client

class ScriptedClient(object):
    """Answers calls from a script and records them; an Exception in the script is raised."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def _answer(self, method):
        answer = self.answers[method]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def call(self, method, request=None, node=None, **kwargs):
        self.calls.append(method)
        return self._answer(method)

    def stream(self, method, request=None, node=None, on_message=None, **kwargs):
        self.calls.append(method)
        frames = self._answer(method)
        for frame in frames:
            if on_message:
                on_message(frame)
        return frames


def _progress(message=None, exit_code=None):
    if message is not None:
        progress = lifecycle_pb2.LifecycleServiceInstallProgress(message=message)
    else:
        progress = lifecycle_pb2.LifecycleServiceInstallProgress(exit_code=exit_code)
    return lifecycle_pb2.LifecycleServiceUpgradeResponse(progress=progress)


PARAMS = dict(api="auto", wait=False, wait_timeout=60, reboot_mode="default", preserve=False, stage=False, force=False)
IMAGE = "ghcr.io/siderolabs/installer:v1.14.0"
PULLED = [image_pb2.ImageServicePullResponse(name=IMAGE)]


def _upgrade(client, **params):
    merged = dict(PARAMS, **params)
    return talos_upgrade.NodeUpgrade(client, "10.5.0.2", merged, IMAGE, "v1.14.0", "v1.13.0")


def test_lifecycle_pulls_installs_and_reboots():
    client = ScriptedClient(**{
        talos_upgrade.IMAGE_PULL: PULLED,
        talos_upgrade.LIFECYCLE_UPGRADE: [_progress("writing boot assets"), _progress(exit_code=0)],
        talos_upgrade.REBOOT: [machine_pb2.Reboot(actor_id="a1")],
    })
    node_upgrade = _upgrade(client)
    assert node_upgrade.run("lifecycle") == "v1.13.0"
    assert client.calls == [talos_upgrade.IMAGE_PULL, talos_upgrade.LIFECYCLE_UPGRADE, talos_upgrade.REBOOT]
    assert node_upgrade.api_used == "lifecycle" and node_upgrade.rebooted
    assert node_upgrade.progress == ["pulled " + IMAGE, "writing boot assets", "installer exited with code 0", "reboot requested"]


def test_unimplemented_lifecycle_falls_back_to_legacy_in_auto():
    client = ScriptedClient(**{
        talos_upgrade.IMAGE_PULL: TalosUnimplementedError("Node 10.5.0.2 does not implement machine.ImageService/Pull.",
                                                          code="Unimplemented"),
        talos_upgrade.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received", actor_id="a1")],
    })
    node_upgrade = _upgrade(client)
    node_upgrade.run("lifecycle")
    assert client.calls == [talos_upgrade.IMAGE_PULL, talos_upgrade.LEGACY_UPGRADE]
    assert node_upgrade.api_used == "legacy" and node_upgrade.rebooted
    assert node_upgrade.progress[-1] == "Upgrade request received"


def test_unimplemented_lifecycle_is_a_failure_when_forced():
    client = ScriptedClient(**{
        talos_upgrade.IMAGE_PULL: TalosUnimplementedError("Node 10.5.0.2 does not implement machine.ImageService/Pull.",
                                                          code="Unimplemented"),
    })
    with pytest.raises(talos_upgrade.UpgradeStepError) as caught:
        _upgrade(client, api="lifecycle").run("lifecycle")
    assert caught.value.step == "pull"
    assert "use api: legacy" in caught.value.message
    assert client.calls == [talos_upgrade.IMAGE_PULL]


def test_non_zero_exit_code_fails_before_reboot_with_last_messages():
    client = ScriptedClient(**{
        talos_upgrade.IMAGE_PULL: PULLED,
        talos_upgrade.LIFECYCLE_UPGRADE: [_progress("line %d" % i) for i in range(8)] + [_progress("no space left"),
                                                                                         _progress(exit_code=1)],
    })
    node_upgrade = _upgrade(client)
    with pytest.raises(talos_upgrade.UpgradeStepError) as caught:
        node_upgrade.run("lifecycle")
    assert caught.value.step == "install"
    assert "exited with code 1" in caught.value.message
    assert "no space left" in caught.value.message and "line 0" not in caught.value.message
    assert "still runs v1.13.0 and was not rebooted" in caught.value.message
    assert talos_upgrade.REBOOT not in client.calls
    assert not node_upgrade.rebooted


def test_failed_reboot_says_the_new_version_waits_on_disk():
    client = ScriptedClient(**{
        talos_upgrade.IMAGE_PULL: PULLED,
        talos_upgrade.LIFECYCLE_UPGRADE: [_progress(exit_code=0)],
        talos_upgrade.REBOOT: TalosApiError("machine.MachineService/Reboot failed on node 10.5.0.2 with FailedPrecondition: x.",
                                            code="FailedPrecondition"),
    })
    with pytest.raises(talos_upgrade.UpgradeStepError) as caught:
        _upgrade(client).run("lifecycle")
    assert caught.value.step == "reboot"
    assert "Talos v1.14.0 is installed but the node still runs v1.13.0 until its next reboot" in caught.value.message


@pytest.mark.parametrize("came_back_on, words", [
    ("v1.13.0", "rolled the upgrade back"),
    ("v1.13.5", "not the target v1.14.0"),
])
def test_wait_detects_rollback_and_wrong_version(monkeypatch, came_back_on, words):
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag=came_back_on))
    client = ScriptedClient(**{
        talos_upgrade.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received")],
        talos_upgrade.VERSION: [version],
    })
    monkeypatch.setattr(talos_upgrade.waiters, "read_boot_id", lambda client, node: "boot-1")
    waited = []
    monkeypatch.setattr(talos_upgrade.waiters, "wait_for_reboot",
                        lambda client, node, boot_id, timeout: waited.append((boot_id, timeout)))
    with pytest.raises(talos_upgrade.UpgradeStepError) as caught:
        _upgrade(client, wait=True, api="legacy").run("legacy")
    assert waited == [("boot-1", 60)]
    assert caught.value.step == "wait"
    assert words in caught.value.message


def test_wait_succeeds_on_target_version(monkeypatch):
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))
    client = ScriptedClient(**{
        talos_upgrade.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received")],
        talos_upgrade.VERSION: [version],
    })
    monkeypatch.setattr(talos_upgrade.waiters, "read_boot_id", lambda client, node: None)
    monkeypatch.setattr(talos_upgrade.waiters, "wait_for_reboot", lambda client, node, boot_id, timeout: None)
    node_upgrade = _upgrade(client, wait=True)
    assert node_upgrade.run("legacy") == "v1.14.0"
    assert node_upgrade.progress[-1] == "node is running v1.14.0"
