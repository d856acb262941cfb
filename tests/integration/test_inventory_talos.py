# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The talos inventory plugin through ansible-inventory and ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml
from playbook_runner import deprecation_warnings

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings

PLUGIN = "talos_linux.talos.talos"
BIN = os.path.dirname(sys.executable)


# The variables the plugin sets; compose adds others.
PLUGIN_VARIABLES = ("ansible_host", "ansible_connection", "ansible_python_interpreter", "talos_node", "talos_addresses",
                    "talos_machine_type", "talos_os_version", "talos_hostname")


def plain_listing(text):
    """The JSON of ``ansible-inventory --list``, whose values the plugin set must be plain: no
    ``{"__ansible_unsafe": ...}`` wrapper (AWX stores what it imports as it is).

    What ``compose`` makes is a template's result, which ansible-core 2.19 and later mark unsafe for every
    constructed inventory; those values are unwrapped here.
    """
    listing = json.loads(text)
    for host, variables in listing["_meta"]["hostvars"].items():
        for name, value in variables.items():
            if name in PLUGIN_VARIABLES:
                assert "__ansible_unsafe" not in json.dumps(value), (host, name, value)
            else:
                variables[name] = _unwrapped(value)
    return listing


def _unwrapped(value):
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return dict((key, _unwrapped(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_unwrapped(item) for item in value]
    return value


class Inventory(object):
    """Writes a ``*.talos.yml`` source and runs ansible-inventory on it."""

    def __init__(self, tmp_path, cluster):
        self.tmp_path = tmp_path
        self.cluster = cluster
        self.env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
                        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"))
        self.env.pop("TALOSCONFIG", None)

    def source(self, name="cluster.talos.yml", **options):
        config = {"plugin": PLUGIN}
        config.update(options)
        path = self.tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def run(self, source, *args, **kwargs):
        env = dict(self.env, **kwargs.pop("env", {}))
        proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", source] + list(args),
                              capture_output=True, text=True, env=env, timeout=300, check=False)
        deprecated = deprecation_warnings(proc.stderr)
        assert not deprecated, "ansible-inventory printed deprecation warnings:\n" + "\n".join(deprecated)
        return proc

    def list(self, source, **kwargs):
        proc = self.run(source, "--list", **kwargs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return plain_listing(proc.stdout)


def squeezed(text):
    """``text`` without whitespace: ansible-core 2.16 wraps warnings at 79 columns, even inside a path."""
    return "".join(text.split())


def groups_of(listing):
    return dict((name, sorted(group.get("hosts", []))) for name, group in listing.items()
                if name not in ("_meta", "all") and group.get("hosts"))


@pytest.fixture
def cluster(emulator):
    return emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.1)


@pytest.fixture
def inventory(tmp_path, cluster):
    return Inventory(tmp_path, cluster)


def test_list_and_graph_follow_the_cluster_as_it_changes(cluster, inventory):
    source = inventory.source(talosconfig=cluster.talosconfig_path())
    listing = inventory.list(source)
    assert groups_of(listing) == {"controlplane": ["controlplane-1", "controlplane-2", "controlplane-3"],
                                  "workers": ["worker-1", "worker-2"]}
    for node in cluster.nodes:
        assert listing["_meta"]["hostvars"][node.hostname] == {
            "ansible_host": node.address,
            "talos_node": node.address,
            "talos_addresses": [node.address],
            "talos_machine_type": node.machine_type,
            "talos_os_version": node.talos_version,
            "talos_hostname": node.hostname,
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        }
    credentials = yaml.safe_load(open(cluster.talosconfig_path()).read())["contexts"][cluster.name]
    listed = json.dumps(listing)
    assert not any(credentials[key][:40] in listed for key in ("ca", "crt", "key")) and "PRIVATE KEY" not in listed
    graph = inventory.run(source, "--graph")
    assert graph.returncode == 0, graph.stderr
    assert "|--@controlplane:\n  |  |--controlplane-1\n  |  |--controlplane-2\n  |  |--controlplane-3" in graph.stdout
    assert "|--@workers:\n  |  |--worker-1\n  |  |--worker-2" in graph.stdout

    # A node joins: the next listing has it.
    added = cluster.add_node("worker")
    listing = inventory.list(source)
    assert groups_of(listing)["workers"] == ["worker-1", "worker-2", "worker-3"]
    assert listing["_meta"]["hostvars"]["worker-3"]["talos_node"] == added.address

    # A node is reset (wiped, rebooted into maintenance): it is no longer a member, nor a host.
    reset = cluster.workers[0]
    settings = ConnectionSettings.from_params({"talosconfig": cluster.talosconfig_path()})
    with TalosClient(settings) as client:
        client.call("machine.MachineService/Reset", machine_pb2.ResetRequest(graceful=True, reboot=True), node=reset.address)
    cluster.wait_until(lambda: reset.maintenance and reset.reachable)
    listing = inventory.list(source)
    assert groups_of(listing) == {"controlplane": ["controlplane-1", "controlplane-2", "controlplane-3"],
                                  "workers": ["worker-2", "worker-3"]}
    assert reset.hostname not in listing["_meta"]["hostvars"]


def test_names_groups_and_variables_are_configurable(cluster, inventory):
    cluster.call(setattr, cluster.workers[1], "talos_version", "v1.13.2")
    source = inventory.source(
        talosconfig=cluster.talosconfig_path(role="reader"), inventory_hostname="address",
        controlplane_group="talos_cp", worker_group="talos_workers", ansible_connection="",
        compose={"talos_is_cp": "talos_machine_type == 'controlplane'", "short_name": "talos_hostname.split('-')[0]"},
        groups={"old_talos": "talos_os_version != 'v1.14.0'"},
        keyed_groups=[{"key": "talos_os_version", "prefix": "talos"}],
    )
    listing = inventory.list(source)
    groups = groups_of(listing)
    cp_addresses = sorted(node.address for node in cluster.controlplanes)
    worker_addresses = sorted(node.address for node in cluster.workers)
    assert groups["talos_cp"] == cp_addresses and groups["talos_workers"] == worker_addresses
    assert groups["old_talos"] == [cluster.workers[1].address]
    assert groups["talos_v1_13_2"] == [cluster.workers[1].address]
    assert groups["talos_v1_14_0"] == sorted(cp_addresses + [cluster.workers[0].address])
    hostvars = listing["_meta"]["hostvars"][cluster.controlplanes[0].address]
    assert hostvars["talos_is_cp"] is True and hostvars["short_name"] == "controlplane"
    assert hostvars["talos_hostname"] == "controlplane-1"
    assert "ansible_connection" not in hostvars and "ansible_python_interpreter" not in hostvars


@pytest.mark.parametrize("discovery_off_in", ["the source", "the machine configuration"])
def test_without_discovery_the_nodes_option_and_etcd_members_are_listed(cluster, inventory, discovery_off_in):
    worker = cluster.workers[0]
    options = dict(talosconfig=cluster.talosconfig_path(), nodes=[worker.address])
    if discovery_off_in == "the source":
        options["discovery"] = False
    else:  # cluster.discovery.enabled: false on every node: no Members anywhere
        for node in cluster.nodes:
            cluster.call(lambda node=node: node.config["cluster"]["discovery"].update(enabled=False))
    source = inventory.source(**options)
    listing = inventory.list(source)
    assert groups_of(listing) == {"controlplane": ["controlplane-1", "controlplane-2", "controlplane-3"],
                                  "workers": ["worker-1"]}
    assert listing["_meta"]["hostvars"]["worker-1"]["talos_os_version"] == "v1.14.0"
    assert listing["_meta"]["hostvars"]["controlplane-2"]["talos_addresses"] == [cluster.controlplanes[1].address]


def test_cache_serves_the_last_listing_until_flushed(cluster, inventory, tmp_path):
    source = inventory.source(talosconfig=cluster.talosconfig_path(), cache=True, cache_plugin="ansible.builtin.jsonfile",
                              cache_connection=str(tmp_path / "cache"), cache_timeout=3600)
    assert groups_of(inventory.list(source))["workers"] == ["worker-1", "worker-2"]
    assert os.listdir(str(tmp_path / "cache"))
    cluster.add_node("worker")
    # Served from the cache: the new node is not there yet, and the cluster is not asked.
    for endpoint in cluster.controlplanes:
        cluster.faults.make_unreachable(endpoint)
    assert groups_of(inventory.list(source))["workers"] == ["worker-1", "worker-2"]
    for endpoint in cluster.controlplanes:
        cluster.faults.make_reachable(endpoint)
    if "--flush-cache" in inventory.run(source, "--help").stdout:
        proc = inventory.run(source, "--list", "--flush-cache")
        assert proc.returncode == 0, proc.stderr
        listing = plain_listing(proc.stdout)
    else:  # ansible-core 2.16: ansible-inventory has no --flush-cache; ansible-playbook's reads the cluster again
        play = tmp_path / "noop.yml"
        play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks: []\n")
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", source, "--flush-cache", str(play)],
                              capture_output=True, text=True, env=inventory.env, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listing = inventory.list(source)
    assert groups_of(listing)["workers"] == ["worker-1", "worker-2", "worker-3"]


@pytest.mark.parametrize("case", ["missing", "unreadable", "not_yaml", "no_context", "unreachable", "wrong_ca", "permission", "env",
                                  "bad_option"])
def test_bad_sources_fail_with_one_sentence_naming_the_file(cluster, inventory, tmp_path, case):
    talosconfig = tmp_path / "talosconfig"
    config = yaml.safe_load(open(cluster.talosconfig_path()).read())
    options, env = {}, {}
    if case == "missing":
        options["talosconfig"] = str(tmp_path / "absent")
        expected = "The talosconfig file %s does not exist." % (tmp_path / "absent")
    elif case == "unreadable":
        talosconfig.write_text(yaml.safe_dump(config))
        talosconfig.chmod(0)
        options["talosconfig"] = str(talosconfig)
        expected = "cannot be read: permission denied"
    elif case == "not_yaml":
        talosconfig.write_text("contexts: [unclosed\n")
        options["talosconfig"] = str(talosconfig)
        expected = "is not valid YAML"
    elif case == "no_context":
        talosconfig.write_text(yaml.safe_dump(config))
        options.update(talosconfig=str(talosconfig), context="staging")
        expected = "The context 'staging' was not found in talosconfig"
    elif case == "unreachable":
        options.update(talosconfig=cluster.talosconfig_path(), endpoints=["127.0.0.1:1"], timeout=2)
        expected = "127.0.0.1:1"
    elif case == "wrong_ca":
        other = yaml.safe_load(open(cluster.talosconfig_path()).read())
        context = other["contexts"][other["context"]]
        context["ca"] = context["crt"]  # a certificate that is not the cluster's CA
        talosconfig.write_text(yaml.safe_dump(other))
        options["talosconfig"] = str(talosconfig)
        expected = "Certificate verification of endpoint"
    elif case == "permission":
        talosconfig.write_text(cluster.talosconfig(roles=["os:etcd:backup"]))
        options["talosconfig"] = str(talosconfig)
        expected = "Permission denied for cosi.resource.State/List"
    elif case == "bad_option":
        options.update(talosconfig=cluster.talosconfig_path(), inventory_hostname="fqdn")
        expected = "inventory_hostname"
    else:  # TALOSCONFIG names the file when the source does not
        env["TALOSCONFIG"] = str(tmp_path / "from-env")
        expected = "The talosconfig file %s does not exist." % (tmp_path / "from-env")
    source = inventory.source(**options)
    if case == "unreadable" and os.access(str(talosconfig), os.R_OK):
        pytest.skip("running as a user who reads every file")
    proc = inventory.run(source, "--list", env=env)
    assert proc.returncode != 0 and "_meta" not in proc.stdout
    assert squeezed(source) in squeezed(proc.stderr) and squeezed(expected) in squeezed(proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    secrets = [yaml.safe_load(open(cluster.talosconfig_path()).read())["contexts"]["emulated"][key] for key in ("crt", "key")]
    assert not any(secret[:40] in proc.stderr + proc.stdout for secret in secrets)


def test_a_playbook_runs_talos_facts_on_every_node_of_the_inventory(cluster, inventory, run_playbook):
    source = inventory.source(talosconfig=cluster.talosconfig_path())
    playbook = [{
        "hosts": "all",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": cluster.talosconfig_path()}},
        "tasks": [{"name": "facts", "talos_linux.talos.talos_facts": {"node": "{{ talos_node }}", "gather_subset": ["min"]}}],
    }]
    run = run_playbook(playbook, inventory=source)
    assert sorted(result["host"] for result in run.tasks("facts")) == sorted(node.hostname for node in cluster.nodes)
    for node in cluster.nodes:
        facts = run.task("facts", node.hostname)["result"]["ansible_facts"]["talos"]
        assert facts["node"] == node.address and facts["hostname"] == node.hostname
        assert facts["machine"]["type"] == node.machine_type
    assert run.changed_count == 0
