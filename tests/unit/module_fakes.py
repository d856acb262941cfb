# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Task with a fake client, for unit tests of a module's run()."""

import copy

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import Task


def spec_params(spec, **options):
    """The params a module's ``run`` sees for ``options``, validated by the module's own TaskSpec ``spec``.

    Ansible's argument spec validation fills the defaults and converts the
    types, and the TaskSpec's own bounds are checked, as both doors do: an
    option the module does not have, or a value it refuses, fails the test
    instead of reaching ``run``.
    """
    validated = ArgumentSpecValidator(spec.argument_spec, **spec.rules).validate(options)
    assert not validated.error_messages, validated.error_messages
    params = validated.validated_parameters
    problem = spec.problem(params)
    assert problem is None, problem
    return params


class FakeTask(Task):
    """A Task whose client is ``client`` and whose target nodes are ``nodes`` (default: the client's).

    The client's settings (those of a FakeTalos) become the task's, naming ``nodes`` as the nodes option when
    ``nodes_listed`` (default: as the client's settings say for its own nodes, else when there are several).
    """

    def __init__(self, client, defaults, nodes=None, check_mode=False, diff=False, nodes_listed=None, **params):
        merged = dict(defaults)
        merged.update(params)
        super(FakeTask, self).__init__("module", merged, check_mode=check_mode, diff=diff)
        self._client = client
        self._nodes = list(nodes) if nodes is not None else list(getattr(client, "nodes", [None]))
        settings = getattr(client, "settings", None)
        if settings is not None:
            if nodes_listed is None:
                nodes_listed = settings.nodes_listed if nodes is None else len(self._nodes) > 1
            settings = copy.copy(settings)
            settings.nodes, settings.nodes_listed = list(self._nodes) or [None], nodes_listed
            client.settings = self._settings = settings

    @property
    def target_nodes(self):
        return list(self._nodes)

    def close(self):
        """The fake client stays open: tests read its calls afterwards."""


def run_module(run, client, defaults, **options):
    """Run a module's ``run`` with a FakeTask: ``(succeeded, result, task)``.

    ``defaults`` are the params before ``options``. A TalosError propagates;
    an ActionFailed's result holds ``task.result`` under its own keys, as the
    doors report it; ``warnings`` holds the task's warnings.
    """
    task = FakeTask(client, defaults, **options)
    try:
        result = dict(task.result, **(run(task) or {}))
    except ActionFailed as failure:
        failure.result = dict(task.result, **failure.result)
        raise
    if task.warnings:
        result["warnings"] = list(task.warnings)
    return True, result, task


def run_task(module, client, targets=None, check_mode=False, diff=False, nodes_listed=None, **options):
    """Run ``module``'s ``run`` with ``options`` validated by its real ``SPEC`` (spec_params): ``(succeeded, result, task)``.

    ``targets`` are the task's target nodes (default: the client's), given as
    the nodes option when ``nodes_listed`` (default: when there are several);
    an option given as None is left out, as a task that does not set it.
    """
    params = spec_params(module.SPEC, **dict((name, value) for name, value in options.items() if value is not None))
    return run_module(module.run, client, params, nodes=targets, check_mode=check_mode, diff=diff, nodes_listed=nodes_listed)
