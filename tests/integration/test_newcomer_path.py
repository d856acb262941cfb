# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A newcomer's path as the README and the guides lay it out, run as written (issue: the newest stack
and a newcomer's path without a stumble): the emulator started by hand, the provisioning guide's
playbook, the demo, and ad-hoc commands."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from playbook_runner import deprecation_warnings

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
BIN = os.path.dirname(sys.executable)


def _env(tmp_path, **extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("TALOSCONFIG", None)
    env.update(extra)
    return env


def _run(command, env, timeout=300):
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=REPO)
    deprecated = deprecation_warnings(proc.stdout + "\n" + proc.stderr)
    assert not deprecated, "%s printed deprecation warnings:\n%s" % (command[0], "\n".join(deprecated))
    return proc


def guide_block(guide, heading, index=0):
    """The ``index``-th YAML block under ``heading`` of docs/``guide``, as written."""
    with open(os.path.join(REPO, "docs", guide)) as handle:
        text = handle.read()
    section = text[text.index(heading):]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)[index]


def test_the_emulator_started_by_a_python_without_its_libraries_finds_the_project_venv(tmp_path):
    """docs/emulator.md: run outside make, tests/talos-emulator finds its environment by itself."""
    bare_python = os.path.join(sys.base_prefix, "bin", "python3")
    assert _run([bare_python, "-c", "import grpclib"], dict(os.environ)).returncode != 0, "the base Python has grpclib"
    env = dict(os.environ)
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)  # as in a shell outside make: the collection is found in .collections
    state_dir = str(tmp_path / "by-hand")
    started = _run([bare_python, os.path.join(TESTS, "talos-emulator"), "up", "--state-dir", state_dir, "--maintenance"], env)
    try:
        if os.path.exists(os.path.join(REPO, ".venv", "bin", "python")):
            assert started.returncode == 0, started.stdout + started.stderr
            assert "is up" in started.stdout
        else:  # without `make setup` it says what to do instead of a ModuleNotFoundError
            assert "make setup" in started.stderr and "Traceback" not in started.stderr
    finally:
        _run([bare_python, os.path.join(TESTS, "talos-emulator"), "down", "--state-dir", state_dir], env)


@pytest.mark.once
def test_the_provisioning_guide_runs_as_written_and_discovery_then_finds_every_node(emulator, run_playbook, tmp_path):
    """docs/provisioning.md "With the cluster role", as written, against the emulator's inventory; afterwards
    the cluster's Members (v1.14 configs: a DiscoveryServiceConfig document) list every node, so the inventory
    plugin lists the workers without a warning and talos_health needs no node lists."""
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, reboot_seconds=0.1)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(cluster.inventory()))
    host_patch = yaml.safe_load(guide_block("provisioning.md", "### With the cluster role", 1))
    (tmp_path / "host_vars").mkdir()
    for node in cluster.nodes:  # the guide's host_vars/cp-1.yml, for each host
        patches = [dict(document, hostname=node.name) for document in host_patch["cluster_host_patches"]]
        (tmp_path / "host_vars" / ("%s.yml" % node.name)).write_text(yaml.safe_dump({"cluster_host_patches": patches}))
    (tmp_path / "site.yml").write_text(guide_block("provisioning.md", "### With the cluster role", 0))

    run_playbook(str(tmp_path / "site.yml"), inventory=str(tmp_path / "inventory.yml"))

    assert cluster.etcd.bootstrapped and not any(node.maintenance for node in cluster.nodes)
    talosconfig = str(tmp_path / "talosconfig")  # next to the inventory, as the guides lay it out
    source = tmp_path / "cluster.talos.yml"
    source.write_text(yaml.safe_dump({"plugin": "talos_linux.talos.talos", "talosconfig": talosconfig}))
    listed = _run([os.path.join(BIN, "ansible-inventory"), "-i", str(source), "--list"], _env(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "[WARNING]" not in listed.stderr, listed.stderr
    assert sorted(json.loads(listed.stdout)["_meta"]["hostvars"]) == sorted(node.name for node in cluster.nodes)
    health = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Health", "talos_linux.talos.talos_health": {"talosconfig": talosconfig, "wait_timeout": 30}}]}])
    assert health.task("Health")["result"]["node_source"] == "discovery"


def test_a_cluster_without_discovery_is_listed_with_a_warning_that_names_what_is_missing(emulator, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    for node in cluster.nodes:
        cluster.call(lambda node=node: node.config["cluster"]["discovery"].update(enabled=False))
    source = tmp_path / "cluster.talos.yml"
    source.write_text(yaml.safe_dump({"plugin": "talos_linux.talos.talos", "talosconfig": cluster.talosconfig_path()}))
    listed = _run([os.path.join(BIN, "ansible-inventory"), "-i", str(source), "--list"], _env(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(listed.stdout)["_meta"]["hostvars"]) == ["controlplane-1"]
    warning = "".join(listed.stderr.split())  # ansible-core 2.16 wraps warnings at 79 columns
    assert "theTalosclusterlistsnoMembers" in warning and "etcd:controlplane-1;" in warning
    assert "workerslistedinneitheraremissing" in warning


def test_ad_hoc_facts_take_the_inventory_variable_talosconfig_and_say_where_they_looked_without_one(emulator, tmp_path):
    """docs/getting-started.md's inventory variable talosconfig works ad hoc; without any talosconfig the
    message says that no file was found and where the modules looked."""
    cluster = emulator(controlplanes=1, workers=1)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(cluster.inventory()))  # all.vars.talosconfig, as in getting-started
    env = _env(tmp_path, HOME=str(tmp_path / "home"))
    ad_hoc = _run([os.path.join(BIN, "ansible"), "-i", str(inventory), "all", "-m", "talos_linux.talos.talos_facts",
                   "-a", "gather_subset=min node={{ ansible_host }}"], env)
    assert ad_hoc.returncode == 0, ad_hoc.stdout + ad_hoc.stderr
    assert ad_hoc.stdout.count("SUCCESS") == 2

    bare = _run([os.path.join(BIN, "ansible"), "-i", "localhost,", "localhost", "-m", "talos_linux.talos.talos_facts"], env)
    assert bare.returncode != 0
    message = " ".join(bare.stdout.split())
    assert "no talosconfig file was found" in message, bare.stdout
    assert "neither %s/.talos/config nor /var/run/secrets/talos.dev/config exists" % (tmp_path / "home") in message


def test_a_task_on_an_inventory_host_without_node_acts_on_that_host(emulator, tmp_path):
    """`ansible worker-1 -m talos_facts` reads worker-1, not the endpoint (issue 31): through both doors; the
    host variable talos_node (the inventory plugin's) comes before ansible_host."""
    cluster = emulator(controlplanes=1, workers=2)
    worker, other = cluster.workers
    inventory = tmp_path / "inventory.yml"
    layout = cluster.inventory()
    layout["all"]["children"]["workers"]["hosts"][other.name]["talos_node"] = worker.address
    inventory.write_text(yaml.safe_dump(layout))
    env = _env(tmp_path)
    for door in ("controller", "module"):
        ad_hoc = _run([os.path.join(BIN, "ansible"), "-i", str(inventory), "workers", "-m", "talos_linux.talos.talos_facts",
                       "-a", "gather_subset=min", "-e", "talos_door=%s ansible_connection=local" % door], env)
        assert ad_hoc.returncode == 0, ad_hoc.stdout + ad_hoc.stderr
        parts = re.split(r"^(\S+) \| SUCCESS => ", ad_hoc.stdout, flags=re.M)[1:]
        results = dict((host, json.loads(text)) for host, text in zip(parts[::2], parts[1::2]))
        for host in (worker.name, other.name):
            facts = results[host]["ansible_facts"]["talos"]
            assert facts["node"] == worker.address and facts["hostname"] == worker.hostname, (door, host, facts)
