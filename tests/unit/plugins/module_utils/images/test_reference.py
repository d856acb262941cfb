# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""images/reference.py: image references as containerd stores them, and version tags."""

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.images import reference as image_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import EMPTY_SCHEMATIC_ID as EMPTY


@pytest.mark.parametrize("ref, normalized", [
    ("nginx", "docker.io/library/nginx:latest"),
    ("nginx:1.27", "docker.io/library/nginx:1.27"),
    ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
    ("index.docker.io/library/alpine:3", "docker.io/library/alpine:3"),
    ("localhost/app", "localhost/app:latest"),
    ("registry.local:5000/team/app:v1", "registry.local:5000/team/app:v1"),
    ("ghcr.io/org/app:v1@sha256:" + "a" * 64, "ghcr.io/org/app@sha256:" + "a" * 64),
    ("factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY, "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY),
])
def test_references_are_normalized_as_containerd_stores_them(ref, normalized):
    assert str(image_reference.parse_reference(ref)) == normalized


@pytest.mark.parametrize("ref", ["", "Bad Name", "ghcr.io/Org/app:v1", "app:", "app@sha256:short"])
def test_a_bad_reference_names_the_option(ref):
    with pytest.raises(TalosConfigError, match="^name .* is not an image reference"):
        image_reference.parse_reference(ref)


def test_image_tag():
    assert image_reference.image_tag("registry:5000/siderolabs/installer:v1.14.0@sha256:" + "0" * 64) == "v1.14.0"
    assert image_reference.image_tag("registry:5000/siderolabs/installer") is None
