# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit log: every mutating call a node processed, for tests to inspect.

Tests read it to prove that check mode and idempotent re-runs changed nothing.
Entries are kept in memory and appended as JSON lines to ``audit.jsonl`` in
the cluster's state directory.
"""

import json
import threading
import time

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc

# Calls that change a node or the cluster: the catalogue's mutations. Dry runs are recorded too, marked.
MUTATING_METHODS = frozenset(method for method in rpc.RPCS if not rpc.is_read(method))


def short_method(method):
    """``/machine.MachineService/Reboot`` or ``machine.MachineService/Reboot`` -> ``Reboot``."""
    return method.rsplit("/", 1)[-1]


def method_matches(method, wanted):
    """True when ``wanted`` names ``method``: full path with or without the slash, the RPC name, or ``*``."""
    return wanted == "*" or wanted.lstrip("/") == method.lstrip("/") or ("/" not in wanted and wanted == short_method(method))


class AuditLog:
    def __init__(self, path=None):
        self.path = path
        self._entries = []
        self._lock = threading.Lock()

    def record(self, method, node, roles, code="OK", **details):
        entry = {
            "time": time.time(),
            "method": method.lstrip("/"),
            "node": node.name,
            "address": node.address,
            "roles": list(roles),
            "code": code,
            "dry_run": bool(details.pop("dry_run", False)),
        }
        entry.update(details)
        with self._lock:
            self._entries.append(entry)
            if self.path:
                with open(self.path, "a") as log:
                    log.write(json.dumps(entry, sort_keys=True) + "\n")
        return entry

    def entries(self, method=None, node=None, include_dry_run=True, include_failed=True):
        with self._lock:
            entries = list(self._entries)
        return [
            entry for entry in entries
            if (method is None or method_matches(entry["method"], method))
            and (node is None or node in (entry["node"], entry["address"]))
            and (include_dry_run or not entry["dry_run"])
            and (include_failed or entry["code"] == "OK")
        ]

    def clear(self):
        with self._lock:
            self._entries = []
