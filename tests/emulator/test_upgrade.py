# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upgrades (server-behaviour.md §7): ImageService.Pull, LifecycleService.Upgrade and legacy Upgrade."""

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, lifecycle_pb2, machine_pb2

INSTALLER = "ghcr.io/siderolabs/installer:v1.14.1"
SYSTEM = common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_SYSTEM)


def _pull(client, image=INSTALLER, **options):
    return client.call("machine.ImageService/Pull", image_pb2.ImageServicePullRequest(containerd=SYSTEM, image_ref=image), **options)


def _upgrade(client, image=INSTALLER, containerd=SYSTEM, **options):
    request = lifecycle_pb2.LifecycleServiceUpgradeRequest(containerd=containerd, source=lifecycle_pb2.InstallArtifactsSource(image_name=image))
    return client.call("machine.LifecycleService/Upgrade", request, **options)


def _error(function, *args, **options):
    with pytest.raises(GRPCError) as excinfo:
        function(*args, **options)
    return excinfo.value.status, excinfo.value.message


def test_pull_then_lifecycle_upgrade_then_reboot_shows_new_version(emulator, api):
    cluster = emulator(workers=1, reboot_seconds=0.1)
    worker = cluster.workers[0]
    client = api(cluster)
    frames = _pull(client, node=worker.address)
    # The pulled image, pinned to its digest as Talos answers.
    assert frames[-1].name.startswith("ghcr.io/siderolabs/installer@sha256:")
    assert all(frame.HasField("pull_progress") for frame in frames[:-1])
    progress = _upgrade(client, node=worker.address)
    assert [frame.progress.WhichOneof("response") for frame in progress][-1] == "exit_code"
    assert progress[-1].progress.exit_code == 0
    assert all(frame.progress.message for frame in progress[:-1])
    # Written to disk only: the running version changes with the next reboot.
    assert client.call("machine.MachineService/Version", node=worker.address).messages[0].version.tag == "v1.14.0"
    client.call("machine.MachineService/Reboot", node=worker.address)
    cluster.wait_until(lambda: worker.reboots == 1)
    cluster.wait_ready(worker)
    assert client.call("machine.MachineService/Version", node=worker.address).messages[0].version.tag == "v1.14.1"
    assert [entry["method"].rsplit("/", 1)[1] for entry in cluster.audit(node="worker-1")] == ["Pull", "Upgrade", "Reboot"]


def test_lifecycle_upgrade_errors(emulator, api):
    cluster = emulator()
    client = api(cluster)
    assert _error(_upgrade, client) == (
        Status.INTERNAL, 'upgrade failed: installer image "%s" not found in containerd store' % INSTALLER)
    assert _error(_upgrade, client, image="") == (Status.INVALID_ARGUMENT, "installer image name is required")
    assert _error(_upgrade, client, containerd=common_pb2.ContainerdInstance())[0] == Status.INVALID_ARGUMENT
    # Pulled into the CRI namespace, not the system one.
    client.call("machine.ImageService/Pull", image_pb2.ImageServicePullRequest(
        containerd=common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_CRI), image_ref=INSTALLER))
    assert _error(_upgrade, client)[0] == Status.INTERNAL
    assert _error(_upgrade, api(cluster, role="operator")) == (Status.PERMISSION_DENIED, "not authorized")
    assert cluster.nodes[0].installed_version == "v1.14.0"


def test_installer_exit_code_is_streamed_not_raised(emulator, api):
    cluster = emulator()
    client = api(cluster)
    _pull(client)
    cluster.faults.fail_installer(exit_code=1)
    progress = _upgrade(client)
    assert progress[-1].progress.exit_code == 1
    assert cluster.nodes[0].installed_version == "v1.14.0"


def test_concurrent_lifecycle_upgrade_is_refused(emulator, api):
    cluster = emulator()
    client = api(cluster)
    _pull(client)
    cluster.faults.pause("machine.LifecycleService/Upgrade", 0.5)
    request = lifecycle_pb2.LifecycleServiceUpgradeRequest(containerd=SYSTEM, source=lifecycle_pb2.InstallArtifactsSource(image_name=INSTALLER))
    results = client.wait(client.call_async("machine.LifecycleService/Upgrade", request),
                          client.call_async("machine.LifecycleService/Upgrade", request))
    errors = [result for result in results if isinstance(result, GRPCError)]
    assert [(error.status, error.message) for error in errors] == [
        (Status.FAILED_PRECONDITION, "another installation/upgrade is already in progress")]


def test_lifecycle_is_unimplemented_before_v113(emulator, api):
    cluster = emulator(talos_version="v1.12.0")
    client = api(cluster)
    assert _error(_upgrade, client) == (Status.UNIMPLEMENTED, "unknown service machine.LifecycleService")
    assert _error(_pull, client) == (Status.UNIMPLEMENTED, "unknown service machine.ImageService")


def test_legacy_upgrade_acks_and_reboots_into_new_version(emulator, api):
    cluster = emulator(talos_version="v1.12.0", reboot_seconds=0.1)
    node = cluster.nodes[0]
    client = api(cluster)
    reply = client.call("machine.MachineService/Upgrade", machine_pb2.UpgradeRequest(image="ghcr.io/siderolabs/installer:v1.13.2")).messages[0]
    assert reply.ack == "Upgrade request received" and reply.actor_id
    cluster.wait_until(lambda: node.reboots == 1)
    cluster.wait_ready(node)
    assert client.call("machine.MachineService/Version").messages[0].version.tag == "v1.13.2"


def test_legacy_upgrade_checks_etcd_quorum_unless_forced(emulator, api):
    cluster = emulator(controlplanes=2, bootstrapped=True, reboot_seconds=0.1)
    client = api(cluster)
    request = machine_pb2.UpgradeRequest(image=INSTALLER)
    assert _error(client.call, "machine.MachineService/Upgrade", request) == (
        Status.UNKNOWN, "etcd member count(2) is insufficient to maintain quorum if upgrade commences")
    cluster.faults.mark_image_unavailable(INSTALLER)
    assert _error(client.call, "machine.MachineService/Upgrade", machine_pb2.UpgradeRequest(image=INSTALLER, force=True))[1].startswith(
        'error validating installer image "%s"' % INSTALLER)
    cluster.faults.clear()
    assert client.call("machine.MachineService/Upgrade", machine_pb2.UpgradeRequest(image=INSTALLER, preserve=True)).messages[0].ack
    cluster.wait_until(lambda: cluster.nodes[0].reboots == 1)
    cluster.wait_ready(cluster.nodes[0])
    assert cluster.nodes[0].talos_version == "v1.14.1"


@pytest.mark.parametrize("image", [
    "ghcr.io/siderolabs/installer:v1.99.0",
    "ghcr.io/siderolabs/installer:latest",
    "ghcr.io/siderolabs/installer",
    "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.15.0",
    "registry.local:5000/siderolabs/installer-secureboot:v2.0.0",
])
def test_an_installer_of_a_release_that_never_was_cannot_be_pulled(emulator, api, image):
    # Its tag is the version it installs: no registry holds a Talos that was never released, so a node cannot install
    # it, whichever upgrade API is asked.
    cluster = emulator(workers=1, node_versions={"worker-1": "v1.12.0"}, reboot_seconds=0.1)
    controlplane, legacy = cluster.nodes
    client = api(cluster)
    status, message = _error(_pull, client, image=image, node=controlplane.address)
    assert status == Status.NOT_FOUND and message.endswith(": not found") and "error pulling image" in message
    status, message = _error(client.call, "machine.MachineService/Upgrade", machine_pb2.UpgradeRequest(image=image),
                             node=legacy.address)
    assert status == Status.UNKNOWN and message.startswith('error validating installer image "%s"' % image)
    assert (controlplane.installed_version, legacy.installed_version) == ("v1.14.0", "v1.12.0")
    assert cluster.audit(method="Reboot") == [] and legacy.reboots == 0


def test_installers_of_released_versions_and_other_images_are_pulled(emulator, api):
    cluster = emulator()
    client = api(cluster)
    for image in ("ghcr.io/siderolabs/installer:v1.14.7", "ghcr.io/siderolabs/installer:v1.9.0",
                  "ghcr.io/siderolabs/installer:v1.14.0-rc.1", "ghcr.io/siderolabs/installer@sha256:" + "a" * 64,
                  "docker.io/library/nginx:latest", "registry.k8s.io/kube-apiserver:v1.99.0"):
        assert _pull(client, image=image)[-1].name
