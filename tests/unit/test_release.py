# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A release is what users get: galaxy.yml's version is a release of the changelog (antsibull-changelog release), and
the CHANGELOG generated from it goes into the tarball."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(*path):
    with open(os.path.join(REPO, *path)) as handle:
        return yaml.safe_load(handle)


def test_the_collections_version_is_a_release_of_the_changelog_with_its_summary():
    version = _load("galaxy.yml")["version"]
    releases = _load("changelogs", "changelog.yaml")["releases"]
    assert version in releases, "galaxy.yml says %s; run antsibull-changelog release" % version
    assert releases[version]["changes"].get("release_summary")
    with open(os.path.join(REPO, "CHANGELOG.rst")) as handle:
        assert "\nv%s\n" % version in handle.read(), "CHANGELOG.rst is not generated from changelogs/changelog.yaml"


def test_the_changelog_goes_into_the_tarball():
    ignored = _load("galaxy.yml").get("build_ignore", [])
    for path in ("CHANGELOG.rst", "changelogs/changelog.yaml"):
        assert not [pattern for pattern in ignored if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/")]
