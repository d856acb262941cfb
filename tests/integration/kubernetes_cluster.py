# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes tests' cluster: 3 control planes and 2 workers provisioned by the cluster role, and a real
kube-apiserver (tests/kube_apiserver) storing its objects in the control planes' real etcd, as on Talos
(``EmulatedCluster.run_kubernetes``, as ``make demo KUBERNETES=1`` runs it)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import contextlib

import yaml
from playbook_runner import run_playbook_in

from talos_emulator import EmulatedCluster


@contextlib.contextmanager
def provisioned(workdir, cluster_name, talos_version, kubernetes_version):
    """Yields ``(cluster, server, inventory path, secrets bundle as a dict)`` once the 5 Nodes are registered."""
    cluster = EmulatedCluster.start(str(workdir / "cluster"), controlplanes=3, workers=2, maintenance=True,
                                    talos_version=talos_version, reboot_seconds=0.1, etcd="real")
    try:
        inventory = workdir / "inventory.yml"
        inventory.write_text(yaml.safe_dump(cluster.inventory()))
        secrets_path = workdir / "generated" / "secrets.yaml"
        provision = run_playbook_in(workdir, "provision", [{
            "hosts": "controlplane:workers", "gather_facts": False,
            "roles": [{"role": "talos_linux.talos.cluster", "vars": {
                "cluster_name": cluster_name,
                "cluster_talos_version": talos_version,
                "cluster_kubernetes_version": kubernetes_version,
                "cluster_secrets": str(secrets_path),
                "cluster_generated_dir": str(workdir / "generated"),
                "cluster_kubeconfig": str(workdir / "generated" / "kubeconfig"),
            }}]}], inventory=str(inventory))
        assert provision.rc == 0, provision.stdout[-6000:] + provision.stderr[-3000:]
        secrets = yaml.safe_load(secrets_path.read_text())
        # The role's cluster_endpoint is the emulator inventory's, where run_kubernetes serves the API.
        server = cluster.run_kubernetes(str(secrets_path))
        cluster.wait_until(lambda: len(server.get("/api/v1/nodes")["items"]) == 5, timeout=60)
        yield cluster, server, inventory, secrets
    finally:
        cluster.stop()
