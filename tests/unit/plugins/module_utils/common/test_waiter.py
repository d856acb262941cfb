# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Waiter, the one wait loop, and retry, against scripted polls."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConnectionError,
    TalosError,
    TalosPermissionError,
    TalosTimeoutError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import (
    POLL_CALL_TIMEOUT,
    Seen,
    WaitTimedOut,
    Waiter,
    retry,
)


def scripted(*states):
    """A poll that sees ``states`` in turn; the last is done, with its state as the value."""
    script = list(states)

    def poll():
        state = script.pop(0)
        if isinstance(state, Exception):
            raise state
        return Seen(state, done=not script, value=state)
    return poll


def test_until_returns_the_value_of_the_done_poll():
    assert Waiter(5, interval=0).until(scripted("one", "two", "three"), "x", "10.5.0.2") == "three"


def test_timeout_names_what_was_awaited_and_the_last_detail():
    with pytest.raises(WaitTimedOut) as err:
        Waiter(0, interval=0).until(lambda: Seen("booting", detail="stage booting, ready false"),
                                    "node 10.5.0.2 to become ready", "10.5.0.2")
    assert err.value.message == ("Timed out after 0 seconds waiting for node 10.5.0.2 to become ready; "
                                 "last observed: stage booting, ready false.")
    assert isinstance(err.value, TalosTimeoutError) and err.value.seen.state == "booting"


def test_a_wait_that_follows_progress_gives_up_only_once_its_subject_stopped_moving(clock):
    # The subject gets further every 8 s for 40 s, then stays: a 10 s wait lasts until 10 s after its last step.
    started = clock["t"]

    def poll():
        elapsed = clock["t"] - started
        return Seen("step %d" % min(elapsed // 8, 5), detail="at step %d" % min(elapsed // 8, 5),
                    advanced=elapsed < 48 and elapsed % 8 == 0)
    with pytest.raises(WaitTimedOut) as err:
        Waiter(10, interval=2).until(poll, "the member to join", "cp-3")
    assert clock["t"] - started == 50
    assert err.value.message == ("Timed out waiting for the member to join: no progress in 10 seconds (50 seconds in all); "
                                 "last observed: at step 5.")


def test_tolerated_errors_are_states_and_others_propagate():
    poll = scripted(TalosConnectionError("Talos endpoint 10.5.0.2:50000 is unreachable."), "running")
    assert Waiter(5, interval=0).until(poll, "x", "10.5.0.2") == "running"
    with pytest.raises(TalosPermissionError):
        Waiter(5, interval=0).until(scripted(TalosPermissionError("denied", code="PermissionDenied"), "x"),
                                    "x", "10.5.0.2")


def test_a_short_wait_shows_no_progress(clock):
    lines = []
    Waiter(60, interval=2, progress=lines.append).until(scripted("rebooting", "running"), "x", "10.5.0.3")
    assert lines == []


def test_a_long_wait_shows_each_state_change_as_it_happens(clock):
    lines = []
    poll = scripted("running", "running", TalosConnectionError("refused"), "booting", "booting", "booting", "running")
    Waiter(600, interval=2, progress=lines.append).until(poll, "x", "10.5.0.3")
    # Quiet for the first 5 seconds, then the trail so far, then every change.
    assert lines == ["10.5.0.3: running → unreachable → booting (6 s)",
                     "10.5.0.3: running → unreachable → booting → running (12 s)"]


def test_long_trails_show_the_latest_states(clock):
    lines = []
    states = ["s%d" % index for index in range(10)]
    Waiter(600, interval=1, progress=lines.append).until(scripted(*states), "x", "n")
    assert lines[-1] == "n: … → s4 → s5 → s6 → s7 → s8 → s9 (9 s)"


def test_streams_report_through_see(clock):
    lines = []
    waiter = Waiter(600, progress=lines.append)
    waiter.see("cluster", "waiting for etcd_healthy")
    clock["t"] += 7
    waiter.see("cluster", "waiting for etcd_healthy")
    waiter.see("cluster", "all checks passed")
    assert lines == ["cluster: waiting for etcd_healthy (7 s)", "cluster: waiting for etcd_healthy → all checks passed (7 s)"]


def test_call_deadline_is_bounded_by_what_is_left(clock):
    waiter = Waiter(30)
    assert waiter.call_deadline() == POLL_CALL_TIMEOUT
    clock["t"] += 27
    assert waiter.call_deadline() == 3 and waiter.elapsed == 27
    clock["t"] += 10
    assert waiter.call_deadline() == 0.5 and waiter.remaining == 0


def test_the_waiter_follows_between_polls(clock):
    paused = []
    poll = scripted("rebooting", "booting", "running")
    assert Waiter(60, interval=2).until(poll, "x", "10.5.0.2", follow=paused.append) == "running"
    assert paused == [2, 2] and clock["t"] == 1000.0


def test_retry_tries_again_what_it_may_until_its_time_is_up():
    calls = []

    def attempt(outcomes):
        def call():
            calls.append(1)
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return call

    def retryable(error):
        return error.code == "Unavailable"

    assert retry(attempt([TalosError("busy", code="Unavailable"), "done"]), retryable, 5, (0.01, 0.02)) == "done"
    assert len(calls) == 2
    with pytest.raises(TalosError, match="refused"):
        retry(attempt([TalosError("refused", code="PermissionDenied"), "done"]), retryable, 5, (0.01, 0.02))
    with pytest.raises(TalosError, match="busy"):  # no time given: tried once
        retry(attempt([TalosError("busy", code="Unavailable"), "done"]), retryable, 0, (0.01, 0.02))
    assert len(calls) == 4
