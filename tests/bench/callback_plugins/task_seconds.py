# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark-only callback: writes how long every task took to the JSON file named by
TALOS_BENCH_TIMES, so that the benchmark compares tasks within one playbook run."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
name: task_seconds
type: aggregate
short_description: Record task durations for the collection's benchmark
description: Writes each task result's name, task id, host, status, changed and duration to the JSON file named by
  E(TALOS_BENCH_TIMES).
requirements:
  - enabled with E(ANSIBLE_CALLBACKS_ENABLED)
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_seconds"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._started = None
        self._times = []

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._started = time.monotonic()

    def _record(self, result, status):
        self._times.append({"task": result._task.get_name(), "id": result._task._uuid, "host": result._host.get_name(),
                            "status": status, "changed": bool(result._result.get("changed")),
                            "seconds": time.monotonic() - self._started,
                            "msg": result._result.get("msg") if status == "failed" else None})

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["TALOS_BENCH_TIMES"], "w") as output:
            json.dump(self._times, output)
