# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node_remove role against the emulator: a control plane leaves etcd and is wiped,
a worker is wiped, check mode sends nothing, the quorum guard stops a removal, and a
powered-off control plane has its member removed through another one, or, when it was the only endpoint, the failure
names the variable to set."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
import yaml
from test_robustness import assert_no_secret, cluster_secrets

pytestmark = pytest.mark.long


def remove_play(cluster, node, **role_vars):
    variables = dict(node_remove_node=node.address, node_remove_talosconfig=cluster.talosconfig_path(),
                     node_remove_wait_timeout=30)
    variables.update(role_vars)
    return [{"name": "Remove a node", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "roles": [{"role": "talos_linux.talos.node_remove", "vars": variables}]}]


def _report(run):
    (report,) = [r for r in run.results if "Report the removal" in r["task"]]
    return report["result"]["msg"]


def test_control_plane_leaves_etcd_then_is_wiped(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=1, bootstrapped=True, reboot_seconds=0.2, etcd="real")
    cp3 = cluster.controlplanes[2]

    check = run_playbook(remove_play(cluster, cp3), check=True)
    assert cluster.audit() == []
    assert _report(check).startswith("Check mode: would remove %s (controlplane). etcd: member controlplane-3 would "
                                     "leave. Reset: wiped the whole system disk." % cp3.address)

    run = run_playbook(remove_play(cluster, cp3, node_remove_reboot=True, node_remove_system_labels_to_wipe=["STATE"]))
    assert [(e["method"], e["node"]) for e in cluster.audit()] == [
        ("machine.MachineService/EtcdLeaveCluster", cp3.name), ("machine.MachineService/Reset", cp3.name)]
    assert sorted(m.node.name for m in cluster.etcd.members) == ["controlplane-1", "controlplane-2"]
    assert cp3.maintenance
    assert _report(run) == ("Removed %s (controlplane). etcd: member controlplane-3 left. Reset: wiped STATE. The node "
                            "is maintenance." % cp3.address)

    again = run_playbook(remove_play(cluster, cp3, node_remove_reboot=True, node_remove_system_labels_to_wipe=["STATE"]))
    assert again.changed_count == 0 and len(cluster.audit()) == 2
    assert "Reset: nothing to do, the node is already in maintenance mode." in _report(again)


def test_worker_is_wiped_and_powered_off(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, etcd="real")
    worker = cluster.workers[0]
    run = run_playbook(remove_play(cluster, worker, node_remove_wipe_mode="system_disk"))
    assert [e["method"] for e in cluster.audit()] == ["machine.MachineService/Reset"]
    assert cluster.audit()[0]["mode"] == "SYSTEM_DISK" and not worker.powered
    assert _report(run) == ("Removed %s (worker). etcd: not a member. Reset: wiped the whole system disk. The node is "
                            "off." % worker.address)


def test_quorum_guard_stops_the_removal_before_any_change(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, _cp2, cp3 = cluster.controlplanes
    cluster.faults.make_unreachable(cp3)
    run = run_playbook(remove_play(cluster, cp1, node_remove_wait_timeout=2), expect_rc=2)
    (failed,) = [r for r in run.results if r["status"] == "failed"]
    assert "Make the node's etcd member leave etcd" in failed["task"]
    assert failed["result"]["msg"].startswith("Refusing to remove etcd member controlplane-1")
    assert cluster.audit() == []


def test_a_powered_off_control_plane_is_removed_through_another(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=1, bootstrapped=True, etcd="real")
    cp1, _cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp3)
    assert sorted(m.node.name for m in cluster.etcd.members) == ["controlplane-1", "controlplane-2", "controlplane-3"]

    check = run_playbook(remove_play(cluster, cp3), check=True)
    assert cluster.audit() == [] and len(cluster.etcd.members) == 3
    assert _report(check) == (
        "Check mode: would remove %s, which is unreachable. etcd: member controlplane-3 would be removed through the "
        "talosconfig endpoints. Reset and wipe: skipped because the node is unreachable; wipe its disks before the "
        "machine is used again." % cp3.address)

    run = run_playbook(remove_play(cluster, cp3), verbosity=3)
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))
    assert [(e["method"], e["code"]) for e in cluster.audit()] == [("machine.MachineService/EtcdRemoveMemberByID", "OK")]
    assert cluster.audit()[0]["node"] != cp3.name
    assert sorted(m.node.name for m in cluster.etcd.members) == ["controlplane-1", "controlplane-2"]
    assert _report(run).startswith("Removed %s, which is unreachable. etcd: member controlplane-3 was removed through "
                                   "the talosconfig endpoints. Reset and wipe: skipped because the node is unreachable"
                                   % cp3.address)

    again = run_playbook(remove_play(cluster, cp3, node_remove_via_node=cp1.address))
    assert again.changed_count == 0 and len(cluster.audit()) == 1
    assert "etcd: no member of it (removed already, or not a control plane)." in _report(again)


def test_a_powered_off_first_endpoint_is_removed_through_the_next_one(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, cp2, _cp3 = cluster.controlplanes
    cluster.power_off(cp1)
    run = run_playbook(remove_play(cluster, cp1, node_remove_via_node=cp2.address))
    assert [(e["method"], e["node"]) for e in cluster.audit()] == [("machine.MachineService/EtcdRemoveMemberByID", cp2.name)]
    assert "etcd: member controlplane-1 was removed through %s." % cp2.address in _report(run)
    assert sorted(m.node.name for m in cluster.etcd.members) == ["controlplane-2", "controlplane-3"]


@pytest.mark.once
def test_when_the_dead_node_is_the_only_endpoint_the_failure_names_what_to_set(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, cp2, cp3 = cluster.controlplanes
    talosconfig = yaml.safe_load(open(cluster.talosconfig_path()).read())
    for context in talosconfig["contexts"].values():
        context["endpoints"] = [cp1.endpoint]
    only_cp1 = tmp_path / "talosconfig-cp1"
    only_cp1.write_text(yaml.safe_dump(talosconfig))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(cluster.inventory()))
    cluster.power_off(cp1)

    failed = run_playbook(remove_play(cluster, cp1, node_remove_talosconfig=str(only_cp1)), inventory=str(inventory),
                          expect_rc=2)
    (said,) = [r for r in failed.results if "Say which endpoints to use" in r["task"]]
    assert said["result"]["msg"].endswith(
        "No endpoint answered: set node_remove_endpoints to control planes whose API answers (the inventory's other "
        "control planes: %s, %s)." % (cp2.address, cp3.address)), said["result"]["msg"]
    assert len(cluster.etcd.members) == 3

    run = run_playbook(remove_play(cluster, cp1, node_remove_talosconfig=str(only_cp1),
                                   node_remove_endpoints=[cp2.endpoint, cp3.endpoint]), inventory=str(inventory))
    assert "etcd: member controlplane-1 was removed through %s, %s." % (cp2.endpoint, cp3.endpoint) in _report(run)
    assert sorted(m.node.name for m in cluster.etcd.members) == ["controlplane-2", "controlplane-3"]
