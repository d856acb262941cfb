# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiting: one Waiter that every wait of the collection goes through.

A wait is a ``Waiter`` (how long, how often, where progress goes) and a poll:
a function that looks once and returns ``Seen(state, done, value)``. The
waiter calls it until it is done or the time is up, waits out the errors a
rebooting node produces, and tells the task's ``progress`` how each subject's
state changes once the wait lasts more than a few seconds::

    10.5.0.3: running → unreachable → booting → running (42 s)

Streams that deliver the changes themselves (COSI Watch, the server-side
health check) feed the same progress lines with ``Waiter.see``. ``retry`` is
the one loop that tries a request again. The waits on a node (reboot, API,
services, gone) are ``nodes/waits.py``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConnectionError,
    TalosError,
    TalosTLSError,
    TalosTimeoutError,
    format_seconds,
)

# Answers a node gives while it reboots or restarts its API: keep waiting.
TRANSIENT_CODES = ("Unavailable", "Canceled", "DeadlineExceeded")

# One poll may take at most this long, so that a node that hangs mid-reboot
# does not eat the whole wait.
POLL_CALL_TIMEOUT = 10.0

# A wait that ends within this many seconds shows no progress: only long waits need telling about.
QUIET_SECONDS = 5.0

# A progress line shows at most this many states, the latest ones.
SHOWN_STATES = 6


def is_transient(error):
    """True for the errors a rebooting node or a restarting API server produces."""
    return isinstance(error, (TalosConnectionError, TalosTimeoutError)) or error.code in TRANSIENT_CODES


def _error_state(error):
    """A short word for a node that answers with ``error`` while it is awaited."""
    if isinstance(error, TalosConnectionError) or error.code == "Unavailable":
        return "unreachable"
    if isinstance(error, TalosTimeoutError):
        return "not answering"
    if isinstance(error, TalosTLSError):
        return "TLS handshake failing"
    return (error.code or "error").lower()


class Seen:
    """What one poll saw.

    ``state`` is a few words for the progress line (``booting``), ``done``
    ends the wait with ``value`` as its result, and ``detail`` (``state`` when
    not given) is what the timeout message says was seen last. ``advanced``
    says the subject got further than ever before in this wait: the waiter
    gives it its whole time again from then on.
    """

    def __init__(self, state, done=False, value=None, detail=None, advanced=False):
        self.state = state
        self.done = done
        self.value = value
        self.detail = detail or state
        self.advanced = advanced


class WaitTimedOut(TalosTimeoutError):
    """A wait ran out of time; ``seen`` is what the last poll saw (its ``value`` may hold a partial result)."""

    def __init__(self, message, seen):
        super(WaitTimedOut, self).__init__(message, code="DeadlineExceeded")
        self.seen = seen


class _Trail:
    """The states one subject went through, and what progress has shown of them."""

    def __init__(self, started):
        self.started = started
        self.states = []
        self.shown = 0

    def add(self, state):
        if not self.states or self.states[-1] != state:
            self.states.append(state)

    def line(self, subject, now):
        shown = self.states[-SHOWN_STATES:]
        more = "… → " if len(self.states) > len(shown) else ""
        return "%s: %s%s (%d s)" % (subject, more, " → ".join(shown), round(now - self.started))


class Waiter:
    """Polls until something is done, at most ``timeout`` seconds from its creation: the one wait loop.

    ``interval`` is the pause between two polls; ``progress`` (a callable
    taking a line, such as ``task.progress``) is told each subject's state
    changes once a wait lasts QUIET_SECONDS. One waiter may serve several
    waits in a row (one per node), which then share its deadline. A poll
    that follows its subject's progress (a member joining etcd) marks what
    it sees ``advanced`` when the subject got further: the deadline is then
    ``timeout`` seconds from that look, so that such a wait gives up only
    once the subject stopped moving for that long.
    """

    def __init__(self, timeout, interval=2.0, progress=None):
        self.timeout = timeout
        self.interval = interval
        self.progress = progress
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.moved_at = None
        self._trails = {}

    @property
    def elapsed(self):
        """Seconds since the waiter was created, to one decimal."""
        return round(time.monotonic() - self.started, 1)

    @property
    def remaining(self):
        return max(0.0, self.deadline - time.monotonic())

    def call_deadline(self):
        """The deadline of one call made by a poll: never more than what is left, nor than POLL_CALL_TIMEOUT."""
        return max(0.5, min(POLL_CALL_TIMEOUT, self.remaining))

    def see(self, subject, state):
        """Record that ``subject`` (a node, the cluster) is in ``state`` now; progress hears of changes."""
        now = time.monotonic()
        trail = self._trails.get(subject)
        if trail is None:
            trail = self._trails[subject] = _Trail(now)
        trail.add(state)
        if self.progress is not None and now - trail.started >= QUIET_SECONDS and len(trail.states) > trail.shown:
            trail.shown = len(trail.states)
            self.progress(trail.line(subject, now))

    def _timed_out(self, what, seen):
        last = str(seen.detail).rstrip(".")
        if self.moved_at is None:
            return "Timed out after %s seconds waiting for %s; last observed: %s." % (format_seconds(self.timeout), what, last)
        return ("Timed out waiting for %s: no progress in %s seconds (%d seconds in all); last observed: %s."
                % (what, format_seconds(self.timeout), round(time.monotonic() - self.started), last))

    def until(self, poll, what, subject, tolerate=is_transient, follow=None):
        """Call ``poll()`` until the Seen it returns is done, and return that Seen's value.

        ``what`` completes "waiting for ..." in the timeout message, ``subject``
        names the progress lines (``node.short_label``, or ``cluster``). A
        TalosError that ``poll`` raises and ``tolerate`` accepts is a state
        too (a rebooting node does not answer); any other propagates. Raises
        WaitTimedOut naming ``what`` and the state seen last. ``follow``
        (an ``EventFollower``) replaces the pause between two polls: it
        returns early when the node reports a change.
        """
        while True:
            try:
                seen = poll()
            except TalosError as error:
                if not tolerate(error):
                    raise
                seen = Seen(_error_state(error), detail=error.message)
            self.see(subject, seen.state)
            if seen.done:
                return seen.value
            if seen.advanced:
                self.moved_at = time.monotonic()
                self.deadline = max(self.deadline, self.moved_at + self.timeout)
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimedOut(self._timed_out(what, seen), seen)
            pause = min(self.interval, remaining)
            if follow is None or pause <= 0:
                time.sleep(pause)
            else:
                follow(pause)


def retry(attempt, retryable, seconds, backoff):
    """``attempt()``'s result, trying it again while the TalosError it raises is ``retryable(error)``, for up to
    ``seconds``: pauses grow from ``backoff[0]`` to at most ``backoff[1]`` seconds. With ``seconds`` 0 it is tried
    once. The one loop that tries a request again (Waiter waits for a state)."""
    deadline = time.monotonic() + seconds
    pause, longest = backoff
    while True:
        try:
            return attempt()
        except TalosError as error:
            remaining = deadline - time.monotonic()
            if not retryable(error) or remaining <= 0:
                raise
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, longest)
