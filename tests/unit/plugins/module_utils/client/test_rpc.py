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
GENERATED = os.path.join("module_utils", "talos_api")
# An RPC path as the code spells it: "machine.MachineService/Version".
RPC_PATH = re.compile(r"""["']((?:machine|cluster|storage|cosi\.resource)\.[A-Z]\w*/[A-Z]\w*)["']""")
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


def _called_paths():
    """Every RPC path the collection's code names, with the file naming it."""
    found = {}
    for directory, _dirs, files in os.walk(PLUGINS):
        if GENERATED in directory:
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path) as source:
                    for match in RPC_PATH.finditer(source.read()):
                        found.setdefault(match.group(1), os.path.relpath(path, PLUGINS))
    return found


def test_every_rpc_the_collection_calls_is_catalogued():
    called = _called_paths()
    assert "machine.MachineService/Version" in called, "the scan found the client's calls"
    missing = dict((path, where) for path, where in called.items() if path not in rpc.RPCS)
    assert missing == {}


def test_the_emulator_serves_exactly_the_catalogue():
    # and the RPCs only talosctl calls (its rules are the emulator's own).
    served = set(path.lstrip("/") for path in machined_handlers(None))
    assert served == set(rpc.RPCS) | set(authz.NOT_IN_CATALOGUE)


@pytest.mark.parametrize("path", sorted(rpc.RPCS))
def test_rows_are_well_formed(path):
    cardinality, access, roles, first_version, history = rpc.RPCS[path]
    assert cardinality in (rpc.UNARY, rpc.SERVER_STREAM, rpc.CLIENT_STREAM)
    assert access in (rpc.READ, rpc.MUTATE)
    assert roles and set(roles) <= KNOWN_ROLES and rpc.ADMIN in roles
    assert first_version is None or re.match(r"^v1\.\d+\.0$", first_version)
    releases = [release for release, _roles in history]
    assert releases == sorted(releases, key=lambda tag: tuple(int(part) for part in tag[1:].split(".")))
    for release, older_roles in history:
        assert re.match(r"^v1\.\d+\.0$", release) and set(older_roles) < set(roles)


def test_reads_and_mutations():
    assert rpc.is_read("machine.MachineService/Version") and rpc.is_read("cosi.resource.State/Watch")
    assert not rpc.is_read("machine.MachineService/Reboot")
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
