# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""images/store.py: images on nodes (against the emulator)."""

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.images import store as images
from ansible_collections.talos_linux.talos.plugins.module_utils.images import reference as image_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings


def test_names_to_remove_leave_content_another_tag_names():
    digest = "sha256:" + "b" * 64
    listed = [{"name": n, "digest": digest} for n in ("docker.io/library/app:v1", "docker.io/library/app@" + digest, digest)]
    assert images._names_to_remove(image_reference.parse_reference("app:v1"), listed) == [
        "docker.io/library/app:v1", "docker.io/library/app@" + digest, digest]
    listed.append({"name": "docker.io/library/app:latest", "digest": digest})
    assert images._names_to_remove(image_reference.parse_reference("app:v1"), listed) == ["docker.io/library/app:v1"]
    assert images._names_to_remove(image_reference.parse_reference("app:v2"), listed) == []


# -- nodes ---------------------------------------------------------------------------------

def _client(cluster, **options):
    params = {"talosconfig": cluster.talosconfig_path()}
    params.update(options)
    return TalosClient(ConnectionSettings.from_params(params))


def test_pull_list_remove_on_nodes(emulator, monkeypatch):
    cluster = emulator(controlplanes=1, workers=1)
    nodes = [node.address for node in cluster.nodes]
    lines = []
    monkeypatch.setattr(images, "PROGRESS_INTERVAL", 0)
    with _client(cluster) as client:
        store = images.NodeImages(client, "cri", progress=lines.append)
        wanted = dict((node, "docker.io/library/busybox:1.36") for node in nodes)
        planned = store.ensure_present(wanted, check_mode=True)
        assert [planned[node]["changed"] for node in nodes] == [True, True]
        # What the kubelet pulled as the nodes booted (the pod sandbox, a control plane's static pods).
        booted = store.list(nodes)
        assert not any("busybox" in str(entry) for entry in booted.values())

        pulled = store.ensure_present(wanted)
        assert all(result["pulled"].startswith("docker.io/library/busybox@sha256:") and result["api"] == "image_service"
                   for result in pulled.values())
        assert "node %s: pulling docker.io/library/busybox:1.36 into the cri namespace" % nodes[0] in lines
        assert any("layers downloaded" in line for line in lines)
        again = store.ensure_present(wanted)
        assert [again[node]["changed"] for node in nodes] == [False, False]
        assert [entry["method"] for entry in cluster.audit()].count(rpc.IMAGE_PULL) == 2

        assert "busybox" not in str(images.NodeImages(client, "system").list(nodes[:1]))
        removed = store.ensure_absent("docker.io/library/busybox:1.36", nodes[:1])
        assert removed[nodes[0]]["changed"] is True and len(removed[nodes[0]]["removed"]) == 3
        assert store.list(nodes[:1]) == {nodes[0]: booted[nodes[0]]}
        assert store.ensure_absent("docker.io/library/busybox:1.36", nodes[:1])[nodes[0]]["changed"] is False

        cluster.faults.mark_image_unavailable("ghcr.io/org/missing:v1")
        failed = store.ensure_present({nodes[0]: "ghcr.io/org/missing:v1"})[nodes[0]]
        assert isinstance(failed, TalosError) and failed.code == "NotFound"


def test_legacy_nodes_pull_but_cannot_remove(emulator):
    cluster = emulator(talos_version="v1.12.6")
    node = cluster.nodes[0].address
    with _client(cluster) as client:
        store = images.NodeImages(client, "system")
        result = store.ensure_present({node: "busybox:1.36"})[node]
        assert (result["changed"], result["api"], result["image"]) == (True, "legacy", "docker.io/library/busybox:1.36")
        assert store.ensure_present({node: "busybox:1.36"})[node]["changed"] is False
        refused = store.ensure_absent("busybox:1.36", [node])[node]
        assert refused.code == "Unimplemented" and "needs Talos v1.13 or later" in refused.message
