# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for talos_upgrade: version and image logic, the step flow and run()."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.images import reference as image_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.images import installer
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import parse_version
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, lifecycle_pb2, machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_upgrade
from fake_talos import FakeTalos, cosi_state, fails_with, resource
from module_fakes import run_task


# Versions and image references

@pytest.mark.parametrize("image, tag", [
    ("ghcr.io/siderolabs/installer:v1.14.0", "v1.14.0"),
    ("registry.local:5000/siderolabs/installer:v1.13.2", "v1.13.2"),
    ("factory.talos.dev/installer/abc123:v1.14.0@sha256:" + "0" * 64, "v1.14.0"),
    ("registry.local:5000/siderolabs/installer", None),
    ("ghcr.io/siderolabs/installer@sha256:" + "0" * 64, None),
])
def test_image_tag(image, tag):
    assert image_reference.image_tag(image) == tag


def test_resolve_target_from_version_adds_v_and_leaves_the_installer_to_the_node():
    assert installer.resolve_target(version="1.14.0") == (None, "v1.14.0")


def test_resolve_target_from_image_uses_its_tag():
    assert installer.resolve_target(image="factory.talos.dev/installer/abc:v1.14.0-rc.1") == (
        "factory.talos.dev/installer/abc:v1.14.0-rc.1", "v1.14.0-rc.1")


@pytest.mark.parametrize("kwargs, words", [
    (dict(image="ghcr.io/siderolabs/installer"), "has no tag"),
    (dict(image="ghcr.io/siderolabs/installer:latest"),
     "^The tag 'latest' of installer_image 'ghcr.io/siderolabs/installer:latest' is not a Talos release: give a release such as "
     "v1.14.1.$"),
    (dict(version="latest"), "^version 'latest' is not a Talos release: give a release such as v1.14.1.$"),
    (dict(version="v1.14"), "^version 'v1.14' is not a Talos release"),
    (dict(version="v1.99.0"), r"^version 'v1.99.0' is not a Talos release this collection supports \(v1.9 to v1.14, any "
                              r"patch release of them\): v1.99 is newer than v1.14; check the value for a typo, or use a "
                              r"release of the collection that supports Talos v1.99.$"),
    (dict(image="ghcr.io/siderolabs/installer:v1.15.0-alpha.0"), "^The tag 'v1.15.0-alpha.0' of installer_image .* v1.15 is newer"),
    (dict(version="1.8.3"), r"^version '1.8.3' is not a Talos release this collection supports \(v1.9 to v1.14, any "
                            r"patch release of them\): v1.8 is older than v1.9.$"),
])
def test_resolve_target_rejects_unusable_targets(kwargs, words):
    with pytest.raises(TalosConfigError, match=words):
        installer.resolve_target(**kwargs)


@pytest.mark.parametrize("version", ["v1.9.0", "1.9.0", "v1.13.0-rc.1", "v1.14.1", "v1.14.12"])
def test_every_patch_of_a_supported_minor_release_is_a_target(version):
    assert installer.target_version(version) == "v" + version.lstrip("v")
    assert installer.release_problem(version, "version") is None


def test_the_options_named_are_the_modules_own():
    with pytest.raises(TalosConfigError, match="^installer_version 'latest' is not"):
        installer.resolve_target(version="latest", version_option="installer_version")
    with pytest.raises(TalosConfigError, match="^installer_image 'x/installer' has no tag"):
        installer.resolve_target(image="x/installer", image_option="installer_image")


def test_parse_version_orders_prereleases_before_releases():
    tags = ["v1.14.0", "v1.13.0", "v1.13.0-rc.1", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "v1.9.5"]
    ordered = sorted(tags, key=parse_version)
    assert ordered == ["v1.9.5", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "v1.13.0-rc.1", "v1.13.0", "v1.14.0"]
    assert parse_version("not-a-version") is None


@pytest.mark.parametrize("api, stage, preserve, chosen", [
    ("auto", False, False, "lifecycle"),
    ("auto", True, False, "legacy"),
    ("auto", False, True, "legacy"),
    ("legacy", False, False, "legacy"),
    ("lifecycle", False, False, "lifecycle"),
])
def test_choose_api(api, stage, preserve, chosen):
    assert installer.choose_api(api, stage=stage, preserve=preserve) == chosen


def test_choose_api_refuses_legacy_options_on_lifecycle():
    with pytest.raises(TalosConfigError, match="stage apply only to the legacy upgrade API"):
        installer.choose_api("lifecycle", stage=True)


@pytest.mark.parametrize("tag, expected", [
    ("v1.12.6", False), ("v1.13.0-alpha.2", True), ("v1.13.0", True), ("v1.14.0", True), ("custom", None),
])
def test_has_lifecycle_api(tag, expected):
    assert installer.has_lifecycle_api(tag) is expected


# The step flow, against a fake client

def asked(client):
    """What the client was asked, in order: the RPC path, or the resource type that get_resource or list_resources read."""
    return [call.request.type if call.via in ("get_resource", "list_resources") else call.method for call in client.calls]


def _progress(message=None, exit_code=None):
    if message is not None:
        progress = lifecycle_pb2.LifecycleServiceInstallProgress(message=message)
    else:
        progress = lifecycle_pb2.LifecycleServiceInstallProgress(exit_code=exit_code)
    return lifecycle_pb2.LifecycleServiceUpgradeResponse(progress=progress)


IMAGE = "ghcr.io/siderolabs/installer:v1.14.0"
PULLED = [image_pb2.ImageServicePullResponse(name=IMAGE)]


def _upgrade(client, fall_back=True):
    result = dict(from_version="v1.13.0", current_version="v1.13.0", rebooted=False, api_used=None, progress=[])
    return lifecycle.NodeUpgrade(client, "10.5.0.2", IMAGE, "v1.14.0", result, fall_back=fall_back)


def _failed_step(node_upgrade, api, wait_timeout=None):
    with pytest.raises(ActionFailed) as caught:
        node_upgrade.run(api, wait_timeout)
    return caught.value.result["step"], caught.value.message


def test_lifecycle_pulls_installs_and_reboots():
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: PULLED,
        rpc.LIFECYCLE_UPGRADE: [_progress("writing boot assets"), _progress(exit_code=0)],
        rpc.REBOOT: [machine_pb2.Reboot(actor_id="a1")],
    })
    result = _upgrade(client).run("lifecycle")
    assert result["current_version"] == "v1.13.0"
    assert asked(client) == [rpc.IMAGE_PULL, rpc.LIFECYCLE_UPGRADE, rpc.REBOOT]
    assert result["api_used"] == "lifecycle" and result["rebooted"]
    assert result["progress"] == ["pulled " + IMAGE, "installing %s (up to 1200 seconds)" % IMAGE, "writing boot assets",
                                  "installer exited with code 0", "reboot requested"]
    # The installer runs far longer than a call: it has its own deadline, not the connection's timeout.
    assert [call.kwargs["deadline"] for call in client.calls_to(rpc.LIFECYCLE_UPGRADE)] == [lifecycle.INSTALL_TIMEOUT]


def test_the_installer_has_the_wait_timeout_to_finish(monkeypatch):
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: PULLED,
        rpc.LIFECYCLE_UPGRADE: [_progress(exit_code=0)],
        rpc.REBOOT: [machine_pb2.Reboot(actor_id="a1")],
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))],
    })
    monkeypatch.setattr(lifecycle.waits, "read_boot_id", lambda client, node: None)
    monkeypatch.setattr(lifecycle.waits, "wait_for_reboot", lambda client, node, boot_id, waiter: None)
    _upgrade(client).run("lifecycle", wait_timeout=900)
    assert [call.kwargs["deadline"] for call in client.calls_to(rpc.LIFECYCLE_UPGRADE)] == [900]


def test_unimplemented_lifecycle_falls_back_to_legacy_in_auto():
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: fails_with("Unimplemented", "unknown service machine.ImageService"),
        rpc.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received", actor_id="a1")],
    })
    result = _upgrade(client).run("lifecycle")
    assert asked(client) == [rpc.IMAGE_PULL, rpc.LEGACY_UPGRADE]
    assert result["api_used"] == "legacy" and result["rebooted"]
    assert result["progress"][-1] == "Upgrade request received"


def test_unimplemented_lifecycle_is_a_failure_without_fall_back():
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: fails_with("Unimplemented", "unknown service machine.ImageService"),
    })
    step, message = _failed_step(_upgrade(client, fall_back=False), "lifecycle")
    assert step == "pull"
    assert "use api: legacy" in message
    assert asked(client) == [rpc.IMAGE_PULL]


def test_non_zero_exit_code_fails_before_reboot_with_last_messages():
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: PULLED,
        rpc.LIFECYCLE_UPGRADE: [_progress("line %d" % i) for i in range(8)] + [_progress("no space left"),
                                                                               _progress(exit_code=1)],
    })
    node_upgrade = _upgrade(client)
    step, message = _failed_step(node_upgrade, "lifecycle")
    assert step == "install"
    assert "exited with code 1" in message
    assert "no space left" in message and "line 0" not in message
    assert "still runs v1.13.0 and was not rebooted" in message
    assert rpc.REBOOT not in asked(client)
    assert not node_upgrade.result["rebooted"]


def test_failed_reboot_says_the_new_version_waits_on_disk():
    client = FakeTalos(answers={
        rpc.IMAGE_PULL: PULLED,
        rpc.LIFECYCLE_UPGRADE: [_progress(exit_code=0)],
        rpc.REBOOT: fails_with("FailedPrecondition", "x"),
    })
    with pytest.raises(ActionFailed) as caught:
        _upgrade(client).run("lifecycle")
    assert caught.value.to_result()["step"] == "reboot" and caught.value.to_result()["code"] == "FailedPrecondition"
    assert "Talos v1.14.0 is installed but the node still runs v1.13.0 until its next reboot" in caught.value.message


@pytest.mark.parametrize("came_back_on, words", [
    ("v1.13.0", "rolled the upgrade back"),
    ("v1.13.5", "not the target v1.14.0"),
])
def test_wait_detects_rollback_and_wrong_version(monkeypatch, came_back_on, words):
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag=came_back_on))
    client = FakeTalos(answers={
        rpc.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received")],
        rpc.VERSION: [version],
    })
    monkeypatch.setattr(lifecycle.waits, "read_boot_id", lambda client, node: "boot-1")
    waited = []
    monkeypatch.setattr(lifecycle.waits, "wait_for_reboot",
                        lambda client, node, boot_id, waiter: waited.append((boot_id, waiter.timeout)))
    step, message = _failed_step(_upgrade(client), "legacy", wait_timeout=60)
    assert waited == [("boot-1", 60)]
    assert step == "wait"
    assert words in message


def test_wait_succeeds_on_target_version(monkeypatch):
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))
    client = FakeTalos(answers={
        rpc.LEGACY_UPGRADE: [machine_pb2.Upgrade(ack="Upgrade request received")],
        rpc.VERSION: [version],
    })
    monkeypatch.setattr(lifecycle.waits, "read_boot_id", lambda client, node: None)
    monkeypatch.setattr(lifecycle.waits, "wait_for_reboot", lambda client, node, boot_id, waiter: None)
    result = _upgrade(client).run("legacy", wait_timeout=60)
    assert result["current_version"] == "v1.14.0"
    assert result["progress"][-1] == "node is running v1.14.0"


# run(): options, the guard and check mode

FACTORY_IMAGE = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0"
MACHINE_CONFIGS = "MachineConfigs.config.talos.dev"


def _config(*installers):
    """A node's active config whose installer reference lives in the homes given: (home, image) pairs."""
    documents = []
    for home, image in installers:
        if home == "machine":
            documents.append("version: v1alpha1\nmachine:\n    type: worker\n    install:\n        disk: /dev/sda\n"
                             "        image: %s\n" % image)
        else:
            documents.append("apiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n    image: %s\n" % image)
    return resource("config", MACHINE_CONFIGS, "v1alpha1", "---\n".join(documents))


def worker(tag, installers=None, extensions=()):
    """A worker running ``tag``: no etcd member list, the ``extensions`` (metadata of ExtensionStatuses), no secure
    boot, its config naming the installer of ``tag`` unless ``installers`` say where and what."""
    state = cosi_state(
        _config(*installers or [("machine", "ghcr.io/siderolabs/installer:%s" % tag)]),
        resource("runtime", "SecurityStates.talos.dev", "securitystate", {"secureBoot": False}),
        *[resource("runtime", "ExtensionStatuses.runtime.talos.dev", str(index), {"metadata": metadata})
          for index, metadata in enumerate(extensions)])
    return FakeTalos(nodes=["10.5.0.9"], answers={
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag=tag),
                                          platform=machine_pb2.PlatformInfo(name="metal"))],
        rpc.ETCD_MEMBER_LIST: fails_with("Unimplemented", "member list is only available on control plane nodes"),
        rpc.COSI_GET: state,
        rpc.COSI_LIST: state,
    })


def run(client, **options):
    options.setdefault("wait_timeout", 60)
    return run_task(talos_upgrade, client, **options)


def test_check_mode_predicts_the_legacy_api_of_an_old_node():
    client = worker("v1.12.6")
    ok, result, _task = run(client, check_mode=True, diff=True, version="1.14.0")
    assert ok and result["changed"] is True and result["api_used"] == "legacy"
    # Talos v1.14 installers come only from the Image Factory: the empty schematic for a node without one.
    assert result["image"] == FACTORY_IMAGE and result["to_version"] == "v1.14.0"
    assert "the node has no schematic" in result["image_reason"]
    assert (result["controlplane"], result["etcd_gate_open"], result["quorum"]) == (False, True, None)
    assert result["installer_reference"] == {"home": ".machine.install.image", "before": "ghcr.io/siderolabs/installer:v1.12.6",
                                             "after": FACTORY_IMAGE, "changed": True}
    assert result["diff"] == {"before": {"version": "v1.12.6", "installer": "ghcr.io/siderolabs/installer:v1.12.6"},
                              "after": {"version": "v1.14.0", "installer": FACTORY_IMAGE}}
    assert asked(client) == [rpc.VERSION, "ExtensionStatuses.runtime.talos.dev", "SecurityStates.talos.dev",
                             rpc.COSI_GET, rpc.VERSION, rpc.ETCD_MEMBER_LIST]


def test_a_node_on_the_target_is_left_alone():
    client = worker("v1.14.0")
    ok, result, _task = run(client, installer_image=IMAGE)
    assert ok and result["changed"] is False and result["etcd_gate_open"] is None
    assert result["image_reason"] == "the installer_image option names it"
    assert result["installer_reference"]["changed"] is False
    assert asked(client) == [rpc.COSI_GET, rpc.VERSION]


def test_a_config_with_two_installer_homes_is_refused_before_anything_changes():
    client = worker("v1.13.0", installers=[("machine", "a:v1.13.0"), ("unattended", "b:v1.13.0")])
    with pytest.raises(TalosConfigError, match=r"sets the installer image in both .machine.install.image \(a:v1.13.0\)"):
        run(client, installer_image=IMAGE)
    assert asked(client) == [rpc.COSI_GET]


def test_a_node_with_a_schematic_keeps_it_and_a_repository_wins():
    schematic = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
    extensions = [{"name": "qemu-guest-agent"},
                  {"name": "schematic", "version": schematic, "author": "Image Factory (https://factory.example.internal)"}]
    client = worker("v1.13.0", extensions=extensions)
    ok, result, _task = run(client, check_mode=True, version="v1.14.0")
    assert ok and result["image"] == "factory.example.internal/metal-installer/%s:v1.14.0" % schematic
    assert "(qemu-guest-agent) are kept" in result["image_reason"]
    ok, result, _task = run(worker("v1.13.0"), check_mode=True, version="v1.14.0",
                            installer_repository="registry.local/installer")
    assert ok and result["image"] == "registry.local/installer:v1.14.0"


def test_bad_options_fail_before_any_call():
    client = worker("v1.13.0")
    with pytest.raises(TalosConfigError, match="^stage apply only to the legacy upgrade API"):
        run(client, version="v1.14.0", api="lifecycle", stage=True)
    assert asked(client) == []


def test_several_nodes_are_upgraded_each_on_its_own_and_reported_per_node():
    client = worker("v1.13.0")
    client.settings = FakeTalos(nodes=["10.5.0.8", "10.5.0.9"]).settings
    # 10.5.0.8 runs the target and its config names its installer already.
    client.answer(rpc.VERSION, [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0"))], node="10.5.0.8")
    client.answer(rpc.COSI_GET, cosi_state(_config(("machine", IMAGE))), node="10.5.0.8")
    ok, result, _task = run(client, check_mode=True, installer_image=IMAGE)
    assert ok and result["changed"] is True and sorted(result["nodes"]) == ["10.5.0.8", "10.5.0.9"]
    assert "from_version" not in result
    on_target, to_upgrade = result["nodes"]["10.5.0.8"], result["nodes"]["10.5.0.9"]
    assert (on_target["changed"], on_target["from_version"], on_target["api_used"]) == (False, "v1.14.0", None)
    assert (to_upgrade["changed"], to_upgrade["from_version"], to_upgrade["etcd_gate_open"]) == (True, "v1.13.0", True)


def test_a_node_that_fails_among_several_is_named_with_the_others_results():
    client = worker("v1.14.0")
    client.settings = FakeTalos(nodes=["10.5.0.8", "10.5.0.9"]).settings
    client.answer(rpc.VERSION, fails_with("PermissionDenied", "not authorized"), node="10.5.0.8")
    with pytest.raises(ActionFailed) as failed:
        run(client, installer_image=IMAGE)
    assert failed.value.message.startswith("1 of 2 nodes failed (10.5.0.8): ")
    result = failed.value.to_result()
    assert result["changed"] is False and result["nodes"]["10.5.0.9"]["current_version"] == "v1.14.0"
    assert result["nodes"]["10.5.0.8"]["failed"] is True
