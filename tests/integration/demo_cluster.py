# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The demo's cluster for tests that use it as a user would: tests/run-demo starts it (``make demo``, with the
Kubernetes switch ``make demo KUBERNETES=1`` as ``kubernetes=True``) in the test's Python environment, and the test
gets what the demo leaves a user, from its files only.

3 control planes and 2 workers with real etcd members, provisioned from maintenance mode by the cluster role; with
``kubernetes`` also a real kube-apiserver on the control planes' etcd and the nodes as its kubelets. Stopping it
(``make demo-stop``) must leave no process of it behind.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import contextlib
import os
import subprocess
import sys

import yaml

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
RUN_DEMO = os.path.join(TESTS, "run-demo")

# ``directory``: the cluster's directory (prod/, where the other files are); ``controlplanes``, ``workers``:
# [(name, address)] as the inventory has them; ``name``: the cluster's name.
DemoCluster = collections.namedtuple(
    "DemoCluster", "directory inventory talosconfig kubeconfig secrets controlplanes workers kubernetes name")


def demo_environment(workdir):
    """The environment tests/run-demo and the playbooks on its cluster run in: this Python's tools first on PATH, the
    collection where the tests install it, no TALOSCONFIG of the caller's."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(workdir / "ansible-local"))
    env.pop("TALOSCONFIG", None)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", os.path.join(REPO, ".collections"))
    return env


@contextlib.contextmanager
def started_demo(state_dir, env, kubernetes=False, reboot_seconds=0.05):
    """Run ``tests/run-demo --current-python --state-dir STATE_DIR [--kubernetes]``; yields its output once the
    cluster runs, then stops it with ``tests/run-demo stop`` and checks that nothing of it is left running."""
    state_dir = str(state_dir)
    command = [RUN_DEMO, "--current-python", "--state-dir", state_dir, "--reboot-seconds", str(reboot_seconds)]
    command += ["--kubernetes"] if kubernetes else []
    try:
        started = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False, cwd=REPO)
        assert started.returncode == 0, started.stdout[-6000:] + started.stderr[-3000:]
        yield started.stdout
    finally:
        stopped = subprocess.run([RUN_DEMO, "stop", "--current-python", "--state-dir", state_dir],
                                 capture_output=True, text=True, env=env, timeout=120, check=False, cwd=REPO)
    assert stopped.returncode == 0 and "is stopped" in stopped.stdout, stopped.stdout + stopped.stderr
    assert not os.path.exists(os.path.join(state_dir, "emulator", "state.json"))
    # Stopping the cluster stopped everything its process ran: no etcd member, no kube-apiserver of it is left.
    left = subprocess.run(["pgrep", "-f", state_dir], capture_output=True, text=True, check=False).stdout.split()
    assert not left, "processes of the demo left after demo-stop: %s" % left


def _hosts(inventory, group):
    return [(name, host["ansible_host"]) for name, host in inventory["all"]["children"][group]["hosts"].items()]


@contextlib.contextmanager
def demo_cluster(workdir, kubernetes=False):
    """Yields a ``DemoCluster`` once the demo's cluster runs, read from the directory tests/run-demo made."""
    with started_demo(workdir / "demo", demo_environment(workdir), kubernetes=kubernetes):
        directory = workdir / "demo" / "prod"
        with open(str(directory / "inventory.yml")) as handle:
            inventory = yaml.safe_load(handle)
        yield DemoCluster(str(directory), str(directory / "inventory.yml"), str(directory / "talosconfig"),
                          str(directory / "kubeconfig"), str(directory / "secrets.yaml"), _hosts(inventory, "controlplane"),
                          _hosts(inventory, "workers"), kubernetes, inventory["all"]["vars"]["talos_cluster_name"])
