# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_kubernetes_upgrade end to end: a 3-control-plane + 2-worker cluster provisioned by the cluster role, a real
kube-apiserver (tests/kube_apiserver) on the cluster's own Kubernetes CA storing its objects in the control planes' real
etcd members (as on Talos), and the emulator's nodes acting as kubelets.

Both config forms: Talos v1.13 configs set the images in v1alpha1 fields (Kubernetes 1.35 -> 1.36), Talos v1.14
configs in Kube*Config documents (1.36 -> 1.37). For each: a target the nodes' Talos does not support is refused, check
mode plans and changes nothing, a missing image stops the upgrade before any change, the upgrade runs (its -vvv output
holds no secret), and a rerun changes nothing. The nodes are given by their DNS names, as an inventory names them: the
module finds their Kubernetes Nodes (registered under their hostnames, with their InternalIPs) by itself.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import contextlib
import json
import re

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
import kubernetes_cluster
from playbook_runner import run_playbook_in

pytestmark = pytest.mark.long

FORMS = {
    "v1alpha1": dict(talos_version="v1.13.5", from_version="1.35.4", to_version="1.36.3", unsupported="1.37.0"),
    "documents": dict(talos_version="v1.14.0", from_version="1.36.3", to_version="1.37.2", unsupported="1.38.0"),
}
STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
V1ALPHA1_FIELDS = {
    "kube-apiserver": ("cluster", "apiServer"), "kube-controller-manager": ("cluster", "controllerManager"),
    "kube-scheduler": ("cluster", "scheduler"), "kube-proxy": ("cluster", "proxy"), "kubelet": ("machine", "kubelet"),
}
DOCUMENTS = {
    "kube-apiserver": "KubeAPIServerConfig", "kube-controller-manager": "KubeControllerManagerConfig",
    "kube-scheduler": "KubeSchedulerConfig", "kube-proxy": "KubeProxyConfig", "kubelet": "KubeletConfig",
}


@contextlib.contextmanager
def _missing_image(cluster, image):
    """The registry lacks ``image`` for the block's length."""
    cluster.model.faults.mark_image_unavailable(image)
    try:
        yield
    finally:
        cluster.model.faults.clear()


def _b64(value):
    return base64.b64decode(value).decode("ascii")


class KubeCluster:
    def __init__(self, form, cluster, server, workdir, inventory, secrets):
        self.form = form
        self.cluster = cluster
        self.server = server
        self.workdir = workdir
        self.inventory = inventory
        self.secrets = secrets
        self.runs = 0

    def play(self, args, check=False, diff=False, verbosity=0, expect_rc=0):
        self.runs += 1
        task = {"name": "Upgrade Kubernetes", "talos_linux.talos.talos_kubernetes_upgrade": dict(
            {"talosconfig": str(self.workdir / "generated" / "talosconfig"), "node": self.cluster.controlplanes[0].address,
             "wait_timeout": 60}, **args)}
        run = run_playbook_in(self.workdir, "upgrade-%d" % self.runs,
                              [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}],
                              check=check, diff=diff, verbosity=verbosity)
        assert run.rc == expect_rc, run.stdout[-6000:] + run.stderr[-3000:]
        recorded = run.task("Upgrade Kubernetes")
        assert recorded["status"] == ("failed" if expect_rc else recorded["status"])
        return run, recorded["result"]

    def documents(self, node):
        return [document for document in yaml.safe_load_all(self.cluster.call(node.config_text)) if document]

    def image(self, node, component):
        """The image ``component`` is set to in ``node``'s config, and where: ``(home, image)``."""
        documents = self.documents(node)
        for document in documents:
            if document.get("kind") == DOCUMENTS[component]:
                return DOCUMENTS[component], document.get("image")
        v1alpha1 = next(document for document in documents if document.get("version") == "v1alpha1" and "kind" not in document)
        section, name = V1ALPHA1_FIELDS[component]
        return "v1alpha1", ((v1alpha1.get(section) or {}).get(name) or {}).get("image")

    def configs(self):
        return dict((node.address, self.cluster.call(node.config_text)) for node in self.cluster.nodes)

    def by_dns_name(self):
        """The node options as an inventory of DNS names gives them."""
        return {"controlplane_nodes": [self.cluster.dns_name(node) for node in self.cluster.controlplanes],
                "worker_nodes": [self.cluster.dns_name(node) for node in self.cluster.workers]}

    def kube(self, path):
        return self.server.get(path)

    def kube_client(self):
        return kube_config.new_client_from_config(config_file=self.server.kubeconfig_path)

    def secret_strings(self):
        """Every secret of the bundle (and the raw keys inside its base64 PEMs), to search the output for."""
        found = set()

        def walk(value):
            if isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, str) and len(value) >= 16:
                found.add(value)
                if value.startswith("LS0t"):
                    pem = _b64(value)
                    if "PRIVATE KEY" in pem:
                        found.update(line for line in pem.splitlines() if len(line) >= 40 and "-----" not in line)

        walk({key: value for key, value in self.secrets.items() if key != "certs"})
        for pair in self.secrets["certs"].values():
            walk({"key": pair.get("key")})
        # The bootstrap token's secret half: the bootstrap token Secret of the manifests holds it alone.
        found.add(self.secrets["secrets"]["bootstraptoken"].split(".", 1)[1])
        return found


# The stacks' runs (tests/run-all) take the v1alpha1 form only: the documents form is the same code on another input.
@pytest.fixture(scope="module", params=[pytest.param("documents", marks=pytest.mark.once), "v1alpha1"])
def kube_cluster(request, tmp_path_factory):
    form = dict(FORMS[request.param], name=request.param)
    workdir = tmp_path_factory.mktemp("kubernetes-%s" % request.param)
    with kubernetes_cluster.provisioned(workdir, "k8s-%s" % request.param, form["talos_version"],
                                        form["from_version"]) as (cluster, server, inventory, secrets):
        yield KubeCluster(form, cluster, server, workdir, str(inventory), secrets)


def test_upgrade_plans_refuses_a_missing_image_upgrades_and_settles(kube_cluster):
    setup, form = kube_cluster, kube_cluster.form
    cluster = setup.cluster
    control_planes = [cluster.dns_name(node) for node in cluster.controlplanes]
    workers = [cluster.dns_name(node) for node in cluster.workers]
    named = setup.by_dns_name()
    to_version = form["to_version"]
    # A target the nodes' Talos does not support: refused, naming the node, before the Kubernetes API is asked.
    _run, refused = setup.play(dict(named, to_version=form["unsupported"]), check=True, expect_rc=2)
    assert refused["msg"] == "node %s runs Talos %s, which supports Kubernetes %s to %s, not %s: upgrade Talos first." % (
        cluster.controlplanes[0].address, form["talos_version"], {"v1alpha1": "1.31", "documents": "1.32"}[form["name"]],
        {"v1alpha1": "1.36", "documents": "1.37"}[form["name"]], form["unsupported"])
    if form["name"] == "v1alpha1":
        # A feature gate Kubernetes 1.36 removed, given to one worker's kubelet: refused, nothing asked to change.
        worker = cluster.workers[0]
        original = cluster.call(worker.config_text)
        documents = [document for document in yaml.safe_load_all(original) if document]
        v1alpha1 = next(document for document in documents if "kind" not in document)
        v1alpha1["machine"]["kubelet"]["extraArgs"] = {"feature-gates": "WatchFromStorageWithoutResourceVersion=true"}
        cluster.call(worker.apply_active_config, yaml.safe_dump_all(documents).encode())
        try:
            _run, refused = setup.play({"to_version": to_version}, check=True, expect_rc=2)
        finally:
            cluster.call(worker.apply_active_config, original.encode())
        assert refused["msg"] == (
            "Kubernetes %s removed what the components are still started with: feature gate "
            "WatchFromStorageWithoutResourceVersion of kubelet on node %s; remove them from the machine config (extraArgs, "
            "or the kubelet's extraConfig) first." % (to_version, worker.address))

    # Drift in the bootstrap manifests: a binding deleted, a field of the bootstrap token Secret changed by hand.
    api = setup.kube_client()
    core, rbac = kube_client.CoreV1Api(api), kube_client.RbacAuthorizationV1Api(api)
    rbac.delete_cluster_role_binding("system:coredns")
    token_secret = next(item.metadata.name for item in core.list_namespaced_secret("kube-system").items
                        if item.metadata.name.startswith("bootstrap-token-"))
    core.patch_namespaced_secret(token_secret, "kube-system", {"data": {"usage-bootstrap-authentication": "ZmFsc2U="}})
    before = setup.configs()
    applied_before = len(cluster.audit(method="ApplyConfiguration", include_dry_run=False))

    # Check mode: the plan, in the form each config uses, and the manifests to sync; nothing changes.
    run, result = setup.play(dict(named, to_version=to_version), check=True, diff=True, verbosity=3)
    assert result["changed"] is True
    assert result["kubernetes_nodes"] == dict((cluster.dns_name(node), node.hostname) for node in cluster.nodes)
    assert result["from_version"] == form["from_version"] and result["to_version"] == to_version
    assert result["controlplane_nodes"] == control_planes and result["worker_nodes"] == workers
    planned = [(item["node"], item["component"]) for item in result["plan"]]
    assert planned == ([(node, component) for component in STATIC_PODS for node in control_planes]
                       + [(node, "kube-proxy") for node in control_planes]
                       + [(node, "kubelet") for node in control_planes + workers])
    for item in result["plan"]:
        node = cluster.find_node(item["node"])
        home, image = setup.image(node, item["component"])
        repository = "ghcr.io/siderolabs/kubelet" if item["component"] == "kubelet" else "registry.k8s.io/" + item["component"]
        assert (item["image_from"], item["from"]) == ("%s:v%s" % (repository, form["from_version"]), form["from_version"])
        assert (item["image_to"], item["to"]) == ("%s:v%s" % (repository, to_version), to_version)
        assert (item["document"], image) == (home, item["image_from"])
    if form["name"] == "documents":
        assert {item["document"] for item in result["plan"]} == set(DOCUMENTS.values())
    else:
        assert {item["document"] for item in result["plan"]} == {"v1alpha1"}
    assert setup.configs() == before
    assert len(cluster.audit(method="ApplyConfiguration", include_dry_run=False)) == applied_before
    drift = dict((item["object"], item["action"]) for item in result["manifests"])
    assert drift["ClusterRoleBinding system:coredns"] == "created"
    assert [action for name, action in drift.items() if name.startswith("Secret kube-system/bootstrap-token-")] == ["updated"]
    assert len(drift) == 2, drift
    diff_text = json.dumps(result.get("diff"))
    assert "kube-apiserver:v" + to_version in diff_text
    secret_diff = next(item for item in result["diff"] if item["before_header"].startswith("Secret "))
    assert "<redacted>" in secret_diff["before"] and "<redacted>" in secret_diff["after"]
    assert rbac.list_cluster_role_binding(field_selector="metadata.name=system:coredns").items == []
    for secret in setup.secret_strings():
        assert secret not in run.stdout + run.stderr and secret not in diff_text

    # A kubelet image the registry lacks: the pre-pull fails, naming node and image, before any change.
    missing = "ghcr.io/siderolabs/kubelet:v" + to_version
    with _missing_image(cluster, missing):
        run, failed = setup.play(dict(named, to_version=to_version), expect_rc=2, verbosity=3)
    for secret in setup.secret_strings():
        assert secret not in run.stdout + run.stderr
    assert failed["msg"].startswith("Pre-pulling %s on " % missing)
    assert "nothing was changed, rerun the task to finish the upgrade" in failed["msg"]
    assert failed["changed"] is False and failed["done"] == []
    assert setup.configs() == before

    # The upgrade, at -vvv: no secret in the whole output.
    run, result = setup.play(dict(named, to_version=to_version), verbosity=3)
    assert result["changed"] is True, result["msg"]
    assert len(result["plan"]) == 3 * 5 + 2
    assert result["msg"].startswith("Upgraded Kubernetes from %s to %s" % (form["from_version"], to_version))
    for secret in setup.secret_strings():
        assert secret not in run.stdout and secret not in run.stderr
    for node in cluster.nodes:
        components = STATIC_PODS + ("kube-proxy", "kubelet") if node in cluster.controlplanes else ("kubelet",)
        for component in components:
            home, image = setup.image(node, component)
            assert image.endswith(":v" + to_version), (node.address, component, home, image)
            assert home == (DOCUMENTS[component] if form["name"] == "documents" else "v1alpha1")
    # Only the image lines changed.
    after = setup.configs()
    for address, text in before.items():
        changed_lines = [(old, new) for old, new in zip(text.splitlines(), after[address].splitlines()) if old != new]
        assert len(text.splitlines()) == len(after[address].splitlines())
        assert changed_lines and all("image:" in old and "image:" in new for old, new in changed_lines)
    if form["name"] == "documents":
        # The v1alpha1 document gained no image field.
        v1alpha1 = next(document for document in setup.documents(cluster.controlplanes[0]) if "kind" not in document)
        assert "image" not in ((v1alpha1.get("cluster") or {}).get("apiServer") or {})
    nodes = setup.kube("/api/v1/nodes")["items"]
    assert sorted(item["status"]["nodeInfo"]["kubeletVersion"] for item in nodes) == ["v" + to_version] * 5
    for component in STATIC_PODS:
        pods = setup.kube("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3D" + component)["items"]
        assert len(pods) == 3
        assert {pod["spec"]["containers"][0]["image"] for pod in pods} == {"registry.k8s.io/%s:v%s" % (component, to_version)}
    proxy = setup.kube("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy")
    assert proxy["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-proxy:v" + to_version

    assert sorted(item["object"] for item in result["manifests"]) == sorted(drift)
    # Every bootstrap manifest object stays in Talos's inventory, the drift undone.
    restored = rbac.read_cluster_role_binding("system:coredns")
    assert restored.metadata.annotations["config.k8s.io/owning-inventory"] == "talos-bootstrap-manifests-inventory"
    assert core.read_namespaced_secret(token_secret, "kube-system").data["usage-bootstrap-authentication"] == "dHJ1ZQ=="
    inventory = core.read_namespaced_config_map("talos-bootstrap-manifests-inventory", "kube-system").data
    assert "_system__coredns_rbac.authorization.k8s.io_ClusterRoleBinding" in inventory
    assert "kube-system_kube-proxy_apps_DaemonSet" in inventory

    # A rerun at the target changes nothing and says so.
    _run, rerun = setup.play(dict(named, to_version=to_version))
    assert rerun["changed"] is False and rerun["plan"] == [] and rerun["manifests"] == []
    assert rerun["msg"] == ("Kubernetes %s runs on every node and the bootstrap manifests are in sync: nothing to do."
                            % to_version)
    assert setup.configs() == after


def _next_patch(version, steps=1):
    major, minor, patch = version.split(".")
    return "%s.%s.%d" % (major, minor, int(patch) + steps)


@pytest.mark.once
def test_an_upgrade_stopped_by_a_pod_that_never_comes_up_names_it_and_a_rerun_finishes(kube_cluster):
    """kube-scheduler's new image is missing and not pre-pulled: the first scheduler never becomes Ready. The
    failure names the component, the node and the step and lists what was done; once the image is there, a rerun
    waits for that pod and finishes the rest."""
    setup = kube_cluster
    cluster = setup.cluster
    target = _next_patch(setup.form["to_version"])
    first = cluster.controlplanes[0].address
    missing = "registry.k8s.io/kube-scheduler:v" + target
    with _missing_image(cluster, missing):
        _run, failed = setup.play({"to_version": target, "pre_pull_images": False, "wait_timeout": 3}, expect_rc=2)
    assert failed["msg"].startswith("kube-scheduler on node %s, waiting for the mirror pod to run the new version and "
                                    "be Ready: Timed out after 3 seconds" % first), failed["msg"]
    assert failed["msg"].endswith("; 7 of 17 planned changes were made, rerun the task to finish the upgrade.")
    assert failed["changed"] is True
    assert [(item["component"], item["node"]) for item in failed["done"]] == (
        [("kube-apiserver", node.address) for node in cluster.controlplanes]
        + [("kube-controller-manager", node.address) for node in cluster.controlplanes]
        + [("kube-scheduler", first)])

    _run, finished = setup.play({"to_version": target, "pre_pull_images": False})
    assert finished["changed"] is True
    assert len(finished["plan"]) == 17 - 7
    pods = setup.kube("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-scheduler")["items"]
    assert {pod["spec"]["containers"][0]["image"] for pod in pods} == {missing}
    assert all(condition["status"] == "True" for pod in pods for condition in pod["status"]["conditions"]
               if condition["type"] == "Ready")


@pytest.mark.once
def test_the_upgrade_role_upgrades_kubernetes_alone_and_a_rerun_changes_nothing(kube_cluster):
    """upgrade_kubernetes_version without upgrade_version: the Talos steps are skipped, the Kubernetes step runs
    through the first control plane with the inventory's node lists (a patch release here), the inventory naming
    the nodes by their DNS names."""
    setup = kube_cluster
    target = _next_patch(setup.form["to_version"], 2)
    inventory = yaml.safe_load(open(setup.inventory).read())
    for group in inventory["all"]["children"].values():
        for name, host in group["hosts"].items():
            host["ansible_host"] = setup.cluster.dns_name(name)
    by_name = setup.workdir / "inventory-by-dns-name.yml"
    by_name.write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "controlplane:workers", "gather_facts": False, "roles": [{
        "role": "talos_linux.talos.upgrade",
        "vars": {"upgrade_kubernetes_version": target,
                 "upgrade_talosconfig": str(setup.workdir / "generated" / "talosconfig"), "upgrade_wait_timeout": 60}}]}]

    run = run_playbook_in(setup.workdir, "role-1", play, inventory=str(by_name))
    assert run.rc == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert not [result for result in run.results if "talos_upgrade" in str(result.get("action", ""))]
    upgraded = run.task("talos_linux.talos.upgrade : Upgrade Kubernetes")
    assert upgraded["status"] == "changed"
    assert {item["to"] for item in upgraded["result"]["plan"]} == {target}
    assert sorted(upgraded["result"]["kubernetes_nodes"]) == sorted(setup.cluster.dns_name(node) for node in setup.cluster.nodes)
    assert len(upgraded["result"]["plan"]) == 3 * 5 + 2
    nodes = setup.kube("/api/v1/nodes")["items"]
    assert {item["status"]["nodeInfo"]["kubeletVersion"] for item in nodes} == {"v" + target}
    report = run.task("talos_linux.talos.upgrade : Report the Kubernetes upgrade")["result"]["msg"]
    assert report.startswith("Upgraded Kubernetes from ") and (" to %s: 17 image change(s)" % target) in report

    again = run_playbook_in(setup.workdir, "role-2", play, inventory=str(by_name))
    assert again.rc == 0 and again.changed_count == 0, again.stdout[-4000:]


@pytest.mark.once
def test_kube_proxy_disabled_is_left_alone(kube_cluster):
    """kube-proxy disabled as each config form says it (.cluster.proxy.disabled; a KubeProxyConfig document's
    enabled: false, as Cilium clusters set it): Talos renders no kube-proxy manifest, and the upgrade neither patches
    its image nor waits for it."""
    setup = kube_cluster
    cluster = setup.cluster
    target = _next_patch(setup.form["to_version"], 3)
    for node in cluster.controlplanes:
        documents = setup.documents(node)
        proxy = [document for document in documents if document.get("kind") == "KubeProxyConfig"]
        if setup.form["name"] == "documents":
            proxy[0]["enabled"] = False
        else:
            next(document for document in documents if "kind" not in document)["cluster"]["proxy"]["disabled"] = True
        cluster.call(node.apply_active_config, yaml.safe_dump_all(documents).encode())
    _run, result = setup.play(dict(setup.by_dns_name(), to_version=target, sync_manifests=False, wait_timeout=20))
    assert result["changed"] is True
    assert sorted({item["component"] for item in result["plan"]}) == sorted(STATIC_PODS + ("kubelet",))
    for node in cluster.controlplanes:
        assert setup.image(node, "kube-proxy")[1].endswith(":v" + _next_patch(setup.form["to_version"], 2))


def _set_kube_proxy(setup, enabled, version=None):
    """kube-proxy enabled or disabled in every control plane's KubeProxyConfig document (the documents form), and its
    image at ``version`` when given."""
    for node in setup.cluster.controlplanes:
        documents = setup.documents(node)
        proxy = next(document for document in documents if document.get("kind") == "KubeProxyConfig")
        wanted = dict(proxy, enabled=enabled)
        if version:
            wanted["image"] = "%s:v%s" % (proxy["image"].rpartition(":")[0], version)
        if wanted != proxy:
            proxy.update(wanted)
            setup.cluster.call(node.apply_active_config, yaml.safe_dump_all(documents).encode())


@pytest.mark.once
@pytest.mark.parametrize("kube_cluster", ["documents"], indirect=True)
def test_the_manifest_sync_recreates_waits_and_prunes_what_talos_no_longer_renders(kube_cluster):
    """The manifest sync at the version the cluster runs, as talosctl and the Terraform provider sync by default.

    A binding whose roleRef was changed by hand cannot be changed back in place: refused before any write, recreated
    with recreate_immutable. A DaemonSet whose new pods cannot start fails the reconcile wait, reported as changed.
    What Talos no longer renders (an inventoried ConfigMap, then kube-proxy once the config disables it) stays with
    prune: false and is deleted and forgotten by default. The sync does not depend on the config form: one form runs it.
    """
    setup = kube_cluster
    cluster = setup.cluster
    api = setup.kube_client()
    core, rbac, apps = kube_client.CoreV1Api(api), kube_client.RbacAuthorizationV1Api(api), kube_client.AppsV1Api(api)
    inventory = ("kube-system", "talos-bootstrap-manifests-inventory")
    ours = {"config.k8s.io/owning-inventory": inventory[1]}
    version = setup.kube("/api/v1/nodes")["items"][0]["status"]["nodeInfo"]["kubeletVersion"].lstrip("v")
    # kube-proxy on (an earlier test may have disabled it) at the version the rest runs: no image to change.
    _set_kube_proxy(setup, True, version)
    image = "registry.k8s.io/kube-proxy:v" + version
    proxy_update = [{"object": "DaemonSet kube-system/kube-proxy", "action": "updated"}] if (
        apps.read_namespaced_daemon_set("kube-proxy", "kube-system").spec.template.spec.containers[0].image != image) else []

    # A ConfigMap in the inventory that Talos does not render, and a binding pointing at another role.
    core.create_namespaced_config_map("kube-system", {"metadata": {"name": "talos-retired", "annotations": ours},
                                                      "data": {"retired": "yes"}})
    core.patch_namespaced_config_map(inventory[1], inventory[0], {"data": {"kube-system_talos-retired__ConfigMap": ""}})
    binding = rbac.read_cluster_role_binding("system-bootstrap-node-renewal")
    role = binding.role_ref.name
    rbac.delete_cluster_role_binding(binding.metadata.name)
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding.metadata.name, "annotations": ours},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"}]})
    retired, recreated = "ConfigMap kube-system/talos-retired", "ClusterRoleBinding system-bootstrap-node-renewal"

    # Check mode reports the recreate and the prune; nothing changes.
    _run, checked = setup.play({"to_version": version, "recreate_immutable": True}, check=True, diff=True)
    assert checked["changed"] is True and checked["plan"] == []
    assert checked["manifests"] == ([{"object": recreated, "action": "recreated"}] + proxy_update
                                    + [{"object": retired, "action": "pruned"}])
    assert checked["manifests_inventory"] == {"added": [], "removed": ["kube-system_talos-retired__ConfigMap"]}
    pruned_diff = next(item for item in checked["diff"] if item["before_header"] == retired + " (live)")
    assert "retired: 'yes'" in pruned_diff["before"] and pruned_diff["after"] == ""
    assert core.read_namespaced_config_map("talos-retired", "kube-system").data == {"retired": "yes"}
    assert rbac.read_cluster_role_binding(binding.metadata.name).role_ref.name == "system:node-bootstrapper"

    # The immutable roleRef: refused before anything is written.
    _run, refused = setup.play({"to_version": version}, expect_rc=2)
    assert refused["msg"].startswith("Syncing the bootstrap manifests, comparing %s with the API server (dry run): The "
                                     "API server refuses to change %s in place (" % (recreated, recreated)), refused["msg"]
    assert "is invalid: roleRef: Invalid value: " in refused["msg"] and "field is immutable" in refused["msg"], refused["msg"]
    assert refused["msg"].endswith("; set recreate_immutable=true to delete and create it again; nothing was changed, "
                                   "rerun the task to finish the upgrade.")
    assert refused["changed"] is False and refused["manifests"] == []

    # Recreated; with prune: false the retired ConfigMap stays, in the inventory too.
    _run, kept = setup.play({"to_version": version, "recreate_immutable": True, "prune": False})
    assert kept["changed"] is True and kept["manifests"] == [{"object": recreated, "action": "recreated"}] + proxy_update
    restored = rbac.read_cluster_role_binding(binding.metadata.name)
    assert restored.role_ref.name == role and restored.metadata.annotations["config.k8s.io/owning-inventory"] == inventory[1]
    assert core.read_namespaced_config_map("talos-retired", "kube-system").data == {"retired": "yes"}
    assert "kube-system_talos-retired__ConfigMap" in core.read_namespaced_config_map(inventory[1], inventory[0]).data

    # kube-proxy's image changed by hand, the rendered one gone from the registry: the sync puts it back, and the
    # DaemonSet never becomes ready; the wait fails, and the task reports what it wrote.
    apps.patch_namespaced_daemon_set("kube-proxy", "kube-system", {"spec": {"template": {"spec": {"containers": [
        {"name": "kube-proxy", "image": image + "-by-hand"}]}}}})
    with _missing_image(cluster, image):
        _run, unready = setup.play({"to_version": version, "prune": False, "reconcile_timeout": 3}, expect_rc=2)
    assert unready["msg"].startswith("Syncing the bootstrap manifests, waiting for the objects written to be ready: Timed out "
                                     "after 3 seconds waiting for the bootstrap manifests to be ready; last observed: "
                                     "DaemonSet kube-system/kube-proxy InProgress: "), unready["msg"]
    assert re.search(r"; \d+ write\(s\) were made in the Kubernetes API, rerun the task to finish the upgrade\.$",
                     unready["msg"]), unready["msg"]
    assert unready["changed"] is True
    assert unready["manifests"] == [{"object": "DaemonSet kube-system/kube-proxy", "action": "updated"}]
    assert apps.read_namespaced_daemon_set("kube-proxy", "kube-system").spec.template.spec.containers[0].image == image

    # kube-proxy disabled: Talos renders none of its objects; they and the retired ConfigMap are pruned and forgotten.
    _set_kube_proxy(setup, False)
    _run, pruned = setup.play({"to_version": version})
    proxy_objects = ["ClusterRoleBinding kube-proxy", "DaemonSet kube-system/kube-proxy", "ServiceAccount kube-system/kube-proxy"]
    assert pruned["changed"] is True
    assert sorted(item["object"] for item in pruned["manifests"]) == sorted(proxy_objects + [retired])
    assert {item["action"] for item in pruned["manifests"]} == {"pruned"}
    assert sorted(pruned["manifests_inventory"]["removed"]) == sorted([
        "kube-system_talos-retired__ConfigMap", "kube-system_kube-proxy_apps_DaemonSet", "kube-system_kube-proxy__ServiceAccount",
        "_kube-proxy_rbac.authorization.k8s.io_ClusterRoleBinding"])
    assert core.list_namespaced_config_map("kube-system", field_selector="metadata.name=talos-retired").items == []
    assert apps.list_namespaced_daemon_set("kube-system", field_selector="metadata.name=kube-proxy").items == []
    left = core.read_namespaced_config_map(inventory[1], inventory[0]).data
    assert not [key for key in left if "kube-proxy" in key or "talos-retired" in key]

    _run, settled = setup.play({"to_version": version})
    assert settled["changed"] is False and settled["manifests"] == []
