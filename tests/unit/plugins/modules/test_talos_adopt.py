# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_config_backup and talos_adopt run() on a fake client serving the nodes' running configs (the fixtures Talos's
own generator made): the files they write, private, what check mode leaves alone, a second run, refusals, and no
secret in a result."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os
import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_adopt, talos_config_backup
from fake_talos import FakeTalos, cosi_state, fails_with, resource
from module_fakes import run_task

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 3 + ["fixtures", "adoption"]))


def _read(*path):
    with open(os.path.join(FIXTURES, *path)) as handle:
        return handle.read()


def cluster_client(name, talos_version=None):
    """A fake client of the fixture cluster ``name``: node 10.5.0.<n> runs the fixture's n-th config."""
    cluster = next(item for item in yaml.safe_load(_read("clusters.yaml"))["clusters"] if item["name"] == name)
    nodes = ["10.5.0.%d" % (index + 2) for index in range(len(cluster["nodes"]))]
    client = FakeTalos(nodes=nodes)
    texts = {}
    for node, spec in zip(nodes, cluster["nodes"]):
        texts[node] = _read(name, spec["file"])
        state = cosi_state(resource("config", "MachineConfigs.config.talos.dev", "v1alpha1", texts[node]),
                           resource("network", "HostnameStatuses.net.talos.dev", "hostname",
                                    {"hostname": spec["name"], "domainname": ""}))
        client.answer(rpc.COSI_GET, state, node=node)
        client.answer(rpc.VERSION, [machine_pb2.Version(version=machine_pb2.VersionInfo(
            tag=talos_version or cluster["talos_version"]))], node=node)
    return client, nodes, texts


def secrets_of_bundle(path):
    return [value for value in SecretsBundle.load(path).secret_values() if len(value) > 8]


def test_the_backup_is_each_nodes_config_as_it_runs_and_a_manifest(tmp_path):
    client, nodes, texts = cluster_client("v1.9-patched")
    directory = tmp_path / "backup"
    succeeded, result, _task = run_task(talos_config_backup, client, directory=str(directory))
    assert result["changed"] and result["manifest"] == str(directory / "manifest.yaml")
    manifest = yaml.safe_load((directory / "manifest.yaml").read_text())["nodes"]
    for node in nodes:
        assert (directory / ("%s.yaml" % node)).read_text() == texts[node]
        assert manifest[node] == {"file": "%s.yaml" % node, "sha256": hashlib.sha256(texts[node].encode()).hexdigest(),
                                  "talos_version": "v1.9.5", "hostname": result["nodes"][node]["hostname"],
                                  "machine_type": result["nodes"][node]["machine_type"],
                                  "documents": result["nodes"][node]["documents"]}
    assert result["nodes"]["10.5.0.4"]["documents"] == ["v1alpha1", "ExtensionServiceConfig/nut-client"]
    assert stat.S_IMODE(os.stat(str(directory)).st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(str(path)).st_mode) for path in directory.iterdir()} == {0o600}
    # The result says what the configs are, never what they hold.
    assert not [secret for secret in secrets_of_bundle(os.path.join(FIXTURES, "secrets.yaml")) if secret in json.dumps(result)]
    again = run_task(talos_config_backup, client, directory=str(directory))[1]
    assert again["changed"] is False and not any(entry["changed"] for entry in again["nodes"].values())


def test_the_backup_in_check_mode_writes_nothing(tmp_path):
    client, _nodes, _texts = cluster_client("v1.11")
    directory = tmp_path / "backup"
    result = run_task(talos_config_backup, client, check_mode=True, diff=True, directory=str(directory))[1]
    assert result["changed"] and not directory.exists()
    assert result["diff"]["after"] == ("10.5.0.2.yaml (contents not shown)\n10.5.0.3.yaml (contents not shown)\n"
                                       "manifest.yaml (contents not shown)\n")


def test_a_node_that_cannot_be_read_fails_the_backup_and_leaves_the_manifest_unwritten(tmp_path):
    client, _nodes, _texts = cluster_client("v1.11")
    client.answer(rpc.VERSION, fails_with("PermissionDenied", "not authorized"), node="10.5.0.3")
    directory = tmp_path / "backup"
    with pytest.raises(ActionFailed) as failed:
        run_task(talos_config_backup, client, directory=str(directory))
    assert failed.value.message.startswith("1 of 2 nodes failed (10.5.0.3): ")
    assert sorted(os.listdir(str(directory))) == ["10.5.0.2.yaml"]


def test_adopt_writes_the_bundle_inventory_variables_and_configs(tmp_path):
    client, nodes, _texts = cluster_client("v1.14-patched")
    dest = tmp_path / "prod"
    succeeded, result, _task = run_task(talos_adopt, client, dest=str(dest), talosconfig_endpoints=["10.5.0.2"])
    assert [entry["path"] for entry in result["files"]] == [
        "secrets.yaml", "controlplane.yaml", "inventory.yml", "worker.yaml", "group_vars/all.yml",
        "host_vars/controlplane-1.yml", "host_vars/controlplane-2.yml", "host_vars/worker-1.yml", "host_vars/worker-2.yml"]
    assert all(entry["changed"] for entry in result["files"])
    assert result["cluster"]["talos_version"] == "v1.14" and result["cluster"]["talosconfig_endpoints"] == ["10.5.0.2"]
    assert result["group_patches"] == {"controlplane": 3, "worker": 3}
    assert result["nodes"]["10.5.0.4"] == dict(result["nodes"]["10.5.0.4"], host="worker-1", group="workers", patches=1)
    fixture = SecretsBundle.load(os.path.join(FIXTURES, "secrets.yaml"))
    assert SecretsBundle.load(str(dest / "secrets.yaml")).cas["k8s"].crt_pem == fixture.cas["k8s"].crt_pem
    assert {stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
            for folder, _dirs, names in os.walk(str(dest)) for name in names} == {0o600}
    assert not [secret for secret in secrets_of_bundle(str(dest / "secrets.yaml")) if secret in json.dumps(result)]
    again = run_task(talos_adopt, client, dest=str(dest), talosconfig_endpoints=["10.5.0.2"])[1]
    assert again["changed"] is False


def test_adopt_in_check_mode_writes_nothing_and_its_diff_shows_no_secret(tmp_path):
    client, _nodes, _texts = cluster_client("v1.9-patched")
    dest = tmp_path / "prod"
    result = run_task(talos_adopt, client, check_mode=True, diff=True, dest=str(dest))[1]
    assert result["changed"] and not dest.exists()
    assert all(entry["changed"] for entry in result["files"])
    shown = json.dumps(result["diff"])
    assert "cluster_worker_patches" in shown and "secrets bundle created (contents not shown)" in shown
    tokens = [SecretsBundle.load(os.path.join(FIXTURES, "secrets.yaml")).trustd_token]
    assert not [secret for secret in secrets_of_bundle(os.path.join(FIXTURES, "secrets.yaml")) + tokens if secret in shown]


def test_adopt_refuses_two_clusters_and_writes_nothing(tmp_path):
    client, _nodes, _texts = cluster_client("v1.14-two-clusters")
    dest = tmp_path / "prod"
    with pytest.raises(TalosConfigError, match=r"^The control planes disagree: node 10\.5\.0\.2 and node 10\.5\.0\.3 have "
                                               r"different cluster IDs, Kubernetes CAs and etcd CAs"):
        run_task(talos_adopt, client, dest=str(dest))
    assert os.listdir(str(dest)) == []


def test_adopt_keeps_the_clusters_bundle_and_refuses_another(tmp_path):
    client, _nodes, _texts = cluster_client("v1.11")
    dest = tmp_path / "prod"
    dest.mkdir()
    (dest / "secrets.yaml").write_text(_read("other-cluster.yaml"))
    with pytest.raises(TalosConfigError, match=r"secrets\.yaml is the secrets bundle of another cluster"):
        run_task(talos_adopt, client, dest=str(dest))
    assert os.listdir(str(dest)) == ["secrets.yaml"]
    (dest / "secrets.yaml").write_text(_read("secrets.yaml"))
    os.chmod(str(dest / "secrets.yaml"), 0o644)
    result = run_task(talos_adopt, client, dest=str(dest))[1]
    assert result["files"][0] == {"path": "secrets.yaml", "changed": True}
    assert (dest / "secrets.yaml").read_text() == _read("secrets.yaml") and stat.S_IMODE(os.stat(str(dest / "secrets.yaml")).st_mode) == 0o600


def test_adopt_needs_the_nodes_and_two_groups(tmp_path):
    client, _nodes, _texts = cluster_client("v1.11")
    with pytest.raises(TalosConfigError, match=r"^talos_adopt needs every node of the cluster: list their addresses in nodes"):
        run_task(talos_adopt, client, targets=[None], dest=str(tmp_path / "prod"))
    client, _nodes, _texts = cluster_client("v1.11")
    with pytest.raises(TalosConfigError, match=r"^controlplane_group and worker_group must differ, both are 'nodes'\.$"):
        run_task(talos_adopt, client, dest=str(tmp_path / "prod"), controlplane_group="nodes", worker_group="nodes")
    assert client.calls == [] and not (tmp_path / "prod").exists(), "bad input is refused before anything is read or made"


def test_adopt_refuses_a_file_where_its_variables_go_and_writes_nothing(tmp_path):
    client, _nodes, _texts = cluster_client("v1.11")
    dest = tmp_path / "prod"
    dest.mkdir()
    (dest / "host_vars").write_text("not a directory\n")
    with pytest.raises(TalosConfigError, match=r"^%s is a file, where the adoption writes variables: move it away, or choose "
                                               r"another dest\. Nothing was written\.$" % str(dest / "host_vars")):
        run_task(talos_adopt, client, dest=str(dest))
    assert sorted(os.listdir(str(dest))) == ["host_vars"]
