# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ControllerModule: the AnsibleModule every talos_linux.talos module is built on.

It checks what Ansible's argument spec cannot (numeric ranges, empty strings)
before anything is done, reports missing Python libraries with
missing_required_lib and turns every TalosError into one fail_json.

talos_machine_secrets, talos_machine_config and talos_client_config use it as
it is: they make files from a secrets bundle and talk to no node, so they take
none of the connection options (and are not in the ``talos`` action group,
whose ``module_defaults`` would hand them options they do not accept).
TalosModule (talos_module.py) adds the connection options and the client.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import importlib.util
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError

# (name on PyPI, module to import) for the generators.
GENERATOR_LIBRARIES = (
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)


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


class ControllerModule(AnsibleModule):
    """An AnsibleModule that validates its options, reports missing libraries and turns TalosError into fail_json.

    ``ranges`` gives the inclusive ``(lowest, highest)`` bounds of every int or
    float option (None for no bound on that side); a numeric option without
    bounds is a programming error. Strings must not be empty unless named in
    ``may_be_empty``.
    """

    def __init__(self, argument_spec, ranges=None, may_be_empty=(), libraries=GENERATOR_LIBRARIES, **kwargs):
        bounds = dict(ranges or {})
        unbounded = sorted(name for name, option in argument_spec.items()
                           if option.get("type") in ("int", "float") and name not in bounds)
        if unbounded:
            raise ValueError("numeric options %s have no range" % ", ".join(unbounded))
        super(ControllerModule, self).__init__(argument_spec=argument_spec, **kwargs)
        problem = option_problem(argument_spec, self.params, bounds, may_be_empty)
        if problem:
            self.fail_json(msg=problem)
        missing = missing_libraries(libraries)
        if missing:
            self.fail_json(msg=missing_required_lib(", ".join(name for name, _tb in missing)), exception=missing[0][1])

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

    def fail_from_error(self, error, **result):
        """fail_json for a TalosError, with its code, node and server message as result keys."""
        result.update(error.to_result())
        self.fail_json(msg=error.message, **result)

    def run(self, fn):
        """Call ``fn(self)``; a TalosError becomes fail_json with its one-sentence message."""
        try:
            fn(self)
        except TalosError as error:
            self.fail_from_error(error)
