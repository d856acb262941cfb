# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for module_utils/nodes/logs.py: since, line times and the line collector."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import logs

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 23, 22, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize("line, expected", [
    ("2026-11-23T21:00:00.123456789Z stderr F started", datetime.datetime(2026, 11, 23, 21, 0, 0, 123456, tzinfo=UTC)),
    ("kern:    info: [2026-11-23T21:00:01Z]: Linux version", datetime.datetime(2026, 11, 23, 21, 0, 1, tzinfo=UTC)),
    ('{"level":"info","ts":"2026-11-23T21:00:02.5Z","msg":"ready"}', datetime.datetime(2026, 11, 23, 21, 0, 2, 500000, tzinfo=UTC)),
    ("a continuation line", None),
    ("{not json", None),
])
def test_line_time(line, expected):
    assert logs.line_time(line) == expected


def test_collector_keeps_the_last_lines_across_chunks():
    collector = logs.LineCollector(2, None)
    collector.feed(b"one\ntw")
    collector.feed(b"o\nthree\nfo")
    collector.feed(b"ur")
    assert collector.close() == ["three", "four"]


def test_collector_since_keeps_continuations_with_their_line():
    since = datetime.datetime(2026, 11, 23, 21, 0, 0, tzinfo=UTC)
    collector = logs.LineCollector(0, since)
    collector.feed(b"2026-11-23T20:59:59Z old\n  old continuation\n2026-11-23T21:00:00Z new\n  new continuation\n")
    assert collector.close() == ["2026-11-23T21:00:00Z new", "  new continuation"]


def test_collector_redacts_lines_that_hold_secrets():
    collector = logs.LineCollector(0, None)
    collector.feed(b"fetching https://user:hunter2secret@registry.example.com/v2/\nplain line\n")
    assert collector.close() == [logs.REDACTED, "plain line"]
