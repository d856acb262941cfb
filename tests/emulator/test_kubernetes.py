# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes side of the emulator against a real API server (tests/kube_apiserver): what nodes render from
their configs (both layouts), the kubelet shim's Nodes, mirror pods, bootstrap manifests and rollouts."""

import base64
import os
import time

import kube_apiserver
from harness_files import HarnessBuild
import kubernetes as k8s
import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, machine_pb2

from emulator_client import ApiClient
from talos_emulator import configgen, kubernetes
from talos_emulator.kubelets import CONDITION_TAINTS
from talos_emulator.pki import to_standard_pem
from talos_emulator.runners import started_message

K8S_VERSION = "v1.36.3"
NEXT = "v1.37.2"
APISERVER_CONFIGS = "APIServerConfigs.kubernetes.talos.dev"
NO_REBOOT = machine_pb2.ApplyConfigurationRequest.NO_REBOOT
STRATEGIC = "application/strategic-merge-patch+json"
# controlplane-1 and worker-1 get v1alpha1 configs (the emulator's configgen), controlplane-2 a v1.14 documents
# config (the collection's generator).
LAYOUTS = {"controlplane-1": "v1alpha1", "controlplane-2": "documents", "worker-1": "v1alpha1"}


class KubeCluster:
    def __init__(self, cluster, server, talos, core, apps):
        self.cluster = cluster
        self.server = server
        self.talos = talos
        self.core = core
        self.apps = apps

    def node(self, name):
        return self.cluster.node(name)

    def get(self, node, namespace, resource_type, resource_id, client=None):
        """``(version, spec)`` of a COSI resource of ``node``."""
        request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id)
        resource = (client or self.talos).call("cosi.resource.State/Get", request, node=self.node(node).address).resource
        return int(resource.metadata.version), yaml.safe_load(resource.spec.yaml_spec)

    def list(self, node, namespace, resource_type):
        request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
        replies = self.talos.call("cosi.resource.State/List", request, node=self.node(node).address)
        return dict((reply.resource.metadata.id, yaml.safe_load(reply.resource.spec.yaml_spec)) for reply in replies)

    def apply(self, node, config_text):
        request = machine_pb2.ApplyConfigurationRequest(data=config_text.encode(), mode=NO_REBOOT)
        return self.talos.call("machine.MachineService/ApplyConfiguration", request, node=self.node(node).address)

    def set_image(self, node, component, image):
        """Apply the node's config with ``component``'s image changed where its layout keeps it."""
        documents = list(yaml.safe_load_all(self.node(node).config_bytes))
        if LAYOUTS[node] == "v1alpha1":
            section = documents[0]["machine"] if component == "kubelet" else documents[0]["cluster"]
            section[{"kubelet": "kubelet", "kube-apiserver": "apiServer", "kube-proxy": "proxy"}[component]]["image"] = image
        else:
            kind = {"kubelet": "KubeletConfig", "kube-apiserver": "KubeAPIServerConfig", "kube-proxy": "KubeProxyConfig"}[component]
            [document] = [document for document in documents if document.get("kind") == kind]
            document["image"] = image
        self.apply(node, yaml.safe_dump_all(documents, sort_keys=False))

    def node_object(self, name):
        return self.core.read_node(name)

    def ready(self, node_object):
        """The Node's Ready status, or None while the kubelet shim has registered it but written no status yet."""
        return next((condition.status for condition in node_object.status.conditions or () if condition.type == "Ready"), None)


def _wait_for(fetch, check, timeout=15, interval=0.05):
    """Poll ``fetch()`` until ``check(value)``; returns the value (AssertionError with the last one otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fetch()
        except k8s.client.ApiException as error:
            if error.status != 404:
                raise
            value = None
        if value is not None and check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError("not reached in %ss; last value: %r" % (timeout, value))
        time.sleep(interval)


def _config(cluster, node, endpoint):
    if LAYOUTS[node.name] == "v1alpha1":
        return configgen.generate_machine_config(cluster.secrets, node.role, cluster.name, endpoint, kubernetes_version=K8S_VERSION)
    return config_generation.render_machine_config(
        os.path.join(cluster.state_dir, "secrets.yaml"), node.role, cluster.name, endpoint,
        talos_version="v1.14.0", kubernetes_version=K8S_VERSION.lstrip("v"))


@pytest.fixture(scope="module")
def kube(module_emulator, kube_apiserver_factory):
    """Two control planes and a worker configured for a real API server, bootstrapped, their kubelets running; the
    API server stores its objects in the control planes' real etcd members, as on Talos."""
    cluster = module_emulator(controlplanes=2, workers=1, maintenance=True, reboot_seconds=0.2, etcd="real")
    secrets = cluster.secrets
    # The configs name the API server's endpoint; it starts once etcd runs.
    port = kube_apiserver.free_port()
    with ApiClient(cluster, insecure=True) as insecure:
        for node in cluster.nodes:
            config_text = _config(cluster, node, "https://127.0.0.1:%d" % port)
            request = machine_pb2.ApplyConfigurationRequest(data=config_text.encode(), mode=NO_REBOOT)
            insecure.call("machine.MachineService/ApplyConfiguration", request, endpoint=node.endpoint)
    cluster.wait_until(lambda: all(node.reboots == 1 for node in cluster.nodes))
    for node in cluster.nodes:
        cluster.wait_ready(node)
    cluster.bootstrap()
    server = kube_apiserver_factory(secrets.k8s_ca.crt_pem, secrets.k8s_ca.key_pem, secrets.service_account_key_pem, port=port,
                                    etcd=(cluster.etcd.client_urls(), secrets.etcd_ca.crt_pem, to_standard_pem(secrets.etcd_ca.key_pem)))
    kubelets = cluster.run_kubelets()
    api_client = k8s.config.new_client_from_config(server.kubeconfig_path)
    talos = ApiClient(cluster)
    kube = KubeCluster(cluster, server, talos, k8s.client.CoreV1Api(api_client), k8s.client.AppsV1Api(api_client))
    try:
        # Ready, and the condition taints gone: the taints follow the Ready condition one write later, as the node
        # lifecycle controller's do.
        _wait_for(lambda: kube.core.list_node().items,
                  lambda nodes: len(nodes) == 3 and all(kube.ready(node) == "True" and not any(
                      taint.key in dict(CONDITION_TAINTS) for taint in node.spec.taints or ()) for node in nodes))
    except AssertionError:
        assert kubelets.errors == [], kubelets.errors[-1]
        raise
    yield kube
    kubelets.stop()
    talos.close()
    server.stop()


@pytest.fixture(autouse=True)
def no_kubelet_errors(request):
    yield
    if "kube" in request.fixturenames:
        errors = request.getfixturevalue("kube").cluster.kubelets.errors
        assert errors == [], errors[-1]


def test_the_api_server_is_the_release_built(kube):
    assert kube.server.version == "v1.37.2"
    assert kube.server.url.startswith("https://127.0.0.1:")


def test_nodes_register_as_kubelets(kube):
    for node in kube.cluster.nodes:
        found = kube.node_object(node.hostname)
        assert found.status.node_info.kubelet_version == K8S_VERSION
        assert kube.ready(found) == "True"
        assert [(address.type, address.address) for address in found.status.addresses] == [
            ("InternalIP", node.address), ("Hostname", node.hostname)]
        assert found.metadata.labels["kubernetes.io/hostname"] == node.hostname
        if node.is_control_plane:
            assert found.metadata.labels[kubernetes.CONTROL_PLANE_LABEL] == ""
            assert [(taint.key, taint.effect) for taint in found.spec.taints] == [(kubernetes.CONTROL_PLANE_LABEL, "NoSchedule")]
        else:
            assert kubernetes.CONTROL_PLANE_LABEL not in found.metadata.labels and not found.spec.taints
    # What talosctl upgrade-k8s asks: the control planes' InternalIPs by the role label.
    control_planes = kube.core.list_node(label_selector=kubernetes.CONTROL_PLANE_LABEL).items
    assert sorted(item.status.addresses[0].address for item in control_planes) == sorted(node.address for node in kube.cluster.controlplanes)


@pytest.mark.parametrize("name", ["controlplane-1", "controlplane-2"])
def test_control_planes_render_both_layouts(kube, name):
    _version, kubelet = kube.get(name, "k8s", "KubeletSpecs.kubernetes.talos.dev", "kubelet")
    assert kubelet["image"] == "ghcr.io/siderolabs/kubelet:%s" % K8S_VERSION and kubelet["expectedNodename"] == name
    for component, resource_type in kubernetes.CONFIG_TYPES.items():
        _version, spec = kube.get(name, "controlplane", resource_type, component)
        assert spec["image"] == "registry.k8s.io/%s:%s" % (component, K8S_VERSION)
    statuses = kube.list(name, "k8s", "StaticPodStatuses.kubernetes.talos.dev")
    assert sorted(statuses) == ["kube-system/%s-%s" % (component, name) for component in kubernetes.COMPONENTS]
    for status in statuses.values():
        # The spec is the pod status itself, as Talos marshals it.
        assert status["phase"] == "Running" and {"type": "Ready", "status": "True"}.items() <= status["conditions"][2].items()
    manifests = kube.list(name, "controlplane", "Manifests.kubernetes.talos.dev")
    assert {"00-kubelet-bootstrapping-token", "01-csr-node-bootstrap", "01-csr-approver-role-binding",
            "01-csr-renewal-role-binding", "10-kube-proxy", "11-core-dns"} <= set(manifests)
    token_id, token_secret = kube.cluster.secrets.bootstrap_token.split(".")
    [secret] = manifests["00-kubelet-bootstrapping-token"]
    assert (secret["metadata"]["name"], secret["stringData"]["token-secret"]) == ("bootstrap-token-%s" % token_id, token_secret)
    [daemon_set] = [item for item in manifests["10-kube-proxy"] if item["kind"] == "DaemonSet"]
    assert daemon_set["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-proxy:%s" % K8S_VERSION


def test_worker_renders_only_its_kubelet(kube):
    assert kube.get("worker-1", "k8s", "KubeletSpecs.kubernetes.talos.dev", "kubelet")[1]["image"].endswith(K8S_VERSION)
    assert kube.list("worker-1", "controlplane", APISERVER_CONFIGS) == {}
    assert kube.list("worker-1", "k8s", "StaticPodStatuses.kubernetes.talos.dev") == {}


def test_definitions_and_sensitivity(kube):
    definitions = kube.list("controlplane-1", "meta", "ResourceDefinitions.meta.cosi.dev")
    assert definitions["staticpodstatuses.kubernetes.talos.dev"]["displayType"] == "StaticPodStatus"
    assert "podstatus" in definitions["staticpodstatuses.kubernetes.talos.dev"]["allAliases"]
    assert definitions["manifests.kubernetes.talos.dev"]["defaultNamespace"] == "controlplane"
    assert definitions["apiserverconfigs.kubernetes.talos.dev"]["sensitivity"] == "sensitive"
    assert definitions["manifests.kubernetes.talos.dev"]["sensitivity"] == "non-sensitive"
    with ApiClient(kube.cluster, role="reader") as reader:
        with pytest.raises(GRPCError) as excinfo:
            kube.get("controlplane-1", "controlplane", APISERVER_CONFIGS, "kube-apiserver", client=reader)
        assert (excinfo.value.status, excinfo.value.message) == (Status.PERMISSION_DENIED, "not authorized")
        assert kube.get("controlplane-1", "controlplane", "Manifests.kubernetes.talos.dev", "01-csr-node-bootstrap", client=reader)


def test_bootstrap_manifests_are_created_once_and_valid(kube, tmp_path):
    token_id = kube.cluster.secrets.bootstrap_token.split(".")[0]
    secret = kube.core.read_namespaced_secret("bootstrap-token-%s" % token_id, "kube-system")
    assert secret.type == "bootstrap.kubernetes.io/token"
    assert secret.metadata.annotations[kubernetes.INVENTORY_ANNOTATION] == kubernetes.INVENTORY_NAME
    assert [entry.manager for entry in secret.metadata.managed_fields] == [kubernetes.FIELD_MANAGER]
    inventory = kube.core.read_namespaced_config_map(kubernetes.INVENTORY_NAME, "kube-system").data
    assert "kube-system_kube-proxy_apps_DaemonSet" in inventory and "_system__coredns_rbac.authorization.k8s.io_ClusterRole" in inventory
    # Its controller would: the shim writes the Deployment's status.
    _wait_for(lambda: kube.apps.read_namespaced_deployment("coredns", "kube-system"),
              lambda found: found.status.available_replicas == 2 and found.status.observed_generation == 1)
    # Every object of every control plane's manifests passes the API server's validation (server-side apply, dry run).
    dynamic = k8s.dynamic.DynamicClient(kube.core.api_client, cache_file=str(tmp_path / "discovery.json"))
    for node in kube.cluster.controlplanes:
        for objects in kube.list(node.name, "controlplane", "Manifests.kubernetes.talos.dev").values():
            for obj in objects:
                resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                dynamic.server_side_apply(resource, body=obj, namespace=obj["metadata"].get("namespace"),
                                          field_manager="test", force_conflicts=True, dry_run="All")


def test_mirror_pods_show_static_pods_with_their_config_versions(kube):
    for node in kube.cluster.controlplanes:
        for component, resource_type in kubernetes.CONFIG_TYPES.items():
            version, spec = kube.get(node.name, "controlplane", resource_type, component)
            pod = kube.core.read_namespaced_pod("%s-%s" % (component, node.hostname), "kube-system")
            assert pod.spec.containers[0].image == spec["image"] and pod.spec.node_name == node.hostname
            assert pod.metadata.labels == {"k8s-app": component, "tier": "control-plane"}
            assert pod.metadata.annotations[kubernetes.CONFIG_VERSION_ANNOTATION] == str(version)
            assert "kubernetes.io/config.mirror" in pod.metadata.annotations
            assert pod.status.host_ip == node.address and pod.status.phase == "Running"
            assert [condition.status for condition in pod.status.conditions if condition.type == "Ready"] == ["True"]
    pods = kube.core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-apiserver").items
    assert sorted(pod.status.host_ip for pod in pods) == sorted(node.address for node in kube.cluster.controlplanes)


@pytest.mark.parametrize("name", ["controlplane-1", "controlplane-2"])
def test_api_server_image_patch_restarts_its_static_pod(kube, name):
    before, _spec = kube.get(name, "controlplane", APISERVER_CONFIGS, "kube-apiserver")
    pod_name = "kube-apiserver-%s" % name
    old_uid = kube.core.read_namespaced_pod(pod_name, "kube-system").metadata.uid
    image = "registry.k8s.io/kube-apiserver:%s" % NEXT
    kube.set_image(name, "kube-apiserver", image)
    version, spec = _wait_for(lambda: kube.get(name, "controlplane", APISERVER_CONFIGS, "kube-apiserver"),
                              lambda found: found[0] > before)
    assert (version, spec["image"]) == (before + 1, image)
    pod = _wait_for(lambda: kube.core.read_namespaced_pod(pod_name, "kube-system"),
                    lambda pod: pod.metadata.annotations[kubernetes.CONFIG_VERSION_ANNOTATION] == str(version)
                    and [c.status for c in pod.status.conditions or () if c.type == "Ready"] == ["True"])
    assert pod.spec.containers[0].image == image and pod.metadata.uid != old_uid
    _version, status = kube.get(name, "k8s", "StaticPodStatuses.kubernetes.talos.dev", "kube-system/%s" % pod_name)
    assert status["containerStatuses"][0]["image"] == image and status["containerStatuses"][0]["ready"]
    # The other components did not restart.
    assert kube.get(name, "controlplane", "SchedulerConfigs.kubernetes.talos.dev", "kube-scheduler")[0] == 1


@pytest.mark.parametrize("name", ["worker-1", "controlplane-2"])
def test_kubelet_image_change_restarts_the_kubelet(kube, name, monkeypatch):
    # A slower restart, so that the test sees the kubelet not ready in between.
    monkeypatch.setattr(kubernetes, "RESTART_SECONDS", 1.0)
    kube.set_image(name, "kubelet", "ghcr.io/siderolabs/kubelet:%s" % NEXT)
    restarting = _wait_for(lambda: kube.node_object(name), lambda found: kube.ready(found) == "False")
    assert restarting.status.node_info.kubelet_version == K8S_VERSION
    upgraded = _wait_for(lambda: kube.node_object(name), lambda found: kube.ready(found) == "True")
    assert upgraded.status.node_info.kubelet_version == NEXT


def test_a_kubernetes_ca_change_restarts_the_kubelet_and_other_changes_do_not(kube, monkeypatch):
    # Talos's KubeletServiceController restarts the kubelet when its secrets (the Kubernetes CAs it trusts) change.
    monkeypatch.setattr(kubernetes, "RESTART_SECONDS", 1.0)
    node = kube.node("worker-1")
    service = node.services["kubelet"]

    def change(edit):
        documents = list(yaml.safe_load_all(node.config_bytes))
        edit(documents[0])
        before = len(service.events)
        kube.apply("worker-1", yaml.safe_dump_all(documents, sort_keys=False))
        return [(message, state) for message, state, _stamp in service.events[before:]]

    assert change(lambda config: config["machine"].setdefault("sysctls", {}).update({"vm.max_map_count": "262144"})) == []
    assert kube.ready(kube.node_object("worker-1")) == "True"
    accepted = SecretsBundle.generate("v1.14").cas["k8s"].crt_pem
    restarted = change(lambda config: config["cluster"].setdefault("acceptedCAs", []).append(
        {"crt": base64.b64encode(accepted.encode()).decode()}))
    assert restarted == [("Service finished successfully", "Finished"), (started_message("kubelet"), "Running")]
    _wait_for(lambda: kube.node_object("worker-1"), lambda found: kube.ready(found) == "False")
    _wait_for(lambda: kube.node_object("worker-1"), lambda found: kube.ready(found) == "True")


def test_a_kubernetes_ca_change_renders_the_static_pods_secrets_anew_and_restarts_the_api_server(kube):
    # Talos renders the static pods' secrets (SecretStatuses static-pods) anew when the Kubernetes CAs change; the pods
    # carry their version (talos.dev/secrets-version) and the kubelet restarts them.
    name, secrets = "controlplane-1", "SecretStatuses.kubernetes.talos.dev"
    node = kube.node(name)
    pod_name = "kube-apiserver-%s" % name
    _version, before = kube.get(name, "controlplane", secrets, "static-pods")
    assert before["ready"] is True and kube.list("worker-1", "controlplane", secrets) == {}
    old = kube.core.read_namespaced_pod(pod_name, "kube-system")
    assert old.metadata.annotations[kubernetes.SECRETS_VERSION_ANNOTATION] == before["version"]
    original = node.config_bytes.decode()
    try:
        documents = list(yaml.safe_load_all(original))
        documents[0]["machine"].setdefault("sysctls", {})["vm.max_map_count"] = "262144"
        kube.apply(name, yaml.safe_dump_all(documents, sort_keys=False))
        assert kube.get(name, "controlplane", secrets, "static-pods")[1] == before, "other fields render no secrets"
        accepted = SecretsBundle.generate("v1.14").cas["k8s"].crt_pem
        documents[0]["cluster"].setdefault("acceptedCAs", []).append({"crt": base64.b64encode(accepted.encode()).decode()})
        kube.apply(name, yaml.safe_dump_all(documents, sort_keys=False))
        _version, after = kube.get(name, "controlplane", secrets, "static-pods")
        assert int(after["version"]) > int(before["version"])
        pod = _wait_for(lambda: kube.core.read_namespaced_pod(pod_name, "kube-system"),
                        lambda pod: pod.metadata.annotations[kubernetes.SECRETS_VERSION_ANNOTATION] == after["version"]
                        and [c.status for c in pod.status.conditions or () if c.type == "Ready"] == ["True"])
        assert pod.metadata.uid != old.metadata.uid
    finally:
        kube.apply(name, original)


def test_missing_kubelet_image_fails_pulls_and_keeps_the_old_kubelet(kube):
    missing = "ghcr.io/siderolabs/kubelet:v1.37.1"
    system = common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_SYSTEM)
    cri = common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_CRI)
    worker = kube.node("worker-1").address
    # The registry has every Kubernetes release's images but the one marked missing.
    for minor in range(30, 38):
        for containerd, image in ((cri, "registry.k8s.io/kube-apiserver:v1.%d.4" % minor), (system, "ghcr.io/siderolabs/kubelet:v1.%d.5" % minor)):
            kube.talos.call("machine.ImageService/Pull", image_pb2.ImageServicePullRequest(containerd=containerd, image_ref=image), node=worker)
    kube.cluster.faults.mark_image_unavailable(missing)
    try:
        with pytest.raises(GRPCError) as excinfo:
            kube.talos.call("machine.ImageService/Pull", image_pb2.ImageServicePullRequest(containerd=system, image_ref=missing), node=worker)
        assert excinfo.value.status == Status.NOT_FOUND
        before = kube.node_object("worker-1").status.node_info.kubelet_version
        kube.set_image("worker-1", "kubelet", missing)
        stuck = _wait_for(lambda: kube.node_object("worker-1"), lambda found: kube.ready(found) == "False")
        assert missing in [c.message for c in stuck.status.conditions if c.type == "Ready"][0]
        time.sleep(0.5)
        kube.cluster.kubelets.sync()
        assert kube.node_object("worker-1").status.node_info.kubelet_version == before
    finally:
        kube.cluster.faults.clear()
    recovered = _wait_for(lambda: kube.node_object("worker-1"), lambda found: kube.ready(found) == "True")
    assert recovered.status.node_info.kubelet_version == "v1.37.1"


def _patch_kube_proxy(kube, patch):
    """A strategic merge patch of the kube-proxy DaemonSet: chosen where the client lets the caller choose, the
    default for a mapping in older clients."""
    try:
        return kube.apps.patch_namespaced_daemon_set("kube-proxy", "kube-system", patch, _content_type=STRATEGIC)
    except TypeError as error:
        if "_content_type" not in str(error):
            raise
    return kube.apps.patch_namespaced_daemon_set("kube-proxy", "kube-system", patch)


def test_daemon_set_rollout_after_a_generation_change(kube):
    nodes = len(kube.cluster.nodes)
    image = "registry.k8s.io/kube-proxy:%s" % NEXT
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "kube-proxy", "image": image}]}}}}
    generation = _patch_kube_proxy(kube, patch).metadata.generation
    rolled = _wait_for(lambda: kube.apps.read_namespaced_daemon_set("kube-proxy", "kube-system"),
                       lambda found: found.status.observed_generation == generation)
    status = rolled.status
    assert (status.desired_number_scheduled, status.updated_number_scheduled, status.number_ready, status.number_available) == (
        nodes, nodes, nodes, nodes)
    # An image the registry lacks leaves one pod unavailable: the rolling update stops there.
    missing = "registry.k8s.io/kube-proxy:v1.37.9"
    kube.cluster.faults.mark_image_unavailable(missing)
    try:
        patch["spec"]["template"]["spec"]["containers"][0]["image"] = missing
        generation = _patch_kube_proxy(kube, patch).metadata.generation
        stuck = _wait_for(lambda: kube.apps.read_namespaced_daemon_set("kube-proxy", "kube-system"),
                          lambda found: found.status.observed_generation == generation).status
        assert (stuck.updated_number_scheduled, stuck.number_unavailable, stuck.number_ready) == (1, 1, nodes - 1)
    finally:
        kube.cluster.faults.clear()


def _collection_kube_api(kube, **options):
    """The collection's KubeAPI with the admin kubeconfig the Kubeconfig RPC of the first control plane returns."""
    settings = configgen.kubernetes_settings(kube.cluster.controlplanes[0].config_bytes)
    return kube_api.KubeAPI(kubernetes.admin_kubeconfig(settings, None), **options)


def test_the_collection_talks_to_the_real_api_server(kube):
    """Every call the upgrade makes, with whichever ``kubernetes`` client is installed (the oldest stack runs the
    lowest the collection declares): /metrics through the client's connection pool, not ``call_api``."""
    api = _collection_kube_api(kube)
    try:
        assert isinstance(api.deprecated_api_requests(), list)
        nodes = dict((item["name"], item) for item in api.nodes())
        assert nodes["worker-1"]["addresses"] == [kube.node("worker-1").address, "worker-1"]
        assert [pod["node_name"] for pod in api.pods("kube-system", "k8s-app=kube-scheduler")] == [
            node.hostname for node in kube.cluster.controlplanes]
        assert api.daemonset_rollout("kube-system", "kube-proxy")["images"][0].startswith("registry.k8s.io/kube-proxy:")
        assert api.daemonset_rollout("kube-system", "absent") is None
        # An API resource Kubernetes 1.37 removed is not served; one it serves is counted.
        assert api.object_count("scheduling.k8s.io", "v1alpha2", "workloads") is None
        assert api.object_count("", "v1", "nodes") == 3
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-api-test", "namespace": "default"},
                      "data": {"a": "1"}}
        api.apply(config_map, dry_run=True)
        assert api.live(config_map) is None and api.writes == 0
        api.apply(config_map)
        assert api.live(config_map)["data"] == {"a": "1"} and api.writes == 1
    finally:
        api.close()


def test_the_kubernetes_endpoint_option_replaces_the_kubeconfig_server(kube):
    settings = dict(configgen.kubernetes_settings(kube.cluster.controlplanes[0].config_bytes), endpoint="https://127.0.0.1:1")
    api = kube_api.KubeAPI(kubernetes.admin_kubeconfig(settings, None), server=kube.server.url + "/")
    try:
        assert api.server == kube.server.url and len(api.nodes()) == 3
    finally:
        api.close()


def test_a_node_is_reached_by_its_dns_name_and_by_another_address(kube):
    """As apid dials a target: a name the network's DNS resolves, or any address of the node; not a bare node name."""
    worker = kube.node("worker-1")
    name = kube.cluster.dns_name(worker)
    assert kube.talos.call("machine.MachineService/Hostname", node=name).messages[0].hostname == "worker-1"
    kube.cluster.add_address(worker, "203.0.113.5")
    assert kube.talos.call("machine.MachineService/Hostname", node="203.0.113.5").messages[0].hostname == "worker-1"
    request = state_pb2.GetRequest(namespace="network", type="NodeAddresses.net.talos.dev", id="current")
    spec = yaml.safe_load(kube.talos.call("cosi.resource.State/Get", request, node=name).resource.spec.yaml_spec)
    assert spec["addresses"] == ["%s/8" % worker.address, "203.0.113.5/32"]
    with pytest.raises(GRPCError) as excinfo:
        kube.talos.call("machine.MachineService/Hostname", node="controlplane-2")
    assert "no such host" in excinfo.value.message


def test_static_pods_render_their_command_lines_with_extra_args(kube):
    _version, pod = kube.get("controlplane-1", "k8s", "StaticPods.kubernetes.talos.dev", "kube-apiserver")
    [container] = pod["spec"]["containers"]
    assert container["command"][0] == "/usr/local/bin/kube-apiserver"
    assert "--enable-admission-plugins=NodeRestriction" in container["command"]
    config = configgen.generate_machine_config(configgen.SecretsBundle.generate(), "controlplane", "c", "https://127.0.0.1:6443",
                                               kubernetes_version=K8S_VERSION)
    document = yaml.safe_load(config)
    document["cluster"]["scheduler"] = {"extraArgs": {"feature-gates": "GangScheduling=true"}}
    document["machine"]["kubelet"]["extraArgs"] = {"containerd": "/run/containerd.sock"}
    document["machine"]["kubelet"]["extraConfig"] = {"featureGates": {"HonorPVReclaimPolicy": True}}
    node = type("Node", (), {"config_bytes": yaml.safe_dump(document).encode(), "hostname": "n", "address": "10.5.0.9"})()
    assert "--feature-gates=GangScheduling=true" in kubernetes.static_pod(node, "kube-scheduler")["spec"]["containers"][0]["command"]
    kubelet = kubernetes.kubelet_spec(node)
    assert "--containerd=/run/containerd.sock" in kubelet["args"]
    assert kubelet["config"]["featureGates"] == {"HonorPVReclaimPolicy": True}


def _upgrade_defaults(**options):
    """The options of talos_kubernetes_upgrade at their defaults, with ``options``."""
    from ansible_collections.talos_linux.talos.plugins.modules import talos_kubernetes_upgrade
    defaults = dict((name, spec.get("default")) for name, spec in talos_kubernetes_upgrade.SPEC.argument_spec.items())
    defaults.update(options)
    return talos_kubernetes_upgrade.run, defaults


def test_the_upgrade_refuses_apis_the_target_removes_end_to_end(kube):
    """The module's run with the collection's client, the emulated nodes (running Talos v1.15, which runs Kubernetes
    1.38) and the real API server: a client asked for resource.k8s.io/v1beta1, which 1.38 removes."""
    from module_fakes import run_module
    from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
    from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
    from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings

    kube.server.get("/apis/resource.k8s.io/v1beta1/deviceclasses")
    versions = dict((node.name, node.talos_version) for node in kube.cluster.nodes)

    def set_versions(wanted):
        for node in kube.cluster.nodes:
            node.talos_version = wanted[node.name]
    kube.cluster.call(set_versions, dict((name, "v1.15.0") for name in versions))
    applied = len(kube.cluster.audit(method="ApplyConfiguration", include_dry_run=False))
    run, defaults = _upgrade_defaults(talosconfig=kube.cluster.talosconfig_path(), node=kube.cluster.controlplanes[0].address,
                                      to_version="1.38.0", from_version="1.37.2", wait_timeout=30)
    try:
        with TalosClient(ConnectionSettings.from_params(defaults)) as client:
            with pytest.raises(TalosConfigError) as refused:
                run_module(run, client, defaults)
    finally:
        kube.cluster.call(set_versions, versions)
    assert refused.value.message.startswith(
        "Clients still ask the API server for APIs Kubernetes 1.38.0 no longer serves: "
        "resource.k8s.io/v1beta1/deviceclasses (removed in 1.38); move them to the current APIs first")
    assert len(kube.cluster.audit(method="ApplyConfiguration", include_dry_run=False)) == applied


# What a config renders, without a cluster.

def _v1alpha1(**cluster_sections):
    text = configgen.generate_machine_config(configgen.SecretsBundle.generate(), "controlplane", "c", "https://127.0.0.1:6443",
                                             kubernetes_version=K8S_VERSION)
    document = yaml.safe_load(text)
    document["cluster"].update(cluster_sections)
    return yaml.safe_dump(document).encode()


def test_kube_proxy_disabled_has_no_manifest():
    config = _v1alpha1(proxy={"disabled": True})
    assert "10-kube-proxy" not in dict(kubernetes.bootstrap_manifests(config))
    assert "10-kube-proxy" in dict(kubernetes.bootstrap_manifests(_v1alpha1()))


def test_a_document_wins_over_its_v1alpha1_field_and_defaults_fill_in():
    config = _v1alpha1(apiServer={"image": "registry.k8s.io/kube-apiserver:v1.30.1"}, scheduler={})
    document = {"apiVersion": "v1alpha1", "kind": "KubeAPIServerConfig", "image": "registry.k8s.io/kube-apiserver:v1.31.2"}
    images = kubernetes.settings(config + b"---\n" + yaml.safe_dump(document).encode())["images"]
    assert images["kube-apiserver"] == "registry.k8s.io/kube-apiserver:v1.31.2"
    assert images["kube-scheduler"] == "registry.k8s.io/kube-scheduler:%s" % configgen.DEFAULT_KUBERNETES_VERSION
    assert kubernetes.settings(config)["images"]["kube-apiserver"] == "registry.k8s.io/kube-apiserver:v1.30.1"


def test_a_failed_build_is_an_error_not_a_skip(tmp_path, monkeypatch):
    build = tmp_path / "build"
    build.write_text("#!/bin/sh\necho 'kube-apiserver harness: no Go toolchain on PATH' >&2\nexit 1\n")
    build.chmod(0o755)
    monkeypatch.setattr(kube_apiserver, "_build", HarnessBuild(str(build), "the test Kubernetes API server", kube_apiserver.KubeAPIServerError))
    with pytest.raises(kube_apiserver.KubeAPIServerError, match="no Go toolchain on PATH"):
        kube_apiserver.binary()
