# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""image_factory.py: schematics and their IDs, installers and boot media, the Image Factory client (against the local
factory)."""

import socket
import urllib.request

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import (
    ARCHITECTURES,
    EMPTY_SCHEMATIC_ID as EMPTY,
    FACTORY_URL,
    ImageFactory,
    ImageFactoryError,
    boot_assets,
    canonical_schematic,
    factory_installer,
    registry_host,
    schematic_from_options,
    schematic_id,
    schematic_text,
)

QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"


def test_registry_host():
    assert registry_host("https://factory.talos.dev/") == "factory.talos.dev"
    assert registry_host("http://127.0.0.1:8080") == "127.0.0.1:8080"
    with pytest.raises(TalosConfigError, match="is not an http"):
        registry_host("factory.talos.dev")


# -- schematics -------------------------------------------------------------

def test_well_known_schematic_ids():
    assert schematic_id(canonical_schematic({})) == EMPTY
    assert schematic_id(canonical_schematic(schematic_from_options())) == EMPTY
    options = schematic_from_options(extensions=["siderolabs/qemu-guest-agent"])
    assert schematic_id(canonical_schematic(options)) == QEMU


def test_options_and_raw_schematic_give_one_canonical_form():
    options = schematic_from_options(
        extensions=["siderolabs/iscsi-tools"], extra_kernel_args=["console=ttyS0"], meta=[{"key": 10, "value": "{}"}],
        overlay={"image": "siderolabs/sbc-raspberrypi", "name": "rpi_generic", "options": {"b": 1, "a": "x"}},
        secureboot={"enroll_keys": "force", "include_well_known_certificates": True}, bootloader="sd-boot",
        disk_image_sector_size=4096)
    raw = {"customization": {"diskImage": {"sectorSize": 4096}, "bootloader": "sd-boot",
                             "secureboot": {"includeWellKnownCertificates": True, "enrollKeys": "force"},
                             "systemExtensions": {"officialExtensions": ["siderolabs/iscsi-tools"]},
                             "meta": [{"value": "{}", "key": 10}], "extraKernelArgs": ["console=ttyS0"]},
           "overlay": {"options": {"a": "x", "b": 1}, "name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}
    assert schematic_text(canonical_schematic(options)) == schematic_text(canonical_schematic(raw)) == (
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
        canonical_schematic(schematic)


# -- installers and boot media ----------------------------------------------------

def test_factory_installer_names():
    assert factory_installer("factory.talos.dev", "metal", EMPTY, "1.14.0") == "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY
    assert factory_installer("f.local:8080", "nocloud", QEMU, "v1.12.6", secure_boot=True) == (
        "f.local:8080/nocloud-installer-secureboot/%s:v1.12.6" % QEMU)
    # Before v1.10 the factory has one installer for every platform.
    assert factory_installer("factory.talos.dev", "aws", QEMU, "v1.9.5") == "factory.talos.dev/installer/%s:v1.9.5" % QEMU


def test_boot_assets_are_paths_the_factory_serves(image_factory):
    factory = image_factory()
    factory.add_schematic({})
    for platform in ("metal", "nocloud", "aws", "vmware", "equinixMetal"):
        for arch in ARCHITECTURES:
            urls = boot_assets(factory.url, EMPTY, "v1.14.0", platform, arch)
            for url in list(urls.values())[:-1] + list(urls["secureboot"].values()):
                if url is None or "/pxe/" in url:
                    continue
                request = urllib.request.Request(url, method="HEAD")
                assert urllib.request.urlopen(request).status == 200, url
            assert urllib.request.urlopen(urls["pxe"]).read().startswith(b"#!ipxe")
    official = boot_assets(FACTORY_URL, EMPTY, "v1.14.0")
    assert official["pxe"] == "https://pxe.talos.dev/pxe/%s/v1.14.0/metal-amd64" % EMPTY
    assert official["disk_image"].endswith("/metal-amd64.raw.zst")
    assert boot_assets(FACTORY_URL, EMPTY, "v1.14.0", "equinixMetal")["disk_image"] is None


# -- the Image Factory client --------------------------------------------------------------

def test_factory_reads_and_schematics(image_factory):
    server = image_factory()
    factory = ImageFactory(server.url + "/")
    assert factory.versions() == server.versions
    assert "siderolabs/iscsi-tools" in [extension["name"] for extension in factory.extensions("1.14.0")]
    assert factory.overlays("v1.14.0")[0]["name"] == "rpi_generic"
    with pytest.raises(ImageFactoryError, match=r"answered 404 Not Found to GET /version/v1.99.0/extensions/official: "
                                                r"version 1.99.0 is not available"):
        factory.extensions("v1.99.0")
    assert factory.schematic(QEMU) is None
    text = schematic_text(canonical_schematic(schematic_from_options(extensions=["siderolabs/qemu-guest-agent"])))
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
    factory = ImageFactory("http://127.0.0.1:%d" % _closed_port(), timeout=5)
    with pytest.raises(ImageFactoryError, match=r"^The Image Factory at http://127.0.0.1:\d+ cannot be reached \(.*\): check "
                                                r"image_factory_url, the proxy settings"):
        factory.versions()


def test_tls_needs_the_factory_ca(image_factory):
    server = image_factory(tls=True)
    with pytest.raises(ImageFactoryError, match="TLS certificate of the Image Factory at https://127.0.0.1:.* could not be verified"):
        ImageFactory(server.url).versions()
    assert ImageFactory(server.url, ca_path=server.ca_path).versions() == server.versions
    assert ImageFactory(server.url, validate_certs=False).versions() == server.versions


def test_proxy_settings_come_from_the_environment(image_factory, monkeypatch):
    server = image_factory()
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:%d" % _closed_port())
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ImageFactoryError, match="cannot be reached"):
        ImageFactory(server.url, timeout=5).versions()
    assert ImageFactory(server.url, use_proxy=False).versions() == server.versions
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert ImageFactory(server.url).versions() == server.versions
