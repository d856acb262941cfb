# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The installer reference in a machine config: where a config names its installer image (.machine.install.image, or
the UnattendedInstallConfig document of Talos v1.14), pointing it at the new installer after an OS upgrade, and never
back at an older one when a config is applied (keep_newer_installer)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
    ConfigApplier, MachineConfig, load_config, parse_yaml_stream, read_active_config, rewrite_image_line,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import image_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import normalize_version, parse_version

UNATTENDED_INSTALL_KIND = "UnattendedInstallConfig"
# The first Talos release that knows the UnattendedInstallConfig document (talosctl writes it from then on).
UNATTENDED_INSTALL_SINCE = (1, 14)


def installer_homes(documents):
    """Where ``documents`` (a parsed machine config) set an installer image: a list of ``(home, image)``.

    The homes are ``.machine.install.image`` of the v1alpha1 document and
    ``installer.image`` of the UnattendedInstallConfig document (Talos v1.14).
    """
    homes = []
    for document in documents:
        if not isinstance(document, dict):
            continue
        if document.get("version") == "v1alpha1" and "kind" not in document:
            image = (((document.get("machine") or {}).get("install")) or {}).get("image")
            if image:
                homes.append((".machine.install.image", image))
        elif document.get("kind") == UNATTENDED_INSTALL_KIND:
            image = (document.get("installer") or {}).get("image")
            if image:
                homes.append(("UnattendedInstallConfig installer.image", image))
    return homes


def both_install_homes(documents):
    """True when ``documents`` have a ``.machine.install`` section and an UnattendedInstallConfig document.

    Talos refuses such a config whatever either holds: "UnattendedInstallConfig
    config is incompatible with v1alpha1 config (.machine.install)".
    """
    machine_install = any(isinstance(document, dict) and document.get("version") == "v1alpha1" and "kind" not in document
                          and ((document.get("machine") or {}).get("install")) is not None for document in documents)
    unattended = any(isinstance(document, dict) and document.get("kind") == UNATTENDED_INSTALL_KIND for document in documents)
    return machine_install and unattended


def installer_home(documents):
    """The one ``(home, image)`` of ``documents``, or None; TalosConfigError when both homes are set."""
    homes = installer_homes(documents)
    if len(homes) > 1:
        raise TalosConfigError(
            "The machine config sets the installer image in both .machine.install.image (%s) and the "
            "UnattendedInstallConfig document's installer.image (%s); Talos takes only one of them: remove one "
            "before upgrading." % (homes[0][1], homes[1][1]))
    return homes[0] if homes else None


def set_installer(documents, image):
    """Point the installer home of ``documents`` at ``image`` (in place); returns the home, or None when there is none."""
    home = installer_home(documents)
    if home is None:
        return None
    for document in documents:
        if home[0] == ".machine.install.image" and document.get("version") == "v1alpha1" and "kind" not in document:
            document["machine"]["install"]["image"] = image
        elif home[0] != ".machine.install.image" and document.get("kind") == UNATTENDED_INSTALL_KIND:
            document["installer"]["image"] = image
    return home[0]


class InstallerReference:
    """The installer reference of a node's active machine config (``text``): ``home`` and ``image``, None for none.

    Raises TalosConfigError when the config sets both homes.
    """

    def __init__(self, text):
        import yaml
        self.text = text
        self.documents = [document for document in yaml.safe_load_all(text) if document is not None]
        self.home, self.image = installer_home(self.documents) or (None, None)

    def config_naming(self, image):
        """The config text with the installer reference naming ``image``.

        The one ``image:`` line that names the old installer is rewritten, so
        that nothing else of the node's config changes; a config where that
        line is not found once is written out anew from its documents.
        """
        rewritten = rewrite_image_line(self.text, self.image, image)
        if rewritten is not None:
            return rewritten
        set_installer(self.documents, image)
        return dump_documents(self.documents)


def keep_newer_installer(config, reference):
    """``config`` (a MachineConfig to apply) with its installer never behind the node's: ``(config, kept)``.

    When the installer ``config`` names is tagged with an older Talos release
    than the one of ``reference`` (the node's InstallerReference, which
    talos_upgrade points at the release it upgraded the node to), the
    installer is tagged with the node's release instead - the config's own
    repository kept, only its ``image:`` line rewritten - and ``kept`` is
    ``{"given": ..., "applied": ...}``; otherwise ``config`` comes back as it
    is with ``kept`` None. An installer pinned by digest, or a tag that is no
    release, is left as it is: nothing says which release it is.
    """
    home = installer_home(config.documents)
    if home is None or reference.image is None or "@" in home[1]:
        return config, None
    given = home[1]
    given_release, node_release = (parse_version(normalize_version(image_tag(image) or "")) for image in (given, reference.image))
    if given_release is None or node_release is None or given_release >= node_release:
        return config, None
    applied = "%s:%s" % (given.rsplit(":", 1)[0], image_tag(reference.image))
    text = rewrite_image_line(config.data.decode("utf-8"), given, applied)
    if text is None:
        documents = copy.deepcopy(config.documents)
        set_installer(documents, applied)
        text = dump_documents(documents)
    return MachineConfig(parse_yaml_stream(text, "the machine config"), text.encode("utf-8")), {"given": given, "applied": applied}


def read_installer_reference(client, node):
    """The InstallerReference of ``node``'s active machine config (needs os:admin: the config is sensitive)."""
    return InstallerReference(read_active_config(client, node))


def point_installer_at(client, node, reference, image):
    """Apply ``node``'s config with its installer reference naming ``image``, without a reboot; True when it changed."""
    config = load_config(config=reference.config_naming(image))
    result, _diff = ConfigApplier(client, config, mode="no_reboot").apply(node)
    return result["changed"]


def update_installer_reference(client, node, reference, image, result, check_mode=False, diff=False, warn=None):
    """Name ``image`` in the node's config once the node runs the target, so that a reinstall does not go back.

    ``reference`` is the node's InstallerReference read before the upgrade,
    ``result`` lifecycle.upgrade's result for the node: its ``changed`` and,
    with ``diff``, its ``diff`` take in the change. A reference that already
    names the target version is left as it is; ``warn(text)`` hears about one
    that cannot follow yet. Returns ``home``, ``before``, ``after`` and ``changed``.
    """
    target = result["to_version"]
    outcome = dict(home=reference.home, before=reference.image, after=reference.image, changed=False)
    if reference.home is None or normalize_version(image_tag(reference.image)) == target:
        return outcome
    if result["current_version"] != target and not (check_mode and result["changed"]):
        if result["changed"] and warn is not None:
            warn("%s still names installer %s in %s: without wait the module cannot tell when the node runs %s; "
                 "run the task again once it does." % (label(node, start=True), reference.image, reference.home, target))
        return outcome
    if diff:
        changes = result.setdefault("diff", dict(before={}, after={}))
        changes["before"]["installer"], changes["after"]["installer"] = reference.image, image
    if not check_mode:
        point_installer_at(client, node, reference, image)
    outcome.update(after=image, changed=True)
    result["changed"] = True
    return outcome
