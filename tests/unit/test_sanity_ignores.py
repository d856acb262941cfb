# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The committed ansible-test ignore files are the one list written out for every supported line."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sanity_ignores", os.path.join(ROOT, "tests", "sanity", "ignores.py"))
ignores = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ignores)


@pytest.mark.parametrize("line", sorted(ignores.LINES))
def test_each_lines_ignore_file_is_the_one_list_written_out(line):
    with open(os.path.join(ROOT, ignores.path_of(line))) as committed:
        assert committed.read().splitlines() == ignores.entries(line), (
            "tests/sanity/ignore-%s.txt is stale: run python tests/sanity/ignores.py" % line)


def test_every_supported_line_from_the_oldest_on_has_its_file():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as runtime:
        oldest = [text.split('"')[1] for text in runtime if text.startswith("requires_ansible")][0]
    assert oldest.startswith(">=") and oldest[2:6] == min(ignores.LINES)
    files = sorted(name for name in os.listdir(os.path.join(ROOT, "tests", "sanity")) if name.startswith("ignore-"))
    assert files == ["ignore-%s.txt" % line for line in sorted(ignores.LINES)]


def test_per_python_tests_are_named_for_each_python_of_the_line():
    generated = [entry for entry in ignores.entries("2.16") if "_pb2.py import" in entry]
    assert {entry.rsplit(" ", 1)[1] for entry in generated} == {"import-3.10!skip", "import-3.11!skip", "import-3.12!skip"}
