#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_image_factory_schematic
short_description: Get the ID of a Talos Image Factory schematic
version_added: 1.0.0
description:
  - Turns a schematic - official system extensions, extra kernel arguments, initial META values, an overlay for
    single-board computers, secure boot and bootloader options - into its ID with the Image Factory, as
    C(POST /schematics) does. Installer images and boot media of that schematic are then named by the ID, see
    M(talos_linux.talos.talos_image_factory_info).
  - The ID is the SHA-256 of the schematic in the factory's canonical form, so the same content always gives the
    same ID, whatever the order of the options here. The order of O(extensions) and O(extra_kernel_args) is part of
    the content.
  - The module first asks the factory whether it holds the schematic already (C(GET /schematics/<id>)) and stores it
    only when it does not. C(changed) means exactly that the factory did not hold the schematic before the task.
  - Runs on the controller and talks to no Talos node, so it takes none of the Talos connection options and is not a
    member of the C(talos_linux.talos.talos) action group.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  schematic:
    description:
      - The whole schematic as the factory takes it (the mapping, or its YAML text), with the factory's field names
        C(overlay) and C(customization) (C(extraKernelArgs), C(meta), C(systemExtensions.officialExtensions),
        C(bootloader), C(secureboot), C(embeddedMachineConfiguration), C(diskImage)).
      - Mutually exclusive with the other schematic options, which build the same thing field by field.
    type: raw
  extensions:
    description:
      - Official system extensions by name, for example V(siderolabs/iscsi-tools) or V(siderolabs/qemu-guest-agent).
      - The factory picks the version of each that fits the Talos version of the image.
    type: list
    elements: str
    default: []
  extra_kernel_args:
    description: Extra kernel arguments, for example V(console=ttyS0).
    type: list
    elements: str
    default: []
  meta:
    description: Initial values of the Talos META partition.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: The META key, from V(0) to V(255) (V(0x0a) is V(10)).
        type: int
        required: true
      value:
        description: The value.
        type: str
        required: true
  overlay:
    description: The overlay of a single-board computer image.
    type: dict
    suboptions:
      image:
        description: Overlay image, for example V(siderolabs/sbc-raspberrypi).
        type: str
        required: true
      name:
        description: Overlay name, for example V(rpi_generic).
        type: str
        required: true
      options:
        description: Options the overlay takes.
        type: dict
  secureboot:
    description: Secure boot options; they apply to secure boot images only.
    type: dict
    suboptions:
      enroll_keys:
        description: How systemd-boot enrolls the secure boot keys on first boot (the factory's default is V(if-safe)).
        type: str
        choices: ["off", manual, if-safe, force]
      include_well_known_certificates:
        description: Include well-known UEFI certificates in the enrollment database (secure boot ISO).
        type: bool
        default: false
  bootloader:
    description: The bootloader of disk images; V(auto) lets the imager choose.
    type: str
    choices: [auto, dual-boot, sd-boot, grub]
    default: auto
  embedded_machine_configuration:
    description:
      - Machine configuration documents (YAML) embedded into the image. They are part of the schematic the factory
        stores and returns to anyone who knows its ID, so put no secrets here.
    type: str
  disk_image_sector_size:
    description: Sector size in bytes of disk images (the factory's default is 512).
    type: int
  talos_version:
    description:
      - When set, the extensions are first checked against the official extensions the factory offers for this
        Talos version, and an unknown one fails the task by name.
    type: str
extends_documentation_fragment:
  - talos_linux.talos.image_factory
  - talos_linux.talos.attributes
attributes:
  check_mode:
    support: full
    details: Computes the ID and asks the factory whether it holds the schematic; stores nothing.
  diff_mode:
    support: full
    details: Shows the schematic the factory would store.
  idempotent:
    support: full
seealso:
  - module: talos_linux.talos.talos_image_factory_info
  - module: talos_linux.talos.talos_upgrade
  - name: Talos images
    description: The collection's guide to the Image Factory, installers and images on nodes.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/images.md
"""

EXAMPLES = r"""
- name: A schematic for Proxmox VMs with iSCSI
  talos_linux.talos.talos_image_factory_schematic:
    extensions:
      - siderolabs/qemu-guest-agent
      - siderolabs/iscsi-tools
    talos_version: v1.14.0
  register: schematic

- name: Its installer
  ansible.builtin.debug:
    msg: "factory.talos.dev/nocloud-installer/{{ schematic.id }}:v1.14.0"

- name: A Raspberry Pi schematic from YAML, on a self-hosted factory
  talos_linux.talos.talos_image_factory_schematic:
    image_factory_url: https://factory.example.internal
    ca_path: /etc/pki/internal-ca.pem
    schematic: |
      overlay:
        image: siderolabs/sbc-raspberrypi
        name: rpi_generic
      customization:
        extraKernelArgs:
          - console=tty0
"""

RETURN = r"""
id:
  description: The schematic ID.
  returned: success
  type: str
  sample: ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515
schematic:
  description: The schematic in the factory's canonical YAML, whose SHA-256 is the ID.
  returned: success
  type: str
  sample: "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/qemu-guest-agent\n"
extensions:
  description: The official extensions of the schematic.
  returned: success
  type: list
  elements: str
  sample: [siderolabs/qemu-guest-agent]
image_factory_url:
  description: The factory asked.
  returned: success
  type: str
  sample: https://factory.talos.dev
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.images import factory as image_factory
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

_FIELD_OPTIONS = ("extensions", "extra_kernel_args", "meta", "overlay", "secureboot", "embedded_machine_configuration",
                  "disk_image_sector_size")

SPEC = TaskSpec(
    argument_spec=dict(
        schematic=dict(type="raw"),
        extensions=dict(type="list", elements="str", default=[]),
        extra_kernel_args=dict(type="list", elements="str", default=[]),
        meta=dict(type="list", elements="dict", default=[], options=dict(
            key=dict(type="int", required=True, no_log=False),
            value=dict(type="str", required=True),
        )),
        overlay=dict(type="dict", options=dict(
            image=dict(type="str", required=True),
            name=dict(type="str", required=True),
            options=dict(type="dict"),
        )),
        secureboot=dict(type="dict", options=dict(
            enroll_keys=dict(type="str", choices=["off", "manual", "if-safe", "force"], no_log=False),
            include_well_known_certificates=dict(type="bool", default=False),
        )),
        bootloader=dict(type="str", default="auto", choices=["auto", "dual-boot", "sd-boot", "grub"]),
        embedded_machine_configuration=dict(type="str"),
        disk_image_sector_size=dict(type="int"),
        talos_version=dict(type="str"),
    ),
    connection=False,
    libraries=(("PyYAML", "yaml"),),
    shared_options=[image_factory.FACTORY_OPTIONS],
    ranges=dict(key=(0, 255), disk_image_sector_size=(1, None)),
    may_be_empty=("value",),
)


def _requested(params):
    """The schematic the options describe, in the factory's field names."""
    if params["schematic"] is None:
        return image_factory.schematic_from_options(
            extensions=params["extensions"], extra_kernel_args=params["extra_kernel_args"], meta=params["meta"],
            overlay=params["overlay"], secureboot=params["secureboot"], bootloader=params["bootloader"],
            embedded_machine_configuration=params["embedded_machine_configuration"],
            disk_image_sector_size=params["disk_image_sector_size"])
    given = [name for name in _FIELD_OPTIONS if params[name]] + (["bootloader"] if params["bootloader"] != "auto" else [])
    if given:
        raise TalosConfigError("schematic is mutually exclusive with %s: give the whole schematic or its fields."
                               % ", ".join(given))
    schematic = params["schematic"]
    if isinstance(schematic, str):
        import yaml
        try:
            schematic = yaml.safe_load(schematic)
        except yaml.YAMLError as error:
            raise TalosConfigError("schematic is not valid YAML: %s." % " ".join(str(error).split()))
    return schematic or {}


def run(task):
    params = task.params
    canonical = image_factory.canonical_schematic(_requested(params))
    version = version_tag(params["talos_version"]) if params["talos_version"] else None
    factory = image_factory.factory_from_params(params)
    extensions = image_factory.schematic_extensions(canonical)
    if version and extensions:
        factory.check_extensions(extensions, version)
    text = image_factory.schematic_text(canonical)
    schematic_id = image_factory.schematic_id(canonical)
    result = dict(changed=False, id=schematic_id, schematic=text, extensions=extensions, image_factory_url=factory.url)

    held = factory.schematic(schematic_id)
    if held is not None:
        result["schematic"] = held
        return result
    result["changed"] = True
    if task.diff:
        result["diff"] = dict(before="", after=text, after_header="schematic %s" % schematic_id)
    if task.check_mode:
        return result
    stored_id, stored = factory.create_schematic(text)
    if stored_id != schematic_id:
        # An enterprise factory adds the caller as the owner, which is part of the ID.
        task.warn("The Image Factory at %s gave the schematic the ID %s, not %s as computed from its content (it adds "
                  "fields such as its owner); its own ID is returned." % (factory.url, stored_id, schematic_id))
    result.update(id=stored_id, schematic=stored)
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
