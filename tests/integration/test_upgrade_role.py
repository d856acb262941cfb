# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade role against the emulator: order, stopping at the first failure, resuming, reporting only the
nodes that changed, and waiting in the modules rather than retrying tasks."""

import os
import threading

import pytest

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
"""


def _upgraded(cluster):
    """Node names in the order their installer ran successfully."""
    return [entry["node"] for entry in cluster.audit(method=UPGRADE) if entry.get("exit_code") == 0]


def _failure(run):
    """The role's summary: the last failure."""
    failed = [r for r in run.results if r["status"] == "failed"]
    assert failed, run.stdout[-3000:]
    return failed[-1]["result"]["msg"]


def _cause(run):
    """The failed task's own message, which the summary does not repeat."""
    failed = [r for r in run.results if r["status"] == "failed"]
    assert len(failed) == 2, run.stdout[-3000:]
    assert failed[0]["result"]["msg"] not in failed[1]["result"]["msg"]
    return failed[0]["result"]["msg"]


def _status(run, task):
    (result,) = [r for r in run.results if r["task"].endswith(" : " + task)]
    return result["status"]


def _batch(run, hosts):
    """The per-node results of the talos_upgrade task of the batch ``hosts``."""
    (result,) = [r for r in run.results if r["task"].endswith(" : Upgrade the workers of the batch - " + ", ".join(hosts))]
    return result["result"]["nodes"]


def _assert_no_task_retried(run):
    assert "FAILED - RETRYING" not in run.stdout, run.stdout[-3000:]


def _recap(run):
    """The PLAY RECAP lines, one per host."""
    return [line for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines() if " : ok=" in line]


def _recap_changes(run):
    """``{host: changed count}`` from the PLAY RECAP."""
    return dict((line.split()[0], int(line.split("changed=")[1].split()[0])) for line in _recap(run))


@pytest.mark.once
def test_control_plane_failure_stops_the_upgrade_and_a_rerun_resumes(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2, etcd="real")
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    cluster.faults.fail_installer(exit_code=1, node="controlplane-2")

    stopped = run_playbook(PLAYBOOK, inventory=inventory, expect_rc=2)

    message = _failure(stopped)
    assert "The rolling upgrade stopped at control plane controlplane-2" in message
    assert "exited with code 1" in _cause(stopped)
    assert "Done: controlplane-1." in message
    assert "Not started: controlplane-3, worker-1, worker-2." in message
    assert _upgraded(cluster) == ["controlplane-1"]

    resumed = run_playbook(PLAYBOOK, inventory=inventory)
    _assert_no_task_retried(resumed)
    order = _upgraded(cluster)
    # Control planes one after the other; the two workers form one concurrent batch.
    assert order[:3] == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert sorted(order[3:]) == ["worker-1", "worker-2"]
    (report,) = [r for r in resumed.results if r["task"].endswith("Report the rolling upgrade")]
    assert "Already there: controlplane-1." in report["result"]["msg"]
    assert all(node.talos_version == "v1.14.0" for node in cluster.nodes)
    # Only the nodes that changed are reported changed, each on its own host, none on the host that ran the tasks.
    assert _recap_changes(resumed) == {"controlplane-1": 0, "controlplane-2": 1, "controlplane-3": 1, "worker-1": 1,
                                       "worker-2": 1}
    # The two workers: one task, each node's outcome in its result.
    workers = _batch(resumed, ["worker-1", "worker-2"])
    assert sorted(workers) == sorted(cluster.node(name).address for name in ("worker-1", "worker-2"))
    assert all((r["changed"], r["previous_version"], r["current_version"]) == (True, "v1.13.0", "v1.14.0")
               for r in workers.values())

    calls = len(cluster.audit())
    again = run_playbook(PLAYBOOK, inventory=inventory)
    assert again.changed_count == 0
    assert len(_recap(again)) == 5 and all("changed=0" in line for line in _recap(again)), again.stdout[-2000:]
    _assert_no_task_retried(again)
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
    failed_batch = [r for r in stopped.results if r["status"] == "failed"][0]["result"]["nodes"]
    worker_1, worker_2 = cluster.node("worker-1").address, cluster.node("worker-2").address
    assert failed_batch[worker_1]["failed"] is True and "exited with code 2" in failed_batch[worker_1]["msg"]
    assert failed_batch[worker_2]["changed"] is True and "failed" not in failed_batch[worker_2]

    # The rerun upgrades worker-1 and worker-3 only: worker-2, upgraded in the batch that failed, is not changed.
    resumed = run_playbook(PLAYBOOK, inventory=inventory, extra_vars={"upgrade_force_quorum_loss": True})
    _assert_no_task_retried(resumed)
    batch = _batch(resumed, ["worker-1", "worker-2"])
    assert (batch[worker_1]["changed"], batch[worker_2]["changed"]) == (True, False)
    assert batch[worker_2]["previous_version"] == "v1.14.0" and batch[worker_2]["rebooted"] is False
    (report,) = [r for r in resumed.results if r["task"].endswith("Report the rolling upgrade")]
    assert "Upgraded: worker-1, worker-3." in report["result"]["msg"]
    assert "Already there: controlplane-1, worker-2." in report["result"]["msg"]


REBOOT_PLAYBOOK = """
- name: Roll a restart
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.upgrade
      vars:
        upgrade_reboot_only: true
        upgrade_wait_for_services: [etcd, kubelet]
        upgrade_talosconfig: "{{ talos_state_dir }}/talosconfig"
        upgrade_worker_batch_size: 2
        upgrade_wait_timeout: 60
        upgrade_etcd_wait_timeout: 3
"""


@pytest.mark.once
def test_reboot_only_restarts_every_node_in_order_behind_the_quorum_guard(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.2, etcd="real")
    inventory = os.path.join(cluster.state_dir, "inventory.yml")

    run = run_playbook(REBOOT_PLAYBOOK, inventory=inventory)
    _assert_no_task_retried(run)
    order = [entry["node"] for entry in cluster.audit(method="Reboot")]
    assert order[:3] == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert sorted(order[3:]) == ["worker-1", "worker-2"]
    assert all(node.reboots == 1 for node in cluster.nodes)
    assert cluster.audit(method=UPGRADE) == []
    (report,) = [r for r in run.results if r["task"].endswith("Report the rolling reboot")]
    assert "Rebooted" in report["result"]["msg"] and "controlplane-1, controlplane-2, controlplane-3" in report["result"]["msg"]
    # etcd is waited for where it runs: on the control planes, not on the workers (issue 31).
    (batch,) = [r for r in run.results if r["task"].endswith("Reboot the workers of the batch - worker-1, worker-2")]
    assert all(node["services"] == {"etcd": "not run on worker nodes", "kubelet": "Running, healthy"}
               for node in batch["result"]["nodes"].values())
    assert _recap_changes(run) == dict((node.name, 1) for node in cluster.nodes)

    # A member unhealthy for a while: talos_reboot waits for etcd to spare the first control plane, saying why,
    # and goes ahead once the member is back.
    cluster.faults.make_unreachable("controlplane-3")
    back = threading.Timer(8, cluster.faults.make_reachable, ["controlplane-3"])
    back.start()
    try:
        # Progress lines show as they happen only through the controller door.
        waited = run_playbook(REBOOT_PLAYBOOK, inventory=inventory, extra_vars={"upgrade_etcd_wait_timeout": 60},
                              env={"TALOS_TEST_DOOR": ""})
    finally:
        back.cancel()
    _assert_no_task_retried(waited)
    cp1 = cluster.node("controlplane-1").address
    lines = [line for line in waited.stdout.splitlines() if "waiting for etcd to spare %s: " % cp1 in line]
    assert lines and "not healthy: controlplane-3 - " in lines[0], waited.stdout[-3000:]
    assert all(line.startswith("controlplane-1: ") for line in lines)  # the task acts on its own host's node
    assert lines[-1].endswith(" s)") and "→ spared (" in lines[-1]
    assert all(node.reboots == 2 for node in cluster.nodes)

    # A member unhealthy for longer than the etcd wait: the guard refuses the first control plane at its end.
    cluster.faults.make_unreachable("controlplane-3")
    stopped = run_playbook(REBOOT_PLAYBOOK, inventory=inventory, expect_rc=2)
    message = _failure(stopped)
    assert "The rolling reboot stopped at control plane controlplane-1" in message
    # The role's own override, not the modules' force_quorum_loss; the refusal itself is said once, by its task.
    assert "set upgrade_force_quorum_loss: true to go ahead anyway" in message and "Refusing" not in message
    cause = _cause(stopped)
    assert cause.startswith("Refusing to reboot control-plane node")
    assert "only 1 member other than controlplane-1 is healthy" in cause
    assert "The guard still refused after 3 seconds of waiting (quorum_wait_timeout)." in cause
    assert len(cluster.audit(method="Reboot")) == 10


@pytest.mark.once
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
    assert "Cluster health check no_diagnostics" in _cause(stopped) and worker.address in _cause(stopped)
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
