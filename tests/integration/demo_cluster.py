# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A cluster started as ``make demo`` starts it, for tests that use it as a user would, from its files only.

3 control planes and 2 workers with real etcd members, provisioned from maintenance mode by the cluster role; with
``kubernetes=True`` also a real kube-apiserver on the control planes' etcd and the nodes as its kubelets (the demo's
Kubernetes switch). What a test gets is what the demo leaves a user: the cluster's directory (inventory, secrets
bundle, configs, talosconfig, kubeconfig) and the nodes' names and addresses.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections
import contextlib
import os

import yaml
from playbook_runner import run_playbook_in

from kubernetes_cluster import provisioned
from talos_emulator import EmulatedCluster

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TALOS_VERSION = "v1.14.0"
KUBERNETES_VERSION = "v1.35.0"

# ``directory``: the cluster's directory (where the other files are); ``controlplanes``, ``workers``: [(name, address)].
# Only what tests/run-demo leaves a user, so that the fixture can start the cluster through it.
DemoCluster = collections.namedtuple("DemoCluster", "directory inventory talosconfig kubeconfig secrets controlplanes workers kubernetes")


def _nodes(cluster, role):
    return [(node.name, node.address) for node in cluster.nodes if node.role == role]


@contextlib.contextmanager
def demo_cluster(workdir, kubernetes=False):
    """Yields a ``DemoCluster`` once the demo's cluster runs (and, with ``kubernetes``, its 5 Nodes are registered)."""
    if kubernetes:
        with provisioned(workdir, "demo", TALOS_VERSION, KUBERNETES_VERSION) as (cluster, _server, inventory, _secrets):
            generated = workdir / "generated"
            yield DemoCluster(str(generated), str(inventory), str(generated / "talosconfig"), str(generated / "kubeconfig"),
                              str(generated / "secrets.yaml"), _nodes(cluster, "controlplane"), _nodes(cluster, "worker"), True)
        return
    cluster = EmulatedCluster.start(str(workdir / "emulator"), controlplanes=3, workers=2, maintenance=True,
                                    talos_version=TALOS_VERSION, reboot_seconds=0.1, name="demo", etcd="real")
    try:
        # tests/run-demo's cluster directory: the emulator's inventory naming the talosconfig next to it.
        directory = workdir / "prod"
        directory.mkdir()
        inventory = cluster.inventory()
        inventory["all"]["vars"]["talosconfig"] = "{{ inventory_dir }}/talosconfig"
        (directory / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        run = run_playbook_in(workdir, "demo", os.path.join(_REPO, "docs", "examples", "demo.yml"),
                              inventory=str(directory / "inventory.yml"))
        assert run.rc == 0, run.stdout[-6000:] + run.stderr[-3000:]
        yield DemoCluster(str(directory), str(directory / "inventory.yml"), str(directory / "talosconfig"),
                          str(directory / "kubeconfig"), str(directory / "secrets.yaml"), _nodes(cluster, "controlplane"),
                          _nodes(cluster, "worker"), False)
    finally:
        cluster.stop()
