# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback: writes every task result to the JSON file named by
TALOS_TEST_RESULTS so integration tests can assert on what modules returned."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
name: record_results
type: aggregate
short_description: Record task results for the collection's integration tests
description: Writes each task result to the JSON file named by the E(TALOS_TEST_RESULTS) environment variable.
requirements:
  - enabled in ansible.cfg or with E(ANSIBLE_CALLBACKS_ENABLED)
"""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._results = []

    def _record(self, result, status):
        self._results.append({
            "task": result._task.get_name(),
            "action": result._task.action,
            "host": result._host.get_name(),
            "status": status,
            "result": self._clean(result._result),
        })

    @staticmethod
    def _clean(value):
        return json.loads(json.dumps(value, default=str))

    def v2_runner_on_ok(self, result):
        self._record(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("TALOS_TEST_RESULTS")
        if path:
            with open(path, "w") as f:
                json.dump(self._results, f, indent=1)
