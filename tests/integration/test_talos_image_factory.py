# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_image_factory_schematic and talos_image_factory_info through ansible-playbook against the local Image
Factory (tests/image_factory): IDs, idempotency, check mode, installers and media, TLS and failures."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import socket
import subprocess
import sys

import pytest

SCHEMATIC = "talos_linux.talos.talos_image_factory_schematic"
INFO = "talos_linux.talos.talos_image_factory_info"
QEMU = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
EMPTY = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"


def play(tasks, **keywords):
    return dict({"name": "image factory", "hosts": "localhost", "gather_facts": False, "tasks": tasks}, **keywords)


def test_schematic_id_check_mode_create_then_unchanged(image_factory, run_playbook):
    factory = image_factory()
    task = {"name": "schematic", SCHEMATIC: {"image_factory_url": factory.url, "extensions": ["siderolabs/qemu-guest-agent"],
                                             "talos_version": "v1.14.0"}}

    check = run_playbook(play([task]), check=True, diff=True)
    planned = check.task("schematic")["result"]
    assert planned["changed"] is True and planned["id"] == QEMU
    assert planned["extensions"] == ["siderolabs/qemu-guest-agent"]
    assert factory.posts() == [] and factory.schematics == {}
    assert "siderolabs/qemu-guest-agent" in check.stdout, "the diff shows the schematic"

    created = run_playbook(play([task])).task("schematic")
    assert created["status"] == "changed" and created["result"]["id"] == QEMU
    assert created["result"]["schematic"] == factory.schematics[QEMU]
    assert factory.posts() == ["/schematics"]

    # The same content as YAML, with the factory's field names: the same schematic, already held.
    raw = {"name": "schematic", SCHEMATIC: {
        "image_factory_url": factory.url,
        "schematic": "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/qemu-guest-agent]\n"}}
    again = run_playbook(play([raw])).task("schematic")
    assert again["status"] == "ok" and again["result"]["id"] == QEMU
    assert factory.posts() == ["/schematics"]


def test_schematic_fields_and_refusals(image_factory, run_playbook):
    factory = image_factory()
    tasks = [
        {"name": "all fields", SCHEMATIC: {
            "extensions": ["siderolabs/iscsi-tools", "siderolabs/util-linux-tools"],
            "extra_kernel_args": ["console=ttyS0"], "meta": [{"key": 10, "value": "{}"}],
            "overlay": {"image": "siderolabs/sbc-raspberrypi", "name": "rpi_generic", "options": {"configTxtAppend": "x"}},
            "secureboot": {"enroll_keys": "force"}, "bootloader": "sd-boot", "disk_image_sector_size": 4096}},
        {"name": "unknown extension", SCHEMATIC: {"extensions": ["siderolabs/nope"], "talos_version": "v1.14.0"},
         "ignore_errors": True},
        {"name": "unknown field", SCHEMATIC: {"schematic": {"customization": {"extension": ["x"]}}}, "ignore_errors": True},
        {"name": "both forms", SCHEMATIC: {"schematic": {}, "extensions": ["siderolabs/gvisor"]}, "ignore_errors": True},
    ]
    # The factory URL from the environment, as for an air-gapped site's self-hosted factory.
    run = run_playbook(play(tasks, environment={"TALOS_IMAGE_FACTORY_URL": factory.url}))
    created = run.task("all fields")["result"]
    assert created["changed"] is True and factory.schematics[created["id"]] == created["schematic"]
    assert "    bootloader: sd-boot\n" in created["schematic"] and "configTxtAppend: x" in created["schematic"]
    assert run.task("unknown extension")["result"]["msg"] == (
        "The Image Factory at %s has no official extension siderolabs/nope for Talos v1.14.0; names look like "
        "siderolabs/iscsi-tools (list them with talos_image_factory_info)." % factory.url)
    assert run.task("unknown field")["result"]["msg"].startswith("schematic customization has unknown field extension;")
    assert run.task("both forms")["result"]["msg"] == (
        "schematic is mutually exclusive with extensions: give the whole schematic or its fields.")
    assert factory.posts() == ["/schematics"]


def test_info_versions_extensions_installer_and_media(image_factory, run_playbook):
    factory = image_factory()
    factory.add_schematic({"customization": {"systemExtensions": {"officialExtensions": ["siderolabs/qemu-guest-agent"]}}})
    host = factory.url.split("://", 1)[1]
    tasks = [
        {"name": "versions", INFO: {"image_factory_url": factory.url}},
        {"name": "media", INFO: {"image_factory_url": factory.url, "talos_version": "1.14.0", "schematic_id": QEMU,
                                 "platform": "nocloud", "architecture": "arm64"}},
        {"name": "unknown schematic", INFO: {"image_factory_url": factory.url, "schematic_id": EMPTY}, "ignore_errors": True},
        {"name": "unknown version", INFO: {"image_factory_url": factory.url, "talos_version": "v1.99.0"}, "ignore_errors": True},
    ]
    run = run_playbook(play(tasks))
    assert run.task("versions")["result"]["versions"] == factory.versions
    assert "extensions" not in run.task("versions")["result"]
    media = run.task("media")["result"]
    assert media["changed"] is False
    assert [extension["name"] for extension in media["extensions"]][:2] == ["siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent"]
    assert media["overlays"][0]["name"] == "rpi_generic"
    assert media["schematic"]["extensions"] == ["siderolabs/qemu-guest-agent"]
    assert media["installer"] == "%s/nocloud-installer/%s:v1.14.0" % (host, QEMU)
    assert media["secureboot_installer"] == "%s/nocloud-installer-secureboot/%s:v1.14.0" % (host, QEMU)
    base = "%s/image/%s/v1.14.0/" % (factory.url, QEMU)
    assert media["urls"]["iso"] == base + "nocloud-arm64.iso"
    assert media["urls"]["disk_image"] == base + "nocloud-arm64.raw.xz"
    assert media["urls"]["pxe"] == "%s/pxe/%s/v1.14.0/nocloud-arm64" % (factory.url, QEMU)
    assert media["urls"]["secureboot"]["iso"] == base + "nocloud-arm64-secureboot.iso"
    assert run.task("unknown schematic")["result"]["msg"] == (
        "The Image Factory at %s holds no schematic %s: create it with talos_image_factory_schematic first." % (factory.url, EMPTY))
    assert run.task("unknown version")["result"]["msg"] == (
        "The Image Factory at %s answered 404 Not Found to GET /version/v1.99.0/extensions/official: version 1.99.0 is "
        "not available." % factory.url)


def _closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("door", ["controller", "module"])
def test_tls_ca_from_the_environment_and_an_unreachable_factory(image_factory, run_playbook, door):
    factory = image_factory(tls=True)
    dead = "http://127.0.0.1:%d" % _closed_port()
    tasks = [
        {"name": "no CA", INFO: {"image_factory_url": factory.url}, "ignore_errors": True},
        {"name": "CA from REQUESTS_CA_BUNDLE", INFO: {"image_factory_url": factory.url},
         "environment": {"REQUESTS_CA_BUNDLE": factory.ca_path}},
        {"name": "unreachable", SCHEMATIC: {"image_factory_url": dead, "timeout": 5}, "ignore_errors": True},
    ]
    run = run_playbook(play(tasks), extra_vars={"talos_door": door})
    assert "could not be verified" in run.task("no CA")["result"]["msg"]
    assert "set ca_path (or REQUESTS_CA_BUNDLE / SSL_CERT_FILE)" in run.task("no CA")["result"]["msg"]
    assert run.task("CA from REQUESTS_CA_BUNDLE")["result"]["versions"] == factory.versions
    message = run.task("unreachable")["result"]["msg"]
    assert message.startswith("The Image Factory at %s cannot be reached (" % dead)
    assert message.endswith("check image_factory_url, the proxy settings (HTTPS_PROXY, NO_PROXY) and that this host can reach it.")


def test_the_documented_command_serves_a_factory_the_modules_use_offline(run_playbook, tmp_path):
    """docs/images.md: tests/image-factory prints the TALOS_IMAGE_FACTORY_URL to export (issue 31)."""
    command = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "image-factory")
    server = subprocess.Popen([sys.executable, command, "--tls", str(tmp_path / "tls")], stdout=subprocess.PIPE, text=True)
    try:
        printed = [server.stdout.readline() for _line in range(4)]
        exports = dict(line.split("export ", 1)[1].strip().split("=", 1) for line in printed if "export " in line)
        assert exports["TALOS_IMAGE_FACTORY_URL"].startswith("https://127.0.0.1:"), printed
        run = run_playbook(play([{"name": "versions", INFO: {}}]), env=exports)
        assert "v1.14.0" in run.task("versions")["result"]["versions"]
    finally:
        server.terminate()
        server.wait(timeout=10)
