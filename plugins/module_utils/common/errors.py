# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The TalosError family, and how messages name a node and a number of seconds.

Every failure a module can meet ends up as one TalosError whose ``message``
is a single sentence a platform engineer can act on. Messages never carry key
material and never a Python traceback.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from contextlib import contextmanager


class TalosError(Exception):
    """Base of every error the collection reports.

    ``code`` is the gRPC status name (``"PermissionDenied"``) or None for local
    errors, ``node`` the target node (None for the endpoint itself) and
    ``server_message`` the server's own text when there is one.
    """

    def __init__(self, message, code=None, node=None, server_message=None):
        super(TalosError, self).__init__(message)
        self.message = message
        self.code = code
        self.node = node
        self.server_message = server_message

    def __str__(self):
        return self.message

    def to_result(self):
        """Fields for fail_json besides ``msg``."""
        result = {}
        if self.code:
            result["code"] = self.code
        if self.node:
            result["node"] = self.node
        if self.server_message:
            result["server_message"] = self.server_message
        return result


class TalosConfigError(TalosError):
    """Bad input: an option, the talosconfig file or the connection options are unusable."""


class ActionFailed(TalosError):
    """A step refused or failed, possibly after others ran: ``result`` is the task's result so far.

    ``cause`` (a TalosError) gives the code, node and server message unless
    ``code`` or ``node`` are given; its result keys win over ``result``'s.
    """

    def __init__(self, message, result=None, cause=None, code=None, node=None):
        super(ActionFailed, self).__init__(message, code=code or getattr(cause, "code", None),
                                           node=node or getattr(cause, "node", None),
                                           server_message=getattr(cause, "server_message", None))
        self.result = dict(result or {})

    def to_result(self):
        result = dict(self.result)
        result.update(super(ActionFailed, self).to_result())
        return result


@contextmanager
def failing_as(what, result, then=None):
    """A step that may fail after others ran: a TalosError raised inside becomes ActionFailed carrying ``result`` (the
    task's result so far), saying "``what``: <the error>" and, with ``then``, "; ``then``" (the cluster's state and
    what to do)."""
    try:
        yield
    except TalosError as error:
        if then is None:
            raise ActionFailed("%s: %s" % (what, error.message), result, error)
        raise ActionFailed("%s: %s; %s" % (what, error.message.rstrip("."), then), result, error)


class TalosConnectionError(TalosError):
    """No endpoint (or, through an endpoint, no node) could be reached, or the connection broke."""


class TalosUnreachableError(TalosConnectionError):
    """Nothing answers: every endpoint, or the node behind one, refused the connection, has no route or timed out.

    Not retried: a task fails at once, unless it waits for a node to come back.
    Its result says ``api_unreachable: true``, so that a play can tell a machine
    that is off from one that answers with an error.
    """

    def to_result(self):
        result = super(TalosUnreachableError, self).to_result()
        # Not "unreachable": Ansible reads that key as the host being unreachable.
        result["api_unreachable"] = True
        return result


class TalosTLSError(TalosError):
    """The TLS handshake failed: certificate verification or a refused client certificate."""


class TalosPermissionError(TalosError):
    """The server refused the call for lack of a role (or refused to forward it)."""


class TalosRoutingError(TalosPermissionError):
    """The endpoint refused to forward the call to the node: it is no control plane, or routing is off."""


class TalosUnimplementedError(TalosError):
    """The node does not offer the API: too old a Talos version, or the wrong node type."""


class TalosTimeoutError(TalosError):
    """An operation or a wait did not finish in time."""


class TalosNodeError(TalosError):
    """A per-node error item (``metadata.error``) inside an otherwise successful reply."""


class TalosApiError(TalosError):
    """Any other gRPC error, with its code and the server's message."""


def label(node, start=False):
    """How a sentence names ``node``: ``node 10.5.0.2``, or ``the endpoint node`` when the endpoint answers itself.

    ``start`` capitalises the first letter only, for the start of a sentence.
    """
    text = "node %s" % node if node else "the endpoint node"
    return text[0].upper() + text[1:] if start else text


def short_label(node):
    """``node`` alone, as a progress line or a list names it: ``10.5.0.2``, or ``the endpoint``."""
    return node or "the endpoint"


def format_seconds(seconds):
    """Seconds as messages write them: ``10``, ``2.5``, ``0.1`` (one decimal at most)."""
    return ("%.1f" % seconds).rstrip("0").rstrip(".")
