# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures the unit tests share."""

import time

import pytest


@pytest.fixture
def clock(monkeypatch):
    """A clock that only moves when a wait sleeps (``clock["t"]``, seconds): waits end at once, however long."""
    now = {"t": 1000.0}
    monkeypatch.setattr(time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(time, "sleep", lambda seconds: now.update(t=now["t"] + seconds))
    return now
