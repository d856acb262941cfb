# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for module_utils/common/durations.py: the one duration grammar (Go's time.ParseDuration plus d) and RFC 3339 times."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common import durations
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 23, 22, 0, 0, tzinfo=UTC)


# What Go's time.ParseDuration answers (in seconds), and 30d/2d for the one unit added.
@pytest.mark.parametrize("text, seconds", [
    ("8760h", 8760 * 3600),
    ("720h0m0s", 720 * 3600),
    ("1h30m", 5400),
    ("30m1h", 5400),
    ("1.5h", 5400),
    (".5h", 1800),
    ("1.h", 3600),
    ("90s", 90),
    ("100ms", 0.1),
    ("1\u00b5s", 1e-6),
    ("1\u03bcs", 1e-6),
    ("1us", 1e-6),
    ("2000ns", 2e-6),  # timedelta keeps whole microseconds
    ("0", 0),
    ("0s", 0),
    ("30d", 30 * 86400),
    ("1d12h", 36 * 3600),
])
def test_a_duration_is_read_as_go_reads_it_plus_days(text, seconds):
    assert durations.parse_duration(text, "ttl").total_seconds() == pytest.approx(seconds)


# Go refuses each of these too (but for d and w, which it does not know, and a sign, which these options never take).
@pytest.mark.parametrize("text", ["", " 1h ", "1h 30m", "-1h", "+1h", "1", "h", ".h", "2w", "30 days", "1H", None, 30])
def test_anything_else_is_refused_naming_the_option(text):
    with pytest.raises(TalosConfigError) as refused:
        durations.parse_duration(text, "max_age")
    assert refused.value.message == "max_age must be a duration such as 720h, 1h30m or 30d, got %r." % (text,)


@pytest.mark.parametrize("text, expected", [
    ("2026-11-27", datetime.datetime(2026, 11, 27, tzinfo=UTC)),
    ("2026-11-27T08:00:00Z", datetime.datetime(2026, 11, 27, 8, tzinfo=UTC)),
    ("2026-11-27t08:00:00z", datetime.datetime(2026, 11, 27, 8, tzinfo=UTC)),
    ("2026-11-27T09:00:00+01:00", datetime.datetime(2026, 11, 27, 8, tzinfo=UTC)),
    ("2026-11-27T09:00:00+0100", datetime.datetime(2026, 11, 27, 8, tzinfo=UTC)),
    ("2026-11-27 08:00:00", datetime.datetime(2026, 11, 27, 8, tzinfo=UTC)),
    # Nanoseconds, as Go writes them: the same on every Python (fromisoformat takes them only from 3.11 on).
    ("2026-11-27T08:00:00.123456789Z", datetime.datetime(2026, 11, 27, 8, 0, 0, 123456, tzinfo=UTC)),
    ("2026-11-27T08:00:00.5Z", datetime.datetime(2026, 11, 27, 8, 0, 0, 500000, tzinfo=UTC)),
])
def test_a_time_is_rfc_3339_or_a_date(text, expected):
    assert durations.parse_time(text, "issued_after") == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-11-27T08:00", "2026-13-01", "2026-02-30T00:00:00Z", "1700000000"])
def test_a_bad_time_is_refused_naming_the_option_or_is_none_without_one(text):
    with pytest.raises(TalosConfigError, match="^issued_after "):
        durations.parse_time(text, "issued_after")
    assert durations.parse_time(text) is None


@pytest.mark.parametrize("since, expected", [
    ("15m", NOW - datetime.timedelta(minutes=15)),
    ("1h30m", NOW - datetime.timedelta(minutes=90)),
    ("90s", NOW - datetime.timedelta(seconds=90)),
    ("2d", NOW - datetime.timedelta(days=2)),
    ("2026-11-23T21:00:00Z", datetime.datetime(2026, 11, 23, 21, 0, tzinfo=UTC)),
    ("2026-11-23T23:00:00+02:00", datetime.datetime(2026, 11, 23, 21, 0, tzinfo=UTC)),
])
def test_since_is_a_duration_before_now_or_a_time(since, expected):
    assert durations.parse_since(since, "since", now=NOW) == expected


def test_a_bad_since_names_the_option():
    with pytest.raises(TalosConfigError, match=r"^since must be a duration such as 15m, 1h30m or 2d, or an RFC 3339 time"):
        durations.parse_since("1h 30m", "since", now=NOW)
