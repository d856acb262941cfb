# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller door: a module's ``run`` inside the controller's worker process.

Every module of the collection has an action plugin of the same name built on
``TalosAction``. By default it validates the task's arguments against the
module's ``TaskSpec`` and calls the module's ``run`` here, in the worker that
Ansible forked for the task: no AnsiballZ payload, no interpreter start and
no connection plugin. The libraries a task needs are imported when the action
plugin is loaded, before the strategy forks its workers, so a task pays none
of their import cost.

It opens the module door instead (the module file runs as an ordinary module
through the connection) when the task runs ``async``, when it is delegated to a
host whose connection is not local (a bastion that can reach the Talos API), or
when the variable ``talos_door`` is ``module``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import gc
import os
import ssl
import tempfile
import threading
from collections.abc import Mapping

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import METHODS
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import Task, execute

display = Display()

# The strategy imports an action plugin before it forks the task's worker: what every task would otherwise set up
# in its worker is set up once here - the generated code of every service (the module door imports what its calls
# need), OpenSSL's defaults and the temporary directory that the client certificate passes through.
METHODS.load_all()
ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
tempfile.gettempdir()

DOORS = ("controller", "module")

_UNREAD = object()


def _plain(value):
    """``value`` as the JSON-like data a module receives: plain dicts, lists, strings and numbers."""
    if isinstance(value, Mapping):
        return dict((str(key), _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return str(value)


def _targets_only(args, node):
    """Whether the task ``args`` target exactly ``node`` (a host's own node; None never matches)."""
    return node is not None and (args.get("node") == node or args.get("nodes") == [node])


def _injects_invocation(task_vars):
    """Whether a module's result carries ``invocation``: a setting from ansible-core 2.21 on, always before."""
    try:
        return C.config.get_config_value("INJECT_INVOCATION", variables=task_vars)
    except AnsibleError:
        return True


class TalosAction(ActionBase):
    """Runs the module ``MODULE`` (the imported module file) through the controller door or the module door."""

    MODULE = None
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = True

    @property
    def module_name(self):
        return self.MODULE.__name__.rsplit(".", 1)[-1]

    def __init__(self, *args, **kwargs):
        super(TalosAction, self).__init__(*args, **kwargs)
        self._own_node = _UNREAD  # the host's node, read once (_host_node)
        self._own_node_lock = threading.Lock()

    def run(self, tmp=None, task_vars=None):
        # The task's worker is a fork of Ansible's main process that ends with the task: a full garbage collection
        # in it would walk every object it inherited (about 50 ms), none of them this task's to free.
        gc.freeze()
        task_vars = task_vars or {}
        result = super(TalosAction, self).run(tmp, task_vars)
        self._use_talosconfig_variable(task_vars)
        self._use_host_node(task_vars)
        door, reason = self._choose_door(task_vars)
        display.v("%s through the %s door (%s)" % (self.module_name, door, reason),
                  host=task_vars.get("inventory_hostname"))
        if door == "module":
            wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
            result.update(self._execute_module(module_name="talos_linux.talos.%s" % self.module_name,
                                               task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        result.update(self._run_here(task_vars))
        return result

    def _use_talosconfig_variable(self, task_vars):
        """An unset talosconfig option takes the inventory variable ``talosconfig`` (docs/getting-started.md),
        ad hoc too, through either door; the environment's TALOSCONFIG comes after it."""
        if ("talosconfig" in self.MODULE.SPEC.argument_spec and self._task.args.get("talosconfig") is None
                and "talosconfig" in task_vars):
            self._task.args = dict(self._task.args, talosconfig=self._templar.template(task_vars["talosconfig"]))

    def _use_host_node(self, task_vars):
        """A task on an inventory host that names no node (nor nodes) acts on that host's node: its variable
        ``talos_node`` (set by the inventory plugin), else its own ``ansible_host`` (docs/getting-started.md).
        A host with neither, such as localhost, keeps the talosconfig's nodes or the endpoint."""
        if (not self.MODULE.SPEC.host_node or self._task.args.get("node") is not None
                or self._task.args.get("nodes") is not None):
            return
        node = self._host_node(task_vars)
        if node is not None:
            self._task.args = dict(self._task.args, node=node)

    def _host_node(self, task_vars):
        """The node the task's inventory host stands for, or None (localhost, a host without those variables).

        Read once per task, and only when needed: reading a host's variables builds all of them, its facts (which
        may be those of a hundred nodes) included. ``task_vars`` will not do: the connection fills their
        ``ansible_host`` in, and delegation replaces them with the delegated host's.
        """
        with self._own_node_lock:  # progress lines may ask from several nodes' threads
            if self._own_node is _UNREAD:
                host_vars = (task_vars.get("hostvars") or {}).get(task_vars.get("inventory_hostname")) or {}
                names = [name for name in ("talos_node", "ansible_host") if host_vars.get(name) is not None]
                self._own_node = str(self._templar.template(host_vars[names[0]])) if names else None
            return self._own_node

    def _choose_door(self, task_vars):
        """``(door, reason)``: which door runs the task, and why (shown at -v)."""
        asked = self._templar.template(task_vars.get("talos_door", "controller"))
        if asked not in DOORS:
            raise AnsibleError("talos_door must be one of %s, got %r." % (", ".join(DOORS), asked))
        if asked == "module":
            return "module", "talos_door is module"
        if self._task.async_val:
            return "module", "the task runs async"
        if self._task.delegate_to and self._connection.transport != "local":
            return "module", "delegated to %s over %s" % (self._task.delegate_to, self._connection.transport)
        return "controller", "in-process"

    def _environment(self):
        """The task's ``environment:`` keyword, merged from the play down to the task, as strings."""
        merged = {}
        environments = self._task.environment or []
        if not isinstance(environments, list):
            environments = [environments]
        for environment in environments:
            if not environment:
                continue
            values = self._templar.template(environment)
            if not isinstance(values, Mapping):
                raise AnsibleError("environment must be a dictionary, received %s (%s)" % (values, type(values)))
            merged.update((str(name), str(value)) for name, value in values.items())
        return merged

    def _run_here(self, task_vars):
        """The module's result, run in this process with the task's environment in ``os.environ``."""
        spec = self.MODULE.SPEC
        if self._task.check_mode and not spec.supports_check_mode:
            return dict(skipped=True, msg="%s does not support check mode" % self.module_name)
        host = task_vars.get("inventory_hostname")

        def report(message):
            # Progress lines name the node they are about; the host's name goes before them only when the task acts
            # on the host's own node, not when the play's first host works on another host's node (run_once in a
            # role).
            own = _targets_only(self._task.args, self._host_node(task_vars))
            display.display(("%s: " % host if own else "") + message)

        environment = self._environment()
        saved = dict((name, os.environ.get(name)) for name in environment)
        os.environ.update(environment)
        try:
            validation = ArgumentSpecValidator(spec.argument_spec, **spec.rules).validate(_plain(self._task.args))
            no_log_values = set(validation._no_log_values)
            params = validation.validated_parameters
            if validation.error_messages:
                message = validation.errors.msg
                if isinstance(validation.errors[0], UnsupportedError):
                    message = "Unsupported parameters for (%s) module: %s" % (self._task.action, message)
                result = dict(failed=True, msg=message)
            else:
                task = Task(self.module_name, params, check_mode=bool(self._task.check_mode),
                            diff=bool(self._task.diff), no_log_values=no_log_values,
                            argument_spec=spec.argument_spec,
                            report=report)
                result = execute(spec, task, self.MODULE.run)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        warnings = list(result.pop("warnings", []))
        warnings.extend("Both option %s and its alias %s are set." % (item["option"], item["alias"])
                        for item in validation._warnings)
        if warnings:
            result["warnings"] = warnings
        if validation._deprecations:
            result["deprecations"] = [dict(msg=item["msg"], version=item.get("version"),
                                           collection_name="talos_linux.talos")
                                      for item in validation._deprecations]
        if _injects_invocation(task_vars):
            result["invocation"] = dict(module_args=params)
        # remove_values copies the whole result (facts of many nodes) even when there is nothing to mask.
        return remove_values(result, no_log_values) if no_log_values else result
