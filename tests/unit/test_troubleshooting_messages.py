# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/troubleshooting.md has an entry for every message the etcd snapshot, backup and restore, CA rotation, support
bundle, fetch and adoption code can raise.

The messages are read from the code: the first argument of every exception the collection defines (the TalosError
family) raised or built in the modules and in their domain modules, and the fail messages of the backup,
restore and adopt roles. A message's variable parts (``%s``, Jinja) split it into fixed parts; its longest fixed part must be in
the page (where ``…`` stands for the variable parts), so that rewording a message or adding one fails here until its
entry follows.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ast
import glob
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "troubleshooting.md")
SOURCES = [os.path.join(ROOT, "plugins", path) for path in (
    "modules/talos_etcd_snapshot.py", "modules/talos_etcd_restore.py", "modules/talos_rotate_ca.py",
    "modules/talos_support_bundle.py", "modules/talos_fetch.py", "modules/talos_config_backup.py", "modules/talos_adopt.py",
    "module_utils/etcd/snapshot.py", "module_utils/etcd/recovery.py", "module_utils/certificates/rotation.py",
    "module_utils/certificates/rotate_ca.py", "module_utils/certificates/trust.py", "module_utils/cluster/support_bundle.py", "module_utils/nodes/files.py",
    "module_utils/common/files.py", "module_utils/config/running.py", "module_utils/config/adoption.py")]
ROLE_TASKS = sorted(glob.glob(os.path.join(ROOT, "roles", "etcd_backup", "tasks", "*.yml"))
                    + glob.glob(os.path.join(ROOT, "roles", "etcd_restore", "tasks", "*.yml"))
                    + glob.glob(os.path.join(ROOT, "roles", "adopt", "tasks", "*.yml")))
VARIABLE = "\x00"
# A fixed part shorter than this says nothing of its own: the message is made of other messages (a wrapper).
DISTINCTIVE = 12
_FORMAT = re.compile(r"%(\([^)]*\))?[-#0 +]*\d*(\.\d+)?[sdrfxi]")


def _exception_classes():
    """The collection's exception classes: every class in plugins/ deriving, by name, from Exception."""
    bases = {}
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True):
        if "talos_api" in path:
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                                    for base in node.bases]
    found = set()
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            if name not in found and any(parent == "Exception" or parent in found for parent in parents):
                found.add(name)
                changed = True
    return found


def _template(node, assigned):
    """The message an expression builds, with VARIABLE for each variable part; None when it builds none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(value.value if isinstance(value, ast.Constant) else VARIABLE for value in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = _template(node.left, assigned)
        return _FORMAT.sub(VARIABLE, left) if left is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left, assigned), _template(node.right, assigned)
        return (left or VARIABLE) + (right or VARIABLE) if left or right else None
    if isinstance(node, ast.Name) and node.id in assigned:
        return _template(assigned[node.id], assigned)
    return None


def code_messages():
    """``{template: where}`` of every message of SOURCES."""
    classes = _exception_classes()
    found = {}
    for path in SOURCES:
        tree = ast.parse(open(path).read())
        for function in [tree] + [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]:
            body = function.body if isinstance(function, ast.Module) else [function]
            assigned = dict((node.targets[0].id, node.value) for part in body for node in ast.walk(part)
                            if isinstance(node, ast.Assign) and len(node.targets) == 1
                            and isinstance(node.targets[0], ast.Name))
            for part in body:
                for node in ast.walk(part):
                    if not isinstance(node, ast.Call) or not node.args:
                        continue
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name in classes:
                        template = _template(node.args[0], assigned)
                        if template:
                            found.setdefault(template, "%s:%d" % (os.path.relpath(path, ROOT), node.lineno))
    return found


def role_messages():
    """``{template: where}`` of the fail messages (assert fail_msg, fail msg) of the roles' tasks."""
    found = {}

    def visit(tasks, path):
        for task in tasks or ():
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always"):
                visit(task.get(key), path)
            for module, field in (("ansible.builtin.assert", "fail_msg"), ("ansible.builtin.fail", "msg")):
                message = (task.get(module) or {}).get(field) if isinstance(task.get(module), dict) else None
                if message:
                    found[re.sub(r"\{\{.*?\}\}|\{%.*?%\}", VARIABLE, message)] = "%s: %s" % (
                        os.path.relpath(path, ROOT), task.get("name"))

    for path in ROLE_TASKS:
        visit(yaml.safe_load(open(path)), path)
    return found


def distinctive_part(template):
    """The longest fixed part of a message, whitespace collapsed; None when no part is distinctive."""
    parts = sorted((" ".join(part.split()) for part in template.split(VARIABLE)), key=len, reverse=True)
    return parts[0] if parts and len(parts[0]) >= DISTINCTIVE else None


def _page():
    return " ".join(open(PAGE).read().split())


MESSAGES = sorted(dict(code_messages(), **role_messages()).items())


def test_the_messages_are_found_in_the_code():
    templates = [template for template, _where in MESSAGES]
    assert len(templates) > 50
    assert any("reads every node before it changes one" in template for template in templates)
    assert any("Set exactly one of etcd_restore_snapshot" in template for template in templates)
    assert any(template.startswith("Refused to fetch ") for template in templates)
    assert distinctive_part("Cannot %s %s on %s: %s" % ((VARIABLE,) * 4)) is None


@pytest.mark.parametrize("template, where", MESSAGES, ids=[where for _template, where in MESSAGES])
def test_every_message_has_its_entry_in_troubleshooting(template, where):
    part = distinctive_part(template)
    if part is None:
        pytest.skip("made of other messages: %r" % template.replace(VARIABLE, "…"))
    assert part in _page(), "docs/troubleshooting.md has no entry for %s: %r (looked for %r)" % (
        where, template.replace(VARIABLE, "…"), part)
