# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node reports about the image it was built from: its Image Factory schematic and system extensions.

An image made by the Image Factory carries a virtual extension named
``schematic`` whose version is the schematic ID and whose author is
``Image Factory (<factory URL>)`` (image-factory ``internal/artifacts/schematic.go``).
Talos lists every extension as an ``ExtensionStatuses.runtime.talos.dev``
resource (ID the extension's image name without ``.sqsh``) and, from
v1.14.0-alpha.2, surfaces the schematic as ``ImageFactorySchematics.runtime.talos.dev``
(``controllers/runtime/image_factory_schematic.go``). Secure boot shows in
``SecurityStates.talos.dev`` (namespace ``runtime``).
"""

import re

from .versions import older_than

SCHEMATIC_EXTENSION = "schematic"
# First release with the ImageFactorySchematic resource.
SCHEMATIC_RESOURCE_SINCE = "v1.14.0"

# <registry>/<platform>-installer[-secureboot]/<schematic>:<tag> and the older <registry>/installer[-secureboot]/<schematic>:<tag>.
_FACTORY_INSTALLER = re.compile(r"^[^/]+/(?:[a-z0-9-]+-)?installer(?:-secureboot)?/(?P<schematic>[0-9a-f]{64})(?::[^@]+)?(?:@.*)?$",
                                re.IGNORECASE)


def factory_schematic(image_ref):
    """The schematic ID an Image Factory installer reference names, or None for any other image."""
    match = _FACTORY_INSTALLER.match(image_ref or "")
    return match.group("schematic") if match else None


def set_factory_build(node, schematic_id, extensions=(), factory_url="https://factory.talos.dev", platform=None,
                      secure_boot=None):
    """Make ``node`` report an Image Factory build: ``schematic_id`` with the official ``extensions``.

    ``extensions`` are names as the factory lists them (``siderolabs/iscsi-tools``).
    """
    node.schematic_id = schematic_id
    node.factory_url = factory_url
    node.extensions = [
        {"name": name.rsplit("/", 1)[-1], "version": "v1.0.0", "author": "Sidero Labs",
         "description": "%s system extension" % name.rsplit("/", 1)[-1]}
        for name in extensions
    ]
    if platform is not None:
        node.platform = platform
    if secure_boot is not None:
        node.secure_boot = secure_boot


def _extension_status(index, metadata, extra_info=None):
    metadata = dict(metadata, compatibility={"talos": {"version": ">= v1.0.0"}})
    if extra_info:
        metadata["extraInfo"] = extra_info
    return ("%03d" % index, {"image": "%03d.sqsh" % index, "metadata": metadata})


def extension_statuses(node):
    """ExtensionStatuses.runtime.talos.dev: the node's extensions, then the schematic's virtual one."""
    statuses = [_extension_status(index, extension) for index, extension in enumerate(node.extensions)]
    if node.schematic_id:
        statuses.append(_extension_status(len(statuses), {
            "name": SCHEMATIC_EXTENSION,
            "version": node.schematic_id,
            "author": "Image Factory (%s)" % node.factory_url,
            "description": "Virtual extension which specifies the schematic of the image built with schematic.",
        }))
    return statuses


def image_factory_schematics(node):
    """ImageFactorySchematics.runtime.talos.dev (v1.14+): the schematic of an Image Factory build."""
    if not node.schematic_id or older_than(node.talos_version, SCHEMATIC_RESOURCE_SINCE):
        return []
    return [("image-factory-schematic", {"schematicId": node.schematic_id, "flavor": "Image Factory", "apiUrl": node.factory_url})]


def security_states(node):
    """SecurityStates.talos.dev: whether the node booted with secure boot."""
    spec = {"secureBoot": node.secure_boot}
    if node.secure_boot:
        spec["bootedWithUKI"] = True
    return [("securitystate", spec)]
