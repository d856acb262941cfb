# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade role against the emulator: order, stopping at the first failure, resuming, reporting only the
nodes that changed, and waiting in the modules rather than retrying tasks."""

import os

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
        upgrade_quorum_wait_timeout: 10
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
    assert "Upgraded: controlplane-1. Already there: none. Not started: controlplane-3, worker-1, worker-2." in message
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
    assert all((r["changed"], r["from_version"], r["current_version"]) == (True, "v1.13.0", "v1.14.0")
               for r in workers.values())

    calls = len(cluster.audit())
    again = run_playbook(PLAYBOOK, inventory=inventory)
    assert again.changed_count == 0
    assert len(_recap(again)) == 5 and all("changed=0" in line for line in _recap(again)), again.stdout[-2000:]
    _assert_no_task_retried(again)
    assert len(cluster.audit()) == calls


@pytest.mark.once
def test_worker_batch_failure_names_the_finished_workers(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=3, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    cluster.faults.fail_installer(exit_code=2, node="worker-1")

    stopped = run_playbook(PLAYBOOK, inventory=inventory, extra_vars={"upgrade_force_quorum_loss": True}, expect_rc=2)

    message = _failure(stopped)
    assert "The rolling upgrade stopped at the batch of workers worker-1, worker-2" in message
    assert "worker-1 failed" in message
    assert "Upgraded: controlplane-1, worker-2. Already there: none. Not started: worker-3." in message
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
    assert batch[worker_2]["from_version"] == "v1.14.0" and batch[worker_2]["rebooted"] is False
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
        upgrade_quorum_wait_timeout: 3
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

    # A member unhealthy for a while - its etcd status unreadable for the guard's first four asks, two seconds apart
    # (the health checks do not read it): talos_reboot waits for etcd to spare the first control plane, saying why,
    # and goes ahead once the member is back.
    cluster.faults.fail("EtcdStatus", "Unknown", "etcd is not ready", times=4, node="controlplane-3")
    # Progress lines show as they happen only through the controller door.
    waited = run_playbook(REBOOT_PLAYBOOK, inventory=inventory, extra_vars={"upgrade_quorum_wait_timeout": 60},
                          env={"TALOS_TEST_DOOR": ""})
    _assert_no_task_retried(waited)
    cp1 = cluster.node("controlplane-1").address
    lines = [line for line in waited.stdout.splitlines() if "waiting for etcd to spare %s: " % cp1 in line]
    assert lines and "not healthy: controlplane-3 - " in lines[0], waited.stdout[-3000:]
    assert all(line.startswith("controlplane-1: ") for line in lines)  # the task acts on its own host's node
    assert lines[-1].endswith(" s)") and "→ spared (" in lines[-1]
    assert all(node.reboots == 2 for node in cluster.nodes)

    # A member unhealthy for longer than the etcd wait: the guard refuses the first control plane at its end.
    cluster.faults.fail("EtcdStatus", "Unknown", "etcd is not ready", times=-1, node="controlplane-3")
    stopped = run_playbook(REBOOT_PLAYBOOK, inventory=inventory, expect_rc=2)
    message = _failure(stopped)
    assert "The rolling reboot stopped at control plane controlplane-1" in message
    # The role's own override, not the modules' force_quorum_loss; the refusal itself is said once, by its task.
    assert "set upgrade_force_quorum_loss: true to go ahead anyway" in message and "Refusing" not in message
    assert message.endswith("Rebooted: none. Not started: controlplane-2, controlplane-3, worker-1, worker-2.")
    cause = _cause(stopped)
    assert cause.startswith("Refusing to reboot control-plane node")
    assert "only 1 member other than controlplane-1 is healthy" in cause
    assert "The guard still refused after 3 seconds of waiting (quorum_wait_timeout)." in cause
    assert len(cluster.audit(method="Reboot")) == 10


@pytest.mark.once
def test_an_unhealthy_cluster_is_refused_before_the_first_node_unless_allowed(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    worker = cluster.workers[0]
    cluster.add_diagnostic(worker, "address-overlap", "host and pod addresses overlap")
    # One control plane: etcd cannot spare it, so the quorum guard is forced.
    forced = {"upgrade_force_quorum_loss": True}

    for check in (True, False):
        refused = run_playbook(PLAYBOOK, inventory=inventory, extra_vars=forced, check=check, expect_rc=2)
        assert _failure(refused) == (
            "The rolling upgrade did not start: the cluster is not healthy - worker-1 (%s): no_diagnostics: diagnostic "
            "address-overlap: host and pod addresses overlap. Nothing %s upgraded. Make those nodes healthy and run the "
            "role again, or set upgrade_allow_unhealthy: true to go ahead without them (nodes that do not answer are left "
            "out, and the health waits leave out every node unhealthy now)." % (worker.address, "would be" if check else "was"))
        assert cluster.audit() == [] and _recap_changes(refused) == {"controlplane-1": 0, "worker-1": 0}

    # Allowed, the unhealthy worker (which answers) is upgraded too, and no health wait waits on its diagnostic.
    allowed = run_playbook(PLAYBOOK, inventory=inventory, extra_vars=dict(forced, upgrade_allow_unhealthy=True))
    assert _upgraded(cluster) == ["controlplane-1", "worker-1"]
    (report,) = [r for r in allowed.results if r["task"].endswith("Report the rolling upgrade")]
    assert report["result"]["msg"] == ("Every node runs Talos v1.14.0. Upgraded: controlplane-1, worker-1. Already there: "
                                       "none.")
    health = [r for r in allowed.results if r["action"] == "talos_linux.talos.talos_health"]
    assert len(health) == 3 and all(r["result"]["node_source"] == "options" for r in health)
    assert health[0]["result"]["controlplane_nodes"] == [cluster.controlplanes[0].address]
    assert health[0]["result"]["worker_nodes"] == [worker.address]
    assert health[0]["result"]["unhealthy_nodes"] == {
        worker.address: ["no_diagnostics: diagnostic address-overlap: host and pod addresses overlap"]}
    assert _recap_changes(allowed) == {"controlplane-1": 1, "worker-1": 1}


@pytest.mark.once
def test_a_node_upgraded_before_a_failed_health_wait_is_counted(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.13.0", reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    worker = cluster.workers[0]
    # The worker turns unhealthy as the control plane is told to reboot into the new version.
    cluster.faults.on_call("Reboot", lambda _node: worker.diagnostics.__setitem__(
        "address-overlap", {"message": "host and pod addresses overlap", "details": []}))

    stopped = run_playbook(PLAYBOOK, inventory=inventory, extra_vars={"upgrade_force_quorum_loss": True,
                                                                      "upgrade_health_wait_timeout": 2}, expect_rc=2)
    assert "Cluster health check no_diagnostics" in _cause(stopped) and worker.address in _cause(stopped)
    assert _failure(stopped) == (
        "The rolling upgrade stopped after control plane controlplane-1 (Wait until the cluster is healthy again - "
        "controlplane-1 failed, see above). Upgraded: controlplane-1. Already there: none. Not started: worker-1.")
    assert _upgraded(cluster) == ["controlplane-1"] and _recap_changes(stopped)["controlplane-1"] == 1


REBOOT_FIVE = REBOOT_PLAYBOOK.replace("upgrade_wait_for_services: [etcd, kubelet]", "upgrade_health_wait_timeout: 60")


@pytest.mark.once
def test_a_rolling_restart_with_a_worker_off_reboots_nothing_unless_told_to_go_ahead_without_it(emulator, run_playbook):
    cluster = emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.2)
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    off = cluster.node("worker-2")
    cluster.power_off(off.name)

    for check in (True, False):
        refused = run_playbook(REBOOT_FIVE, inventory=inventory, check=check, expect_rc=2)
        message = _failure(refused)
        assert message.startswith("The rolling reboot did not start: the cluster is not healthy - worker-2 (%s): "
                                  "apid_ready: Node %s is unreachable" % (off.address, off.address)), message
        assert "Nothing %s rebooted." % ("would be" if check else "was") in message
        assert "set upgrade_allow_unhealthy: true" in message
        # Refused at the gate: no node was touched, and nothing waited on the worker that is off.
        assert not [r for r in refused.results if "Wait until" in r["task"] or "Reboot the" in r["task"]]
        assert cluster.audit(method="Reboot") == [] and _recap_changes(refused)["controlplane-1"] == 0

    allowed = {"upgrade_allow_unhealthy": True}
    preview = run_playbook(REBOOT_FIVE, inventory=inventory, extra_vars=allowed, check=True)
    (report,) = [r for r in preview.results if r["task"].endswith("Report the rolling reboot")]
    assert report["result"]["msg"] == (
        "Check mode: every node but those left out would be rebooted, one control plane at a time then the workers in "
        "batches. Would be rebooted: controlplane-1, controlplane-2, controlplane-3, worker-1. Left out, not answering "
        "before the start: worker-2.")
    assert cluster.audit(method="Reboot") == []
    # One line per node, in the order the hosts' workers finish (a loaded machine shuffles them).
    assert sorted(line for line in preview.stdout.splitlines() if "would be rebooted." in line) == [
        '    "msg": "%s would be rebooted."' % name for name in ("controlplane-1", "controlplane-2", "controlplane-3", "worker-1")]

    restarted = run_playbook(REBOOT_FIVE, inventory=inventory, extra_vars=allowed)
    (report,) = [r for r in restarted.results if r["task"].endswith("Report the rolling reboot")]
    assert report["result"]["msg"].endswith("Rebooted: controlplane-1, controlplane-2, controlplane-3, worker-1. Left "
                                            "out, not answering before the start: worker-2.")
    assert sorted(entry["node"] for entry in cluster.audit(method="Reboot")) == [
        "controlplane-1", "controlplane-2", "controlplane-3", "worker-1"]
    assert _recap_changes(restarted) == {"controlplane-1": 1, "controlplane-2": 1, "controlplane-3": 1, "worker-1": 1,
                                         "worker-2": 0}
    # The health waits left the worker that is off out: they passed (one on it would have failed at its timeout).
    waits = [r for r in restarted.results if r["task"].split(" : ")[-1].startswith("Wait until the cluster is healthy")]
    assert len(waits) == 4 and all(r["status"] == "ok" for r in waits)
    assert all(r["result"]["checks"][3]["name"] == "apid_ready" for r in waits)


@pytest.mark.parametrize("target, message", [
    ({"upgrade_version": "latest"}, "upgrade_version 'latest' is not a Talos release: give a release such as v1.14.1. "
                                    "Nothing was upgraded."),
    ({"upgrade_version": "v1.99.0"}, "upgrade_version 'v1.99.0' is not a Talos release this collection supports (v1.9 to "
                                     "v1.14, any patch release of them): v1.99 is newer than v1.14; check the value for a "
                                     "typo, or use a release of the collection that supports Talos v1.99. Nothing was "
                                     "upgraded."),
    ({"upgrade_version": "", "upgrade_installer_image": "ghcr.io/siderolabs/installer:v1.99.0"},
     "The tag 'v1.99.0' of upgrade_installer_image 'ghcr.io/siderolabs/installer:v1.99.0' is not a Talos release this collection "
     "supports"),
])
def test_a_target_that_is_no_supported_release_is_refused_before_any_node(emulator, run_playbook, target, message):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, talos_version="v1.13.0")
    inventory = os.path.join(cluster.state_dir, "inventory.yml")
    refused = run_playbook(PLAYBOOK, inventory=inventory, extra_vars=target, expect_rc=2)
    assert _failure(refused).startswith(message)
    assert len([r for r in refused.results if r["status"] == "failed"]) == 1
    assert cluster.audit() == [] and all(node.talos_version == "v1.13.0" for node in cluster.nodes)
