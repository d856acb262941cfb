# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for TalosModule, for unit tests of a module's run() with a fake client."""

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule


class Exited(Exception):
    """exit_json was called; args[0] is the result."""


class Failed(Exception):
    """fail_json was called; args[0] is the result."""


class FakeModule:
    """What run() uses of TalosModule: client, params (``defaults`` updated with ``params``),
    target_nodes, single_node, check_mode, diff, warn, no_log_values, mask_only, exit_json, fail_json, fail_from_error."""

    def __init__(self, client, defaults, nodes=None, check_mode=False, diff=False, **params):
        self.client = client
        self.target_nodes = list(nodes) if nodes is not None else list(getattr(client, "nodes", [None]))
        self.check_mode = check_mode
        self._diff = diff
        self.no_log_values = set()
        self.argument_spec = {}
        self.warnings = []
        self.params = dict(defaults)
        self.params.update(params)

    def single_node(self, task):
        if len(self.target_nodes) > 1:
            self.fail_json(msg="module %s but %d nodes are targeted" % (task, len(self.target_nodes)))
        return self.target_nodes[0]

    mask_only = TalosModule.mask_only

    def warn(self, message):
        self.warnings.append(message)

    def exit_json(self, **result):
        raise Exited(result)

    def fail_json(self, **result):
        raise Failed(result)

    def fail_from_error(self, error, **result):
        result.update(error.to_result())
        self.fail_json(msg=error.message, **result)


def run_module(run, client, defaults, **options):
    """Run a module's ``run`` with a FakeModule: ``(succeeded, result, module)``."""
    module = FakeModule(client, defaults, **options)
    with pytest.raises((Exited, Failed)) as raised:
        run(module)
    return raised.type is Exited, raised.value.args[0], module
