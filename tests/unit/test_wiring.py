# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wiring nothing else checks: each module's controller door and its place in the action group.

A module without its action plugin silently runs through AnsiballZ (and loses the inventory's
``talosconfig``); one missing from ``meta/runtime.yml`` ignores ``module_defaults: group/...``.
"""

import ast
import importlib
import os

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.plugin_utils.controller_door import TalosAction

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "ansible_collections.talos_linux.talos.plugins"
GROUP_FRAGMENT = "talos_linux.talos.attributes.actiongroup_talos"
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))


def documentation(module):
    """The module's DOCUMENTATION, read without importing it."""
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py")) as source:
        tree = ast.parse(source.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "DOCUMENTATION" for target in node.targets):
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % module)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_has_its_controller_door(module):
    action = importlib.import_module("%s.action.%s" % (PACKAGE, module)).ActionModule
    assert issubclass(action, TalosAction)
    assert action.MODULE is importlib.import_module("%s.modules.%s" % (PACKAGE, module))


def test_no_action_plugin_without_its_module():
    actions = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "action")) if name.endswith(".py"))
    assert actions == MODULES


def test_the_action_group_lists_exactly_the_modules_that_document_it():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as runtime:
        group = yaml.safe_load(runtime)["action_groups"]["talos"]
    documented = [module for module in MODULES if GROUP_FRAGMENT in documentation(module).get("extends_documentation_fragment", [])]
    assert sorted(group) == group, "meta/runtime.yml: keep the talos action group sorted"
    assert group == documented


@pytest.mark.parametrize("module", MODULES)
def test_modules_that_reach_a_node_belong_to_the_group(module):
    fragments = documentation(module).get("extends_documentation_fragment", [])
    if "talos_linux.talos.connection" in fragments:
        assert GROUP_FRAGMENT in fragments
