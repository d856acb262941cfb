# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""images.py: references, schematics and their IDs, installers and boot media, the default installer of a node,
installer homes in a config, the Image Factory client (against the local factory) and images on nodes (against
the emulator)."""

import socket
import urllib.request

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import images
from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images import ImageFactoryError
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import ConnectionSettings

from talos_emulator.image_factory import set_factory_build

EMPTY = images.EMPTY_SCHEMATIC_ID
QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"


# -- references -------------------------------------------------------------

@pytest.mark.parametrize("ref, normalized", [
    ("nginx", "docker.io/library/nginx:latest"),
    ("nginx:1.27", "docker.io/library/nginx:1.27"),
    ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
    ("index.docker.io/library/alpine:3", "docker.io/library/alpine:3"),
    ("localhost/app", "localhost/app:latest"),
    ("registry.local:5000/team/app:v1", "registry.local:5000/team/app:v1"),
    ("ghcr.io/org/app:v1@sha256:" + "a" * 64, "ghcr.io/org/app@sha256:" + "a" * 64),
    ("factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY, "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY),
])
def test_references_are_normalized_as_containerd_stores_them(ref, normalized):
    assert str(images.parse_reference(ref)) == normalized


@pytest.mark.parametrize("ref", ["", "Bad Name", "ghcr.io/Org/app:v1", "app:", "app@sha256:short"])
def test_a_bad_reference_names_the_option(ref):
    with pytest.raises(TalosConfigError, match="^name .* is not an image reference"):
        images.parse_reference(ref)


def test_image_tag_and_registry_host():
    assert images.image_tag("registry:5000/siderolabs/installer:v1.14.0@sha256:" + "0" * 64) == "v1.14.0"
    assert images.image_tag("registry:5000/siderolabs/installer") is None
    assert images.registry_host("https://factory.talos.dev/") == "factory.talos.dev"
    assert images.registry_host("http://127.0.0.1:8080") == "127.0.0.1:8080"
    with pytest.raises(TalosConfigError, match="is not an http"):
        images.registry_host("factory.talos.dev")


# -- schematics -------------------------------------------------------------

def test_well_known_schematic_ids():
    assert images.schematic_id(images.canonical_schematic({})) == EMPTY
    assert images.schematic_id(images.canonical_schematic(images.schematic_from_options())) == EMPTY
    options = images.schematic_from_options(extensions=["siderolabs/qemu-guest-agent"])
    assert images.schematic_id(images.canonical_schematic(options)) == QEMU


def test_options_and_raw_schematic_give_one_canonical_form():
    options = images.schematic_from_options(
        extensions=["siderolabs/iscsi-tools"], extra_kernel_args=["console=ttyS0"], meta=[{"key": 10, "value": "{}"}],
        overlay={"image": "siderolabs/sbc-raspberrypi", "name": "rpi_generic", "options": {"b": 1, "a": "x"}},
        secureboot={"enroll_keys": "force", "include_well_known_certificates": True}, bootloader="sd-boot",
        disk_image_sector_size=4096)
    raw = {"customization": {"diskImage": {"sectorSize": 4096}, "bootloader": "sd-boot",
                             "secureboot": {"includeWellKnownCertificates": True, "enrollKeys": "force"},
                             "systemExtensions": {"officialExtensions": ["siderolabs/iscsi-tools"]},
                             "meta": [{"value": "{}", "key": 10}], "extraKernelArgs": ["console=ttyS0"]},
           "overlay": {"options": {"a": "x", "b": 1}, "name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}
    assert images.schematic_text(images.canonical_schematic(options)) == images.schematic_text(images.canonical_schematic(raw)) == (
        "overlay:\n"
        "    image: siderolabs/sbc-raspberrypi\n"
        "    name: rpi_generic\n"
        "    options:\n"
        "        a: x\n"
        "        b: 1\n"
        "customization:\n"
        "    extraKernelArgs:\n"
        "        - console=ttyS0\n"
        "    meta:\n"
        "        - key: 10\n"
        "          value: '{}'\n"
        "    systemExtensions:\n"
        "        officialExtensions:\n"
        "            - siderolabs/iscsi-tools\n"
        "    bootloader: sd-boot\n"
        "    secureboot:\n"
        "        enrollKeys: force\n"
        "        includeWellKnownCertificates: true\n"
        "    diskImage:\n"
        "        sectorSize: 4096\n")


@pytest.mark.parametrize("schematic, message", [
    ({"customization": {"extensions": []}}, "schematic customization has unknown field extensions"),
    ({"owner": "me"}, "schematic  has unknown field owner"),
    ({"customization": {"meta": [{"key": 300, "value": "x"}]}}, r"customization.meta\[0\].key must be a number from 0 to 255"),
    ({"overlay": {"name": "rpi_generic"}}, "overlay needs both image and name"),
    ({"customization": {"bootloader": "lilo"}}, "bootloader must be one of"),
    ({"customization": {"extraKernelArgs": "quiet"}}, "extraKernelArgs must be a list"),
])
def test_a_schematic_the_factory_would_refuse_is_refused_here(schematic, message):
    with pytest.raises(TalosConfigError, match=message):
        images.canonical_schematic(schematic)


# -- installers and boot media ----------------------------------------------------

def test_factory_installer_names():
    assert images.factory_installer("factory.talos.dev", "metal", EMPTY, "1.14.0") == "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY
    assert images.factory_installer("f.local:8080", "nocloud", QEMU, "v1.12.6", secure_boot=True) == (
        "f.local:8080/nocloud-installer-secureboot/%s:v1.12.6" % QEMU)
    # Before v1.10 the factory has one installer for every platform.
    assert images.factory_installer("factory.talos.dev", "aws", QEMU, "v1.9.5") == "factory.talos.dev/installer/%s:v1.9.5" % QEMU


def test_boot_assets_are_paths_the_factory_serves(image_factory):
    factory = image_factory()
    factory.add_schematic({})
    for platform in ("metal", "nocloud", "aws", "vmware", "equinixMetal"):
        for arch in images.ARCHITECTURES:
            urls = images.boot_assets(factory.url, EMPTY, "v1.14.0", platform, arch)
            for url in list(urls.values())[:-1] + list(urls["secureboot"].values()):
                if url is None or "/pxe/" in url:
                    continue
                request = urllib.request.Request(url, method="HEAD")
                assert urllib.request.urlopen(request).status == 200, url
            assert urllib.request.urlopen(urls["pxe"]).read().startswith(b"#!ipxe")
    official = images.boot_assets(images.FACTORY_URL, EMPTY, "v1.14.0")
    assert official["pxe"] == "https://pxe.talos.dev/pxe/%s/v1.14.0/metal-amd64" % EMPTY
    assert official["disk_image"].endswith("/metal-amd64.raw.zst")
    assert images.boot_assets(images.FACTORY_URL, EMPTY, "v1.14.0", "equinixMetal")["disk_image"] is None


# -- the default installer of a node --------------------------------------------------

def _build(**fields):
    values = dict(version="v1.13.5", platform="metal")
    values.update(fields)
    return images.NodeBuild(**values)


def test_an_explicit_image_or_repository_wins():
    build = _build(schematic_id=QEMU, extensions=["qemu-guest-agent"])
    choice = images.choose_installer(build, "v1.14.0", image="registry.local/installer:v1.14.0")
    assert (choice.image, choice.source) == ("registry.local/installer:v1.14.0", "image")
    choice = images.choose_installer(build, "1.14.0", image_repository="registry.local/installer/")
    assert (choice.image, choice.source) == ("registry.local/installer:v1.14.0", "image_repository")


def test_a_node_keeps_its_schematic_platform_and_factory():
    build = _build(platform="nocloud", schematic_id=QEMU, extensions=["qemu-guest-agent"], factory_url="https://factory.example.internal")
    choice = images.choose_installer(build, "v1.14.0")
    assert choice.image == "factory.example.internal/nocloud-installer/%s:v1.14.0" % QEMU
    assert choice.source == "schematic"
    assert "qemu-guest-agent" in choice.reason and QEMU in choice.reason
    choice = images.choose_installer(_build(schematic_id=QEMU, secure_boot=True), "v1.13.5", factory_url="http://127.0.0.1:9000")
    assert choice.image == "127.0.0.1:9000/metal-installer-secureboot/%s:v1.13.5" % QEMU


def test_a_node_without_a_schematic():
    choice = images.choose_installer(_build(), "v1.14.1")
    assert (choice.image, choice.source) == ("factory.talos.dev/metal-installer/%s:v1.14.1" % EMPTY, "factory")
    assert images.choose_installer(_build(), "v1.13.6").image == "ghcr.io/siderolabs/installer:v1.13.6"
    assert images.choose_installer(_build(secure_boot=True), "v1.13.6").image == (
        "factory.talos.dev/metal-installer-secureboot/%s:v1.13.6" % EMPTY)
    with pytest.raises(TalosConfigError, match=r"system extensions \(iscsi-tools\) that come from no Image Factory schematic"):
        images.choose_installer(_build(extensions=["iscsi-tools"]), "v1.14.0")
    with pytest.raises(TalosConfigError, match="version 'latest' is not a Talos version"):
        images.choose_installer(_build(), "latest")


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
    build = images.node_build(Version, statuses, {"spec": {"secureBoot": True}})
    assert build.as_dict() == {"version": "v1.14.0", "platform": "nocloud", "arch": "arm64", "secure_boot": True,
                               "extensions": ["qemu-guest-agent"], "schematic_id": QEMU, "factory_url": "https://factory.example.internal"}
    assert images.node_build(Version, [], None).schematic_id is None


# -- installer homes ------------------------------------------------------------------

V1ALPHA1 = {"version": "v1alpha1", "machine": {"type": "worker", "install": {"disk": "/dev/sda", "image": "old:v1"}}}
UNATTENDED = {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig", "installer": {"image": "old:v2"}}


def test_installer_homes():
    documents = [dict(V1ALPHA1, machine=dict(V1ALPHA1["machine"], install=dict(V1ALPHA1["machine"]["install"])))]
    assert images.set_installer(documents, "new:v3") == ".machine.install.image"
    assert documents[0]["machine"]["install"] == {"disk": "/dev/sda", "image": "new:v3"}
    documents = [{"version": "v1alpha1", "machine": {"type": "worker"}}, dict(UNATTENDED, installer={"image": "old:v2"})]
    assert images.set_installer(documents, "new:v3") == "UnattendedInstallConfig installer.image"
    assert documents[1]["installer"]["image"] == "new:v3"
    assert images.set_installer([{"version": "v1alpha1", "machine": {}}], "new:v3") is None
    with pytest.raises(TalosConfigError, match=r"both .machine.install.image \(old:v1\) and the UnattendedInstallConfig"):
        images.installer_home([V1ALPHA1, UNATTENDED])


def test_names_to_remove_leave_content_another_tag_names():
    digest = "sha256:" + "b" * 64
    listed = [{"name": n, "digest": digest} for n in ("docker.io/library/app:v1", "docker.io/library/app@" + digest, digest)]
    assert images._names_to_remove(images.parse_reference("app:v1"), listed) == [
        "docker.io/library/app:v1", "docker.io/library/app@" + digest, digest]
    listed.append({"name": "docker.io/library/app:latest", "digest": digest})
    assert images._names_to_remove(images.parse_reference("app:v1"), listed) == ["docker.io/library/app:v1"]
    assert images._names_to_remove(images.parse_reference("app:v2"), listed) == []


# -- the Image Factory client --------------------------------------------------------------

def test_factory_reads_and_schematics(image_factory):
    server = image_factory()
    factory = images.ImageFactory(server.url + "/")
    assert factory.versions() == server.versions
    assert "siderolabs/iscsi-tools" in [extension["name"] for extension in factory.extensions("1.14.0")]
    assert factory.overlays("v1.14.0")[0]["name"] == "rpi_generic"
    with pytest.raises(ImageFactoryError, match=r"answered 404 Not Found to GET /version/v1.99.0/extensions/official: "
                                                r"version 1.99.0 is not available"):
        factory.extensions("v1.99.0")
    assert factory.schematic(QEMU) is None
    text = images.schematic_text(images.canonical_schematic(images.schematic_from_options(extensions=["siderolabs/qemu-guest-agent"])))
    assert factory.create_schematic(text) == (QEMU, text)
    assert factory.schematic(QEMU) == text
    with pytest.raises(ImageFactoryError, match="answered 400 Bad Request to POST /schematics: yaml: unmarshal errors"):
        factory.create_schematic("customization:\n    unknown: 1\n")
    factory.check_extensions(["siderolabs/gvisor"], "v1.14.0")
    with pytest.raises(ImageFactoryError, match="has no official extension siderolabs/nope, example/x for Talos v1.14.0"):
        factory.check_extensions(["siderolabs/nope", "siderolabs/gvisor", "example/x"], "v1.14.0")


def _closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_factory_is_one_sentence():
    factory = images.ImageFactory("http://127.0.0.1:%d" % _closed_port(), timeout=5)
    with pytest.raises(ImageFactoryError, match=r"^The Image Factory at http://127.0.0.1:\d+ cannot be reached \(.*\): check "
                                                r"factory_url, the proxy settings"):
        factory.versions()


def test_tls_needs_the_factory_ca(image_factory):
    server = image_factory(tls=True)
    with pytest.raises(ImageFactoryError, match="TLS certificate of the Image Factory at https://127.0.0.1:.* could not be verified"):
        images.ImageFactory(server.url).versions()
    assert images.ImageFactory(server.url, ca_path=server.ca_path).versions() == server.versions
    assert images.ImageFactory(server.url, validate_certs=False).versions() == server.versions


def test_proxy_settings_come_from_the_environment(image_factory, monkeypatch):
    server = image_factory()
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:%d" % _closed_port())
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ImageFactoryError, match="cannot be reached"):
        images.ImageFactory(server.url, timeout=5).versions()
    assert images.ImageFactory(server.url, use_proxy=False).versions() == server.versions
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert images.ImageFactory(server.url).versions() == server.versions


# -- nodes ---------------------------------------------------------------------------------

def _client(cluster, **options):
    params = {"talosconfig": cluster.talosconfig_path()}
    params.update(options)
    return TalosClient(ConnectionSettings.from_params(params))


def test_pull_list_remove_on_nodes(emulator, monkeypatch):
    cluster = emulator(controlplanes=1, workers=1)
    nodes = [node.address for node in cluster.nodes]
    lines = []
    monkeypatch.setattr(images, "PROGRESS_INTERVAL", 0)
    with _client(cluster) as client:
        store = images.NodeImages(client, "cri", progress=lines.append)
        wanted = dict((node, "registry.k8s.io/pause:3.10") for node in nodes)
        planned = store.ensure_present(wanted, check_mode=True)
        assert [planned[node]["changed"] for node in nodes] == [True, True]
        assert store.list(nodes) == {nodes[0]: [], nodes[1]: []}

        pulled = store.ensure_present(wanted)
        assert all(result["pulled"].startswith("registry.k8s.io/pause@sha256:") and result["api"] == "image_service"
                   for result in pulled.values())
        assert "node %s: pulling registry.k8s.io/pause:3.10 into the cri namespace" % nodes[0] in lines
        assert any("layers downloaded" in line for line in lines)
        again = store.ensure_present(wanted)
        assert [again[node]["changed"] for node in nodes] == [False, False]
        assert [entry["method"] for entry in cluster.audit()].count("machine.ImageService/Pull") == 2

        assert images.NodeImages(client, "system").list(nodes[:1]) == {nodes[0]: []}
        removed = store.ensure_absent("registry.k8s.io/pause:3.10", nodes[:1])
        assert removed[nodes[0]]["changed"] is True and len(removed[nodes[0]]["removed"]) == 3
        assert store.list(nodes[:1]) == {nodes[0]: []}
        assert store.ensure_absent("registry.k8s.io/pause:3.10", nodes[:1])[nodes[0]]["changed"] is False

        cluster.faults.mark_image_unavailable("ghcr.io/org/missing:v1")
        failed = store.ensure_present({nodes[0]: "ghcr.io/org/missing:v1"})[nodes[0]]
        assert isinstance(failed, TalosError) and failed.code == "NotFound"


def test_legacy_nodes_pull_but_cannot_remove(emulator):
    cluster = emulator(talos_version="v1.12.6")
    node = cluster.nodes[0].address
    with _client(cluster) as client:
        store = images.NodeImages(client, "system")
        result = store.ensure_present({node: "busybox:1.36"})[node]
        assert (result["changed"], result["api"], result["image"]) == (True, "legacy", "docker.io/library/busybox:1.36")
        assert store.ensure_present({node: "busybox:1.36"})[node]["changed"] is False
        refused = store.ensure_absent("busybox:1.36", [node])[node]
        assert refused.code == "Unimplemented" and "needs Talos v1.13 or later" in refused.message


def test_read_node_build_from_the_emulator(emulator):
    cluster = emulator(workers=1, node_versions={"worker-1": "v1.12.6"})
    for node in cluster.nodes:
        set_factory_build(node, QEMU, ["siderolabs/qemu-guest-agent"], platform="nocloud")
    with _client(cluster) as client:
        for node in cluster.nodes:
            build = images.read_node_build(client, node.address)
            assert (build.platform, build.schematic_id, build.extensions, build.factory_url, build.secure_boot) == (
                "nocloud", QEMU, ["qemu-guest-agent"], "https://factory.talos.dev", False)
