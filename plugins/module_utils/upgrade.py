# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for talos_upgrade: the target version and the upgrade API choice (installers: images.py).

Everything here is free of I/O. The upgrade itself is lifecycle.upgrade; the
etcd quorum guard before it is etcd.QuorumGuard.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images import image_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.node import normalize_version, parse_version, runs_at_least


def resolve_target(image=None, version=None):
    """The installer image given (or None) and the target version tag, from the module's options.

    Returns ``(image, version)``; without ``image`` the installer is the
    node's own (images.choose_installer). Raises TalosConfigError with a sentence
    naming the option when the target cannot be derived.
    """
    if image:
        tag = image_tag(image)
        if not tag:
            raise TalosConfigError("image %r has no tag: give the installer image with its version tag, for example "
                                   "factory.talos.dev/metal-installer/<schematic>:v1.14.0." % image)
        if parse_version(tag) is None:
            raise TalosConfigError("The tag %r of image %r is not a Talos version such as v1.14.0." % (tag, image))
        return image, normalize_version(tag)
    target = normalize_version(version)
    if parse_version(target) is None:
        raise TalosConfigError("version %r is not a Talos version such as v1.14.0." % version)
    return None, target


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
