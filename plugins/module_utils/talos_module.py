# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""TalosModule: the AnsibleModule every talos_linux.talos module is built on.

It merges the shared connection options into the module's argument spec,
reports missing Python libraries with missing_required_lib, builds the
TalosClient on first use and turns every TalosError into one fail_json.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.controller_module import missing_libraries
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import ConnectionSettings

CONNECTION_ARGUMENT_SPEC = dict(
    talosconfig=dict(type="path", fallback=(env_fallback, ["TALOSCONFIG"])),
    context=dict(type="str"),
    endpoints=dict(type="list", elements="str"),
    node=dict(type="str"),
    nodes=dict(type="list", elements="str"),
    ca=dict(type="str", no_log=True),
    crt=dict(type="str", no_log=True),
    key=dict(type="str", no_log=True),
    insecure=dict(type="bool", default=False),
    timeout=dict(type="int", default=60),
)

CONNECTION_MUTUALLY_EXCLUSIVE = [("node", "nodes")]

# Inclusive (lowest, highest) bounds of the shared numeric options; modules add their own with ``ranges``.
# Every int or float option must have bounds: TalosModule refuses to build a module that leaves one out.
CONNECTION_RANGES = dict(timeout=(1, None))
WAIT_RANGES = dict(wait_timeout=(1, None))

WAIT_ARGUMENT_SPEC = dict(
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=600),
)

# (name on PyPI, module to import) for every library the client needs.
REQUIRED_LIBRARIES = (
    ("grpclib", "grpclib"),
    ("protobuf", "google.protobuf"),
    ("googleapis-common-protos", "google.rpc.status_pb2"),
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)


def _bounds_text(low, high):
    if high is None:
        return "at least %s" % low
    if low is None:
        return "at most %s" % high
    return "between %s and %s" % (low, high)


def option_problem(spec, params, bounds, may_be_empty=(), prefix=""):
    """The first option of ``params`` outside its bounds or given as an empty string, as a sentence; None when all are fine.

    Runs after Ansible's own type checks and before anything is sent, so that a
    negative timeout or an unset variable never reaches a node. Sub-options
    (lists of dicts) are checked under ``option[index].name``.
    """
    for name, option in spec.items():
        value = params.get(name)
        label = prefix + name
        if value is None or name in may_be_empty:
            continue
        kind = option.get("type", "str")
        if kind in ("int", "float"):
            low, high = bounds[name]
            if (low is not None and value < low) or (high is not None and value > high):
                return "%s must be %s, got %s." % (label, _bounds_text(low, high), value)
        elif kind in ("str", "path") and not value.strip():
            return "%s is empty: set it to a value or leave it out (an unset variable?)." % label
        elif kind == "list" and option.get("elements") in ("str", "path"):
            for index, item in enumerate(value):
                if item is None or not str(item).strip():
                    return "%s[%d] is empty: every item must be a non-empty string." % (label, index)
        elif kind == "list" and option.get("elements") == "dict" and option.get("options"):
            for index, item in enumerate(value):
                problem = option_problem(option["options"], item or {}, bounds, may_be_empty, "%s[%d]." % (label, index))
                if problem:
                    return problem
    return None


def _scalars(value):
    """The strings Ansible masks for a no_log value: every non-empty scalar in it, as text."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _scalars(item)
    elif isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


class TalosModule(AnsibleModule):
    """An AnsibleModule with the connection options, a lazy ``client`` and ``run()``.

    ``wait=True`` adds the ``wait``/``wait_timeout`` options (doc fragment
    talos_linux.talos.wait).
    """

    def __init__(self, argument_spec, wait=False, mutually_exclusive=None, ranges=None, may_be_empty=(), **kwargs):
        spec = dict(CONNECTION_ARGUMENT_SPEC)
        bounds = dict(CONNECTION_RANGES)
        if wait:
            spec.update(WAIT_ARGUMENT_SPEC)
            bounds.update(WAIT_RANGES)
        bounds.update(ranges or {})
        shadowed = sorted(set(spec) & set(argument_spec))
        if shadowed:
            # A module option with a shared option's name would silently replace it.
            raise ValueError("module options %s shadow the shared connection or wait options" % ", ".join(shadowed))
        spec.update(argument_spec)
        unbounded = sorted(name for name, option in spec.items() if option.get("type") in ("int", "float") and name not in bounds)
        if unbounded:
            raise ValueError("numeric options %s have no range" % ", ".join(unbounded))
        exclusive = list(CONNECTION_MUTUALLY_EXCLUSIVE) + list(mutually_exclusive or [])
        super(TalosModule, self).__init__(argument_spec=spec, mutually_exclusive=exclusive, **kwargs)
        problem = option_problem(spec, self.params, bounds, may_be_empty)
        if problem:
            self.fail_json(msg=problem)
        missing = missing_libraries(REQUIRED_LIBRARIES)
        if missing:
            names = ", ".join(name for name, _tb in missing)
            self.fail_json(msg=missing_required_lib(names), exception=missing[0][1])
        self._settings = None
        self._client = None

    @property
    def settings(self):
        """ConnectionSettings from the module's connection options (raises TalosConfigError)."""
        if self._settings is None:
            self._settings = ConnectionSettings.from_params(self.params)
        return self._settings

    @property
    def client(self):
        """The TalosClient, created on first use; closed by ``run()``."""
        if self._client is None:
            self._client = TalosClient(self.settings)
        return self._client

    @property
    def target_nodes(self):
        """The nodes the task addresses; ``[None]`` means the endpoint itself."""
        return list(self.settings.nodes)

    def single_node(self, task):
        """The one node a single-node module addresses; several targeted nodes fail the task.

        ``task`` says what the module does, e.g. "bootstraps exactly one control-plane node".
        """
        nodes = self.target_nodes
        if len(nodes) > 1:
            self.fail_json(msg="%s %s but %d nodes are targeted (%s): set node to one of them, for example "
                               "node: \"{{ ansible_host }}\" with one inventory host per node."
                               % (self._name.rsplit(".", 1)[-1], task, len(nodes), ", ".join(nodes)))
        return nodes[0]

    def mask_only(self, option, secrets):
        """Narrow the no_log masking of ``option`` to ``secrets``.

        Ansible masks every scalar of a no_log option wherever it appears, so a
        word of a structured option (an operation, a path) garbles unrelated
        messages. Until this is called (argument validation) the option stays
        masked whole.
        """
        others = set()
        for name, spec in self.argument_spec.items():
            if name != option and spec.get("no_log") and self.params.get(name):
                others.update(_scalars(self.params[name]))
        self.no_log_values.difference_update(set(_scalars(self.params.get(option))) - others)
        self.no_log_values.update(secrets)

    def close_client(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    def fail_from_error(self, error, **result):
        """fail_json for a TalosError, with its code, node and server message as result keys."""
        result.update(error.to_result())
        self.fail_json(msg=error.message, **result)

    def run(self, fn):
        """Call ``fn(self)``; a TalosError becomes fail_json; the client is always closed."""
        try:
            fn(self)
        except TalosError as error:
            self.fail_from_error(error)
        finally:
            self.close_client()
