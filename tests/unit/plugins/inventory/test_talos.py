# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the talos inventory plugin: hosts, groups, variables, constructed options and errors."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from ansible.errors import AnsibleError, AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.inventory import talos
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with

DEFAULTS = dict(
    talosconfig=None, context=None, endpoints=None, node=None, nodes=None, ca=None, crt=None, key=None, insecure=False,
    timeout=60, discovery=True, inventory_hostname="hostname", address_family="ipv4", controlplane_group="controlplane",
    worker_group="workers", ansible_connection="local", strict=False, compose={}, groups={}, keyed_groups=[],
    leading_separator=True, use_extra_vars=False,
)


def node(hostname, addresses, machine_type="worker", os_version="v1.14.0"):
    return {"hostname": hostname, "addresses": addresses, "machine_type": machine_type, "os_version": os_version,
            "node_id": None, "source": "members"}


CLUSTER = [
    node("cp-1", ["fd00::2", "10.5.0.2"], "controlplane"),
    node("cp-2", ["10.5.0.4"], "init", "v1.13.2"),
    node("w-1", ["10.5.0.3"]),
    node("odd", ["10.5.0.9"], None, None),
]


class Display:
    def __init__(self):
        self.warnings = []

    def warning(self, message):
        self.warnings.append(message)

    def vvv(self, message):
        pass


def plugin(**options):
    inventory_plugin = talos.InventoryModule()
    values = dict(DEFAULTS, **options)
    inventory_plugin.get_option = values.__getitem__
    inventory_plugin.inventory = InventoryData()
    inventory_plugin.loader = DataLoader()
    inventory_plugin.display = Display()
    if not isinstance(getattr(type(inventory_plugin), "templar", None), property):  # ansible-core before 2.19: parse() sets it
        inventory_plugin.templar = Templar(loader=inventory_plugin.loader)
    return inventory_plugin


def hostvars(inventory_plugin, name):
    return dict((key, value) for key, value in inventory_plugin.inventory.get_host(name).vars.items()
                if key not in ("inventory_file", "inventory_dir"))


def members(inventory_plugin, group):
    return sorted(host.name for host in inventory_plugin.inventory.groups[group].get_hosts())


@pytest.mark.parametrize("path, accepted", [
    ("cluster.talos.yml", True), ("prod.talos.yaml", True), ("talos.yml", True), ("cluster.yml", False), ("talos.json", False),
])
def test_verify_file_accepts_talos_yml_and_yaml(tmp_path, path, accepted):
    source = tmp_path / path
    source.write_text("plugin: talos_linux.talos.talos\n")
    assert talos.InventoryModule().verify_file(str(source)) is accepted


def test_hosts_groups_and_variables():
    inventory_plugin = plugin()
    inventory_plugin._populate(CLUSTER)
    assert members(inventory_plugin, "controlplane") == ["cp-1", "cp-2"]
    assert members(inventory_plugin, "workers") == ["w-1"]
    assert "odd" in inventory_plugin.inventory.hosts and inventory_plugin.inventory.get_host("odd").get_groups() == []
    assert hostvars(inventory_plugin, "cp-1") == {
        "ansible_host": "10.5.0.2", "talos_node": "10.5.0.2", "talos_addresses": ["fd00::2", "10.5.0.2"],
        "talos_machine_type": "controlplane", "talos_os_version": "v1.14.0", "talos_hostname": "cp-1",
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    assert hostvars(inventory_plugin, "cp-2")["talos_machine_type"] == "init"


def test_names_by_address_ipv6_and_group_names():
    inventory_plugin = plugin(inventory_hostname="address", address_family="ipv6", controlplane_group="cp",
                              worker_group="w", ansible_connection="")
    inventory_plugin._populate(CLUSTER)
    assert members(inventory_plugin, "cp") == ["10.5.0.4", "fd00::2"]
    assert members(inventory_plugin, "w") == ["10.5.0.3"]
    assert "controlplane" not in inventory_plugin.inventory.groups and "workers" not in inventory_plugin.inventory.groups
    variables = hostvars(inventory_plugin, "fd00::2")
    assert variables["ansible_host"] == variables["talos_node"] == "fd00::2" and variables["talos_hostname"] == "cp-1"
    assert "ansible_connection" not in variables and "ansible_python_interpreter" not in variables


def test_ssh_or_another_connection_is_set_without_an_interpreter():
    inventory_plugin = plugin(ansible_connection="ansible.builtin.ssh")
    inventory_plugin._populate(CLUSTER[:1])
    variables = hostvars(inventory_plugin, "cp-1")
    assert variables["ansible_connection"] == "ansible.builtin.ssh" and "ansible_python_interpreter" not in variables


def test_a_shared_hostname_and_a_node_without_address_are_warned_about():
    inventory_plugin = plugin()
    inventory_plugin._populate([node("talos", ["10.5.0.2"]), node("talos", ["10.5.0.3"]), node("ghost", [])])
    assert sorted(inventory_plugin.inventory.hosts) == ["10.5.0.3", "talos"]
    assert inventory_plugin.display.warnings == [
        "Talos nodes 10.5.0.2 and 10.5.0.3 share the hostname talos; the second is named by its address.",
        "Talos node ghost reports no address and is left out of the inventory.",
    ]


def test_compose_groups_and_keyed_groups():
    # Expressions from a configuration file are trusted templates.
    trusted = talos.trust_as_template
    inventory_plugin = plugin(
        compose={"talos_major": trusted("talos_os_version.split('.')[:2] | join('.')")},
        groups={"old": trusted("talos_os_version != 'v1.14.0'")},
        keyed_groups=[{"key": trusted("talos_machine_type"), "prefix": "type"}],
    )
    inventory_plugin._populate(CLUSTER[:3])
    assert hostvars(inventory_plugin, "cp-2")["talos_major"] == "v1.13"
    assert members(inventory_plugin, "old") == ["cp-2"]
    assert members(inventory_plugin, "type_controlplane") == ["cp-1"]
    assert members(inventory_plugin, "type_init") == ["cp-2"]
    assert members(inventory_plugin, "type_worker") == ["w-1"]


def test_strict_compose_fails_on_an_undefined_variable():
    inventory_plugin = plugin(strict=True, compose={"x": talos.trust_as_template("talos_no_such_variable.value")})
    with pytest.raises(AnsibleError):
        inventory_plugin._populate(CLUSTER[:1])


def discovering(monkeypatch, error=None, **options):
    """The plugin with ``options``, its clients answering Members with nothing (or ``error``) and an empty etcd."""
    inventory_plugin = plugin(endpoints=["10.5.0.2"], insecure=True, **options)
    clients = []

    def make_client(settings):
        clients.append(FakeTalos(settings=settings, answers={
            rpc.COSI_LIST: error or [],
            rpc.ETCD_MEMBER_LIST: [machine_pb2.EtcdMembers()],
        }))
        return clients[-1]
    monkeypatch.setattr(inventory_plugin, "_client", make_client)
    return inventory_plugin, clients


def test_discovery_errors_name_the_source_in_one_sentence(monkeypatch):
    error = fails_with("PermissionDenied", "not authorized", client_roles=["os:impersonator"])
    inventory_plugin, _clients = discovering(monkeypatch, error=error)
    with pytest.raises(AnsibleParserError) as raised:
        inventory_plugin._discover("/srv/cluster.talos.yml")
    message = str(raised.value)
    assert message.startswith("/srv/cluster.talos.yml: Permission denied for cosi.resource.State/List")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_cluster_without_nodes_is_an_error(monkeypatch):
    inventory_plugin, _clients = discovering(monkeypatch)
    with pytest.raises(AnsibleParserError, match=r"^/srv/cluster.talos.yml: the cluster reports no nodes: .*; set nodes\.$"):
        inventory_plugin._discover("/srv/cluster.talos.yml")


def test_node_and_nodes_are_mutually_exclusive(monkeypatch):
    inventory_plugin, clients = discovering(monkeypatch, node="10.5.0.3", nodes=["10.5.0.4"])
    with pytest.raises(AnsibleParserError, match="node and nodes are mutually exclusive"):
        inventory_plugin._discover("/srv/cluster.talos.yml")
    assert clients == []


def test_the_connection_options_reach_the_client(monkeypatch, tmp_path):
    inventory_plugin, clients = discovering(monkeypatch, nodes=[], timeout=7)
    with pytest.raises(AnsibleParserError):
        inventory_plugin._discover("/srv/cluster.talos.yml")
    settings = clients[0].settings
    assert settings.endpoints == ["10.5.0.2:50000"] and settings.insecure is True and settings.timeout == 7


def test_a_missing_talosconfig_names_both_files(monkeypatch, tmp_path):
    inventory_plugin = plugin(talosconfig=str(tmp_path / "absent"))
    with pytest.raises(AnsibleParserError) as raised:
        inventory_plugin._discover("/srv/cluster.talos.yml")
    assert str(raised.value) == "/srv/cluster.talos.yml: The talosconfig file %s does not exist." % (tmp_path / "absent")


@pytest.mark.parametrize("options, named", [({}, "the nodes of the talosconfig context"),
                                            ({"nodes": ["10.5.0.3"]}, "the nodes option")])
def test_a_cluster_without_members_is_warned_about_at_default_verbosity(monkeypatch, options, named):
    inventory_plugin, _clients = discovering(monkeypatch, **options)
    found = [node("cp-1", ["10.5.0.2"], "controlplane"), node("w-1", ["10.5.0.3"])]
    monkeypatch.setattr(talos, "discover", lambda client, use_members, warn: (found, "nodes and etcd"))
    assert inventory_plugin._discover("/srv/cluster.talos.yml") == found
    assert inventory_plugin.display.warnings == [
        "/srv/cluster.talos.yml: the Talos cluster lists no Members (cluster discovery is off in its machine "
        "configuration, or its nodes have not found each other yet), so the inventory holds only %s and the control "
        "planes in etcd: cp-1, w-1; workers listed in neither are missing. Turn on cluster discovery (a "
        "DiscoveryServiceConfig document, or cluster.discovery.enabled before Talos v1.14), or list every node in "
        "nodes." % named]


def test_no_warning_when_the_nodes_come_from_members_or_discovery_is_turned_off(monkeypatch):
    for discovery, source in ((True, "members"), (False, "nodes and etcd")):
        inventory_plugin, _clients = discovering(monkeypatch, discovery=discovery)
        monkeypatch.setattr(talos, "discover", lambda client, use_members, warn: ([node("cp-1", ["10.5.0.2"])], source))
        inventory_plugin._discover("/srv/cluster.talos.yml")
        assert inventory_plugin.display.warnings == []


def test_reported_values_are_plain_unless_they_look_like_templates():
    """Text without template syntax is marked as rendering to itself (ansible-inventory --list shows it plain);
    text with it stays data that is never rendered."""
    inventory_plugin = plugin()
    inventory_plugin._populate([node("cp-{{ lookup('pipe', 'id') }}", ["10.5.0.2"], "controlplane")])
    variables = inventory_plugin.inventory.get_host("cp-{{ lookup('pipe', 'id') }}").vars
    if not _trust_tagging():  # ansible-core before 2.19: text that is not a template is wrapped as unsafe
        from ansible.utils.unsafe_proxy import AnsibleUnsafe
        assert not isinstance(variables["ansible_host"], AnsibleUnsafe)
        assert not isinstance(variables["talos_addresses"][0], AnsibleUnsafe)
        assert isinstance(variables["talos_hostname"], AnsibleUnsafe)
    else:
        from ansible.template import is_trusted_as_template
        assert is_trusted_as_template(variables["ansible_host"]) and is_trusted_as_template(variables["talos_addresses"][0])
        assert is_trusted_as_template(variables["ansible_python_interpreter"])
        assert not is_trusted_as_template(variables["talos_hostname"])


def _trust_tagging():
    try:
        from ansible.template import trust_as_template  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        return False
    return True
