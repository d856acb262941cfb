# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one-task plays the module tests run against an emulated cluster."""


def module_play(cluster, module, args, node, task_name, role="admin", timeout=20, **task_keywords):
    """A localhost play running talos_linux.talos.<module> with ``args`` on ``node``,
    connected with the cluster's ``role`` talosconfig through module_defaults."""
    task = {"name": task_name, "talos_linux.talos." + module: args}
    task.update(task_keywords)
    return {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {
            "talosconfig": cluster.talosconfig_path(role), "node": node, "timeout": timeout}},
        "tasks": [task],
    }
