# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wiring nothing else checks: each module's controller door and its place in the action group.

A module without its action plugin silently runs through AnsiballZ (and loses the inventory's
``talosconfig``); one missing from ``meta/runtime.yml`` ignores ``module_defaults: group/...``.
A unit test that copies a module's defaults by hand keeps passing after the module's options change.
"""

import ast
import importlib
import os
import re

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.plugin_utils.controller_door import TalosAction

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "ansible_collections.talos_linux.talos.plugins"
GROUP_FRAGMENT = "talos_linux.talos.attributes.actiongroup_talos"
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))


def documentation(module, name="DOCUMENTATION"):
    """The module's DOCUMENTATION (or RETURN), read without importing it."""
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py")) as source:
        tree = ast.parse(source.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return yaml.safe_load(node.value.value) or {}
    raise AssertionError("%s has no %s" % (module, name))


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


def test_unit_tests_build_module_params_through_the_modules_spec():
    """Unit tests run a module's run() through module_fakes.run_task, which validates the options against its real SPEC."""
    unit = os.path.join(ROOT, "tests", "unit")
    by_hand = []
    for folder, _dirs, files in os.walk(unit):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py"):
                continue
            with open(path) as source:
                tree = ast.parse(source.read())
            where = os.path.relpath(path, ROOT)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "module_fakes":
                    by_hand.extend("%s:%d imports %s" % (where, node.lineno, alias.name) for alias in node.names
                                   if alias.name in ("run_module", "FakeTask"))
                elif (isinstance(node, ast.Assign) and folder == os.path.join(unit, "plugins", "modules")
                      and any(getattr(target, "id", None) == "DEFAULTS" for target in node.targets)):
                    by_hand.append("%s:%d copies DEFAULTS" % (where, node.lineno))
    assert by_hand == [], "use module_fakes.run_task(module, client, **options): " + "; ".join(by_hand)


def _is_once(decorators):
    return any(isinstance(decorator, ast.Attribute) and decorator.attr == "once" for decorator in decorators)


def _strings(node):
    return [item.value for item in ast.walk(node) if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def test_every_module_runs_through_both_doors_on_every_stack():
    """The stacks' runs skip the playbook tests marked ``once`` (tests/run-all): every module must still run in a test
    they take, named in it (``talos_linux.talos.<module>``, or ``talos_<module>`` for module_plays) or through a role
    it runs."""
    integration = os.path.join(ROOT, "tests", "integration")
    texts = []
    for name in sorted(os.listdir(integration)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        with open(os.path.join(integration, name)) as source:
            tree = ast.parse(source.read())
        if any(isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "pytestmark" for target in node.targets)
               and "once" in ast.dump(node.value) for node in tree.body):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and _is_once(node.decorator_list):
                continue
            texts.extend(_strings(node))
    text = "\n".join(texts)
    roles = os.path.join(ROOT, "roles")
    for role in sorted(os.listdir(roles)):
        if "talos_linux.talos.%s" % role in text or "role: %s" % role in text:
            for folder, _dirs, files in os.walk(os.path.join(roles, role, "tasks")):
                for name in files:
                    with open(os.path.join(folder, name)) as tasks:
                        text += "\n" + tasks.read()
    missing = [module for module in MODULES if not re.search(r"\b(talos_linux\.talos\.)?%s\b" % module, text)]
    assert missing == [], "no playbook test the stacks run takes %s" % ", ".join(missing)


def test_every_role_has_its_readme_and_argument_specs():
    # Galaxy refuses a collection whose role has no README (tests/run-galaxy-importer runs its importer).
    roles_dir = os.path.join(ROOT, "roles")
    missing = [role for role in sorted(os.listdir(roles_dir))
               if not all(os.path.isfile(os.path.join(roles_dir, role, *path))
                          for path in (("README.md",), ("meta", "argument_specs.yml")))]
    assert missing == []


ROLES = sorted(os.listdir(os.path.join(ROOT, "roles")))


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_required_variable_has_no_default(role):
    # A default would let a misspelt variable pass the argument spec's check, to fail later under another name.
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as specs:
        options = yaml.safe_load(specs)["argument_specs"]["main"]["options"]
    defaults_path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    defaults = {}
    if os.path.isfile(defaults_path):
        with open(defaults_path) as defaults_file:
            defaults = yaml.safe_load(defaults_file) or {}
    required = sorted(name for name, option in options.items() if option.get("required"))
    assert [name for name in required if name in defaults or "default" in options[name]] == []


@pytest.mark.parametrize("role", ROLES)
def test_a_role_takes_its_inventory_groups_from_its_variables(role):
    # As every role's *_controlplane_group does: an inventory may name its groups otherwise.
    found = []
    for directory, unused_dirs, names in os.walk(os.path.join(ROOT, "roles", role)):
        for name in names:
            if name.endswith((".yml", ".yaml", ".j2")):
                with open(os.path.join(directory, name)) as source:
                    found += re.findall(r"groups\s*\[\s*['\"][^'\"]+['\"]\s*\]|groups\.[A-Za-z_]\w*", source.read())
    assert found == []


NODES_RETURNED = "with O(nodes) or the talosconfig context's nodes"


@pytest.mark.parametrize("module", MODULES)
def test_a_module_declared_to_act_on_several_nodes_takes_the_shared_option_and_returns_nodes(module):
    from ansible_collections.talos_linux.talos.plugins.module_utils.task.several_nodes import CONCURRENCY_OPTIONS
    spec = importlib.import_module("%s.modules.%s" % (PACKAGE, module)).SPEC
    returned = documentation(module, "RETURN")
    if not spec.several_nodes:
        # `nodes` has one meaning everywhere: a map keyed by node, never a list of names or an option's echo.
        assert returned.get("nodes", {}).get("type", "dict") == "dict"
        assert returned.get("nodes", {}).get("returned") != NODES_RETURNED, "the shape of several_nodes, undeclared"
        return
    shared_spec, shared_ranges = CONCURRENCY_OPTIONS
    assert spec.argument_spec["max_concurrency"] == shared_spec["max_concurrency"]
    assert spec.ranges["max_concurrency"] == shared_ranges["max_concurrency"]
    documented = documentation(module)
    assert "talos_linux.talos.several_nodes" in documented.get("extends_documentation_fragment", [])
    assert "max_concurrency" not in documented["options"]  # the fragment's text and default, not a copy
    assert returned["nodes"]["type"] == "dict" and returned["nodes"]["returned"] == NODES_RETURNED
    # The shape is described once, where several_nodes is: each module's RETURN points there.
    assert 'docs/architecture.md, "Several nodes in one task"' in " ".join(returned["nodes"]["description"])
