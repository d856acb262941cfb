# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scalars as Go's yaml.v3 writes them, non-ASCII text included.

go_yaml_scalars.json holds, per string, what Go's encoder writes for it as a mapping value and in
a sequence; tests/conformance/go_yaml_test.go checks each vector against yaml.v3 (the Image
Factory's encoder) and yaml v4 (Talos's) on every run, so these vectors are Go's own output.
"""

import json
import os

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.images import factory as image_factory

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "go_yaml_scalars.json")) as _vectors:
    VECTORS = json.load(_vectors)


@pytest.mark.parametrize("vector", VECTORS, ids=[ascii(vector["value"]) for vector in VECTORS])
def test_each_string_is_written_as_go_writes_it(vector):
    assert go_yaml.dump({"v": vector["value"]}) == vector["mapping"]
    assert go_yaml.dump({"w": [{"k": vector["value"]}, vector["value"]]}) == vector["sequence"]


def test_a_schematic_with_non_ascii_text_is_hashed_as_go_writes_it():
    # The Image Factory's ID is the SHA-256 of this text: a quoted or escaped ü would be another schematic.
    canonical = image_factory.canonical_schematic({"customization": {"meta": [{"key": 10, "value": "Grüße 日本語"}],
                                                                     "extraKernelArgs": ["console=ttyS0", "ü=é"]}})
    text = image_factory.schematic_text(canonical)
    assert "value: Grüße 日本語\n" in text and "- ü=é\n" in text
    assert yaml.safe_load(text)["customization"]["meta"][0]["value"] == "Grüße 日本語"


def test_reading_leaves_timestamps_as_strings_as_go_does():
    assert go_yaml.load("notAfter: 2026-11-27T10:00:00Z\nday: 2026-11-27\n") == {
        "notAfter": "2026-11-27T10:00:00Z", "day": "2026-11-27"}
    assert go_yaml.load_all("a: 1\n---\n---\nb: [x]\n") == [{"a": 1}, None, {"b": ["x"]}]
    assert go_yaml.load("") is None
