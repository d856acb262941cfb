# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The installer of a node, along the path of an OS upgrade.

- The target version (a Talos release the collection supports: the one rule
  for every option that names a version to move nodes to) and the upgrade API
  to try first (from the module's options).
- What a node was built from (its schematic, platform and secure boot, as
  Talos reports them) and the installer it gets by default: from its own
  schematic, so that its system extensions survive; an explicit image always
  wins.
- The installer reference in a machine config, in either of its homes:
  ``.machine.install.image`` or the ``UnattendedInstallConfig`` document's
  ``installer.image``, and pointing it at the new installer once the node runs
  the target.

The upgrade itself is lifecycle.upgrade; the etcd quorum guard before it is
etcd.QuorumGuard; the Image Factory's names and URLs are image_factory.py's.
Nothing here sees a Task: functions take a client and plain values and raise
the collection's errors.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import (
    EMPTY_SCHEMATIC_ID,
    FACTORY_URL,
    SCHEMATIC_EXTENSION,
    factory_installer,
    registry_host,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.images.store import image_tag, version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import (
    SUPPORTED_RELEASES,
    SUPPORTED_TEXT,
    VERSION,
    normalize_version,
    parse_version,
    runs_at_least,
)

LEGACY_INSTALLER_REPOSITORY = "ghcr.io/siderolabs/installer"
# Talos v1.14 publishes no installer at ghcr.io: installers come from the Image Factory.
FACTORY_INSTALLER_SINCE = (1, 14)


# -- the target version and the upgrade API ---------------------------------------------------------

def release_problem(version, what):
    """Why ``version`` cannot be a target of an upgrade (``what`` names it in the sentence), or None when it can.

    A target is a Talos release of a minor release the collection supports
    (node.SUPPORTED_RELEASES): any patch or pre-release of it, newer patches
    included. Anything else - no version at all (``latest``), a minor release
    older or newer than those (a typo such as ``v1.99.0``) - is refused before
    a node is asked to pull it.
    """
    key = parse_version(normalize_version(version))
    if key is None:
        return "%s is not a Talos release: give a release such as v1.14.1." % what
    if key[:2] in SUPPORTED_RELEASES:
        return None
    minor, oldest, newest = ["v%d.%d" % release for release in (key[:2], SUPPORTED_RELEASES[0], SUPPORTED_RELEASES[-1])]
    if key[:2] > SUPPORTED_RELEASES[-1]:
        why = ("%s is newer than %s; check the value for a typo, or use a release of the collection that supports Talos %s"
               % (minor, newest, minor))
    else:
        why = "%s is older than %s" % (minor, oldest)
    return "%s is not a Talos release this collection supports (%s, any patch release of them): %s." % (what, SUPPORTED_TEXT, why)


def target_version(version, option="version"):
    """``version`` as Talos spells it (``v1.14.1``) when a node may be upgraded to it; TalosConfigError naming
    ``option`` and the value otherwise (release_problem)."""
    problem = release_problem(version, "%s %r" % (option, version))
    if problem:
        raise TalosConfigError(problem)
    return normalize_version(version)


def resolve_target(image=None, version=None, image_option="installer_image", version_option="version"):
    """The installer image given (or None) and the target version tag, from the module's options.

    Returns ``(image, version)``; without ``image`` the installer is the
    node's own (choose_installer). Raises TalosConfigError with a sentence
    naming the option (``image_option``, ``version_option``) when the target
    cannot be derived or is no release the collection supports (release_problem).
    """
    if image:
        tag = image_tag(image)
        if not tag:
            raise TalosConfigError("%s %r has no tag: give the installer image with its version tag, for example "
                                   "factory.talos.dev/metal-installer/<schematic>:v1.14.0." % (image_option, image))
        problem = release_problem(tag, "The tag %r of %s %r" % (tag, image_option, image))
        if problem:
            raise TalosConfigError(problem)
        return image, normalize_version(tag)
    return None, target_version(version, version_option)


def choose_api(api, stage=False, preserve=False):
    """The first upgrade API to try: ``lifecycle`` or ``legacy``.

    ``stage`` and ``preserve`` exist only in the legacy API, so ``auto`` with
    either of them goes straight to it. Raises TalosConfigError for ``api=lifecycle``
    combined with them.
    """
    legacy_only = [name for name, value in (("stage", stage), ("preserve", preserve)) if value]
    if api == "lifecycle" and legacy_only:
        raise TalosConfigError("%s apply only to the legacy upgrade API: set api to legacy or auto, or drop %s."
                               % (" and ".join(legacy_only), " and ".join(legacy_only)))
    if api == "auto":
        return "legacy" if legacy_only else "lifecycle"
    return api


def has_lifecycle_api(tag):
    """Whether Talos ``tag`` serves LifecycleService (v1.13 and its pre-releases on); None when unparseable."""
    return runs_at_least(tag, (1, 13))


# -- what a node runs, and its default installer ----------------------------------------------

class NodeBuild:
    """What a node was built from, as it reports it.

    ``platform`` and ``arch`` from ``Version``; ``secure_boot`` from
    ``SecurityStates.talos.dev``; ``extensions`` (names) and the Image Factory
    ``schematic_id`` and ``factory_url`` from ``ExtensionStatuses.runtime.talos.dev``,
    where the factory's virtual ``schematic`` extension carries them on every
    Talos release (v1.14 also shows them as ``ImageFactorySchematics``).
    """

    def __init__(self, version, platform, arch="amd64", secure_boot=False, extensions=(), schematic_id=None, factory_url=None):
        self.version = version
        self.platform = platform or "metal"
        self.arch = arch or "amd64"
        self.secure_boot = secure_boot
        self.extensions = list(extensions)
        self.schematic_id = schematic_id
        self.factory_url = factory_url

    def as_dict(self):
        return {
            "version": self.version, "platform": self.platform, "arch": self.arch, "secure_boot": self.secure_boot,
            "extensions": list(self.extensions), "schematic_id": self.schematic_id, "factory_url": self.factory_url,
        }


def _author_url(author):
    """``Image Factory (https://factory.talos.dev)`` -> ``https://factory.talos.dev`` (Talos's parseAuthor)."""
    index = (author or "").rfind(" (")
    url = author[index + 2:].rstrip(")") if index >= 0 else ""
    return url if re.match(r"^https?://", url) else None


def node_build(version_item, extension_statuses, security_state):
    """The NodeBuild from a ``Version`` reply item, ExtensionStatus resources and the SecurityState resource (or None)."""
    extensions, schematic, factory_url = [], None, None
    for resource in extension_statuses:
        metadata = ((resource.get("spec") or {}).get("metadata")) or {}
        if metadata.get("name") == SCHEMATIC_EXTENSION and metadata.get("version"):
            schematic, factory_url = metadata["version"], _author_url(metadata.get("author"))
        elif metadata.get("name"):
            extensions.append(metadata["name"])
    secure_boot = bool(((security_state or {}).get("spec") or {}).get("secureBoot"))
    return NodeBuild(version_item.version.tag, version_item.platform.name, version_item.version.arch, secure_boot,
                     extensions, schematic, factory_url)


def read_node_build(client, node, version_item=None):
    """Read the NodeBuild of ``node`` (``version_item``: its Version reply item when already read)."""
    if version_item is None:
        version_item = client.call(VERSION, node=node)[0]
    extensions = client.list_resources("runtime", "ExtensionStatuses.runtime.talos.dev", node=node)
    try:
        security = client.get_resource("runtime", "SecurityStates.talos.dev", "securitystate", node=node)
    except TalosError as error:
        # Missing on releases without the resource type; nothing else is worth failing for.
        if error.code not in ("NotFound", "PermissionDenied"):
            raise
        security = None
    return node_build(version_item, extensions, security)


class InstallerChoice:
    """The installer image a node gets, and why (``source`` names the rule, ``reason`` says it in words)."""

    def __init__(self, image, source, reason):
        self.image = image
        self.source = source
        self.reason = reason


def choose_installer(build, target, image=None, repository=None, factory_url=None):
    """The installer for upgrading a node of ``build`` to ``target`` (``vX.Y.Z``): an InstallerChoice.

    In order: the explicit ``image``; ``repository`` tagged with the
    target; the Image Factory installer of the node's own schematic, platform
    and secure boot (so that its extensions survive) from ``factory_url``, else
    the factory the node was built by, else factory.talos.dev; for a node
    without a schematic, the factory installer of the empty schematic from
    Talos v1.14 on (or when it boots with secure boot) and
    ghcr.io/siderolabs/installer before. A node with system extensions but no
    schematic has no default that keeps them: TalosConfigError.
    """
    target = version_tag(target, "version")
    if image:
        return InstallerChoice(image, "installer_image", "the installer_image option names it")
    if repository:
        return InstallerChoice("%s:%s" % (repository.rstrip("/"), target), "installer_repository",
                               "the installer_repository option tagged with the target version")
    platform = build.platform
    secure = " with secure boot" if build.secure_boot else ""
    if build.schematic_id:
        url = factory_url or build.factory_url or FACTORY_URL
        installer = factory_installer(registry_host(url), platform, build.schematic_id, target, build.secure_boot)
        kept = ("its system extensions (%s) are kept" % ", ".join(build.extensions)) if build.extensions else "it has no system extensions"
        return InstallerChoice(installer, "schematic", "the node runs Image Factory schematic %s on platform %s%s, so %s"
                               % (build.schematic_id, platform, secure, kept))
    if build.extensions:
        raise TalosConfigError(
            "The node runs system extensions (%s) that come from no Image Factory schematic, so no default installer keeps "
            "them: set installer_image (or installer_repository) to an installer that carries them, for example one made with "
            "talos_image_factory_schematic." % ", ".join(build.extensions))
    if runs_at_least(target, FACTORY_INSTALLER_SINCE) or build.secure_boot:
        url = factory_url or FACTORY_URL
        installer = factory_installer(registry_host(url), platform, EMPTY_SCHEMATIC_ID, target, build.secure_boot)
        why = ("Talos %s installers come only from the Image Factory" % target if not build.secure_boot
               else "secure boot installers come from the Image Factory")
        return InstallerChoice(installer, "factory", "%s; the node has no schematic, so the empty one, for platform %s%s"
                               % (why, platform, secure))
    return InstallerChoice("%s:%s" % (LEGACY_INSTALLER_REPOSITORY, target), "legacy",
                           "the node has no Image Factory schematic and Talos %s installers are published at %s"
                           % (target, LEGACY_INSTALLER_REPOSITORY))


def choose_node_installer(client, node, target, image=None, repository=None, factory_url=None):
    """The InstallerChoice for upgrading ``node`` to ``target``; its build is read only when no option names the installer."""
    build = None if image or repository else read_node_build(client, node)
    return choose_installer(build, target, image=image, repository=repository, factory_url=factory_url)


# -- the installer reference in a machine config -------------------------------------------------

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
        from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import rewrite_image_line
        rewritten = rewrite_image_line(self.text, self.image, image)
        if rewritten is not None:
            return rewritten
        from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump_documents
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
    from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
        MachineConfig, parse_yaml_stream, rewrite_image_line,
    )
    text = rewrite_image_line(config.data.decode("utf-8"), given, applied)
    if text is None:
        from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump_documents
        documents = copy.deepcopy(config.documents)
        set_installer(documents, applied)
        text = dump_documents(documents)
    return MachineConfig(parse_yaml_stream(text, "the machine config"), text.encode("utf-8")), {"given": given, "applied": applied}


def read_installer_reference(client, node):
    """The InstallerReference of ``node``'s active machine config (needs os:admin: the config is sensitive)."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import read_active_config
    return InstallerReference(read_active_config(client, node))


def point_installer_at(client, node, reference, image):
    """Apply ``node``'s config with its installer reference naming ``image``, without a reboot; True when it changed."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import ConfigApplier, load_config
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
