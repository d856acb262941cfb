# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade role against the emulator: order, stopping at the first failure, resuming."""

import os

UPGRADE = "machine.LifecycleService/Upgrade"

PLAYBOOK = """
- name: Roll the upgrade
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.upgrade
      vars:
        upgrade_version: v1.14.0
        upgrade_talosconfig: "{{ talos_state_dir }}/talosconfig"
        upgrade_worker_batch_size: 2
        upgrade_wait_timeout: 60
        upgrade_etcd_wait_timeout: 10
        upgrade_etcd_wait_delay: 1
        upgrade_poll_delay: 1
"""


def _upgraded(cluster):
    """Node names in the order their installer ran successfully."""
    return [entry["node"] for entry in cluster.audit(method=UPGRADE) if entry.get("exit_code") == 0]


def _failure(run):
    failed = [r for r in run.results if r["status"] == "failed"]
    assert failed, run.stdout[-3000:]
    return failed[-1]["result"]["msg"]


def test_control_plane_failure_stops_the_upgrade_and_a_rerun_resumes(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    cluster.faults.fail_installer(exit_code=1, node="controlplane-2")

    stopped = run_playbook(PLAYBOOK, inventory=inventory, expect_rc=2)

    message = _failure(stopped)
    assert "The rolling upgrade stopped at control plane controlplane-2" in message
    assert "exited with code 1" in message
    assert "Done: controlplane-1." in message
    assert "Not started: controlplane-3, worker-1, worker-2." in message
    assert _upgraded(cluster) == ["controlplane-1"]

    resumed = run_playbook(PLAYBOOK, inventory=inventory)
    order = _upgraded(cluster)
    # Control planes one after the other; the two workers form one concurrent batch.
    assert order[:3] == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert sorted(order[3:]) == ["worker-1", "worker-2"]
    (report,) = [r for r in resumed.results if r["task"].endswith("Report the rolling upgrade")]
    assert "Already there: controlplane-1." in report["result"]["msg"]
    assert all(node.talos_version == "v1.14.0" for node in cluster.nodes)

    calls = len(cluster.audit())
    again = run_playbook(PLAYBOOK, inventory=inventory)
    assert again.changed_count == 0
    assert len(cluster.audit()) == calls


def test_worker_batch_failure_names_the_finished_workers(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=3, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    cluster.faults.fail_installer(exit_code=2, node="worker-1")

    stopped = run_playbook(PLAYBOOK, inventory=inventory, extra_vars={"upgrade_force_quorum_loss": True}, expect_rc=2)

    message = _failure(stopped)
    assert "The rolling upgrade stopped at the batch of workers worker-1, worker-2" in message
    assert "worker-1 failed" in message
    assert "Done: controlplane-1, worker-2." in message
    assert "Not started: worker-3." in message
    assert sorted(_upgraded(cluster)) == ["controlplane-1", "worker-2"]
    assert cluster.node("worker-3").talos_version == "v1.13.0"


REBOOT_PLAYBOOK = """
- name: Roll a restart
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.upgrade
      vars:
        upgrade_reboot_only: true
        upgrade_wait_for_services: [kubelet]
        upgrade_talosconfig: "{{ talos_state_dir }}/talosconfig"
        upgrade_worker_batch_size: 2
        upgrade_wait_timeout: 60
        upgrade_etcd_wait_timeout: 3
        upgrade_etcd_wait_delay: 1
        upgrade_poll_delay: 1
"""


def test_reboot_only_restarts_every_node_in_order_behind_the_quorum_guard(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")

    run = run_playbook(REBOOT_PLAYBOOK, inventory=inventory)
    order = [entry["node"] for entry in cluster.audit(method="Reboot")]
    assert order[:3] == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert sorted(order[3:]) == ["worker-1", "worker-2"]
    assert all(node.reboots == 1 for node in cluster.nodes)
    assert cluster.audit(method=UPGRADE) == []
    (report,) = [r for r in run.results if r["task"].endswith("Report the rolling reboot")]
    assert "Rebooted" in report["result"]["msg"] and "controlplane-1, controlplane-2, controlplane-3" in report["result"]["msg"]

    # An unhealthy member: the quorum guard refuses the first control plane, retried until the etcd wait runs out.
    cluster.faults.make_unreachable("controlplane-3")
    stopped = run_playbook(REBOOT_PLAYBOOK, inventory=inventory, expect_rc=2)
    message = _failure(stopped)
    assert "The rolling upgrade stopped at control plane controlplane-1" in message
    assert "Refusing to reboot control-plane node" in message
    assert len(cluster.audit(method="Reboot")) == 5


def test_unhealthy_cluster_stops_the_upgrade_after_the_node(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    worker = cluster.workers[0]
    cluster.add_diagnostic(worker, "address-overlap", "host and pod addresses overlap")

    # One control plane: etcd cannot spare it, so the quorum guard is forced (by the deprecated name, which still works).
    forced = {"upgrade_force": True}
    stopped = run_playbook(PLAYBOOK, inventory=inventory, extra_vars=dict(forced, upgrade_health_timeout=2), expect_rc=2)

    message = _failure(stopped)
    assert "The rolling upgrade stopped at control plane controlplane-1" in message
    assert "Cluster health check no_diagnostics" in message and worker.address in message
    assert "Not started: worker-1." in message
    assert _upgraded(cluster) == ["controlplane-1"]

    cluster.add_diagnostic(worker, "address-overlap", None)
    run_playbook(PLAYBOOK, inventory=inventory, extra_vars=forced)
    assert _upgraded(cluster) == ["controlplane-1", "worker-1"]
    again = run_playbook(PLAYBOOK, inventory=inventory, extra_vars=forced)
    health = [r for r in again.results if r["action"] == "talos_linux.talos.talos_health"]
    assert len(health) == 2 and all(r["result"]["node_source"] == "options" for r in health)
    assert health[0]["result"]["control_plane_nodes"] == [cluster.controlplanes[0].address]
    assert health[0]["result"]["worker_nodes"] == [worker.address]
