# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contributor's map of plugins/module_utils (docs/architecture.md) is true: every file is in it, and every
import follows its layers.

The map's table is the one statement of the packages and their layers: this test reads it from the document.
"""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
PREFIX = "ansible_collections.talos_linux.talos.plugins.module_utils"
GENERATED = "talos_api"
MAP_HEADING = "## The map of plugins/module_utils"
ROW = re.compile(r"^\| `(?P<package>\w+)/` \| (?P<layer>\d+) \| [^|]+ \| (?P<files>[^|]+) \|$")


def read_map(text):
    """``{package: (layer, [file names])}`` from the map's table."""
    section = text.split(MAP_HEADING, 1)[1].split("\n## ", 1)[0]
    packages = {}
    for line in section.splitlines():
        match = ROW.match(line.strip())
        if match:
            packages[match.group("package")] = (int(match.group("layer")), re.findall(r"`([\w.]+\.py)`", match.group("files")))
    return packages


def module_utils_files():
    """Every source file of plugins/module_utils but the generated package, as paths relative to it."""
    found = []
    for directory, subdirectories, names in os.walk(MODULE_UTILS):
        relative = os.path.relpath(directory, MODULE_UTILS)
        if relative.split(os.sep, maxsplit=1)[0] == GENERATED:
            subdirectories[:] = []
            continue
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        found.extend(os.path.normpath(os.path.join(relative, name)) for name in names
                     if name.endswith(".py") and name != "__init__.py")
    return sorted(found)


def imported_packages(source):
    """``(line, package)`` of each module_utils package ``source`` imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and (node.module + ".").startswith(PREFIX + "."):
            names = node.module[len(PREFIX) + 1:].split(".") if node.module != PREFIX else []
            if names:
                yield node.lineno, names[0]
            else:
                for alias in node.names:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PREFIX + "."):
                    yield node.lineno, alias.name[len(PREFIX) + 1:].split(".")[0]


def layer_problems(packages, files, read):
    """The imports of ``files`` (paths under module_utils) that break the layer rule, as sentences."""
    problems = []
    for path in files:
        package = path.split(os.sep)[0]
        if package not in packages:
            continue  # reported as missing from the map
        layer = packages[package][0]
        for line, imported in imported_packages(read(path)):
            if imported in (package, GENERATED):
                continue
            if imported not in packages:
                problems.append("%s:%d imports %s, which is no package of the map" % (path, line, imported))
            elif packages[imported][0] > layer:
                problems.append("%s:%d (layer %d) imports %s/ of the higher layer %d"
                                % (path, line, layer, imported, packages[imported][0]))
            elif packages[imported][0] == layer:
                problems.append("%s:%d imports %s/, a sibling package of its own layer %d" % (path, line, imported, layer))
    return problems


def _read(path):
    with open(os.path.join(MODULE_UTILS, path), encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def packages():
    with open(ARCHITECTURE, encoding="utf-8") as handle:
        return read_map(handle.read())


def test_the_map_names_every_module_utils_file_and_no_other(packages):
    mapped = sorted(os.path.join(package, name) for package, (_layer, names) in packages.items() for name in names)
    present = module_utils_files()
    assert [path for path in present if path not in mapped] == [], "files missing from the map in docs/architecture.md"
    assert [path for path in mapped if path not in present] == [], "the map names files that do not exist"


def test_every_package_is_in_the_map_with_an_empty_init(packages):
    directories = sorted(name for name in os.listdir(MODULE_UTILS)
                         if os.path.isdir(os.path.join(MODULE_UTILS, name)) and name not in (GENERATED, "__pycache__"))
    assert directories == sorted(packages)
    for package in packages:
        # ansible-test sanity wants every package's __init__.py empty.
        assert os.path.getsize(os.path.join(MODULE_UTILS, package, "__init__.py")) == 0


def test_imports_follow_the_layers(packages):
    assert layer_problems(packages, module_utils_files(), _read) == []


def test_the_layer_rule_catches_a_higher_layer_and_a_sibling():
    packages = {"common": (0, ["errors.py"]), "nodes": (2, ["node.py"]), "task": (2, ["task.py"]),
                "etcd": (3, ["members.py"])}
    sources = {
        os.path.join("nodes", "node.py"): "from %s.etcd import members\n" % PREFIX,
        os.path.join("task", "task.py"): "def f():\n    from %s.nodes.node import label\n" % PREFIX,
        os.path.join("etcd", "members.py"): "from %s.common.errors import TalosError\nfrom %s import nodes\n"
                                            "from %s.talos_api.machine import machine_pb2\n" % (PREFIX, PREFIX, PREFIX),
        os.path.join("common", "errors.py"): "import %s.cluster.facts\n" % PREFIX,
    }
    assert layer_problems(packages, sorted(sources), sources.__getitem__) == [
        "common/errors.py:1 imports cluster, which is no package of the map",
        "nodes/node.py:1 (layer 2) imports etcd/ of the higher layer 3",
        "task/task.py:2 imports nodes/, a sibling package of its own layer 2",
    ]


def test_the_map_is_read_as_the_document_writes_it():
    text = "%s\n\n| package | layer | what it holds | files |\n|---|---|---|---|\n" \
           "| `common/` | 0 | errors | `errors.py`, `files.py` |\n\n## Next\n| `other/` | 1 | x | `a.py` |\n" % MAP_HEADING
    assert read_map(text) == {"common": (0, ["errors.py", "files.py"])}
