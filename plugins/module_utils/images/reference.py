# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Image references as containerd stores them (``reference.ParseDockerRef``: ``nginx`` is
``docker.io/library/nginx:latest``) and Talos version tags."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import normalize_version, parse_version

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"

_REFERENCE = re.compile(r"^(?P<name>(?:%s/)?%s(?:/%s)*)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[0-9a-fA-F]{32,}))?$"
                        % (_DOMAIN, _COMPONENT, _COMPONENT))


class ImageReference:
    """An image reference normalized as containerd stores it: ``name`` with a ``tag`` or a ``digest``.

    ``str()`` is the name containerd lists: ``name:tag``, or ``name@digest``
    (a tag given with a digest is dropped, as ``reference.ParseDockerRef`` does).
    """

    def __init__(self, name, tag=None, digest=None):
        self.name = name
        self.tag = tag
        self.digest = digest

    def __str__(self):
        return "%s@%s" % (self.name, self.digest) if self.digest else "%s:%s" % (self.name, self.tag)

    def pinned(self, digest):
        """``name@digest``: how Talos names a pulled image."""
        return "%s@%s" % (self.name, digest)


def parse_reference(ref, option="name"):
    """The ImageReference of ``ref``; raises TalosConfigError naming ``option`` when it is no image reference."""
    match = _REFERENCE.match(str(ref or "").strip())
    if not match:
        raise TalosConfigError("%s %r is not an image reference such as registry.example.com/team/app:v1.2.3 "
                               "(lower-case repository path, optional :tag and @sha256:digest)." % (option, ref))
    name, tag, digest = match.group("name"), match.group("tag"), match.group("digest")
    first, _slash, rest = name.partition("/")
    # distribution's splitDockerDomain: a first component without "." or ":" (and not localhost) is a Docker Hub path.
    if not rest or ("." not in first and ":" not in first and first != "localhost" and first.lower() == first):
        name, first, rest = "docker.io/" + name, "docker.io", name
    elif first == "index.docker.io":
        name, first = "docker.io/" + rest, "docker.io"
    if first == "docker.io" and "/" not in rest:
        name = "docker.io/library/" + rest
    if digest:
        return ImageReference(name, digest=digest.lower())
    return ImageReference(name, tag=tag or "latest")


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


def version_tag(version, option="talos_version"):
    """``version`` as Talos spells it (``v1.14.0``); TalosConfigError naming ``option`` when it is no version."""
    tag = normalize_version(version)
    if parse_version(tag) is None:
        raise TalosConfigError("%s %r is not a Talos version such as v1.14.0." % (option, version))
    return tag
