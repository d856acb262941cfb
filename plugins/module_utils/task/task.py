# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a module's ``run`` sees, whichever door runs it.

A module declares a ``TaskSpec`` (its argument spec and the checks Ansible's
argument spec cannot make) and a ``run(task)`` that returns the result dict or
raises a ``TalosError``: ``TalosConfigError`` for bad input, ``ActionFailed``
for a failure that carries a partial result. Two doors run it:

- the controller door (``plugins/plugin_utils/controller_door.py``): the action
  plugin of the same name runs ``run`` inside the controller's worker process;
- the module door (``module_door.py``): the module file runs as an ordinary
  Ansible module (delegation to a host with a real connection, ``async``, or
  ``talos_door: module``).

Both build a ``Task`` from the validated options and hand it to ``execute``,
so validation, failures and results are the same through either door.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import importlib.util
import traceback

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import CONNECTION_ARGUMENT_SPEC, ConnectionSettings

CONNECTION_MUTUALLY_EXCLUSIVE = [("node", "nodes")]

# Inclusive (lowest, highest) bounds of the shared numeric options; modules add their own with ``ranges``.
CONNECTION_RANGES = dict(timeout=(1, None))

WAIT_ARGUMENT_SPEC = dict(
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=600),
)

WAIT_RANGES = dict(wait_timeout=(1, None))

# How long a module that takes a control plane down waits for the etcd quorum guard to let it go (doc fragment
# talos_linux.talos.quorum_wait).
QUORUM_WAIT_ARGUMENT_SPEC = dict(
    quorum_wait_timeout=dict(type="int", default=0),
)

QUORUM_WAIT_RANGES = dict(quorum_wait_timeout=(0, None))

# (name on PyPI, module to import) for every library the client needs.
CLIENT_LIBRARIES = (
    ("grpclib", "grpclib"),
    ("protobuf", "google.protobuf"),
    ("googleapis-common-protos", "google.rpc.status_pb2"),
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)

# (name on PyPI, module to import) for the modules that only make files from a secrets bundle.
GENERATOR_LIBRARIES = (
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)

_VALIDATOR_KEYS = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


class TaskSpec:
    """A module's options and the rules they follow, for both doors.

    ``connection`` adds the shared connection options (doc fragment
    talos_linux.talos.connection); ``wait`` the ``wait``/``wait_timeout``
    options (talos_linux.talos.wait), or ``"timeout"`` only ``wait_timeout``,
    with ``wait_defaults`` for a module whose defaults differ (a read waits only
    when asked); ``quorum_wait`` adds ``quorum_wait_timeout``; ``shared_options``
    adds other groups of options that several modules share, each an
    ``(argument_spec, ranges)`` pair defined once where its concept lives (the
    Image Factory's: ``image_factory.FACTORY_OPTIONS``). ``several_nodes``
    declares that the module acts on every node of O(nodes) (or the talosconfig
    context's), with the result shape of several_nodes.result: it adds
    ``max_concurrency`` (doc fragment talos_linux.talos.several_nodes). A module option with
    one of their names is refused. ``ranges`` gives the inclusive ``(lowest, highest)`` bounds of every
    int or float option (None for no bound on that side): a numeric option
    without bounds is a programming error. Strings must not be empty unless
    named in ``may_be_empty``. ``host_node`` says that a task on an inventory
    host that names no node acts on that host's node (the doors' default
    ``node``); False for a module whose ``node`` is only the control plane it
    works through. The other keywords are AnsibleModule's.
    """

    def __init__(self, argument_spec, connection=True, wait=False, wait_defaults=None, quorum_wait=False, ranges=None,
                 may_be_empty=(), supports_check_mode=True, libraries=None, host_node=True, shared_options=(), several_nodes=False, **rules):
        unknown = sorted(set(rules) - set(_VALIDATOR_KEYS))
        if unknown:
            raise ValueError("unknown TaskSpec rules: %s" % ", ".join(unknown))
        spec, bounds, exclusive = {}, {}, []
        if connection:
            spec.update(CONNECTION_ARGUMENT_SPEC)
            bounds.update(CONNECTION_RANGES)
            exclusive.extend(CONNECTION_MUTUALLY_EXCLUSIVE)
        if wait:
            options = ("wait_timeout",) if wait == "timeout" else ("wait", "wait_timeout")
            for name in options:
                spec[name] = dict(WAIT_ARGUMENT_SPEC[name], **({"default": wait_defaults[name]}
                                                               if name in (wait_defaults or {}) else {}))
            bounds.update(WAIT_RANGES)
        if quorum_wait:
            spec.update(QUORUM_WAIT_ARGUMENT_SPEC)
            bounds.update(QUORUM_WAIT_RANGES)
        if several_nodes:
            # Imported here: the modules that only make files never load the client several_nodes stands on.
            from ansible_collections.talos_linux.talos.plugins.module_utils.task.several_nodes import CONCURRENCY_OPTIONS
            shared_options = [CONCURRENCY_OPTIONS] + list(shared_options)
        for group_spec, group_ranges in shared_options:
            spec.update(group_spec)
            bounds.update(group_ranges)
        shadowed = sorted(set(spec) & set(argument_spec))
        if shadowed:
            # A module option with a shared option's name would silently replace it.
            raise ValueError("module options %s shadow shared options" % ", ".join(shadowed))
        spec.update(argument_spec)
        bounds.update(ranges or {})
        unbounded = sorted(name for name, option in spec.items()
                           if option.get("type") in ("int", "float") and name not in bounds)
        if unbounded:
            raise ValueError("numeric options %s have no range" % ", ".join(unbounded))
        exclusive.extend(rules.pop("mutually_exclusive", None) or [])
        if exclusive:
            rules["mutually_exclusive"] = exclusive
        self.argument_spec = spec
        self.ranges = bounds
        self.may_be_empty = tuple(may_be_empty)
        self.supports_check_mode = supports_check_mode
        self.connection = connection
        self.host_node = connection and host_node
        self.several_nodes = bool(several_nodes)
        self.libraries = libraries if libraries is not None else (CLIENT_LIBRARIES if connection else GENERATOR_LIBRARIES)
        self.rules = rules

    def module_kwargs(self):
        """The keyword arguments of AnsibleModule for this spec."""
        return dict(argument_spec=self.argument_spec, supports_check_mode=self.supports_check_mode, **self.rules)

    def problem(self, params):
        """The first option outside its bounds or given as an empty string, as a sentence; None when all are fine."""
        return option_problem(self.argument_spec, params, self.ranges, self.may_be_empty)


class Task:
    """One run of a module: its validated options, its mode and its connection to the cluster.

    ``module_name`` is the module's short name (talos_facts), for messages.
    ``no_log_values`` is the door's set of values to mask in the result; the
    module door shares AnsibleModule's own set. ``report`` shows a progress line
    as it happens (the controller door prints it; the module door cannot).
    ``result`` holds the task-wide keys ``run`` knows before or while it calls
    the domain (what was read, which nodes were checked): ``execute`` puts them
    in the task's result whether ``run`` returns or fails.
    """

    def __init__(self, module_name, params, check_mode=False, diff=False, no_log_values=None, argument_spec=None,
                 report=None):
        self.module_name = module_name
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        self.no_log_values = no_log_values if no_log_values is not None else set()
        self.argument_spec = argument_spec or {}
        self.warnings = []
        self.result = {}
        self._report = report
        self._settings = None
        self._client = None

    @property
    def settings(self):
        """ConnectionSettings from the connection options (raises TalosConfigError)."""
        if self._settings is None:
            self._settings = ConnectionSettings.from_params(self.params)
        return self._settings

    @property
    def client(self):
        """The TalosClient, created on first use and closed when the task ends."""
        if self._client is None:
            from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
            self._client = TalosClient(self.settings)
        return self._client

    @property
    def target_nodes(self):
        """The nodes the task addresses; ``[None]`` means the endpoint itself."""
        return list(self.settings.nodes)

    def single_node(self, what):
        """The one node a single-node module addresses; several targeted nodes fail the task.

        ``what`` says what the module does, e.g. "bootstraps exactly one control-plane node".
        """
        nodes = self.target_nodes
        if len(nodes) > 1:
            raise TalosConfigError("%s %s but %d nodes are targeted (%s): set node to one of them, for example "
                                   "node: \"{{ ansible_host }}\" with one inventory host per node."
                                   % (self.module_name, what, len(nodes), ", ".join(nodes)))
        return nodes[0]

    def require(self, libraries, why=None):
        """Fail the task as ``execute`` fails it for a missing library, when one of ``libraries`` is missing.

        For the optional libraries only some options need: ``libraries`` are
        (name on PyPI, module to import) pairs, ``why`` what needs them.
        """
        missing = missing_libraries(libraries)
        if missing:
            raise missing_library_failure(missing, why)

    def warn(self, message):
        self.warnings.append(message)

    def progress(self, message):
        """Show ``message`` now, when the door can (a long wait's state changes)."""
        if self._report is not None:
            self._report(message)

    def hide(self, values):
        """Mask ``values`` (secrets met while running) wherever they would appear in the result."""
        self.no_log_values.update(value for value in values if value)

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

    def close(self):
        if self._client is not None:
            self._client.close()
            self._client = None


def execute(spec, task, run):
    """Check the options, call ``run(task)`` and return its result dict, failures included.

    Every door calls this: the result has ``changed``, and ``failed``/``msg``
    when the task failed (a ``TalosError``, an option out of bounds or a
    missing library); ``task.result`` under what ``run`` returns or what the
    error carries; ``warnings`` holds the task's warnings. The client is
    always closed.
    """
    try:
        problem = spec.problem(task.params)
        if problem:
            raise TalosConfigError(problem)
        missing = missing_libraries(spec.libraries)
        if missing:
            raise missing_library_failure(missing)
        result = dict(task.result, **(run(task) or {}))
    except TalosError as error:
        result = dict(task.result, **error.to_result())
        result.update(failed=True, msg=error.message)
    finally:
        task.close()
    result.setdefault("changed", False)
    if task.warnings:
        result["warnings"] = list(task.warnings)
    return result


def missing_library_failure(missing, why=None):
    """The failure for ``missing`` (from ``missing_libraries``): Ansible's sentence, the first traceback."""
    message = missing_required_lib(", ".join(name for name, _tb in missing), reason=why)
    return ActionFailed(message, dict(exception=missing[0][1]))


def missing_libraries(libraries):
    """``[(pypi_name, traceback_text)]`` for every library of ``libraries`` that cannot be imported.

    A library that is installed is found without being imported (a task
    imports only what its calls need); one that is not is imported to get
    the traceback that names what is missing.
    """
    missing = []
    for pypi_name, module_name in libraries:
        try:
            if importlib.util.find_spec(module_name) is not None:
                continue
        except (ImportError, ValueError):
            pass
        try:
            importlib.import_module(module_name)
        except ImportError:
            missing.append((pypi_name, traceback.format_exc()))
    return missing


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
