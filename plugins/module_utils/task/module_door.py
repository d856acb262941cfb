# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module door: a module file run as an ordinary Ansible module.

Ansible runs this door when a task is delegated to a host with a real
connection, uses ``async``, or sets ``talos_door: module``; otherwise the
action plugin of the same name runs ``run`` in the controller (see
``plugins/plugin_utils/controller_door.py``). Both go through ``task.execute``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import Task, execute


def run_module(spec, run):
    """Run ``run`` for the TaskSpec ``spec`` as an Ansible module, and exit with its result."""
    module = AnsibleModule(**spec.module_kwargs())
    task = Task(module._name.rsplit(".", 1)[-1], module.params, check_mode=module.check_mode, diff=module._diff,
                no_log_values=module.no_log_values, argument_spec=module.argument_spec)
    result = execute(spec, task, run)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)
