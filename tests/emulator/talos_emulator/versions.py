# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Talos version tags and the behaviour switches that depend on them."""

import re

_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?")

# The newest Talos minor release there is in the emulated world: no registry holds an installer of a later one.
NEWEST_MINOR = (1, 14)


def parse_version(tag):
    """``"v1.14.0-rc.1"`` -> ``(1, 14, 0, "rc.1")``."""
    match = _TAG.match(tag or "")
    if not match:
        raise ValueError("not a Talos version tag: %r" % (tag,))
    major, minor, patch, pre = match.groups()
    return int(major), int(minor), int(patch), pre


def older_than(tag, other):
    """True when release ``tag`` comes before release ``other`` (pre-releases count as their release)."""
    return parse_version(tag)[:3] < parse_version(other)[:3]


def image_tag(image_ref):
    """The tag of an image reference (``ghcr.io/siderolabs/installer:v1.14.1`` -> ``v1.14.1``), or None."""
    name = image_ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    return None


def released(tag):
    """Whether ``tag`` names a Talos release there is (any patch of a minor release up to NEWEST_MINOR): an
    installer tagged ``latest`` or with a release that never was (``v1.99.0``) cannot be pulled."""
    try:
        return parse_version(tag)[:2] <= NEWEST_MINOR
    except ValueError:
        return False
