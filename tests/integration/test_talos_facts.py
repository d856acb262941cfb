# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_facts through ansible-playbook against the emulator: node types, maintenance, subsets, several nodes."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import load_config

FACTS = "talos_linux.talos.talos_facts"


def play(tasks, talosconfig, hosts="localhost"):
    return [{
        "name": "talos_facts",
        "hosts": hosts,
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": talosconfig}},
        "tasks": tasks,
    }]


def test_control_plane_and_worker_from_the_inventory(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    tasks = [
        {"name": "gather", FACTS: {"node": "{{ ansible_host }}"}},
        {"name": "use the fact", "ansible.builtin.set_fact": {"seen": "{{ ansible_facts.talos.hostname }}/{{ ansible_facts.talos.version.tag }}"}},
    ]
    run = run_playbook(play(tasks, cluster.talosconfig_path(), hosts="all"), inventory="%s/inventory.yml" % cluster.state_dir)

    cp_facts = run.task("gather", controlplane.name)["result"]["ansible_facts"]["talos"]
    worker_facts = run.task("gather", worker.name)["result"]["ansible_facts"]["talos"]
    assert run.task("gather", controlplane.name)["result"]["changed"] is False
    assert run.task("use the fact", worker.name)["result"]["ansible_facts"]["seen"] == "%s/v1.14.0" % worker.hostname

    for facts, node in ((cp_facts, controlplane), (worker_facts, worker)):
        assert facts["node"] == node.address and facts["maintenance"] is False and "unavailable" not in facts
        assert facts["hostname"] == node.hostname
        assert facts["version"]["tag"] == node.talos_version and facts["version"]["features"] == {"rbac": True}
        assert facts["machine"] == {"type": node.machine_type, "configured": True, "stage": "running", "ready": True,
                                    "unmet_conditions": []}
        assert facts["config"]["hash"] == load_config(config=node.config_text()).hash()
        assert facts["config"]["machine_type"] == node.machine_type
        assert sorted(service["id"] for service in facts["services"]) == sorted(node.services)
        assert "%s/8" % node.address in facts["network"]["addresses"]
        assert facts["disks"] and facts["mounts"] and facts["memory"]["memtotal"] > 0

    assert "etcd" not in worker_facts
    assert [member["hostname"] for member in cp_facts["etcd"]["members"]] == [controlplane.hostname]
    assert cp_facts["etcd"]["is_leader"] is True and cp_facts["etcd"]["leader"] == cp_facts["etcd"]["members"][0]["id"]
    # Facts are a read: nothing was recorded as a change.
    assert cluster.audit() == []


def test_maintenance_nodes_gather_what_a_reader_may_see(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True)
    # Maintenance mode has no node routing: every node is its own endpoint.
    tasks = [{"name": "gather", FACTS: {"endpoints": ["{{ ansible_host }}:%d" % cluster.port], "insecure": True}}]
    run = run_playbook(play(tasks, cluster.talosconfig_path(), hosts="all"), inventory="%s/inventory.yml" % cluster.state_dir)

    for node in cluster.nodes:
        facts = run.task("gather", node.name)["result"]["ansible_facts"]["talos"]
        # The task acts on its host's node (ansible_host), which in maintenance mode is the endpoint itself.
        assert facts["maintenance"] is True and facts["node"] == node.address
        assert facts["hostname"] == node.hostname
        assert facts["machine"] == {"type": "unknown", "configured": False, "stage": "maintenance", "ready": True, "unmet_conditions": []}
        assert facts["version"]["tag"] == "v1.14.0" and facts["version"]["features"] is None
        assert facts["config"] is None and "etcd" not in facts and "unavailable" not in facts
        assert {service["id"] for service in facts["services"]} == set(node.services)
        assert "%s/8" % node.address in facts["network"]["addresses"]


def test_several_nodes_with_exclusions_and_resources(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2, bootstrapped=True)
    addresses = [node.address for node in cluster.nodes]
    tasks = [{"name": "gather", FACTS: {
        "nodes": addresses,
        "gather_subset": ["!disks", "!mounts", "!memory", "!etcd"],
        "resources": [{"type": "Members.cluster.talos.dev"}, {"type": "MachineTypes.config.talos.dev", "id": "machine-type"}],
    }}]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    result = run.task("gather")["result"]
    assert set(result["nodes"]) == set(addresses)
    # Each node's facts once, under nodes: none is set as the host's fact.
    assert "ansible_facts" not in result
    for node in cluster.nodes:
        facts = result["nodes"][node.address]
        assert facts["hostname"] == node.hostname and facts["machine"]["type"] == node.machine_type
        assert not {"disks", "mounts", "memory", "etcd"} & set(facts)
        members, machine_type = facts["resources"]
        assert members["namespace"] == "cluster" and members["id"] is None
        assert sorted(item["spec"]["hostname"] for item in members["items"]) == sorted(n.hostname for n in cluster.nodes)
        assert machine_type["items"][0]["spec"] == node.machine_type


def test_a_list_of_one_is_keyed_and_a_failed_node_fails_the_task_with_every_nodes_facts(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.faults.make_unreachable(worker)
    tasks = [
        {"name": "one listed", FACTS: {"nodes": [controlplane.address], "gather_subset": ["min"]}},
        {"name": "both", FACTS: {"nodes": [controlplane.address, worker.address], "gather_subset": ["min"], "timeout": 5}},
    ]
    run = run_playbook(play(tasks, cluster.talosconfig_path()), expect_rc=2)

    listed = run.task("one listed")["result"]
    assert "ansible_facts" not in listed and listed["nodes"][controlplane.address]["hostname"] == controlplane.hostname

    both = run.task("both")
    assert both["status"] == "failed"
    assert both["result"]["msg"].startswith("1 of 2 nodes failed (%s): " % worker.address)
    assert both["result"]["nodes"][controlplane.address]["hostname"] == controlplane.hostname
    failed = both["result"]["nodes"][worker.address]
    assert failed["failed"] is True and failed["code"] and worker.address in failed["msg"]


def test_reader_certificate_leaves_out_the_config(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    tasks = [{"name": "gather", FACTS: {"node": node.address, "gather_subset": ["min", "config"]}}]
    run = run_playbook(play(tasks, cluster.talosconfig_path("reader")))

    facts = run.task("gather")["result"]["ansible_facts"]["talos"]
    assert facts["hostname"] == node.hostname and "config" not in facts
    assert "os:admin" in facts["unavailable"]["config"]


def test_one_task_reads_a_hundred_nodes_a_few_at_a_time(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=97)
    addresses = [node.address for node in cluster.nodes]
    tasks = [{"name": "gather", FACTS: {"nodes": addresses, "gather_subset": ["min"], "max_concurrency": 10}},
             {"name": "zero", FACTS: {"nodes": addresses[:1], "max_concurrency": 0}, "ignore_errors": True}]
    run = run_playbook(play(tasks, cluster.talosconfig_path()))

    result = run.task("gather", "localhost")["result"]
    assert sorted(result["nodes"]) == sorted(addresses)
    for node in cluster.nodes:
        facts = result["nodes"][node.address]
        assert facts["hostname"] == node.hostname and facts["machine"]["type"] == node.machine_type
    refused = run.task("zero", "localhost")
    assert refused["status"] == "failed"
    assert refused["result"]["msg"] == "max_concurrency must be at least 1, got 0."
