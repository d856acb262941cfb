# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Images on a node (ImageService List/Pull/Remove, legacy ImageList/ImagePull) and what a node reports of its
build: platform, secure boot, system extensions and the Image Factory schematic."""

import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, lifecycle_pb2, machine_pb2

from talos_emulator.image_factory import factory_schematic, set_factory_build

SYSTEM = common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_SYSTEM)
CRI = common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_CRI)
SCHEMATIC = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"


def _error(client, method, request=None, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(method, request, **options)
    return excinfo.value.status, excinfo.value.message


def _names(client, containerd, **options):
    return sorted(reply.name for reply in client.call("machine.ImageService/List",
                                                      image_pb2.ImageServiceListRequest(containerd=containerd), **options))


def _booted_with(client, containerd, **options):
    """The names a node's store of ``containerd`` holds from its boot (the kubelet's pulls on a control plane)."""
    return set(_names(client, containerd, **options))


def _pull(client, ref, containerd=CRI, **options):
    return client.call("machine.ImageService/Pull", image_pb2.ImageServicePullRequest(containerd=containerd, image_ref=ref), **options)


def _list(client, resource_type, **options):
    replies = client.call("cosi.resource.State/List", state_pb2.ListRequest(namespace="runtime", type=resource_type), **options)
    return [(reply.resource.metadata.id, yaml.safe_load(reply.resource.spec.yaml_spec)) for reply in replies]


def test_pull_normalizes_and_leaves_three_names_per_namespace(emulator, api):
    cluster = emulator()
    client = api(cluster)
    booted = _booted_with(client, CRI)
    # The kubelet pulled the pod sandbox and the static pods' images as the control plane booted.
    assert {"registry.k8s.io/pause:3.10", "registry.k8s.io/kube-apiserver:v1.35.0", "registry.k8s.io/kube-controller-manager:v1.35.0",
            "registry.k8s.io/kube-scheduler:v1.35.0"} <= booted and len(booted) == 12
    frames = _pull(client, "nginx:1.27")
    digest = frames[-1].name.split("@", 1)[1]
    assert frames[-1].name == "docker.io/library/nginx@" + digest
    assert set(_names(client, CRI)) - booted == {"docker.io/library/nginx:1.27", "docker.io/library/nginx@" + digest, digest}
    # The system namespace holds what machined pulled at boot for its own services, the kubelet's and etcd's images.
    system = _names(client, SYSTEM)
    assert [name for name in system if "@" not in name and not name.startswith("sha256:")] == [
        "ghcr.io/siderolabs/kubelet:v1.35.0", "registry.k8s.io/etcd:3.7.1"]
    assert len(system) == 6 and not any("nginx" in name for name in system)

    again = _pull(client, "docker.io/library/nginx:1.27")
    statuses = {frame.pull_progress.progress.status for frame in again[:-1]}
    assert statuses == {image_pb2.ImageServicePullLayerProgress.ALREADY_EXISTS}
    assert again[-1].name == frames[-1].name

    listed = [reply for reply in client.call("machine.ImageService/List", image_pb2.ImageServiceListRequest(containerd=CRI))
              if reply.name not in booted]
    assert len(listed) == 3 and all(reply.digest == digest and reply.size > 0 and reply.created_at.seconds > 0 for reply in listed)


def test_remove_takes_the_exact_name(emulator, api):
    cluster = emulator()
    client = api(cluster)
    booted = _booted_with(client, CRI)
    _pull(client, "registry.k8s.io/pause:3.10")
    remove = "machine.ImageService/Remove"
    assert _error(client, remove, image_pb2.ImageServiceRemoveRequest(containerd=CRI, image_ref="pause:3.10")) == (
        Status.NOT_FOUND, "image pause:3.10 not found")
    client.call(remove, image_pb2.ImageServiceRemoveRequest(containerd=CRI, image_ref="registry.k8s.io/pause:3.10"))
    assert set(_names(client, CRI)) == booted - {"registry.k8s.io/pause:3.10"}
    assert _error(api(cluster, role="operator"), remove, image_pb2.ImageServiceRemoveRequest(containerd=CRI, image_ref="x")) == (
        Status.PERMISSION_DENIED, "not authorized")


def test_image_errors_are_talos_errors(emulator, api):
    cluster = emulator()
    client = api(cluster)
    cluster.faults.mark_image_unavailable("ghcr.io/siderolabs/missing:v1")
    status, message = _error(client, "machine.ImageService/Pull",
                             image_pb2.ImageServicePullRequest(containerd=CRI, image_ref="ghcr.io/siderolabs/missing:v1"))
    assert status == Status.NOT_FOUND and message.startswith("error pulling image: ")
    assert _error(client, "machine.ImageService/Pull", image_pb2.ImageServicePullRequest(containerd=CRI, image_ref="Bad Name"))[0] == Status.UNKNOWN
    assert _error(client, "machine.ImageService/List", image_pb2.ImageServiceListRequest(containerd=common_pb2.ContainerdInstance())) == (
        Status.INVALID_ARGUMENT, "invalid containerd namespace NS_UNKNOWN")
    inmem_cri = common_pb2.ContainerdInstance(driver=common_pb2.CONTAINERD, namespace=common_pb2.NS_CRI)
    assert _error(client, "machine.ImageService/List", image_pb2.ImageServiceListRequest(containerd=inmem_cri)) == (
        Status.INVALID_ARGUMENT, "cannot use CRI namespace with containerd driver")
    assert _error(api(cluster, role="reader"), "machine.ImageService/Pull",
                  image_pb2.ImageServicePullRequest(containerd=CRI, image_ref="nginx"))[0] == Status.PERMISSION_DENIED
    assert not any("nginx" in name for name in _names(api(cluster, role="reader"), CRI))


def test_legacy_image_api_on_v1_12(emulator, api):
    cluster = emulator(talos_version="v1.12.0")
    client = api(cluster)
    assert _error(client, "machine.ImageService/List", image_pb2.ImageServiceListRequest(containerd=CRI))[0] == Status.UNIMPLEMENTED
    reply = client.call("machine.MachineService/ImagePull", machine_pb2.ImagePullRequest(namespace=common_pb2.NS_SYSTEM, reference="busybox"))
    assert len(reply.messages) == 1
    listed = client.call("machine.MachineService/ImageList", machine_pb2.ImageListRequest(namespace=common_pb2.NS_SYSTEM))
    assert "docker.io/library/busybox:latest" in [item.name for item in listed]
    assert _error(client, "machine.MachineService/ImageList", machine_pb2.ImageListRequest()) == (
        Status.INVALID_ARGUMENT, "invalid namespace NS_UNKNOWN")


def test_a_plain_node_reports_metal_and_no_extensions(emulator, api):
    cluster = emulator()
    client = api(cluster)
    platform = client.call("machine.MachineService/Version").messages[0].platform
    assert (platform.name, platform.mode) == ("metal", "metal")
    assert _list(client, "ExtensionStatuses.runtime.talos.dev") == []
    assert _list(client, "ImageFactorySchematics.runtime.talos.dev") == []
    assert _list(client, "SecurityStates.talos.dev") == [("securitystate", {"secureBoot": False})]


def test_a_factory_build_reports_its_schematic_and_extensions(emulator, api):
    cluster = emulator(workers=1, node_versions={"worker-1": "v1.13.2"})
    node, older = cluster.nodes
    for each in (node, older):
        set_factory_build(each, SCHEMATIC, ["siderolabs/qemu-guest-agent"], platform="nocloud", secure_boot=True)
    client = api(cluster)
    platform = client.call("machine.MachineService/Version").messages[0].platform
    assert (platform.name, platform.mode) == ("nocloud", "cloud")
    extensions = _list(client, "ExtensionStatuses.runtime.talos.dev")
    assert [(spec["metadata"]["name"], spec["metadata"]["version"]) for _id, spec in extensions] == [
        ("qemu-guest-agent", "v1.0.0"), ("schematic", SCHEMATIC)]
    assert extensions[-1][1]["metadata"]["author"] == "Image Factory (https://factory.talos.dev)"
    assert _list(client, "ImageFactorySchematics.runtime.talos.dev") == [
        ("image-factory-schematic", {"schematicId": SCHEMATIC, "flavor": "Image Factory", "apiUrl": "https://factory.talos.dev"})]
    assert _list(client, "SecurityStates.talos.dev")[0][1]["secureBoot"] is True
    # Before v1.14 only the extension carries the schematic.
    assert _list(client, "ImageFactorySchematics.runtime.talos.dev", node=older.address) == []
    assert len(_list(client, "ExtensionStatuses.runtime.talos.dev", node=older.address)) == 2


def test_the_installer_decides_the_build_after_the_reboot(emulator, api):
    cluster = emulator(workers=1, reboot_seconds=0.1)
    worker = cluster.workers[0]
    set_factory_build(worker, SCHEMATIC, ["siderolabs/qemu-guest-agent"])
    client = api(cluster)

    def upgrade(image, reboots):
        _pull(client, image, containerd=SYSTEM, node=worker.address)
        request = lifecycle_pb2.LifecycleServiceUpgradeRequest(containerd=SYSTEM, source=lifecycle_pb2.InstallArtifactsSource(image_name=image))
        client.call("machine.LifecycleService/Upgrade", request, node=worker.address)
        client.call("machine.MachineService/Reboot", node=worker.address)
        cluster.wait_until(lambda: worker.reboots == reboots)
        cluster.wait_ready(worker)

    upgrade("factory.talos.dev/metal-installer/%s:v1.14.1" % SCHEMATIC, 1)
    assert (worker.talos_version, worker.schematic_id, [extension["name"] for extension in worker.extensions]) == (
        "v1.14.1", SCHEMATIC, ["qemu-guest-agent"])
    # An installer without the schematic drops the extensions, as on a real node.
    upgrade("ghcr.io/siderolabs/installer:v1.14.2", 2)
    assert (worker.talos_version, worker.schematic_id, worker.extensions) == ("v1.14.2", None, [])


def test_factory_schematic_of_installer_references():
    assert factory_schematic("factory.talos.dev/metal-installer/%s:v1.14.0" % SCHEMATIC) == SCHEMATIC
    assert factory_schematic("factory.talos.dev/installer-secureboot/%s:v1.9.0" % SCHEMATIC) == SCHEMATIC
    assert factory_schematic("127.0.0.1:8080/nocloud-installer/%s:v1.14.0" % SCHEMATIC) == SCHEMATIC
    assert factory_schematic("ghcr.io/siderolabs/installer:v1.14.0") is None
