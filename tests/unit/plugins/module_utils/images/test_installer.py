# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""images/installer.py: the default installer of a node (from what it reports; against the emulator). The target
version and the upgrade API choice are tested with talos_upgrade."""

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import EMPTY_SCHEMATIC_ID as EMPTY
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import (
    NodeBuild,
    choose_installer,
    choose_installers,
    node_build,
    read_node_build,
    read_node_builds,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, cosi_state, fails_with

from talos_emulator.image_factory import set_factory_build

QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"


# -- the default installer of a node --------------------------------------------------

def _build(**fields):
    values = dict(version="v1.13.5", platform="metal")
    values.update(fields)
    return NodeBuild(**values)


def test_an_explicit_image_or_repository_wins():
    build = _build(schematic_id=QEMU, extensions=["qemu-guest-agent"])
    choice = choose_installer(build, "v1.14.0", image="registry.local/installer:v1.14.0")
    assert (choice.image, choice.source) == ("registry.local/installer:v1.14.0", "installer_image")
    choice = choose_installer(build, "1.14.0", repository="registry.local/installer/")
    assert (choice.image, choice.source) == ("registry.local/installer:v1.14.0", "installer_repository")


def test_a_node_keeps_its_schematic_platform_and_factory():
    build = _build(platform="nocloud", schematic_id=QEMU, extensions=["qemu-guest-agent"], factory_url="https://factory.example.internal")
    choice = choose_installer(build, "v1.14.0")
    assert choice.image == "factory.example.internal/nocloud-installer/%s:v1.14.0" % QEMU
    assert choice.source == "schematic"
    assert "qemu-guest-agent" in choice.reason and QEMU in choice.reason
    choice = choose_installer(_build(schematic_id=QEMU, secure_boot=True), "v1.13.5", factory_url="http://127.0.0.1:9000")
    assert choice.image == "127.0.0.1:9000/metal-installer-secureboot/%s:v1.13.5" % QEMU


def test_a_node_without_a_schematic():
    choice = choose_installer(_build(), "v1.14.1")
    assert (choice.image, choice.source) == ("factory.talos.dev/metal-installer/%s:v1.14.1" % EMPTY, "factory")
    assert choose_installer(_build(), "v1.13.6").image == "ghcr.io/siderolabs/installer:v1.13.6"
    assert choose_installer(_build(secure_boot=True), "v1.13.6").image == (
        "factory.talos.dev/metal-installer-secureboot/%s:v1.13.6" % EMPTY)
    with pytest.raises(TalosConfigError, match=r"system extensions \(iscsi-tools\) that come from no Image Factory schematic"):
        choose_installer(_build(extensions=["iscsi-tools"]), "v1.14.0")
    with pytest.raises(TalosConfigError, match="version 'latest' is not a Talos version"):
        choose_installer(_build(), "latest")


def test_node_build_from_what_the_node_reports():
    class Version:
        class version:
            tag, arch = "v1.14.0", "arm64"

        class platform:
            name = "nocloud"

    statuses = [
        {"spec": {"metadata": {"name": "qemu-guest-agent", "version": "10.1.2"}}},
        {"spec": {"metadata": {"name": "schematic", "version": QEMU, "author": "Image Factory (https://factory.example.internal)"}}},
    ]
    build = node_build(Version, statuses, {"spec": {"secureBoot": True}})
    assert build.as_dict() == {"version": "v1.14.0", "platform": "nocloud", "arch": "arm64", "secure_boot": True,
                               "extensions": ["qemu-guest-agent"], "schematic_id": QEMU, "factory_url": "https://factory.example.internal"}
    assert node_build(Version, [], None).schematic_id is None


# -- installer homes ------------------------------------------------------------------

def test_read_node_build_from_the_emulator(emulator):
    cluster = emulator(workers=1, node_versions={"worker-1": "v1.12.6"})
    for node in cluster.nodes:
        set_factory_build(node, QEMU, ["siderolabs/qemu-guest-agent"], platform="nocloud")
    with TalosClient(ConnectionSettings.from_params({"talosconfig": cluster.talosconfig_path()})) as client:
        for node in cluster.nodes:
            build = read_node_build(client, node.address)
            assert (build.platform, build.schematic_id, build.extensions, build.factory_url, build.secure_boot) == (
                "nocloud", QEMU, ["qemu-guest-agent"], "https://factory.talos.dev", False)


# -- several nodes' installers at once -------------------------------------------------

def test_each_node_of_several_gets_its_own_installer_from_one_round_of_reads(emulator):
    cluster = emulator(controlplanes=1, workers=2, node_versions={"worker-2": "v1.13.5"})
    plain, factory_node, extensions_only = cluster.nodes
    set_factory_build(factory_node, QEMU, ["siderolabs/qemu-guest-agent"], platform="nocloud")
    extensions_only.extensions = [{"name": "iscsi-tools", "version": "v0.2.0", "author": "Sidero Labs", "description": "iSCSI"}]
    nodes = [node.address for node in cluster.nodes]
    with TalosClient(ConnectionSettings.from_params({"talosconfig": cluster.talosconfig_path()})) as client:
        builds = read_node_builds(client, nodes, max_concurrency=2)
        one_by_one = dict((node, read_node_build(client, node).as_dict()) for node in nodes)
        choices = choose_installers(client, nodes, "v1.14.1")
    assert dict((node, build.as_dict()) for node, build in builds.items()) == one_by_one
    assert (choices[plain.address].image, choices[plain.address].source) == (
        "factory.talos.dev/metal-installer/%s:v1.14.1" % EMPTY, "factory")
    assert (choices[factory_node.address].image, choices[factory_node.address].source) == (
        "factory.talos.dev/nocloud-installer/%s:v1.14.1" % QEMU, "schematic")
    assert isinstance(choices[extensions_only.address], TalosConfigError)
    assert choices[extensions_only.address].message.startswith("The node runs system extensions (iscsi-tools)")
    assert cluster.audit() == [], "choosing an installer changes nothing"


def _fake_nodes(security):
    """Two nodes, 10.5.0.8 refusing its Version, 10.5.0.9 answering SecurityState with ``security``."""
    client = FakeTalos(nodes=["10.5.0.8", "10.5.0.9"], answers={
        rpc.VERSION: [machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.13.5"), platform=machine_pb2.PlatformInfo(name="metal"))],
        rpc.COSI_LIST: cosi_state(),
        rpc.COSI_GET: security,
    })
    client.answer(rpc.VERSION, fails_with("Unavailable", "connection refused"), node="10.5.0.8")
    return client


def test_a_node_that_cannot_be_read_fails_alone_and_a_missing_security_state_is_no_secure_boot():
    for security in (fails_with("NotFound", "resource doesn't exist"), fails_with("PermissionDenied", "not authorized")):
        client = _fake_nodes(security)
        choices = choose_installers(client, ["10.5.0.8", "10.5.0.9"], "v1.13.6", max_concurrency=3)
        assert isinstance(choices["10.5.0.8"], TalosError) and choices["10.5.0.8"].code == "Unavailable"
        assert (choices["10.5.0.9"].image, choices["10.5.0.9"].source) == ("ghcr.io/siderolabs/installer:v1.13.6", "legacy")
        # The reads go to every node at once, none of them one node at a time.
        assert sorted(set(call.via for call in client.calls)) == ["call_many", "stream_many"]
        assert all(call.kwargs["max_concurrency"] == 3 for call in client.calls)
    failing = choose_installers(_fake_nodes(fails_with("Internal", "boom")), ["10.5.0.8", "10.5.0.9"], "v1.13.6")
    assert isinstance(failing["10.5.0.9"], TalosError) and failing["10.5.0.9"].code == "Internal"


def test_an_installer_named_by_an_option_reads_no_node():
    client = FakeTalos(nodes=["10.5.0.8", "10.5.0.9"])
    choices = choose_installers(client, ["10.5.0.8", "10.5.0.9"], "v1.14.1", repository="registry.local/installer")
    assert [choice.image for choice in choices.values()] == ["registry.local/installer:v1.14.1"] * 2
    assert client.calls == []
