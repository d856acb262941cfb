# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talos version contracts and the generator defaults that follow from them.

A version contract (``v1.13``) says which Talos release a generated config
must be accepted by: it chooses the document layout and the feature fields.
It must not be newer than the oldest Talos on the nodes (a node refuses keys
it does not know). The defaults per contract are those of that release's
``talosctl gen config``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import EMPTY_SCHEMATIC_ID, FACTORY_URL, registry_host
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import FACTORY_INSTALLER_SINCE, LEGACY_INSTALLER_REPOSITORY
from ansible_collections.talos_linux.talos.plugins.module_utils.config.installer_reference import UNATTENDED_INSTALL_SINCE
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import SUPPORTED_RELEASES, SUPPORTED_TEXT

# A contract for every Talos minor release the collection supports.
SUPPORTED_CONTRACTS = SUPPORTED_RELEASES
# The newest Talos release the generator knows; its tag is the default installer image tag.
DEFAULT_TALOS_VERSION = "v1.14.1"

# DefaultKubernetesVersion of the newest release of each Talos minor version.
DEFAULT_KUBERNETES_VERSIONS = {
    (1, 9): "1.32.4",
    (1, 10): "1.33.6",
    (1, 11): "1.34.1",
    (1, 12): "1.35.4",
    (1, 13): "1.36.3",
    (1, 14): "1.37.0",
}

INSTALLER_IMAGE = LEGACY_INSTALLER_REPOSITORY
# Talos v1.14 publishes no installer under ghcr.io: talosctl points at the Image Factory (empty schematic).
FACTORY_INSTALLER_IMAGE = "%s/metal-installer/%s" % (registry_host(FACTORY_URL), EMPTY_SCHEMATIC_ID)

# Where a config puts the installer image and its disk (talos_machine_config install_home): the v1alpha1
# .machine.install section, or the UnattendedInstallConfig document; Talos refuses a config with both.
INSTALL_HOMES = ("machine", "unattended")

# vMAJOR.MINOR[.PATCH[-pre]] with an optional leading v, as Talos parses contracts.
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+)(?:-[0-9A-Za-z.-]+)?)?$")
_KUBERNETES_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")


def parse_contract(talos_version, parameter="talos_version"):
    """``(major, minor)`` of a Talos version such as ``v1.13``, ``1.14.0`` or ``v1.14.0-rc.1``; None means the newest."""
    if talos_version is None:
        return SUPPORTED_CONTRACTS[-1]
    match = _VERSION.match(str(talos_version).strip())
    if not match:
        raise TalosConfigError("%s must be a Talos version such as v1.14 or v1.14.1, got %r." % (parameter, talos_version))
    contract = (int(match.group(1)), int(match.group(2)))
    if contract not in SUPPORTED_CONTRACTS:
        raise TalosConfigError("%s %s is not supported: the collection generates configs for Talos %s."
                               % (parameter, talos_version, SUPPORTED_TEXT))
    return contract


def contract_name(contract):
    return "v%d.%d" % contract


def release_tag(talos_version):
    """The release tag of ``talos_version``: ``v1.13`` -> ``v1.13.0``, ``1.14.1`` -> ``v1.14.1``."""
    text = str(talos_version or DEFAULT_TALOS_VERSION).strip()
    text = text if text.startswith("v") else "v" + text
    match = _VERSION.match(text)
    if match and match.group(3) is None:
        return "%s.0" % text
    return text


def default_installer_image(talos_version):
    """The installer image talosctl of that release puts into ``machine.install.image``."""
    contract = parse_contract(talos_version)
    repository = FACTORY_INSTALLER_IMAGE if contract >= FACTORY_INSTALLER_SINCE else INSTALLER_IMAGE
    return "%s:%s" % (repository, release_tag(talos_version))


def install_home(value, contract, parameter="install_home"):
    """Where a config of ``contract`` puts the installer: ``value``, else where talosctl of that release puts it."""
    unattended_known = contract >= UNATTENDED_INSTALL_SINCE
    if not value:
        return "unattended" if unattended_known else "machine"
    if value not in INSTALL_HOMES:
        raise TalosConfigError("%s must be one of %s, got %r." % (parameter, ", ".join(INSTALL_HOMES), value))
    if value == "unattended" and not unattended_known:
        raise TalosConfigError(
            "%s unattended needs talos_version v%d.%d or later: Talos %s has no UnattendedInstallConfig document, so its "
            "installer and install disk go in .machine.install (%s machine)."
            % ((parameter,) + UNATTENDED_INSTALL_SINCE + (contract_name(contract), parameter)))
    return value


def kubernetes_version(value, contract):
    """The Kubernetes version without its leading ``v``; the contract's default when ``value`` is empty."""
    if not value:
        return DEFAULT_KUBERNETES_VERSIONS[contract]
    text = str(value).strip()
    if not _KUBERNETES_VERSION.match(text):
        raise TalosConfigError("kubernetes_version must be a version such as 1.36.3 or v1.36.3, got %r." % value)
    return text[1:] if text.startswith("v") else text


def validate_cluster_endpoint(endpoint, parameter="cluster_endpoint"):
    """Check ``endpoint`` as talosctl gen config does; returns ``(url, host)``.

    It must be ``https://host[:port]``: a scheme, ``https``, a non-empty host,
    IPv6 addresses in brackets, a numeric port in range.
    """
    text = str(endpoint or "").strip()
    example = "https://<host>:6443"
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise TalosConfigError("%s %r has no scheme: give it as %s." % (parameter, text, example))
    if scheme.lower() != "https":
        raise TalosConfigError("%s %r must use https, not %s: give it as %s." % (parameter, text, scheme, example))
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    if authority.startswith("["):
        host, bracket, tail = authority[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise TalosConfigError("%s %r has a malformed IPv6 address: write it as https://[addr]:6443." % (parameter, text))
        port = tail[1:] if tail else None
    elif authority.count(":") > 1:
        raise TalosConfigError("%s %r has an IPv6 address without brackets: write it as https://[addr]:6443." % (parameter, text))
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
    if not host:
        raise TalosConfigError("%s %r names no host: give it as %s." % (parameter, text, example))
    if port is not None and (not port.isdigit() or not 0 < int(port) < 65536):
        raise TalosConfigError("%s %r has an invalid port %r: it must be a number from 1 to 65535." % (parameter, text, port))
    return text, host
