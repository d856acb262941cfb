# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RPC catalogue agrees with the generated stubs, the code that calls them and the emulator that serves them."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import subprocess
import sys

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import METHODS

from talos_emulator import authz
from talos_emulator.services import machined_handlers

PLUGINS = os.path.join(os.path.dirname(os.path.abspath(rpc.__file__)), os.pardir, os.pardir)
CATALOGUE = os.path.join("module_utils", "client", "rpc.py")
GENERATED = os.path.join("module_utils", "talos_api")
# An RPC path: "machine.MachineService/Version", "cosi.resource.State/Get"; RPC_LITERAL finds one spelled in code.
RPC_PATH = r"(?:[a-z]+\.)+[A-Z]\w*/[A-Z]\w*"
RPC_LITERAL = re.compile(r"""["'](%s)["']""" % RPC_PATH)
# A catalogue name as code uses it: rpc.VERSION.
RPC_NAME = re.compile(r"\brpc\.([A-Z][A-Z0-9_]*)\b")
# The naming rule of rpc.py's docstring: a prefix per service, LEGACY_ for what Talos v1.13 deprecated.
PREFIXES = {
    "machine.MachineService": "",
    "machine.ImageService": "IMAGE_",
    "machine.LifecycleService": "LIFECYCLE_",
    "storage.StorageService": "STORAGE_",
    "inspect.InspectService": "INSPECT_",
    "cluster.ClusterService": "CLUSTER_",
    "cosi.resource.State": "COSI_",
}
DEPRECATED_IN_V1_13 = ("machine.MachineService/Upgrade", "machine.MachineService/ImageList", "machine.MachineService/ImagePull")
# Rows no plugin calls: the emulator serves them and reads the catalogue as its rules table.
EMULATOR_ONLY = ("CPU_INFO", "LOAD_AVG", "LIFECYCLE_INSTALL")
KNOWN_ROLES = {rpc.ADMIN, rpc.OPERATOR, rpc.READER, rpc.ETCD_BACKUP}
SERVICES = sorted(set(path.split("/")[0] for path in rpc.RPCS))


def _stub_methods(service):
    """``{path: grpclib cardinality name}`` of every method of a generated stub."""
    stub = rpc.service_stub(service)(None)
    return dict((method.name.lstrip("/"), type(method).__name__) for method in vars(stub).values())


_CARDINALITY_OF_STUB = {
    "UnaryUnaryMethod": rpc.UNARY,
    "UnaryStreamMethod": rpc.SERVER_STREAM,
    "StreamUnaryMethod": rpc.CLIENT_STREAM,
}


@pytest.mark.parametrize("service", SERVICES)
def test_every_stub_method_is_in_the_catalogue_with_its_cardinality(service):
    stub = _stub_methods(service)
    catalogued = dict((path, rpc.cardinality(path)) for path in rpc.RPCS if path.startswith(service + "/"))
    assert catalogued == dict((path, _CARDINALITY_OF_STUB[kind]) for path, kind in stub.items())


def test_the_client_knows_every_catalogued_rpc_and_nothing_else():
    for path in rpc.RPCS:
        assert METHODS[path].cardinality.name == rpc.cardinality(path)
    assert "machine.MachineService/Nope" not in METHODS
    assert rpc.service_stub("machine.NopeService") is None


def _plugin_sources():
    """``{path relative to plugins/: text}`` of every Python file of plugins/ but the generated code."""
    sources = {}
    for directory, _dirs, files in os.walk(PLUGINS):
        for name in files:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, PLUGINS)
            if name.endswith(".py") and not relative.startswith(GENERATED):
                with open(path) as source:
                    sources[relative] = source.read()
    return sources


def _catalogue_names():
    """``{name: path}`` of every constant of rpc.py that holds an RPC path."""
    return dict((name, value) for name, value in vars(rpc).items()
                if name.isupper() and isinstance(value, str) and re.match("^%s$" % RPC_PATH, value))


def expected_name(path):
    """The constant rpc.py's naming rule gives ``path``: ``EtcdMemberList`` -> ``ETCD_MEMBER_LIST``."""
    service, method = path.split("/")
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", method).upper()
    return ("LEGACY_" if path in DEPRECATED_IN_V1_13 else "") + PREFIXES[service] + words


@pytest.mark.parametrize("path, name", [
    ("machine.MachineService/EtcdRemoveMemberByID", "ETCD_REMOVE_MEMBER_BY_ID"),
    ("machine.MachineService/CPUInfo", "CPU_INFO"),
    ("machine.MachineService/ImagePull", "LEGACY_IMAGE_PULL"),
    ("machine.ImageService/Pull", "IMAGE_PULL"),
    ("inspect.InspectService/ControllerRuntimeDependencies", "INSPECT_CONTROLLER_RUNTIME_DEPENDENCIES"),
    ("cosi.resource.State/Get", "COSI_GET"),
])
def test_the_naming_rule(path, name):
    assert expected_name(path) == name


@pytest.mark.parametrize("path", sorted(rpc.RPCS))
def test_every_row_is_named_by_the_rule(path):
    assert getattr(rpc, expected_name(path), None) == path


def test_each_rpc_has_one_name_and_a_row():
    names = _catalogue_names()
    assert len(names) == len(set(names.values())), "one name per RPC"
    assert set(names.values()) == set(rpc.RPCS), "every named RPC has a row and every row a name"


def test_no_rpc_path_is_spelled_outside_the_catalogue():
    sources = _plugin_sources()
    assert set(RPC_LITERAL.findall(sources.pop(CATALOGUE))) == set(rpc.RPCS), "the scan finds the catalogue's paths"
    spelled = dict((where, RPC_LITERAL.findall(text)) for where, text in sources.items() if RPC_LITERAL.search(text))
    assert spelled == {}, "name these RPCs by their constants in client/rpc.py"


def test_the_code_calls_the_catalogue_by_its_names():
    used = {}
    for where, text in _plugin_sources().items():
        for name in RPC_NAME.findall(text):
            used.setdefault(name, where)
    names = _catalogue_names()
    assert "VERSION" in used and "SERVICE_START" in used, "the scan finds the code's calls"
    assert dict((name, where) for name, where in used.items() if not hasattr(rpc, name)) == {}
    assert sorted(set(names) - set(used)) == sorted(EMULATOR_ONLY), "a row nothing calls is dropped unless the emulator serves it"


def test_the_emulator_serves_exactly_the_catalogue():
    # and the RPCs only talosctl calls (its rules are the emulator's own).
    served = set(path.lstrip("/") for path in machined_handlers(None))
    assert served == set(rpc.RPCS) | set(authz.NOT_IN_CATALOGUE)


@pytest.mark.parametrize("path", sorted(rpc.RPCS))
def test_rows_are_well_formed(path):
    cardinality, access, roles, first_version, history = rpc.RPCS[path]
    assert cardinality in (rpc.UNARY, rpc.SERVER_STREAM, rpc.CLIENT_STREAM)
    assert access in (rpc.READ_ONLY, rpc.MUTATING)
    assert roles and set(roles) <= KNOWN_ROLES and rpc.ADMIN in roles
    assert first_version is None or re.match(r"^v1\.\d+\.0$", first_version)
    releases = [release for release, _roles in history]
    assert releases == sorted(releases, key=lambda tag: tuple(int(part) for part in tag[1:].split(".")))
    for release, older_roles in history:
        assert re.match(r"^v1\.\d+\.0$", release) and set(older_roles) < set(roles)


def test_reads_and_mutations():
    assert rpc.is_read(rpc.VERSION) and rpc.is_read(rpc.COSI_WATCH) and rpc.is_read(rpc.READ)
    assert not rpc.is_read(rpc.REBOOT)
    assert not rpc.is_read("machine.MachineService/Nope"), "an unknown call is never repeated"


def test_roles_as_the_server_and_the_messages_see_them():
    assert rpc.rule_roles("machine.MachineService/Nope") == (rpc.ADMIN,), "unlisted methods need os:admin, as on the server"
    # The rules table lets a reader apply a config; the handler accepts it only in maintenance mode.
    assert rpc.rule_roles("machine.MachineService/ApplyConfiguration") == (rpc.ADMIN, rpc.READER)
    assert rpc.configured_node_roles("machine.MachineService/ApplyConfiguration") == (rpc.ADMIN,)
    assert rpc.configured_node_roles("machine.MachineService/Reboot") == (rpc.ADMIN, rpc.OPERATOR)
    assert rpc.role_history("machine.MachineService/EtcdStatus") == (("v1.11.0", (rpc.ADMIN, rpc.OPERATOR)),)
    assert rpc.role_history("machine.MachineService/Nope") == ()


def test_first_versions():
    assert rpc.first_version("machine.LifecycleService/Upgrade") == "v1.13.0"
    assert rpc.first_version("machine.MachineService/EtcdStatus") == "v1.4.0"
    assert rpc.first_version("machine.MachineService/Version") is None
    assert rpc.first_version("machine.MachineService/Nope") is None


def test_importing_the_catalogue_imports_no_library():
    code = ("import sys; from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc; "
            "print(sorted(name for name in sys.modules if name.split('.')[0] in ('grpclib', 'google', 'yaml', 'h2') "
            "or 'talos_api' in name))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.stdout.strip() == "[]"
