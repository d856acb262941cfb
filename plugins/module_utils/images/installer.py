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

The installer reference in a machine config is config/installer_reference.py's;
the upgrade itself is lifecycle.upgrade; the etcd quorum guard before it is
etcd/quorum.py's; the Image Factory's names and URLs are images/factory.py's.
Nothing here sees a Task: functions take a client and plain values and raise
the collection's errors.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import (
    EMPTY_SCHEMATIC_ID,
    FACTORY_URL,
    SCHEMATIC_EXTENSION,
    factory_installer,
    registry_host,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import image_tag, version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import (
    SUPPORTED_RELEASES,
    SUPPORTED_TEXT,
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


# The COSI resources a node's build is read from besides its Version: (namespace, type[, id]).
EXTENSION_STATUSES = ("runtime", "ExtensionStatuses.runtime.talos.dev")
SECURITY_STATE = ("runtime", "SecurityStates.talos.dev", "securitystate")


def _security_state(answer):
    """The SecurityState of a node from its answer (the resource or a TalosError): None where it is missing, on
    releases without the resource type, or not readable; nothing else is worth failing for."""
    if isinstance(answer, TalosError):
        if answer.code not in ("NotFound", "PermissionDenied"):
            raise answer
        return None
    return answer


def read_node_build(client, node, version_item=None):
    """Read the NodeBuild of ``node`` (``version_item``: its Version reply item when already read)."""
    if version_item is None:
        version_item = client.call(rpc.VERSION, node=node)[0]
    extensions = client.list_resources(*EXTENSION_STATUSES, node=node)
    try:
        security = client.get_resource(*SECURITY_STATE, node=node)
    except TalosError as error:
        security = error
    return node_build(version_item, extensions, _security_state(security))


def read_node_builds(client, nodes, max_concurrency=None):
    """``{node: NodeBuild or TalosError}``: read_node_build of every node of ``nodes``, the nodes read at once
    (Version and SecurityState in one batch, then the ExtensionStatuses), at most ``max_concurrency`` calls at a time."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2

    versions, securities = client.call_batch([
        (rpc.VERSION, None, nodes),
        (rpc.COSI_GET, state_pb2.GetRequest(namespace=SECURITY_STATE[0], type=SECURITY_STATE[1], id=SECURITY_STATE[2]), nodes),
    ], max_concurrency=max_concurrency)
    extensions = client.stream_many(rpc.COSI_LIST, state_pb2.ListRequest(namespace=EXTENSION_STATUSES[0], type=EXTENSION_STATUSES[1]),
                                    nodes=nodes, max_concurrency=max_concurrency)
    builds = {}
    for node in nodes:
        # A node's failure is the one read_node_build would meet first.
        builds[node] = next((answer for answer in (versions[node], extensions[node]) if isinstance(answer, TalosError)), None)
        if builds[node] is not None:
            continue
        security = securities[node]
        try:
            security = _security_state(security if isinstance(security, TalosError) else resource_to_dict(security[0].resource))
        except TalosError as error:
            builds[node] = error
            continue
        builds[node] = node_build(versions[node][0], [resource_to_dict(reply.resource) for reply in extensions[node]], security)
    return builds


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


def choose_installers(client, nodes, target, image=None, repository=None, factory_url=None, max_concurrency=None):
    """``{node: InstallerChoice or TalosError}``: choose_node_installer for each of ``nodes``, their builds read at
    once (read_node_builds) and only when no option names the installer; a node that cannot be read, or that no
    default installer fits, gets the TalosError that says why."""
    builds = dict.fromkeys(nodes) if image or repository else read_node_builds(client, nodes, max_concurrency)
    choices = {}
    for node in nodes:
        build = builds[node]
        try:
            choices[node] = build if isinstance(build, TalosError) else choose_installer(
                build, target, image=image, repository=repository, factory_url=factory_url)
        except TalosError as error:
            choices[node] = error
    return choices
