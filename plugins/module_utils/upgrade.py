# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for talos_upgrade: version tags, installer image references and the etcd gate.

Everything here is free of I/O except ``etcd_gate``, which only reads.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils import etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError, TalosUnimplementedError

DEFAULT_IMAGE_REPOSITORY = "ghcr.io/siderolabs/installer"

# v1.14.0, 1.14.0, v1.14.0-rc.1, v1.13.0-alpha.2.3+g1234 (git describe builds)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def normalize_version(version):
    """``"1.14.0"`` -> ``"v1.14.0"``: the spelling of ``Version.tag``. Returns None for None."""
    if version is None:
        return None
    version = str(version).strip()
    return version if version.startswith("v") else "v" + version


def parse_version(tag):
    """A sortable key for a Talos version tag, or None when ``tag`` is not ``vMAJOR.MINOR.PATCH[-pre]``.

    Pre-releases sort before their release, as in semantic versioning:
    ``v1.13.0-alpha.2 < v1.13.0-rc.1 < v1.13.0``.
    """
    match = _VERSION.match(str(tag or "").strip())
    if not match:
        return None
    major, minor, patch, pre = match.groups()
    if pre is None:
        pre_key = (1,)
    else:
        pre_key = (0,) + tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in pre.split("."))
    return (int(major), int(minor), int(patch), pre_key)


def image_tag(image):
    """The tag of an image reference, or None when it has none.

    ``registry:5000/siderolabs/installer:v1.14.0@sha256:...`` -> ``"v1.14.0"``: the
    digest is dropped and a colon before the last slash belongs to the registry.
    """
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.rsplit(":", 1)[1] or None


def resolve_target(image=None, version=None, image_repository=DEFAULT_IMAGE_REPOSITORY):
    """The installer image and target version tag from the module's options.

    Returns ``(image, version)``; raises ValueError with a sentence naming the
    option when the target cannot be derived.
    """
    if image:
        tag = image_tag(image)
        if not tag:
            raise ValueError("image %r has no tag: give the installer image with its version tag, "
                             "for example %s:v1.14.0." % (image, DEFAULT_IMAGE_REPOSITORY))
        if parse_version(tag) is None:
            raise ValueError("The tag %r of image %r is not a Talos version such as v1.14.0." % (tag, image))
        return image, normalize_version(tag)
    target = normalize_version(version)
    if parse_version(target) is None:
        raise ValueError("version %r is not a Talos version such as v1.14.0." % version)
    return "%s:%s" % (image_repository.rstrip("/"), target), target


def choose_api(api, stage=False, preserve=False):
    """The first upgrade API to try: ``lifecycle`` or ``legacy``.

    ``stage`` and ``preserve`` exist only in the legacy API, so ``auto`` with
    either of them goes straight to it. Raises ValueError for ``api=lifecycle``
    combined with them.
    """
    legacy_only = [name for name, value in (("stage", stage), ("preserve", preserve)) if value]
    if api == "lifecycle" and legacy_only:
        raise ValueError("%s apply only to the legacy upgrade API: set api to legacy or auto, or drop %s."
                         % (" and ".join(legacy_only), " and ".join(legacy_only)))
    if api == "auto":
        return "legacy" if legacy_only else "lifecycle"
    return api


def has_lifecycle_api(tag):
    """Whether Talos ``tag`` serves LifecycleService (v1.13 and its pre-releases on); None when unparseable."""
    key = parse_version(tag)
    if key is None:
        return None
    return key[:2] >= (1, 13)


def etcd_gate(client, node):
    """Decide whether ``node`` may be upgraded without risking etcd quorum.

    The rule: every etcd member must be started (it has a name), a voting
    member (not a learner) and healthy (its own node answers EtcdStatus with an
    empty ``errors`` list; etcd lists active alarms such as NOSPACE there), and
    the cluster must keep a quorum without one member, which takes at least
    three members. A one- or two-member cluster loses etcd while a control
    plane reboots whatever happens; upgrading it needs ``force``.

    Returns ``(controlplane, problem)``: ``controlplane`` is False for a worker
    (which answers EtcdMemberList with Unimplemented; no gate applies), and
    ``problem`` says why the gate is closed, or is None.
    """
    try:
        members = etcd.list_members(client, node)
    except TalosUnimplementedError:
        return False, None
    except TalosError as err:
        # EtcdMemberList needs a raft leader: an unreadable list is itself a closed gate.
        return True, "its etcd member list cannot be read (%s)" % err.message.rstrip(".")
    statuses = etcd.member_statuses(client, members)
    return True, gate_problem(members, statuses)


def gate_problem(members, statuses):
    """Why the etcd gate is closed, or None when it is open (the rule is in ``etcd_gate``)."""
    problems = []
    for member in members:
        status = statuses.get(member["id"])
        if not member["hostname"]:
            problems.append("member %s has not started" % member["id"])
        elif member["is_learner"]:
            problems.append("member %s is still a learner" % member["hostname"])
        elif not etcd.is_healthy(status):
            if isinstance(status, dict):
                reason = "; ".join(status["errors"])
            else:
                reason = getattr(status, "message", None) or "no status"
            problems.append("member %s is not healthy (%s)" % (member["hostname"], reason.rstrip(".")))
    if problems:
        return "; ".join(problems)
    needed = etcd.quorum(len(members))
    if len(members) - 1 < needed:
        return ("the cluster has %d etcd member(s) and keeps no quorum (%d needed) while one of them reboots"
                % (len(members), needed))
    return None
