# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Task with a fake client, for unit tests of a module's run()."""

from ansible_collections.talos_linux.talos.plugins.module_utils.task import Task, TaskFailed


class FakeTask(Task):
    """A Task whose client is ``client`` and whose target nodes are ``nodes`` (default: the client's)."""

    def __init__(self, client, defaults, nodes=None, check_mode=False, diff=False, **params):
        merged = dict(defaults)
        merged.update(params)
        super(FakeTask, self).__init__("module", merged, check_mode=check_mode, diff=diff)
        self._client = client
        self._nodes = list(nodes) if nodes is not None else list(getattr(client, "nodes", [None]))

    @property
    def target_nodes(self):
        return list(self._nodes)

    def close(self):
        """The fake client stays open: tests read its calls afterwards."""


def run_module(run, client, defaults, **options):
    """Run a module's ``run`` with a FakeTask: ``(succeeded, result, task)``.

    A TaskFailed's result carries ``msg`` (and ``failed``), as the doors report it;
    a TalosError propagates; ``warnings`` holds the task's warnings.
    """
    task = FakeTask(client, defaults, **options)
    try:
        result = dict(run(task) or {})
        succeeded = True
    except TaskFailed as failure:
        result = dict(failure.result, failed=True, msg=failure.msg)
        succeeded = False
    if task.warnings:
        result["warnings"] = list(task.warnings)
    return succeeded, result, task
