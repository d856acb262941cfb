# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one grammar of every option that takes a duration or a time.

A duration is written as talosctl takes its flags, in Go's
``time.ParseDuration`` form (``8760h``, ``720h0m0s``, ``1h30m``, ``1.5h``,
``100ms``, a bare ``0``), plus ``d`` for 24 hours (``30d``). The options are
never negative, so a sign is refused. A time is RFC 3339 (``T``, ``Z`` or an
offset, any fraction of a second), read the same on every Python the modules
support; a bare date is midnight UTC where an instant is meant.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError

# Go's units (both spellings of micro), and d.
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600,
                 "d": 86400}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h|d)")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?$")
_OFFSET = re.compile(r"([+-]\d{2}):?(\d{2})$")
_FRACTION = re.compile(r"\.(\d+)")


def parse_duration(text, option):
    """``text`` as a timedelta; TalosConfigError names ``option`` when it is not a duration."""
    value = text if isinstance(text, str) else ""
    position, seconds = 0, 0.0
    if value != "0":
        for match in _PART.finditer(value):
            if match.start() != position:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            position = match.end()
        if not value or position != len(value):
            raise TalosConfigError("%s must be a duration such as 720h, 1h30m or 30d, got %r." % (option, text))
    return datetime.timedelta(seconds=seconds)


def parse_time(text, option=None):
    """An RFC 3339 time (or a bare date, midnight UTC) as an aware UTC datetime.

    With ``option`` a text that is no time raises TalosConfigError naming it;
    without, it gives None (a log line that does not start with a time).
    """
    value = text.strip() if isinstance(text, str) else ""
    if _DATE.match(value):
        value += "T00:00:00Z"
    if not _TIME.match(value):
        if option is None:
            return None
        raise TalosConfigError("%s must be an RFC 3339 time such as 2026-11-27T08:00:00Z, or a date such as 2026-11-27; "
                               "got %r." % (option, text))
    value = value[:10] + "T" + value[11:]
    if value[-1] in "Zz":
        value = value[:-1] + "+00:00"
    elif len(value) > 19:
        value = value[:19] + _OFFSET.sub(r"\1:\2", value[19:])
    # Python's fromisoformat takes at most microseconds, and only from 3.11 on more or fewer than 3 or 6 digits.
    value = _FRACTION.sub(lambda match: "." + match.group(1)[:6].ljust(6, "0"), value, count=1)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:  # a day or an hour that does not exist
        if option is None:
            return None
        raise TalosConfigError("%s is not a valid time, got %r." % (option, text))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def parse_since(text, option, now=None):
    """A duration before ``now`` (default: the current time) or an RFC 3339 time, as an aware UTC datetime."""
    value = text if isinstance(text, str) else ""
    try:
        return (now or datetime.datetime.now(datetime.timezone.utc)) - parse_duration(value, option)
    except TalosConfigError:
        moment = parse_time(value)
    if moment is None:
        raise TalosConfigError("%s must be a duration such as 15m, 1h30m or 2d, or an RFC 3339 time such as "
                               "2026-01-02T15:04:05Z; got %r." % (option, text))
    return moment
