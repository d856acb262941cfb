#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_image_factory_info
short_description: Read what a Talos Image Factory offers, and where a schematic's installer and boot media are
version_added: 1.0.0
description:
  - Returns the Talos versions the Image Factory builds images of.
  - With O(talos_version), also the official system extensions (name, image reference, digest, author, description)
    and overlays the factory offers for that version.
  - With O(schematic_id), also the schematic the factory holds under that ID; with O(schematic_id) and
    O(talos_version), the installer image reference for O(platform) (plain and secure boot) and the URLs of the
    ISO, the disk image, the PXE script, the kernel, the initramfs, the kernel command line and the UKI, with their
    secure boot variants, for O(platform) and O(architecture).
  - Installer references are C(<factory host>/<platform>-installer/<schematic>:<version>) (C(metal-installer) for
    bare metal; C(installer) for Talos versions before v1.10), with C(-secureboot) appended to the repository for
    secure boot.
  - Runs on the controller and talks to no Talos node, so it takes none of the Talos connection options and is not a
    member of the C(talos_linux.talos.talos) action group.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  talos_version:
    description: The Talos version to read extensions and overlays for, and to name installers and media of.
    type: str
  schematic_id:
    description:
      - A schematic ID, from M(talos_linux.talos.talos_image_factory_schematic) or a node's facts.
      - V(376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba) is the schematic without customizations.
    type: str
  platform:
    description:
      - The platform of the installer and media, as Talos names it (C(Version.platform)) - V(metal) for bare metal,
        V(nocloud) for Proxmox and other hypervisors with nocloud metadata, V(aws), V(gcp), V(azure), V(vmware),
        V(openstack), V(hcloud) and others.
    type: str
    default: metal
  architecture:
    description: The CPU architecture of the media.
    type: str
    choices: [amd64, arm64]
    default: amd64
  pxe_url:
    description:
      - Base URL of the factory's PXE frontend. Defaults to V(https://pxe.talos.dev) for the official factory and to
        O(image_factory_url) for any other.
    type: str
extends_documentation_fragment:
  - talos_linux.talos.image_factory
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.read_only
seealso:
  - module: talos_linux.talos.talos_image_factory_schematic
  - module: talos_linux.talos.talos_image
  - name: Talos images
    description: The collection's guide to the Image Factory, installers and images on nodes.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/images.md
"""

EXAMPLES = r"""
- name: Which Talos versions and extensions does the factory offer?
  talos_linux.talos.talos_image_factory_info:
    talos_version: v1.14.0
  register: factory

- name: Extension names
  ansible.builtin.debug:
    msg: "{{ factory.extensions | map(attribute='name') | list }}"

- name: Installer and ISO of a schematic for Proxmox
  talos_linux.talos.talos_image_factory_info:
    schematic_id: "{{ schematic.id }}"
    talos_version: v1.14.0
    platform: nocloud
  register: media

- name: Download the ISO
  ansible.builtin.get_url:
    url: "{{ media.urls.iso }}"
    dest: /var/lib/vz/template/iso/talos-v1.14.0.iso
"""

RETURN = r"""
image_factory_url:
  description: The factory asked.
  returned: always
  type: str
  sample: https://factory.talos.dev
versions:
  description: The Talos versions the factory builds images of, as it lists them.
  returned: success
  type: list
  elements: str
  sample: [v1.13.5, v1.14.0]
extensions:
  description: The official system extensions for O(talos_version).
  returned: when O(talos_version) is set
  type: list
  elements: dict
  sample:
    - name: siderolabs/iscsi-tools
      ref: ghcr.io/siderolabs/iscsi-tools:v0.2.0
      digest: sha256:3c9a8a2e9bd0a4c1b7cf42b2fb0e8a5bbd1a1e3d2a16b4f0b0b5b5e40c6e9a12
      author: Sidero Labs
      description: This system extension provides iscsi-tools.
overlays:
  description: The official overlays for O(talos_version).
  returned: when O(talos_version) is set
  type: list
  elements: dict
  sample:
    - name: rpi_generic
      image: siderolabs/sbc-raspberrypi
      ref: ghcr.io/siderolabs/sbc-raspberrypi:v0.1.5
      digest: sha256:849ace01b9af514d817b05a9c5963a35202e09a4807d12f8a3ea83657c76c863
schematic:
  description: The schematic the factory holds under O(schematic_id).
  returned: when O(schematic_id) is set
  type: dict
  contains:
    id:
      description: The schematic ID.
      type: str
    yaml:
      description: The schematic in the factory's canonical YAML.
      type: str
    content:
      description: The schematic, parsed.
      type: dict
    extensions:
      description: Its official extensions.
      type: list
      elements: str
installer:
  description: The installer image reference for O(platform).
  returned: when O(schematic_id) and O(talos_version) are set
  type: str
  sample: factory.talos.dev/nocloud-installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.14.0
secureboot_installer:
  description: The secure boot installer image reference for O(platform).
  returned: when O(schematic_id) and O(talos_version) are set
  type: str
  sample: factory.talos.dev/nocloud-installer-secureboot/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.14.0
urls:
  description:
    - The URLs of the boot media for O(platform) and O(architecture); C(disk_image) is null for a platform without
      disk images. C(secureboot) holds the secure boot variants.
  returned: when O(schematic_id) and O(talos_version) are set
  type: dict
  sample:
    iso: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-amd64.iso
    disk_image: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-amd64.raw.zst
    pxe: https://pxe.talos.dev/pxe/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-amd64
    kernel: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/kernel-amd64
    initramfs: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/initramfs-amd64.xz
    cmdline: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/cmdline-metal-amd64
    uki: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-amd64-uki.efi
    installer_tarball: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-installer-amd64.tar
    secureboot:
      iso: https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.14.0/metal-amd64-secureboot.iso
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.images import factory as image_factory
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import ImageFactoryError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        talos_version=dict(type="str"),
        schematic_id=dict(type="str"),
        platform=dict(type="str", default="metal"),
        architecture=dict(type="str", default="amd64", choices=list(image_factory.ARCHITECTURES)),
        pxe_url=dict(type="str"),
    ),
    connection=False,
    libraries=(("PyYAML", "yaml"),),
    shared_options=[image_factory.FACTORY_OPTIONS],
)


def run(task):
    import yaml

    params = task.params
    factory = image_factory.factory_from_params(params)
    version, schematic_id = params["talos_version"], params["schematic_id"]
    if version:
        version = version_tag(version)
    result = dict(changed=False, image_factory_url=factory.url, versions=factory.versions())
    if version:
        result.update(extensions=factory.extensions(version), overlays=factory.overlays(version))
    if schematic_id:
        text = factory.schematic(schematic_id)
        if text is None:
            raise ImageFactoryError("The Image Factory at %s holds no schematic %s: create it with "
                                    "talos_image_factory_schematic first." % (factory.url, schematic_id), status=404)
        content = yaml.safe_load(text) or {}
        result["schematic"] = dict(id=schematic_id, yaml=text, content=content,
                                   extensions=image_factory.schematic_extensions(content))
    if version and schematic_id:
        platform = params["platform"]
        result.update(
            installer=image_factory.factory_installer(factory.registry, platform, schematic_id, version),
            secureboot_installer=image_factory.factory_installer(factory.registry, platform, schematic_id, version, secure_boot=True),
            urls=image_factory.boot_assets(factory.url, schematic_id, version, platform, params["architecture"], params["pxe_url"]),
        )
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
