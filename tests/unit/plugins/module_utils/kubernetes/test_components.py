# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubernetes_components.py: versions and upgrade paths, Talos support, image tags, config homes in both forms and
the least-change patch of a config's text."""

import json
import os

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import components
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError

V1ALPHA1 = """\
version: v1alpha1 # comment kept
machine:
  type: controlplane
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.36.3
cluster:
  apiServer:
    image: registry.k8s.io/kube-apiserver:v1.36.3 # pinned by us
  controllerManager:
    image: registry.k8s.io/kube-controller-manager:v1.36.3
  proxy:
    image: registry.k8s.io/kube-proxy:v1.36.3
"""

DOCUMENTS = """\
version: v1alpha1
machine:
  type: controlplane
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.36.3
---
apiVersion: v1alpha1
kind: KubeAPIServerConfig
image: mirror.example.com/k8s/kube-apiserver:v1.36.3
---
apiVersion: v1alpha1
kind: KubeletConfig
image: ghcr.io/siderolabs/kubelet:v1.36.3
"""


def documents(text):
    return [document for document in yaml.safe_load_all(text) if document is not None]


@pytest.mark.parametrize("from_version, to_version, problem", [
    ("1.36.3", "1.37.2", None),
    ("1.36.3", "1.36.5", None),
    ("1.36.5", "1.36.3", None),
    ("1.36.3", "1.37.0-rc.1", None),
    ("1.35.2", "1.37.2", "one minor release at a time: 1.35.2 to 1.37.2 skips 1.36; upgrade to the newest 1.36"),
    ("1.37.2", "1.36.3", "cannot be downgraded from 1.37.2 to 1.36.3"),
    ("1.36.3", "2.0.0", "a major version change is not supported"),
])
def test_upgrade_path(from_version, to_version, problem):
    found = components.upgrade_path_problem(from_version, to_version)
    if problem is None:
        assert found is None
    else:
        assert problem in found


def test_talos_support_names_the_node_and_the_range():
    assert components.talos_support_problem("v1.14.0", "1.37.2", "10.5.0.2") is None
    problem = components.talos_support_problem("v1.13.5", "1.37.2", "10.5.0.2")
    assert problem == ("10.5.0.2 runs Talos v1.13.5, which supports Kubernetes 1.31 to 1.36, not 1.37.2: "
                       "upgrade Talos first.")
    # Talos 1.15 as published (pkg/machinery/compatibility/talos115: Kubernetes 1.33.0 to 1.38.99).
    assert components.talos_support_problem("v1.15.0-alpha.0", "1.38.0", "10.5.0.2") is None
    assert "supports Kubernetes 1.33 to 1.38, not 1.32.9" in components.talos_support_problem("v1.15.1", "1.32.9", "n")


def test_a_talos_release_the_table_does_not_know_is_refused():
    assert components.talos_support_problem("v1.16.0", "1.38.0", "node 10.5.0.2") == (
        "node 10.5.0.2 runs Talos v1.16.0, whose supported Kubernetes versions this collection does not know (it knows "
        "Talos 1.9 to 1.15); use a collection release that supports it.")
    assert "does not know" in components.talos_support_problem("v1.8.3", "1.31.0", "node 10.5.0.2")


def test_a_target_no_talos_release_supports_is_refused_without_a_node():
    assert components.unsupported_everywhere_problem("1.38.1") is None
    assert components.unsupported_everywhere_problem("1.27.0") is None
    assert components.unsupported_everywhere_problem("1.39.0") == (
        "to_version 1.39.0 is not supported by any Talos release (Talos 1.9 to 1.15 run Kubernetes 1.27 to 1.38).")
    assert components.unsupported_everywhere_problem("1.26.9").startswith("to_version 1.26.9 is not supported")


@pytest.mark.parametrize("given, spelled", [("1.37.2", "1.37.2"), ("v1.37.2", "1.37.2"), (" v1.37.0-rc.1", "1.37.0-rc.1")])
def test_kubernetes_version(given, spelled):
    assert components.kubernetes_version(given) == spelled


def test_kubernetes_version_names_the_option():
    with pytest.raises(TalosConfigError, match=r"^from_version 'latest' is not a Kubernetes version such as 1.37.2.$"):
        components.kubernetes_version("latest", "from_version")


@pytest.mark.parametrize("image, version, retagged", [
    ("registry.k8s.io/kube-apiserver:v1.36.3", "1.37.2", "registry.k8s.io/kube-apiserver:v1.37.2"),
    ("registry.local:5000/k8s/kube-apiserver:v1.36.3@sha256:" + "a" * 64, "1.37.2",
     "registry.local:5000/k8s/kube-apiserver:v1.37.2"),
    ("registry.local:5000/kube-apiserver", "1.37.2", "registry.local:5000/kube-apiserver:v1.37.2"),
    (None, "1.37.2", "registry.k8s.io/kube-scheduler:v1.37.2"),
    ("ghcr.io/siderolabs/kubelet:v1.36.3-fat", "1.37.2", "ghcr.io/siderolabs/kubelet:v1.37.2-fat"),
])
def test_retagged_keeps_the_repository(image, version, retagged):
    assert components.retagged(image, version, "registry.k8s.io/kube-scheduler") == retagged


def test_retagged_moves_to_another_repository_keeping_the_flavour():
    moved = components.retagged("ghcr.io/siderolabs/kubelet:v1.36.3-fat", "1.37.2", "ghcr.io/siderolabs/kubelet",
                                "registry.example.com/kubelet")
    assert moved == "registry.example.com/kubelet:v1.37.2-fat"
    moved = components.retagged(None, "1.37.2", "registry.k8s.io/kube-scheduler", "registry.example.com:5000/k8s/kube-scheduler")
    assert moved == "registry.example.com:5000/k8s/kube-scheduler:v1.37.2"


@pytest.mark.parametrize("value", ["registry.example.com/kube-apiserver:v1.37.2", "registry.k8s.io/kube-apiserver@sha256:ab",
                                   "", "Registry.example.com/Kube"])
def test_image_repository_refuses_a_tag_a_digest_or_nothing(value):
    with pytest.raises(TalosConfigError, match=r"^apiserver_image .* is not an image repository such as "):
        components.image_repository(value, "apiserver_image")


def test_image_repository_accepts_a_registry_with_a_port():
    assert components.image_repository("registry.local:5000/k8s/kube-apiserver", "apiserver_image") == (
        "registry.local:5000/k8s/kube-apiserver")


def test_image_version():
    assert components.image_version("registry.k8s.io/kube-apiserver:v1.36.3") == "1.36.3"
    assert components.image_version("ghcr.io/siderolabs/kubelet:v1.36.3-slim") == "1.36.3"
    assert components.image_version("ghcr.io/siderolabs/kubelet:v1.37.0-rc.1") == "1.37.0-rc.1"
    assert components.image_version("registry.local:5000/kube-apiserver") is None
    assert components.image_version("example.com/kube-apiserver:latest") is None


def test_config_home_v1alpha1_fields():
    docs = documents(V1ALPHA1)
    home = components.config_home(docs, components.KUBE_APISERVER)
    assert (home.document, home.field, home.image) == ("v1alpha1", ".cluster.apiServer.image",
                                                       "registry.k8s.io/kube-apiserver:v1.36.3")
    # A field the config leaves to Talos.
    home = components.config_home(docs, components.KUBE_SCHEDULER)
    assert (home.document, home.field, home.image) == ("v1alpha1", ".cluster.scheduler.image", None)


def test_config_home_prefers_the_document_the_config_has():
    docs = documents(DOCUMENTS)
    home = components.config_home(docs, components.KUBE_APISERVER)
    assert home.as_dict() == {"document": "KubeAPIServerConfig", "field": "image"}
    assert components.config_home(docs, components.KUBELET).document == "KubeletConfig"
    # No KubeSchedulerConfig document: the v1alpha1 field, as Talos reads it.
    assert components.config_home(docs, components.KUBE_SCHEDULER).document == "v1alpha1"


def test_config_home_needs_somewhere_to_write():
    docs = documents("apiVersion: v1alpha1\nkind: KubeletConfig\nimage: ghcr.io/siderolabs/kubelet:v1.36.3\n")
    with pytest.raises(TalosConfigError, match="neither a KubeAPIServerConfig document nor a v1alpha1 document"):
        components.config_home(docs, components.KUBE_APISERVER)


def test_config_with_image_changes_one_line_only():
    docs = documents(V1ALPHA1)
    home = components.config_home(docs, components.KUBE_APISERVER)
    patched = components.config_with_image(V1ALPHA1, docs, home, "registry.k8s.io/kube-apiserver:v1.37.2")
    assert patched == V1ALPHA1.replace("kube-apiserver:v1.36.3 # pinned", "kube-apiserver:v1.37.2 # pinned")


def test_config_with_image_in_a_document():
    docs = documents(DOCUMENTS)
    home = components.config_home(docs, components.KUBE_APISERVER)
    patched = components.config_with_image(DOCUMENTS, docs, home, "mirror.example.com/k8s/kube-apiserver:v1.37.2")
    assert patched == DOCUMENTS.replace("kube-apiserver:v1.36.3", "kube-apiserver:v1.37.2")


def test_config_with_image_sets_a_field_the_config_lacks():
    docs = documents(V1ALPHA1)
    home = components.config_home(docs, components.KUBE_SCHEDULER)
    patched = documents(components.config_with_image(V1ALPHA1, docs, home, "registry.k8s.io/kube-scheduler:v1.37.2"))
    assert patched[0]["cluster"]["scheduler"] == {"image": "registry.k8s.io/kube-scheduler:v1.37.2"}
    assert patched[0]["cluster"]["apiServer"]["image"] == "registry.k8s.io/kube-apiserver:v1.36.3"


def test_config_with_image_named_twice_writes_the_home_only():
    # The kubelet image is named in machine.kubelet and in the KubeletConfig document: only the document is Talos's.
    docs = documents(DOCUMENTS)
    home = components.config_home(docs, components.KUBELET)
    patched = documents(components.config_with_image(DOCUMENTS, docs, home, "ghcr.io/siderolabs/kubelet:v1.37.2"))
    assert patched[2]["image"] == "ghcr.io/siderolabs/kubelet:v1.37.2"
    assert patched[0]["machine"]["kubelet"]["image"] == "ghcr.io/siderolabs/kubelet:v1.36.3"


def test_kube_proxy_enabled():
    assert components.kube_proxy_enabled(documents(V1ALPHA1)) is True
    disabled = V1ALPHA1.replace("  proxy:\n", "  proxy:\n    disabled: true\n")
    assert components.kube_proxy_enabled(documents(disabled)) is False


def test_kube_proxy_disabled_the_v1_14_way():
    # A KubeProxyConfig document replaces the v1alpha1 section: its enabled decides (Cilium clusters set false).
    proxy = "---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nimage: registry.k8s.io/kube-proxy:v1.36.3\n"
    assert components.kube_proxy_enabled(documents(DOCUMENTS + proxy)) is True
    assert components.kube_proxy_enabled(documents(DOCUMENTS + proxy + "enabled: false\n")) is False
    assert components.kube_proxy_enabled(documents(DOCUMENTS + proxy + "enabled: true\n")) is True


METRICS = """\
# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested.
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="flowcontrol.apiserver.k8s.io",removed_release="1.37",resource="flowschemas",subresource="",version="v1beta3"} 1
apiserver_requested_deprecated_apis{group="",removed_release="",resource="componentstatuses",subresource="",version="v1"} 1
apiserver_requested_deprecated_apis{group="storage.k8s.io",removed_release="1.38",resource="csistoragecapacities",subresource="",version="v1beta1"} 1
apiserver_request_total{code="200",resource="pods",verb="LIST",version="v1"} 12
"""


def test_deprecated_apis_from_metrics_and_those_the_target_removes():
    requested = kube_api.deprecated_apis(METRICS)
    assert requested == [
        {"group": "flowcontrol.apiserver.k8s.io", "version": "v1beta3", "resource": "flowschemas", "removed_release": "1.37"},
        {"group": "storage.k8s.io", "version": "v1beta1", "resource": "csistoragecapacities", "removed_release": "1.38"},
    ]
    assert components.removed_apis(requested, "1.36.3") == []
    removed = components.removed_apis(requested, "1.37.2")
    assert [item["resource"] for item in removed] == ["flowschemas"]
    assert components.removed_apis_problem(removed, "1.37.2") == (
        "Clients still ask the API server for APIs Kubernetes 1.37.2 no longer serves: "
        "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas (removed in 1.37); move them to the current APIs first, "
        "or set check_deprecated_apis: false.")
    assert components.removed_apis_problem([], "1.37.2") is None


UPSTREAM = os.path.join(os.path.dirname(__file__), "upstream_kubernetes_removals.json")
_UPSTREAM_COMPONENTS = {"kubeAPIServerChecks": "kube-apiserver", "kubeControllerManagerChecks": "kube-controller-manager",
                        "kubeSchedulerChecks": "kube-scheduler", "kubeletChecks": "kubelet"}


def _from_upstream(entry):
    """An entry of upstream's upgradeVersionCheck in the shape of REMOVED_BY_PATH."""
    ours = {}
    if entry.get("removedFeatureGates"):
        ours["feature_gates"] = tuple(entry["removedFeatureGates"])
    flags = dict((_UPSTREAM_COMPONENTS[key], tuple(value["removedFlags"])) for key, value in entry.items()
                 if key in _UPSTREAM_COMPONENTS and value.get("removedFlags"))
    if flags:
        ours["flags"] = flags
    apiserver = entry.get("kubeAPIServerChecks") or {}
    if apiserver.get("removedAdmissionPlugins"):
        ours["admission_plugins"] = tuple(apiserver["removedAdmissionPlugins"])
    if apiserver.get("removedAPIResources"):
        ours["api_resources"] = tuple(apiserver["removedAPIResources"])
    return ours


def test_the_removal_table_is_upstreams_for_every_supported_path():
    """Every upgrade path a Talos release of SUPPORTED_KUBERNETES allows has upstream's removals (none when upstream
    lists none), and the table holds no path upstream does not."""
    with open(UPSTREAM) as source:
        upstream = json.load(source)["paths"]
    lowest = min(low for low, _high in components.SUPPORTED_KUBERNETES.values())
    highest = max(high for _low, high in components.SUPPORTED_KUBERNETES.values())
    paths = ["1.%d->1.%d" % (minor, minor + 1) for minor in range(lowest[1], highest[1])]
    assert "1.36->1.37" in paths and "1.37->1.38" in paths
    for path in paths:
        assert components.REMOVED_BY_PATH.get(path, {}) == _from_upstream(upstream.get(path, {})), path
    assert sorted(components.REMOVED_BY_PATH) == sorted(upstream)
    for path in upstream:
        assert components.REMOVED_BY_PATH[path] == _from_upstream(upstream[path]), path


def test_removed_arguments_of_a_rendered_command_line():
    kubelet = ["--config=/etc/kubernetes/kubelet.yaml", "--pod-infra-container-image=pause:3.9",
               "--feature-gates=SizeMemoryBackedVolumes=true,Other=false"]
    assert components.removed_arguments("kubelet", kubelet, "1.34->1.35") == [
        "flag --pod-infra-container-image", "feature gate SizeMemoryBackedVolumes"]
    assert components.removed_arguments("kubelet", kubelet, "1.33->1.34") == []
    assert components.removed_arguments("kubelet", kubelet, None) == []
    # The kubelet's featureGates of its config file count too.
    assert components.removed_arguments("kubelet", [], "1.35->1.36", feature_gates=["HonorPVReclaimPolicy"]) == [
        "feature gate HonorPVReclaimPolicy"]
    apiserver = ["/usr/local/bin/kube-apiserver", "--enable-admission-plugins=NodeRestriction,SecurityContextDeny"]
    assert components.removed_arguments("kube-apiserver", apiserver, "1.29->1.30") == ["admission plugin SecurityContextDeny"]
    # A flag removed from one component is no problem for another.
    assert components.removed_arguments("kube-apiserver", ["--cloud-config=/etc/cloud"], "1.33->1.34") == []
    assert components.removed_arguments("kubelet", ["--cloud-config", "/etc/cloud"], "1.33->1.34") == ["flag --cloud-config"]
    assert components.removed_arguments("kube-scheduler", ["--feature-gates", "GangScheduling=true"], "1.36->1.37") == [
        "feature gate GangScheduling"]


def test_removed_api_resources_and_upgrade_paths():
    assert components.upgrade_path("1.36.3", "1.37.2") == "1.36->1.37"
    assert components.upgrade_path("1.37.0", "1.37.2") is None
    assert components.removed_api_resources("1.36->1.37") == [
        ("scheduling.k8s.io", "v1alpha2", "workloads"), ("scheduling.k8s.io", "v1alpha2", "podgroups")]
    assert components.removed_api_resources("1.35->1.36") == []
