# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_support_bundle through ansible-playbook against a 3 + 2 emulated cluster with one worker powered off: with
the Kubernetes API down, then up (a real kube-apiserver on the cluster's Kubernetes CA) and encrypted with age. Both
archives open with the standard library's zip reader, hold talosctl's layout, list what they missed, and hold none
of the secrets of the bundle the cluster was built from. The node that is off fails the task once the bundle of the
others is written."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import subprocess
import zipfile

import pytest
import yaml

import age_cli
from module_plays import module_play
from test_robustness import cluster_secrets

NODE_FILES = ("summary", "dmesg.log", "controller-runtime.log", "dns-resolve-cache.log", "dependencies.dot", "mounts",
              "devices", "io", "processes", "service-logs/apid.log",
              "service-logs/apid.state", "service-logs/kubelet.log", "resources/machinestatuses.runtime.talos.dev.yaml")


def assert_no_secret_in(archive, secrets):
    for name in archive.namelist():
        text = archive.read(name).decode("utf-8", "replace")
        leaked = [secret for secret in secrets if secret in text]
        assert not leaked, "%s holds a secret of the cluster's bundle" % name


def _node_names(server):
    from kubernetes import client as kube_client, config as kube_config
    api = kube_client.CoreV1Api(kube_config.new_client_from_config(server.kubeconfig_path))
    return [item.metadata.name for item in api.list_node().items]


@pytest.fixture(scope="module")
def bundle_cluster(module_emulator):
    cluster = module_emulator(controlplanes=3, workers=2, bootstrapped=True, reboot_seconds=0.1)
    cluster.power_off(cluster.workers[1])
    return cluster


def bundle_play(cluster, dest, nodes=None, **options):
    nodes = nodes or [node.address for node in cluster.nodes]
    return module_play(cluster, "talos_support_bundle", dict({"dest": str(dest), "nodes": nodes, "node": "{{ omit }}"},
                                                             **options), cluster.controlplanes[0].address, "bundle", timeout=10)


def test_a_bundle_with_the_kubernetes_api_down_holds_every_reached_node(bundle_cluster, run_playbook, tmp_path):
    cluster = bundle_cluster
    off = cluster.workers[1].address
    dest = tmp_path / "support.zip"
    planned = run_playbook(bundle_play(cluster, dest), check=True, expect_rc=2).task("bundle")["result"]
    assert planned["msg"].startswith("1 of 5 nodes failed (%s): " % off) and not dest.exists()
    assert planned["nodes"][off]["failed"] is True and "unreachable" in planned["nodes"][off]["msg"]
    assert planned["cluster"]["collected"] == ["kubernetes-nodes", "kubernetes-system-pods"]
    assert planned["nodes"][cluster.controlplanes[0].address]["collected"][0] == "summary"

    run = run_playbook(bundle_play(cluster, dest), verbosity=3, expect_rc=2)
    result = run.task("bundle")["result"]
    # The node that is off fails the task, once the bundle of the others is written.
    assert run.task("bundle")["status"] == "failed" and result["dest"] == str(dest) and result["encrypted"] is False
    assert result["msg"].startswith("1 of 5 nodes failed (%s): " % off)
    assert stat.S_IMODE(os.stat(str(dest)).st_mode) == 0o600
    reached = sorted(name for name, entry in result["nodes"].items() if entry.get("reached"))
    assert len(reached) == 4 and off not in reached
    assert result["nodes"][off]["failed"] is True and "unreachable" in result["nodes"][off]["msg"]
    missed = dict((entry["section"], entry["reason"]) for entry in result["cluster"]["missed"])
    assert "could not be reached" in missed["kubernetes-nodes"]
    # unzip, the standard tool, tests every member's checksum.
    tested = subprocess.run(["unzip", "-t", str(dest)], capture_output=True, text=True, check=False)
    assert tested.returncode == 0 and "No errors detected" in tested.stdout, tested.stdout + tested.stderr
    with zipfile.ZipFile(str(dest)) as archive:
        assert archive.testzip() is None
        names = set(archive.namelist())
        for node in reached:
            assert [name for name in NODE_FILES if "%s/%s" % (node, name) not in names] == [], (sorted(names), result["nodes"])
        assert not [name for name in names if name.startswith(off + "/")]
        cp = cluster.controlplanes[0]
        assert "%s/kubernetes-logs/kube-system/kube-apiserver-%s.log" % (cp.address, cp.name) in names
        assert not [name for name in names if name.startswith("kubernetesResources/")]
        # Sensitive types are written as talosctl writes them: each resource's metadata, and its spec replaced whole.
        for node in reached:
            machine_configs = list(yaml.safe_load_all(archive.read("%s/resources/machineconfigs.config.talos.dev.yaml" % node)))
            assert machine_configs and {document["spec"] for document in machine_configs} == {"<REDACTED>"}
            assert {document["metadata"]["type"] for document in machine_configs} == {"MachineConfigs.config.talos.dev"}
            assert "v1alpha1" in [document["metadata"]["id"] for document in machine_configs]
            kubelet = yaml.safe_load(archive.read("%s/resources/kubeletspecs.kubernetes.talos.dev.yaml" % node))
            assert kubelet["metadata"]["id"] == "kubelet" and kubelet["spec"] == "<REDACTED>"
        api_server = yaml.safe_load(archive.read("%s/resources/apiserverconfigs.kubernetes.talos.dev.yaml" % cp.address))
        assert api_server["metadata"]["namespace"] == "controlplane" and api_server["spec"] == "<REDACTED>"
        assert not [entry for node in reached for entry in result["nodes"][node]["missed"]
                    if entry["section"] == "resources"], result["nodes"]
        summary = archive.read("%s/summary" % cp.address).decode()
        assert "Tag:         %s" % cp.talos_version in summary
        assert cp.boot_id in archive.read("%s/dmesg.log" % cp.address).decode()
        assert cp.boot_id in archive.read("%s/controller-runtime.log" % cp.address).decode()
        assert "STATE    Running" in archive.read("%s/service-logs/etcd.state" % cp.address).decode()
        graph = archive.read("%s/dependencies.dot" % cp.address).decode()
        assert graph.startswith("digraph {") and '"controller:etcd.SpecController" -> "resource:etcd/EtcdSpecs.etcd.talos.dev"' in graph
        report = yaml.safe_load(archive.read("support-bundle.yaml"))
        assert report["nodes"][off]["reached"] is False and report["cluster"] == result["cluster"]
        assert dict((node, report["nodes"][node]) for node in reached) == dict((node, result["nodes"][node]) for node in reached)
        assert_no_secret_in(archive, cluster_secrets(cluster))
    output = run.stdout + run.stderr
    assert not [secret for secret in cluster_secrets(cluster) if secret in output]
    if os.environ.get("TALOS_TEST_DOOR") != "module":  # the module door cannot show progress as it happens
        assert "support bundle: service-logs of 4 node(s)" in run.stdout


def test_a_bundle_with_the_kubernetes_api_up_encrypted_with_age(bundle_cluster, kube_apiserver_factory, run_playbook, tmp_path):
    pyrage = pytest.importorskip("pyrage")
    cluster = bundle_cluster
    secrets = cluster.secrets
    server = kube_apiserver_factory(secrets.k8s_ca.crt_pem, secrets.k8s_ca.key_pem, secrets.service_account_key_pem)
    # The running nodes register as kubelets of that API server.
    kubelets = cluster.run_kubelets(api_url=server.url)
    cluster.wait_until(lambda: kubelets.sync() or len(_node_names(server)) == 4, timeout=60)
    identity = pyrage.x25519.Identity.generate()
    dest = tmp_path / "support.zip.age"
    running = [node.address for node in cluster.nodes if node is not cluster.workers[1]]
    run = run_playbook(bundle_play(cluster, dest, running, kubernetes_endpoint=server.url,
                                   encryption_recipients=[str(identity.to_public())]))
    result = run.task("bundle")["result"]
    assert run.task("bundle")["status"] == "changed" and result["encrypted"] is True and sorted(result["nodes"]) == sorted(running)
    assert result["cluster"] == {"collected": ["kubernetes-nodes", "kubernetes-system-pods"], "missed": []}
    # age itself (filippo.io/age, the format's reference implementation) opens it, as a user would.
    identity_file = tmp_path / "identity.txt"
    identity_file.write_text(str(identity) + "\n")
    plain = tmp_path / "support.zip"
    opened = subprocess.run([age_cli.binary(), "--decrypt", "-i", str(identity_file), "-o", str(plain), str(dest)],
                            capture_output=True, text=True, check=False)
    assert opened.returncode == 0, opened.stderr
    tested = subprocess.run(["unzip", "-t", str(plain)], capture_output=True, text=True, check=False)
    assert tested.returncode == 0 and "No errors detected" in tested.stdout, tested.stdout + tested.stderr
    with zipfile.ZipFile(str(plain)) as archive:
        nodes = yaml.safe_load(archive.read("kubernetesResources/nodes.yaml"))
        pods = yaml.safe_load(archive.read("kubernetesResources/systemPods.yaml"))
        assert nodes["kind"] == "NodeList" and pods["kind"] == "PodList"
        assert sorted(item["metadata"]["name"] for item in nodes["items"]) == sorted(_node_names(server))
        assert any(item["metadata"]["name"].startswith("kube-apiserver-") for item in pods["items"])
        assert_no_secret_in(archive, cluster_secrets(cluster))
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(str(dest))
