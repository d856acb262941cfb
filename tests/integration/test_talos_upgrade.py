# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""talos_upgrade through ansible-playbook against the emulator: the lifecycle path, the
legacy fallback, idempotency, check mode, installer failures and the etcd quorum guard."""

import pytest

LIFECYCLE_CALLS = ["machine.ImageService/Pull", "machine.LifecycleService/Upgrade", "machine.MachineService/Reboot"]
# Then the installer reference in the node's config names the new installer: a dry run, then the apply.
UPGRADE_CALLS = LIFECYCLE_CALLS + ["machine.MachineService/ApplyConfiguration"] * 2
# Talos v1.14 installers come from the Image Factory: the empty schematic for a node without one.
FACTORY_INSTALLER = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"


def _upgrade_play(cluster, node, **options):
    """A play that upgrades ``node`` with talos_upgrade; options are the module's."""
    args = dict(talosconfig=cluster.talosconfig_path(), node=node.address, wait_timeout=60)
    args.update(options)
    return {
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [{"name": "upgrade", "talos_linux.talos.talos_upgrade": args, "register": "upgraded"}],
    }


def _calls(cluster, node):
    return [entry["method"] for entry in cluster.audit(node=node.name)]


def _version(cluster, node):
    return cluster.node(node.name).talos_version


def _worker(cluster):
    return cluster.workers[0]


def test_lifecycle_upgrade_check_mode_then_apply_then_unchanged(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = _worker(cluster)

    check = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"), check=True).task("upgrade")
    assert check["status"] == "changed"
    assert check["result"]["from_version"] == "v1.14.0"
    assert check["result"]["api_used"] == "lifecycle"
    assert check["result"]["controlplane"] is False
    assert _calls(cluster, worker) == []

    applied = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1")).task("upgrade")["result"]
    assert applied["changed"] is True
    assert applied["from_version"] == "v1.14.0"
    assert applied["current_version"] == "v1.14.1"
    assert applied["api_used"] == "lifecycle"
    assert applied["rebooted"] is True
    assert applied["image"] == FACTORY_INSTALLER + ":v1.14.1"
    assert "installer exited with code 0" in applied["progress"]
    assert applied["progress"][-1] == "node is running v1.14.1"
    assert applied["installer_reference"] == {"home": ".machine.install.image", "before": "ghcr.io/siderolabs/installer:v1.14.0",
                                              "after": FACTORY_INSTALLER + ":v1.14.1", "changed": True}
    assert cluster.node(worker.name).config["machine"]["install"]["image"] == FACTORY_INSTALLER + ":v1.14.1"
    assert _calls(cluster, worker) == UPGRADE_CALLS
    pull, install, reboot = cluster.audit(node=worker.name)[:3]
    assert pull["namespace"] == "NS_SYSTEM" and pull["image"] == FACTORY_INSTALLER + ":v1.14.1"
    assert install["exit_code"] == 0
    assert reboot["mode"] == "DEFAULT"
    assert _version(cluster, worker) == "v1.14.1"

    again = run_playbook(_upgrade_play(cluster, worker, installer_image="ghcr.io/siderolabs/installer:v1.14.1")).task("upgrade")
    assert again["status"] == "ok"
    assert again["result"]["api_used"] is None
    assert _calls(cluster, worker) == UPGRADE_CALLS, "an up-to-date node must not be called again"


def test_legacy_fallback_on_v1_12(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.12.0")
    worker = _worker(cluster)

    check = run_playbook(_upgrade_play(cluster, worker, version="v1.12.1"), check=True).task("upgrade")["result"]
    assert check["changed"] is True and check["api_used"] == "legacy"
    assert cluster.audit() == []

    result = run_playbook(_upgrade_play(cluster, worker, version="v1.12.1", reboot_mode="powercycle")).task("upgrade")["result"]

    assert result["api_used"] == "legacy"
    assert result["current_version"] == "v1.12.1"
    assert "node has no lifecycle API; using the legacy upgrade API" in result["progress"]
    (upgrade,) = cluster.audit(node=worker.name, method="machine.MachineService/Upgrade")
    assert upgrade["image"] == "ghcr.io/siderolabs/installer:v1.12.1"
    assert upgrade["stage"] is False and upgrade["force"] is False and upgrade["preserve"] is False
    assert "machine.LifecycleService/Upgrade" not in _calls(cluster, worker)
    assert _version(cluster, worker) == "v1.12.1"


def test_lifecycle_only_refuses_an_old_node(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.12.0")
    worker = _worker(cluster)

    run = run_playbook(_upgrade_play(cluster, worker, version="v1.12.1", api="lifecycle"), expect_rc=2)

    result = run.task("upgrade")["result"]
    assert result["step"] == "pull"
    assert "use api: legacy" in result["msg"]
    assert [call for call in _calls(cluster, worker) if not call.startswith("machine.ImageService")] == []
    assert _version(cluster, worker) == "v1.12.0"


def test_non_zero_installer_exit_fails_without_reboot(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = _worker(cluster)
    cluster.faults.fail_installer(exit_code=3, node=worker.name)

    run = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"), expect_rc=2)

    result = run.task("upgrade")["result"]
    assert run.task("upgrade")["status"] == "failed"
    assert result["step"] == "install"
    assert "exited with code 3" in result["msg"]
    assert "installer failed with exit code 3" in result["msg"], "the last installer lines belong in the message"
    assert "still runs v1.14.0 and was not rebooted" in result["msg"]
    assert result["rebooted"] is False
    assert "machine.MachineService/Reboot" not in _calls(cluster, worker)
    assert _version(cluster, worker) == "v1.14.0"


def test_node_back_on_the_old_version_is_a_rollback_failure(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = _worker(cluster)
    boot_id = cluster.node(worker.name).boot_id
    cluster.faults.roll_back_next_boot(node=worker.name)

    run = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"), expect_rc=2)

    result = run.task("upgrade")["result"]
    assert run.task("upgrade")["status"] == "failed"
    assert result["step"] == "wait"
    assert "came back on v1.14.0 instead of v1.14.1" in result["msg"]
    assert "rolled the upgrade back" in result["msg"]
    assert _calls(cluster, worker) == LIFECYCLE_CALLS, "the node was installed and rebooted exactly once"
    assert cluster.node(worker.name).boot_id != boot_id
    assert _version(cluster, worker) == "v1.14.0"


def test_unavailable_image_fails_at_the_pull(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = _worker(cluster)
    cluster.faults.mark_image_unavailable(FACTORY_INSTALLER + ":v1.14.1")

    result = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"), expect_rc=2).task("upgrade")["result"]

    assert result["step"] == "pull"
    assert result["code"] == "NotFound"
    assert "The node was not changed and still runs v1.14.0" in result["msg"]
    assert [call for call in _calls(cluster, worker) if call != "machine.ImageService/Pull"] == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_quorum_guard_refuses_an_unhealthy_cluster(emulator, run_playbook, check_mode):
    cluster = emulator(controlplanes=3, workers=0, bootstrapped=True, talos_version="v1.14.0", etcd="real")
    target, alarmed = cluster.controlplanes[0], cluster.controlplanes[1]
    cluster.raise_etcd_alarm(alarmed.name)

    run = run_playbook(_upgrade_play(cluster, target, version="v1.14.1"), check=check_mode, expect_rc=2)

    result = run.task("upgrade")["result"]
    assert result["msg"].startswith("Refusing to upgrade control-plane node %s: etcd would keep 3 voting members and "
                                    "need 2 of them healthy for quorum, but only 1 member other than %s is healthy (not "
                                    "healthy: %s - memberID:%d alarm:NOSPACE); " % (
                                        target.address, target.name, alarmed.name, cluster.etcd.member_of(alarmed).id)), result["msg"]
    assert result["quorum"]["unhealthy"] == [alarmed.name]
    assert "force_quorum_loss: true" in result["msg"]
    assert result["controlplane"] is True and result["etcd_gate_open"] is False
    assert cluster.audit() == []


def test_a_single_control_plane_needs_force_quorum_loss(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=0, bootstrapped=True, talos_version="v1.14.0")
    node = cluster.controlplanes[0]

    refused = run_playbook(_upgrade_play(cluster, node, version="v1.14.1"), expect_rc=2).task("upgrade")["result"]
    assert "etcd would keep 1 voting member and need 1 of them healthy for quorum, but only 0 members" in refused["msg"]
    assert cluster.audit() == []

    forced = run_playbook(_upgrade_play(cluster, node, version="v1.14.1", force_quorum_loss=True)).task("upgrade")["result"]
    assert forced["current_version"] == "v1.14.1" and forced["etcd_gate_open"] is False
    assert _calls(cluster, node) == UPGRADE_CALLS


def test_healthy_control_plane_passes_the_quorum_guard(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=0, bootstrapped=True, talos_version="v1.13.0", etcd="real")
    node = cluster.controlplanes[2]

    result = run_playbook(_upgrade_play(cluster, node, version="v1.14.0")).task("upgrade")["result"]

    assert result["controlplane"] is True
    assert result["current_version"] == "v1.14.0"
    assert _calls(cluster, node) == UPGRADE_CALLS
    assert [entry["node"] for entry in cluster.audit()] == [node.name] * 5


@pytest.mark.parametrize("door", ["controller", "module"])
def test_several_nodes_in_one_task_are_reported_per_node(emulator, run_playbook, door):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True, talos_version="v1.14.0", reboot_seconds=0.2)
    first, second = cluster.workers
    play = _upgrade_play(cluster, first, version="v1.14.1")
    args = play["tasks"][0]["talos_linux.talos.talos_upgrade"]
    del args["node"]
    args["nodes"] = [first.address]
    run_playbook(play, extra_vars={"talos_door": door})

    # The first worker runs the target already: only the second one changes.
    args["nodes"] = [first.address, second.address]
    upgraded = run_playbook(play, extra_vars={"talos_door": door}).task("upgrade")
    assert upgraded["status"] == "changed"
    nodes = upgraded["result"]["nodes"]
    assert sorted(nodes) == sorted([first.address, second.address]) and "from_version" not in upgraded["result"]
    assert (nodes[first.address]["changed"], nodes[first.address]["rebooted"]) == (False, False)
    assert (nodes[second.address]["changed"], nodes[second.address]["current_version"]) == (True, "v1.14.1")
    assert _calls(cluster, second) == UPGRADE_CALLS

    again = run_playbook(play, extra_vars={"talos_door": door}).task("upgrade")
    assert again["status"] == "ok" and not any(result["changed"] for result in again["result"]["nodes"].values())

    # A node that fails fails the task once the other is done, and the result keeps both.
    cluster.faults.fail_installer(exit_code=4, node=second.name)
    args["version"] = "v1.14.2"
    failed = run_playbook(play, extra_vars={"talos_door": door}, expect_rc=2).task("upgrade")
    assert failed["status"] == "failed"
    assert failed["result"]["msg"].startswith("1 of 2 nodes failed (%s): The installer for " % second.address)
    nodes = failed["result"]["nodes"]
    assert nodes[first.address]["current_version"] == "v1.14.2" and nodes[first.address]["changed"] is True
    assert nodes[second.address]["failed"] is True and nodes[second.address]["step"] == "install"
    assert _version(cluster, second) == "v1.14.1"


@pytest.mark.parametrize("options, message", [
    (dict(version="latest"), "version 'latest' is not a Talos release: give a release such as v1.14.1."),
    (dict(version="v1.99.0"), "version 'v1.99.0' is not a Talos release this collection supports (v1.9 to v1.14, any patch "
                              "release of them): v1.99 is newer than v1.14; check the value for a typo, or use a release "
                              "of the collection that supports Talos v1.99."),
    (dict(installer_image="ghcr.io/siderolabs/installer:v1.99.0"),
     "The tag 'v1.99.0' of installer_image 'ghcr.io/siderolabs/installer:v1.99.0' is not a Talos release this collection supports"),
])
def test_a_target_that_is_no_supported_release_is_refused_before_any_call(emulator, run_playbook, options, message):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0")
    worker = _worker(cluster)
    image_play = _upgrade_play(cluster, worker)
    image_play["tasks"] = [{"name": "pull", "talos_linux.talos.talos_image": dict(
        talosconfig=cluster.talosconfig_path(), node=worker.address,
        **dict(("installer_version" if key == "version" else key, value) for key, value in options.items())),
        "ignore_errors": True}] + image_play["tasks"]
    image_play["tasks"][1]["talos_linux.talos.talos_upgrade"].update(options)

    run = run_playbook(image_play, expect_rc=2)
    assert run.task("upgrade")["result"]["msg"].startswith(message)
    # talos_image names its own version option, installer_version; the installer image is installer_image in both.
    assert run.task("pull")["result"]["msg"].replace("installer_version", "version").startswith(message)
    assert "installer_" in run.task("pull")["result"]["msg"]
    assert cluster.audit() == []
    assert _version(cluster, worker) == "v1.14.0"


def test_a_node_at_the_target_with_an_older_installer_reference_only_has_its_reference_updated(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.14.0", reboot_seconds=0.1)
    worker = _worker(cluster)
    older = worker.config_text()
    run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"))
    # A config applied again as it was before the upgrade names the older installer.
    run_playbook({"hosts": "localhost", "gather_facts": False, "tasks": [{"talos_linux.talos.talos_apply_config": dict(
        talosconfig=cluster.talosconfig_path(), node=worker.address, config=older)}]})
    assert worker.config["machine"]["install"]["image"] == "ghcr.io/siderolabs/installer:v1.14.0"
    calls, reboots = len(_calls(cluster, worker)), worker.reboots

    check = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1"), check=True).task("upgrade")["result"]
    assert (check["changed"], check["upgraded"], check["rebooted"]) == (True, False, False)
    assert check["installer_reference"]["changed"] is True and len(_calls(cluster, worker)) == calls

    result = run_playbook(_upgrade_play(cluster, worker, version="v1.14.1")).task("upgrade")["result"]
    assert (result["changed"], result["upgraded"], result["rebooted"]) == (True, False, False)
    assert "nodes" not in result  # node: the node's result once, at the top
    assert result["installer_reference"]["after"] == FACTORY_INSTALLER + ":v1.14.1" and worker.reboots == reboots
    assert _calls(cluster, worker)[calls:] == ["machine.MachineService/ApplyConfiguration"] * 2

    upgraded = run_playbook(_upgrade_play(cluster, worker, version="v1.14.2")).task("upgrade")["result"]
    assert (upgraded["changed"], upgraded["upgraded"], upgraded["rebooted"]) == (True, True, True)
