# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The two doors: the controller door by default, the module door for delegation, async and talos_door: module."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

FACTS = "talos_linux.talos.talos_facts"
HERE = os.path.dirname(os.path.abspath(__file__))


def play(tasks, talosconfig, hosts="all", **extra):
    play = {
        "name": "doors",
        "hosts": hosts,
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}},
        "tasks": tasks,
    }
    play.update(extra)
    return [play]


def door_lines(run):
    return [line for line in run.stdout.splitlines() if " door (" in line]


def comparable(result):
    """A task result without what only tells the doors apart."""
    return {key: value for key, value in result.items() if key not in ("invocation", "_ansible_no_log")}


def test_controller_door_needs_no_connection_and_module_door_gives_the_same_result(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    inventory = "%s/inventory.yml" % cluster.state_dir
    tasks = [{"name": "gather", FACTS: {"node": "{{ ansible_host }}", "gather_subset": ["min", "services", "config"]}}]
    # The emulator's inventory sets no connection: Ansible's default (ssh) would fail, the controller door uses none.
    controller = run_playbook(play(tasks, cluster.talosconfig_path()), inventory=inventory, verbosity=1,
                              env={"TALOS_TEST_DOOR": ""})
    module = run_playbook(play(tasks, cluster.talosconfig_path(), vars={"talos_door": "module"}), inventory=inventory,
                          extra_vars={"ansible_connection": "local"}, verbosity=1, env={"TALOS_TEST_DOOR": ""})

    for node in cluster.nodes:
        through_controller = controller.task("gather", node.name)["result"]
        through_module = module.task("gather", node.name)["result"]
        assert through_controller["ansible_facts"]["talos"]["hostname"] == node.hostname
        assert comparable(through_controller) == comparable(through_module)
        assert through_controller["invocation"]["module_args"] == through_module["invocation"]["module_args"]
    assert len([line for line in door_lines(controller) if "talos_facts through the controller door" in line]) == 2
    assert len([line for line in door_lines(module) if "talos_facts through the module door (talos_door is module)" in line]) == 2
    assert cluster.audit() == []


def test_delegation_to_a_remote_host_and_async_open_the_module_door(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    controlplane = cluster.controlplanes[0]
    inventory = tmp_path / "bastion.yml"
    inventory.write_text("all:\n  hosts:\n    bastion:\n      ansible_connection: remote_local\n"
                         "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n"
                         "    local-controller:\n      ansible_connection: local\n")
    tasks = [
        {"name": "through the bastion", FACTS: {"node": controlplane.address, "gather_subset": ["min"]},
         "delegate_to": "bastion"},
        {"name": "delegated to a local host", FACTS: {"node": controlplane.address, "gather_subset": ["min"]},
         "delegate_to": "local-controller"},
        {"name": "async", FACTS: {"node": controlplane.address, "gather_subset": ["min"]}, "async": 60, "poll": 1},
    ]
    run = run_playbook(play(tasks, cluster.talosconfig_path(), hosts="local-controller"), inventory=str(inventory),
                       verbosity=1, env={"TALOS_TEST_DOOR": "", "ANSIBLE_CONNECTION_PLUGINS": os.path.join(HERE, "connection_plugins")})

    for name in ("through the bastion", "delegated to a local host", "async"):
        assert run.task(name)["result"]["ansible_facts"]["talos"]["hostname"] == controlplane.hostname
    lines = door_lines(run)
    assert any("module door (delegated to bastion over remote_local)" in line for line in lines), lines
    assert any("controller door (in-process)" in line for line in lines), lines
    assert any("module door (the task runs async)" in line for line in lines), lines


def test_environment_check_mode_no_log_and_validation_behave_as_in_a_module(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True)
    controlplane = cluster.controlplanes[0]
    secret = "not-a-key-but-secret-text-1234"
    tasks = [
        # TALOSCONFIG from the task's environment is the talosconfig fallback, as in a module process.
        {"name": "talosconfig from the environment", FACTS: {"node": controlplane.address, "gather_subset": ["min"]},
         "environment": {"TALOSCONFIG": cluster.talosconfig_path()}},
        {"name": "unknown option", FACTS: {"node": controlplane.address, "colour": "blue"}, "ignore_errors": True,
         "environment": {"TALOSCONFIG": cluster.talosconfig_path()}},
        {"name": "out of range", FACTS: {"node": controlplane.address, "max_concurrency": 0}, "ignore_errors": True,
         "environment": {"TALOSCONFIG": cluster.talosconfig_path()}},
        # Through an extra variable: ansible-core 2.19 quotes a failed task's own lines, literals included.
        {"name": "no_log option masked", FACTS: {"endpoints": [cluster.endpoint], "ca": "{{ secret }}",
                                                 "crt": "{{ secret }}", "key": "{{ secret }}"}, "ignore_errors": True},
        {"name": "unknown door", FACTS: {"node": controlplane.address}, "vars": {"talos_door": "sideways"},
         "ignore_errors": True},
    ]
    for door in ("controller", "module"):
        run = run_playbook([{"name": "doors", "hosts": "localhost", "gather_facts": False, "tasks": tasks,
                             "vars": {"talos_door": door}}], extra_vars={"ansible_connection": "local", "secret": secret},
                           check=True, verbosity=3, env={"TALOS_TEST_DOOR": ""})
        facts = run.task("talosconfig from the environment")["result"]
        assert facts["ansible_facts"]["talos"]["hostname"] == controlplane.hostname, door
        assert run.task("unknown option")["result"]["msg"].startswith(
            "Unsupported parameters for (talos_linux.talos.talos_facts) module: colour."), door
        assert run.task("out of range")["result"]["msg"] == "max_concurrency must be at least 1, got 0.", door
        masked = run.task("no_log option masked")
        assert masked["status"] == "failed", door
        assert masked["result"]["invocation"]["module_args"]["key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER", door
        assert secret not in run.stdout and secret not in run.stderr, door
        assert "talos_door must be one of controller, module, got 'sideways'." in run.task("unknown door")["result"]["msg"]
    assert cluster.audit() == []
