# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The call being served, as handlers see it (set by machined for each call)."""

import contextvars

_CURRENT_CALL = contextvars.ContextVar("talos_emulator_call")


class CallContext:
    def __init__(self, node, method, roles, metadata):
        self.node = node
        self.method = method
        self.roles = frozenset(roles)
        self.metadata = metadata
        # Extra fields for the audit entry of a mutating call (mode, dry_run, ...).
        self.audit = {}

    def has_role(self, *roles):
        return bool(self.roles & frozenset(roles))


def current_call():
    return _CURRENT_CALL.get()


def enter_call(context):
    return _CURRENT_CALL.set(context)


def leave_call(token):
    _CURRENT_CALL.reset(token)
