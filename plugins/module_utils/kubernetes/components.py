# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes components Talos runs, as the machine config names them.

Each component has one image, set in one of two homes: a v1alpha1 field
(``.cluster.apiServer.image``) or, from Talos v1.14, the ``image`` of its own
document (``KubeAPIServerConfig``). A node takes the document when its config
has one, so an upgrade writes the home the config already uses: writing the
other form gives a config Talos rejects or ignores (upstream
``stdpatches.GuessVersionContract*``). What the node runs is read from its
resources (``APIServerConfigs``, ``KubeletSpecs``), which also hold the image
Talos chose when the config sets none.

Also here: which version jumps Kubernetes allows, which Kubernetes minors
each Talos minor supports, and what each upgrade path removes (talosctl's
table of flags, feature gates, admission plugins and API resources).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import image_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import is_v1alpha1, rewrite_image_line
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import normalize_version, parse_version


class Component:
    """One Kubernetes component: its name, its two config homes, its default repository and the Talos resource
    that reports the image the node runs (COSI ``(namespace, type, id)``; None for kube-proxy, which runs as a
    DaemonSet from the bootstrap manifests)."""

    def __init__(self, name, v1alpha1_path, document, repository, resource):
        self.name = name
        self.v1alpha1_path = v1alpha1_path
        self.document = document
        self.repository = repository
        self.resource = resource

    @property
    def v1alpha1_field(self):
        return "." + ".".join(self.v1alpha1_path)


KUBE_APISERVER = Component("kube-apiserver", ("cluster", "apiServer", "image"), "KubeAPIServerConfig",
                           "registry.k8s.io/kube-apiserver",
                           ("controlplane", "APIServerConfigs.kubernetes.talos.dev", "kube-apiserver"))
KUBE_CONTROLLER_MANAGER = Component("kube-controller-manager", ("cluster", "controllerManager", "image"),
                                    "KubeControllerManagerConfig", "registry.k8s.io/kube-controller-manager",
                                    ("controlplane", "ControllerManagerConfigs.kubernetes.talos.dev", "kube-controller-manager"))
KUBE_SCHEDULER = Component("kube-scheduler", ("cluster", "scheduler", "image"), "KubeSchedulerConfig",
                           "registry.k8s.io/kube-scheduler",
                           ("controlplane", "SchedulerConfigs.kubernetes.talos.dev", "kube-scheduler"))
KUBE_PROXY = Component("kube-proxy", ("cluster", "proxy", "image"), "KubeProxyConfig", "registry.k8s.io/kube-proxy", None)
KUBELET = Component("kubelet", ("machine", "kubelet", "image"), "KubeletConfig", "ghcr.io/siderolabs/kubelet",
                    ("k8s", "KubeletSpecs.kubernetes.talos.dev", "kubelet"))

SYSTEM_NAMESPACE = "kube-system"
# The annotations of the static pods Talos renders, which their mirror pods carry: the version of the component's
# config resource (APIServerConfigs...) and of the secrets the pods mount (STATIC_POD_SECRETS: the CAs, certificates
# and kubeconfigs). Talos renders the pod anew when either moves, and the kubelet restarts it.
CONFIG_VERSION_ANNOTATION = "talos.dev/config-version"
SECRETS_VERSION_ANNOTATION = "talos.dev/secrets-version"
STATIC_POD_SECRETS = ("controlplane", "SecretStatuses.kubernetes.talos.dev", "static-pods")
# The resource naming the Kubernetes Node a Talos node registers as.
NODENAME = ("k8s", "Nodenames.kubernetes.talos.dev", "nodename")


def read_nodename(client, node):
    """The name of the Kubernetes Node ``node`` registers as (None before its kubelet has one)."""
    return (client.get_resource(NODENAME[0], NODENAME[1], NODENAME[2], node=node).get("spec") or {}).get("nodename")


def read_static_pod_secrets_version(client, node):
    """The version of the secrets Talos rendered for the static pods of control plane ``node``."""
    return (client.get_resource(*STATIC_POD_SECRETS, node=node).get("spec") or {}).get("version")


def mirror_pod_seen(kube, component, kube_name, annotation, version):
    """How the mirror pod of ``component`` (a name) on the Kubernetes Node ``kube_name`` stands, as a wait's Seen: done
    once it runs ``version`` of ``annotation`` and is Ready, as talosctl upgrade-k8s waits for a static pod (the pod
    Talos rendered is then the one the kubelet runs). ``kube`` is a KubeAPI."""
    pods = [pod for pod in kube.pods(SYSTEM_NAMESPACE, "k8s-app=%s" % component) if pod["node_name"] == kube_name]
    if not pods:
        return Seen("no mirror pod", detail="no %s pod on Node %s in %s" % (component, kube_name, SYSTEM_NAMESPACE))
    pod = pods[0]
    seen = pod["annotations"].get(annotation)
    if seen != version:
        words = annotation.rpartition("/")[2].replace("-", " ")  # config version, secrets version
        return Seen("%s %s" % (words, seen), detail="pod %s runs %s %s, expected %s" % (pod["name"], words, seen, version))
    if not pod["ready"]:
        return Seen("not ready", detail="pod %s is not Ready" % pod["name"])
    return Seen("ready", done=True, value=pod)


# The control-plane static pods (a mirror pod each in kube-system, label k8s-app=<name>), in the order talosctl
# upgrades them.
STATIC_PODS = (KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER)

# Talos minor -> the (lowest, highest) Kubernetes minors it supports (pkg/machinery/compatibility, talosNNN packages).
# A Talos release missing here is refused, as talosctl refuses it.
SUPPORTED_KUBERNETES = {
    (1, 9): ((1, 27), (1, 32)),
    (1, 10): ((1, 28), (1, 33)),
    (1, 11): ((1, 29), (1, 34)),
    (1, 12): ((1, 30), (1, 35)),
    (1, 13): ((1, 31), (1, 36)),
    (1, 14): ((1, 32), (1, 37)),
    (1, 15): ((1, 33), (1, 38)),
}


def kubernetes_version(version, option="to_version"):
    """``version`` without its ``v`` (``1.37.2``), as Talos and talosctl spell Kubernetes versions.

    Raises TalosConfigError naming ``option`` when it is not ``MAJOR.MINOR.PATCH[-pre]``.
    """
    tag = normalize_version(version)
    if parse_version(tag) is None:
        raise TalosConfigError("%s %r is not a Kubernetes version such as 1.37.2." % (option, version))
    return tag[1:]


def _minor_text(key):
    return "%d.%d" % key[:2]


def upgrade_path_problem(from_version, to_version):
    """Why Kubernetes cannot go from ``from_version`` to ``to_version`` in one upgrade, or None.

    Kubernetes supports upgrades of one minor at a time, and moves within a
    minor (patch releases, either way); a minor downgrade is not supported.
    """
    old, new = parse_version("v" + from_version), parse_version("v" + to_version)
    if old[0] != new[0]:
        return "Kubernetes cannot move from %s to %s: a major version change is not supported." % (from_version, to_version)
    if new[1] < old[1]:
        return ("Kubernetes cannot be downgraded from %s to %s: a minor release down is not supported (only patch "
                "releases within %s)." % (from_version, to_version, _minor_text(old)))
    if new[1] > old[1] + 1:
        skipped = ", ".join("%d.%d" % (old[0], minor) for minor in range(old[1] + 1, new[1]))
        return ("Kubernetes upgrades one minor release at a time: %s to %s skips %s; upgrade to the newest %d.%d "
                "patch release first." % (from_version, to_version, skipped, old[0], old[1] + 1))
    return None


def _supported_range_text():
    talos = sorted(SUPPORTED_KUBERNETES)
    return "Talos %s to %s" % (_minor_text(talos[0]), _minor_text(talos[-1]))


def unsupported_everywhere_problem(to_version):
    """Why no Talos release this collection knows runs Kubernetes ``to_version``, or None (no node is asked)."""
    wanted = parse_version("v" + to_version)[:2]
    if any(lowest <= wanted <= highest for lowest, highest in SUPPORTED_KUBERNETES.values()):
        return None
    lowest = min(low for low, _high in SUPPORTED_KUBERNETES.values())
    highest = max(high for _low, high in SUPPORTED_KUBERNETES.values())
    return ("to_version %s is not supported by any Talos release (%s run Kubernetes %s to %s)."
            % (to_version, _supported_range_text(), _minor_text(lowest), _minor_text(highest)))


def talos_support_problem(talos_tag, to_version, node_label):
    """Why the Talos release ``talos_tag`` cannot run Kubernetes ``to_version``, or None.

    A release missing from SUPPORTED_KUBERNETES is refused: nobody has said
    which Kubernetes it runs.
    """
    talos_key = parse_version(talos_tag)
    supported = SUPPORTED_KUBERNETES.get(talos_key[:2]) if talos_key else None
    if supported is None:
        return ("%s runs Talos %s, whose supported Kubernetes versions this collection does not know (it knows %s); "
                "use a collection release that supports it." % (node_label, talos_tag, _supported_range_text()))
    wanted = parse_version("v" + to_version)[:2]
    lowest, highest = supported[0], supported[1]
    if lowest <= wanted <= highest:
        return None
    return ("%s runs Talos %s, which supports Kubernetes %s to %s, not %s: upgrade Talos first."
            % (node_label, talos_tag, _minor_text(lowest), _minor_text(highest), to_version))


# What each upgrade path removes that a component may still be started with, as talosctl checks it
# (siderolabs/go-kubernetes kubernetes/upgrade/checks.go, upgradeVersionCheck; the one copy here, held to upstream's by
# tests/unit/plugins/module_utils/kubernetes/test_components.py): feature gates (kube-apiserver,
# kube-controller-manager, kube-scheduler), command-line flags per component, kube-apiserver admission plugins, and
# API resources (``resource.version.group``) the API server no longer serves. A component started with a removed
# flag or feature gate does not start.
REMOVED_BY_PATH = {
    "1.24->1.25": {
        "feature_gates": ("CSIVolumeFSGroupPolicy", "ConfigurableFSGroupPolicy", "PodDisruptionBudget", "SelectorIndex"),
        "flags": {"kube-apiserver": ("service-account-api-audiences",),
                  "kube-controller-manager": ("deleting-pods-qps", "deleting-pods-burst", "register-retry-count")},
        "admission_plugins": ("PodSecurityPolicy",),
        "api_resources": ("podsecuritypolicies.v1beta1.policy",),
    },
    "1.25->1.26": {
        "feature_gates": ("DynamicKubeletConfig",),
        "flags": {"kube-apiserver": ("master-service-namespace",)},
    },
    "1.26->1.27": {
        "feature_gates": ("ExpandCSIVolumes", "ExpandInUsePersistentVolumes", "ExpandPersistentVolumes",
                          "ControllerManagerLeaderMigration", "CSIMigration", "CSIInlineVolume", "EphemeralContainers",
                          "LocalStorageCapacityIsolation", "NetworkPolicyEndPort", "StatefulSetMinReadySeconds",
                          "IdentifyPodOS", "DaemonSetUpdateSurge"),
        "flags": {"kube-controller-manager": ("enable-taint-manager", "pod-eviction-timeout"),
                  "kubelet": ("container-runtime", "master-service-namespace")},
    },
    "1.27->1.28": {
        "feature_gates": ("AdvancedAuditing", "DelegateFSGroupToCSIDriver", "DevicePlugins",
                          "DisableAcceleratorUsageMetrics", "EndpointSliceTerminatingCondition", "CSIStorageCapacity",
                          "CSIMigrationGCE", "KubeletCredentialProviders", "MixedProtocolLBService",
                          "ServiceInternalTrafficPolicy", "ServiceIPStaticSubrange", "WindowsHostProcessContainers"),
    },
    "1.28->1.29": {
        "api_resources": ("clustercidrs.v1alpha1.networking.k8s.io",),
    },
    "1.29->1.30": {
        "feature_gates": ("ExpandedDNSConfig", "ExperimentalHostUserNamespaceDefaultingGate", "IPTablesOwnershipCleanup",
                          "KubeletPodResources", "KubeletPodResourcesGetAllocatable", "MinimizeIPTablesRestore",
                          "ProxyTerminatingEndpoints", "RemoveSelfLink"),
        "admission_plugins": ("SecurityContextDeny",),
    },
    "1.30->1.31": {
        "feature_gates": ("APIPriorityAndFairness", "CSINodeExpandSecret", "ConsistentHTTPGetHandlers",
                          "DefaultHostNetworkHostPortsInPodTemplates", "ServiceNodePortStaticSubrange",
                          "SkipReadOnlyValidationGCE"),
        "flags": {"kubelet": ("keep-terminated-pod-volumes", "iptables-masquerade-bit", "iptables-drop-bit"),
                  "kube-controller-manager": ("volume-host-cidr-denylist", "volume-host-allow-local-loopback",
                                              "horizontal-pod-autoscaler-upscale-delay",
                                              "horizontal-pod-autoscaler-downscale-delay")},
    },
    "1.31->1.32": {
        "feature_gates": ("AllowServiceLBStatusOnNonLB", "CloudDualStackNodeIPs", "DRAControlPlaneController",
                          "HPAContainerMetrics", "KMSv2", "KMSv2KDF", "LegacyServiceAccountTokenCleanUp",
                          "MinDomainsInPodTopologySpread", "NewVolumeManagerReconstruction",
                          "NodeOutOfServiceVolumeDetach", "ServerSideApply", "ServerSideFieldValidation",
                          "StableLoadBalancerNodeSet", "ValidatingAdmissionPolicy",
                          "ZeroLimitedNominalConcurrencyShares"),
        "api_resources": ("podschedulingcontexts.v1alpha3.resource.k8s.io",),
    },
    "1.32->1.33": {
        "feature_gates": ("AppArmor", "AppArmorFields", "CPUManager", "DisableCloudProviders",
                          "DisableKubeletCloudCredentialProviders", "JobPodFailurePolicy",
                          "KubeProxyDrainingTerminatingNodes", "PDBUnhealthyPodEvictionPolicy",
                          "PersistentVolumeLastPhaseTransitionTime", "VolumeCapacityPriority"),
        "flags": {"kube-apiserver": ("cloud-config",)},
    },
    "1.33->1.34": {
        "feature_gates": ("DevicePluginCDIDevices", "LegacySidecarContainers", "PodDisruptionConditions"),
        "flags": {"kubelet": ("cloud-config",)},
    },
    "1.34->1.35": {
        "feature_gates": ("SizeMemoryBackedVolumes", "UserNamespacesHostNetworkSupport"),
        "flags": {"kubelet": ("pod-infra-container-image",)},
    },
    "1.35->1.36": {
        "feature_gates": ("CSIMigrationPortworx", "HonorPVReclaimPolicy", "InTreePluginPortworxUnregister",
                          "WatchFromStorageWithoutResourceVersion"),
    },
    "1.36->1.37": {
        "feature_gates": ("AnyVolumeDataSource", "DeclarativeValidationTakeover", "GangScheduling",
                          "PreventStaticPodAPIReferences", "WorkloadAwarePreemption"),
        "flags": {"kubelet": ("application-metrics-count-limit", "boot-id-file", "container-hints", "containerd",
                              "containerd-namespace", "enable-load-reader", "event-storage-age-limit",
                              "event-storage-event-limit", "global-housekeeping-interval", "log-cadvisor-usage",
                              "machine-id-file", "storage-driver-user", "storage-driver-password",
                              "storage-driver-host", "storage-driver-db", "storage-driver-table",
                              "storage-driver-secure", "storage-driver-buffer-duration")},
        "api_resources": ("workloads.v1alpha2.scheduling.k8s.io", "podgroups.v1alpha2.scheduling.k8s.io"),
    },
}


def upgrade_path(from_version, to_version):
    """The key of REMOVED_BY_PATH for a minor upgrade (``1.36->1.37``), or None within a minor."""
    old, new = parse_version("v" + from_version), parse_version("v" + to_version)
    if new[:2] <= old[:2]:
        return None
    return "%d.%d->%d.%d" % (old[0], old[1], new[0], new[1])


def _flag_values(args, flag):
    """The values of ``--flag`` in a command line ``args`` (``--flag=value`` or ``--flag value``)."""
    values = []
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name == "--" + flag:
            values.append(value if equals else (args[index + 1] if index + 1 < len(args) else ""))
    return values


def removed_arguments(component, args, path, feature_gates=None):
    """What the command line ``args`` of ``component`` (a name) names that the upgrade ``path`` (``upgrade_path``)
    removed: words such as ``flag --cloud-config`` or ``feature gate CPUManager``. ``feature_gates`` adds the gates
    a config file turns on or off (the kubelet's ``featureGates``)."""
    removed = REMOVED_BY_PATH.get(path) or {}
    found = ["flag --%s" % flag for flag in (removed.get("flags") or {}).get(component, ())
             if any(arg.partition("=")[0] == "--" + flag for arg in args)]
    gates = set(feature_gates or ())
    for value in _flag_values(args, "feature-gates"):
        gates.update(gate.split("=", 1)[0].strip() for gate in value.split(","))
    found += ["feature gate %s" % gate for gate in removed.get("feature_gates", ()) if gate in gates]
    if component == KUBE_APISERVER.name:
        plugins = set(plugin.strip() for value in _flag_values(args, "enable-admission-plugins") for plugin in value.split(","))
        found += ["admission plugin %s" % plugin for plugin in removed.get("admission_plugins", ()) if plugin in plugins]
    return found


def removed_api_resources(path):
    """The API resources (``resource.version.group``) the upgrade ``path`` removed, as ``(group, version, resource)``."""
    found = []
    for name in (REMOVED_BY_PATH.get(path) or {}).get("api_resources", ()):
        resource, version, group = (name.split(".", 2) + ["", ""])[:3]
        found.append((group, version, resource))
    return found


def removed_apis(requested, to_version):
    """The APIs of ``requested`` (``kube_api.deprecated_apis``) that Kubernetes ``to_version`` no longer serves."""
    wanted = parse_version("v" + to_version)[:2]
    removed = []
    for item in requested:
        release = parse_version("v%s.0" % item["removed_release"])
        if release is not None and release[:2] <= wanted:
            removed.append(item)
    return removed


def removed_apis_problem(removed, to_version):
    """The refusal for ``removed`` (``removed_apis``), or None when it is empty."""
    if not removed:
        return None
    names = ", ".join("%s%s/%s (removed in %s)" % (
        (item["group"] + "/") if item["group"] else "", item["version"], item["resource"], item["removed_release"])
        for item in removed)
    return ("Clients still ask the API server for APIs Kubernetes %s no longer serves: %s; move them to the current "
            "APIs first, or set check_deprecated_apis: false." % (to_version, names))


# Flavours of an image Talos publishes as a tag suffix (the kubelet's ``v1.36.3-fat``): kept across upgrades, as
# talosctl keeps them.
TAG_FLAVOURS = ("-fat", "-slim")


def _tag_and_flavour(image):
    tag = image_tag(image or "") or ""
    flavour = next((suffix for suffix in TAG_FLAVOURS if tag.endswith(suffix)), "")
    return tag[:len(tag) - len(flavour)], flavour


def image_version(image):
    """The Kubernetes version an image's tag names (``registry.k8s.io/kube-apiserver:v1.36.3`` -> ``1.36.3``,
    ``ghcr.io/siderolabs/kubelet:v1.36.3-fat`` -> ``1.36.3``), or None."""
    tag, _flavour = _tag_and_flavour(image)
    return normalize_version(tag)[1:] if tag and parse_version(tag) else None


def retagged(image, version, repository, moved_to=None):
    """``image`` with the tag ``v<version>`` (and its flavour): its repository kept (a mirror stays a mirror), or
    ``moved_to`` when given; digest dropped. ``repository`` when there is no image."""
    flavour = _tag_and_flavour(image)[1] if image else ""
    if moved_to:
        return "%s:v%s%s" % (moved_to, version, flavour)
    if not image:
        return "%s:v%s" % (repository, version)
    name = image.split("@", 1)[0]
    head, _slash, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return "%s:v%s%s" % ((head + "/" + last) if head else last, version, flavour)


def image_repository(value, option):
    """``value`` (an image option) as a repository to move a component to; TalosConfigError naming ``option`` when
    it has a tag or a digest (the tag is always ``v<to_version>``)."""
    value = value.strip()
    last = value.rpartition("/")[2]
    if not value or "@" in value or ":" in last or value != value.lower() or " " in value:
        raise TalosConfigError("%s %r is not an image repository such as registry.example.com/kube-apiserver: give it "
                               "without a tag or digest (the tag is v<to_version>)." % (option, value))
    return value


def _document(documents, kind):
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == kind:
            return document
    return None


def _v1alpha1(documents):
    for document in documents:
        if isinstance(document, dict) and is_v1alpha1(document):
            return document
    return None


def _get_path(document, path):
    value = document
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


class ConfigHome:
    """Where a machine config sets ``component``'s image: ``document`` (a kind, or ``v1alpha1``), ``field`` and ``image``."""

    def __init__(self, component, document, field, image):
        self.component = component
        self.document = document
        self.field = field
        self.image = image

    def as_dict(self):
        return {"document": self.document, "field": self.field}


def config_home(documents, component):
    """The ConfigHome of ``component`` in ``documents`` (a parsed machine config): its document when the config
    has one, else the v1alpha1 field (``image`` None when the config leaves the image to Talos)."""
    document = _document(documents, component.document)
    if document is not None:
        return ConfigHome(component, component.document, "image", document.get("image"))
    v1alpha1 = _v1alpha1(documents)
    if v1alpha1 is None:
        raise TalosConfigError("The machine config has neither a %s document nor a v1alpha1 document to set the %s "
                               "image in." % (component.document, component.name))
    return ConfigHome(component, "v1alpha1", component.v1alpha1_field, _get_path(v1alpha1, component.v1alpha1_path))


def kube_proxy_enabled(documents):
    """Whether the config runs kube-proxy: a ``KubeProxyConfig`` document's ``enabled`` when the config has one (the
    document replaces the v1alpha1 section), else unless ``.cluster.proxy.disabled`` is set."""
    document = _document(documents, KUBE_PROXY.document)
    if document is not None:
        return document.get("enabled", True) is not False
    return not _get_path(_v1alpha1(documents) or {}, ("cluster", "proxy", "disabled"))


def config_with_image(text, documents, home, image):
    """The config ``text`` with ``home`` set to ``image``, changing as little as possible.

    The one line naming the old image is rewritten when there is exactly one;
    otherwise (no image set yet, or the same image named twice) the documents
    are written out anew with the field set.
    """
    from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump_documents
    if home.image:
        rewritten = rewrite_image_line(text, home.image, image)
        if rewritten is not None:
            return rewritten
    documents = copy.deepcopy(documents)
    if home.document == "v1alpha1":
        value = _v1alpha1(documents)
        for key in home.component.v1alpha1_path[:-1]:
            if not isinstance(value.get(key), dict):
                value[key] = {}
            value = value[key]
        value[home.component.v1alpha1_path[-1]] = image
    else:
        _document(documents, home.document)["image"] = image
    return dump_documents(documents)
