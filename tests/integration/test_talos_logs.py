# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_logs through ansible-playbook against the emulator: service, container and kernel logs, tails and limits."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def logs_task(name, **options):
    return dict({"name": name, "talos_linux.talos.talos_logs": options})


def test_service_container_and_kernel_logs(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.set_service_state(cp, "etcd", "Running", healthy=True, message="the last etcd message")
    play = module_play(cluster, "talos_logs", {"service": "etcd", "lines": 5}, cp.address, "etcd tail")
    play["tasks"] += [
        logs_task("whole etcd log", service="etcd", lines=0),
        logs_task("container", namespace="cri", service="kube-system/kube-apiserver-%s:kube-apiserver" % cp.hostname, lines=2),
        logs_task("kernel", kernel=True, lines=3, node=worker.address),
        logs_task("kernel of every node", kernel=True, lines=1, nodes=[cp.address, worker.address], node="{{ omit }}"),
        dict(logs_task("etcd of every node", service="etcd", lines=1, nodes=[worker.address, cp.address], node="{{ omit }}"),
             ignore_errors=True),
        logs_task("nothing newer than the future", service="etcd", since="2999-01-01T00:00:00Z"),
        logs_task("the last hour", service="apid", since="1h", lines=0),
    ]
    run = run_playbook(play, check=True)

    tail = run.task("etcd tail")["result"]
    assert tail["changed"] is False and len(tail["lines"]) == 5
    assert tail["lines"][-1].endswith("etcd: [Running] the last etcd message")
    whole = run.task("whole etcd log")["result"]["lines"]
    assert len(whole) > 20 and whole[-5:] == tail["lines"]
    container = run.task("container")["result"]["lines"]
    assert len(container) == 2 and "kube-apiserver started" in container[-1]
    kernel = run.task("kernel")["result"]
    assert len(kernel["lines"]) == 3 and kernel["lines"][-1].startswith("kern:") and worker.boot_id in kernel["lines"][-1]
    assert "nodes" not in kernel and "logs" not in kernel
    every = run.task("kernel of every node")["result"]
    assert sorted(every["nodes"]) == sorted([cp.address, worker.address]) and "lines" not in every
    assert [every["nodes"][node.address]["lines"][0].endswith(node.boot_id) for node in (cp, worker)] == [True, True]
    assert "logs" not in every
    # A worker runs no etcd: it fails, and the control plane's log is read all the same.
    etcd_of_every = run.task("etcd of every node")
    assert etcd_of_every["status"] == "failed"
    assert etcd_of_every["result"]["msg"].startswith("1 of 2 nodes failed (%s): " % worker.address)
    assert etcd_of_every["result"]["nodes"][worker.address]["failed"] is True
    assert etcd_of_every["result"]["nodes"][cp.address]["lines"] == tail["lines"][-1:]
    assert run.task("nothing newer than the future")["result"]["lines"] == []
    assert len(run.task("the last hour")["result"]["lines"]) > 20


def test_unknown_service_and_bad_options_fail_clearly(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True, reboot_seconds=0.1)
    node = cluster.controlplanes[0].address
    play = module_play(cluster, "talos_logs", {"service": "nope"}, node, "unknown", ignore_errors=True)
    play["tasks"] += [
        dict(logs_task("bad since", service="etcd", since="yesterday"), ignore_errors=True),
        dict(logs_task("both", service="etcd", kernel=True), ignore_errors=True),
        dict(logs_task("neither"), ignore_errors=True),
    ]
    run = run_playbook(play)
    assert run.task("unknown")["status"] == "failed" and "nope" in run.task("unknown")["result"]["msg"]
    assert "since must be a duration" in run.task("bad since")["result"]["msg"]
    assert "not both" in run.task("both")["result"]["msg"]
    assert "service" in run.task("neither")["result"]["msg"]
