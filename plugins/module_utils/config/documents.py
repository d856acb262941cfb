# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The document kinds and fields of a machine config, and the first Talos release that knows each.

Talos decodes a machine config strictly: a node refuses a document kind its
release does not register (``"KubeletConfig" "v1alpha1": not registered``) and
a field it does not know (``unknown keys found during decoding``). This is the
one registry of what each release knows, read from upstream's document
registry, its Go types and its config schema, release by release:

- ``KIND_SINCE``: every kind Talos v1.9 to v1.14 registers, with the first
  release that does (``v1.9.0`` for the kinds every supported release knows);
  the legacy root document (``version: v1alpha1``, no ``kind``) is
  ``v1alpha1``;
- ``FIELD_SINCE``: the fields added to a kind after it first appeared, from
  v1.10 on, per kind (``v1alpha1`` for the root document);
- ``VALUE_SINCE``: values a field takes only from some release on: lists as
  ``extraArgs`` values (v1.13) and negative volume ``maxSize`` (v1.13).

A gate is a tuple of release tags: the first release of the minor release
each names, every later minor release from its ``.0`` (``("v1.12.9",
"v1.13.4")``: v1.12.9 and later v1.12 patches, v1.13.4 and later, v1.14).
Patch releases added a field twice in v1.12 and v1.13, so a gate is per patch,
not per minor release. Pre-releases count as their release.

``check_fits`` is the one check, run before anything is rendered or sent:
the config's documents against a Talos version. ``valid_for`` says which
supported releases know everything a config holds. Neither judges values
beyond the gates above: the node's own validation still does.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import SUPPORTED_RELEASES, parse_version

ROOT = "v1alpha1"

# The first release that registers each kind (siderolabs/talos pkg/machinery/config/types, every registry.Register).
# Patch releases never added a kind. Every kind takes apiVersion v1alpha1 only.
KIND_SINCE = {
    ROOT: "v1.9.0",
    "EventSinkConfig": "v1.9.0",
    "ExtensionServiceConfig": "v1.9.0",
    "KmsgLogConfig": "v1.9.0",
    "KubeSpanEndpointsConfig": "v1.9.0",
    "NetworkDefaultActionConfig": "v1.9.0",
    "NetworkRuleConfig": "v1.9.0",
    "SideroLinkConfig": "v1.9.0",
    "TrustedRootsConfig": "v1.9.0",
    "VolumeConfig": "v1.9.0",
    "WatchdogTimerConfig": "v1.9.0",
    "EthernetConfig": "v1.10.0",
    "PCIDriverRebindConfig": "v1.10.0",
    "UserVolumeConfig": "v1.10.0",
    "ExistingVolumeConfig": "v1.11.0",
    "RawVolumeConfig": "v1.11.0",
    "SwapVolumeConfig": "v1.11.0",
    "ZswapConfig": "v1.11.0",
    "BondConfig": "v1.12.0",
    "BridgeConfig": "v1.12.0",
    "DHCPv4Config": "v1.12.0",
    "DHCPv6Config": "v1.12.0",
    "DummyLinkConfig": "v1.12.0",
    "HCloudVIPConfig": "v1.12.0",
    "HostnameConfig": "v1.12.0",
    "Layer2VIPConfig": "v1.12.0",
    "LinkAliasConfig": "v1.12.0",
    "LinkConfig": "v1.12.0",
    "OOMConfig": "v1.12.0",
    "RegistryAuthConfig": "v1.12.0",
    "RegistryMirrorConfig": "v1.12.0",
    "RegistryTLSConfig": "v1.12.0",
    "ResolverConfig": "v1.12.0",
    "StaticHostConfig": "v1.12.0",
    "TimeSyncConfig": "v1.12.0",
    "VLANConfig": "v1.12.0",
    "WireguardConfig": "v1.12.0",
    "BlackholeRouteConfig": "v1.13.0",
    "EnvironmentConfig": "v1.13.0",
    "ExternalVolumeConfig": "v1.13.0",
    "ImageVerificationConfig": "v1.13.0",
    "KubeSpanConfig": "v1.13.0",
    "RoutingRuleConfig": "v1.13.0",
    "TCPProbeConfig": "v1.13.0",
    "VRFConfig": "v1.13.0",
    "BGPInstanceConfig": "v1.14.0",
    "ContainerConfig": "v1.14.0",
    "CRIBaseRuntimeSpecConfig": "v1.14.0",
    "CRICustomizationConfig": "v1.14.0",
    "DiscoveryIdentityConfig": "v1.14.0",
    "DiscoveryServiceConfig": "v1.14.0",
    "EtcFileConfig": "v1.14.0",
    "FilesystemScrubConfig": "v1.14.0",
    "FilesystemTrimConfig": "v1.14.0",
    "HTTPProbeConfig": "v1.14.0",
    "ImageCacheConfig": "v1.14.0",
    "KernelModuleConfig": "v1.14.0",
    "KubeAdmissionControlConfig": "v1.14.0",
    "KubeAggregatorCAConfig": "v1.14.0",
    "KubeAPIServerCAConfig": "v1.14.0",
    "KubeAPIServerConfig": "v1.14.0",
    "KubeAuditPolicyConfig": "v1.14.0",
    "KubeAuthenticationConfig": "v1.14.0",
    "KubeAuthorizerConfig": "v1.14.0",
    "KubeClusterConfig": "v1.14.0",
    "KubeControllerManagerConfig": "v1.14.0",
    "KubeCoreDNSConfig": "v1.14.0",
    "KubeCredentialProviderConfig": "v1.14.0",
    "KubeEtcdEncryptionConfig": "v1.14.0",
    "KubeExternalManifestConfig": "v1.14.0",
    "KubeFlannelCNIConfig": "v1.14.0",
    "KubeInlineManifestConfig": "v1.14.0",
    "KubeletConfig": "v1.14.0",
    "KubeNetworkConfig": "v1.14.0",
    "KubeNodeConfig": "v1.14.0",
    "KubePrismConfig": "v1.14.0",
    "KubeProxyConfig": "v1.14.0",
    "KubeSchedulerConfig": "v1.14.0",
    "KubeServiceAccountConfig": "v1.14.0",
    "KubeStaticPodConfig": "v1.14.0",
    "KubeTalosAPIAccessConfig": "v1.14.0",
    "LVMLogicalVolumeConfig": "v1.14.0",
    "LVMVolumeGroupConfig": "v1.14.0",
    "RAIDArrayConfig": "v1.14.0",
    "SecurityProfileConfig": "v1.14.0",
    "SysctlConfig": "v1.14.0",
    "SysfsConfig": "v1.14.0",
    "UdevRulesConfig": "v1.14.0",
    "UnattendedInstallConfig": "v1.14.0",
    "VethConfig": "v1.14.0",
}

# Fields added to a kind after its first release: per kind, (path, gate). A path is dotted keys, ``[]`` stepping
# into each item of a list; a gate on a key covers everything below it. The v1alpha1 fields from the Go types, the
# others from the config schema of each release (RegistryTLSConfig's clientIdentity cert/key, a fix of the schema
# only in v1.14, is no gate: nodes took them from v1.12.0).
FIELD_SINCE = {
    ROOT: (
        ("machine.install.grubUseUKICmdline", ("v1.12.0",)),
        ("machine.network.kubespan.filters.excludeAdvertisedNetworks", ("v1.12.4", "v1.13.0")),
        ("cluster.network.cni.flannel.kubeNetworkPoliciesEnabled", ("v1.13.0",)),
    ),
    "SideroLinkConfig": (
        ("uniqueToken", ("v1.10.0",)),
    ),
    "EthernetConfig": (
        ("wakeOnLan", ("v1.12.0",)),
    ),
    "OOMConfig": (
        ("strictCgroupClassOrdering", ("v1.12.9", "v1.13.4")),
    ),
    "DHCPv4Config": (
        ("ignoreRoutes", ("v1.14.0",)),
    ),
    "ResolverConfig": (
        ("hostDNS", ("v1.14.0",)),
        ("nameservers[].protocol", ("v1.14.0",)),
        ("nameservers[].tlsServerName", ("v1.14.0",)),
    ),
    "TimeSyncConfig": (
        ("ntp.useNTS", ("v1.14.0",)),
    ),
    "VolumeConfig": (
        ("encryption", ("v1.11.0",)),
        ("encryption.keys[].tpm.options", ("v1.12.0",)),
        ("mount", ("v1.13.0",)),
        ("mount.disableAccessTime", ("v1.14.0",)),
        ("encryption.allowDiscards", ("v1.14.0",)),
        ("filesystem", ("v1.14.0",)),
        ("trim", ("v1.14.0",)),
        ("scrub", ("v1.14.0",)),
    ),
    "UserVolumeConfig": (
        ("encryption.keys[].lockToState", ("v1.11.0",)),
        ("filesystem.projectQuotaSupport", ("v1.11.0",)),
        ("encryption.keys[].tpm.options", ("v1.12.0",)),
        ("volumeType", ("v1.12.0",)),
        ("mount", ("v1.13.0",)),
        ("encryption.allowDiscards", ("v1.14.0",)),
        ("filesystem.xfs", ("v1.14.0",)),
        ("trim", ("v1.14.0",)),
        ("scrub", ("v1.14.0",)),
    ),
    "RawVolumeConfig": (
        ("encryption.keys[].tpm.options", ("v1.12.0",)),
        ("encryption.allowDiscards", ("v1.14.0",)),
    ),
    "SwapVolumeConfig": (
        ("encryption.keys[].tpm.options", ("v1.12.0",)),
        ("encryption.allowDiscards", ("v1.14.0",)),
    ),
    "ExistingVolumeConfig": (
        ("mount.secure", ("v1.13.0",)),
        ("mount.disableAccessTime", ("v1.13.0",)),
        ("trim", ("v1.14.0",)),
        ("scrub", ("v1.14.0",)),
    ),
}

# Values a field takes from some release on: per kind, (path of a mapping or a value, what, gate). ``list values``:
# a value of the mapping at the path that is a list (Talos v1.13 reads extraArgs as a list of strings per key; older
# releases fail to decode one). ``negative``: a size below zero, the space to leave free (v1.13).
_EXTRA_ARGS_SINCE = ("v1.13.0",)
_NEGATIVE_SIZE_SINCE = ("v1.13.0",)
VALUE_SINCE = {
    ROOT: (
        ("machine.kubelet.extraArgs", "list values", _EXTRA_ARGS_SINCE),
        ("cluster.apiServer.extraArgs", "list values", _EXTRA_ARGS_SINCE),
        ("cluster.controllerManager.extraArgs", "list values", _EXTRA_ARGS_SINCE),
        ("cluster.proxy.extraArgs", "list values", _EXTRA_ARGS_SINCE),
        ("cluster.scheduler.extraArgs", "list values", _EXTRA_ARGS_SINCE),
        ("cluster.etcd.extraArgs", "list values", _EXTRA_ARGS_SINCE),
    ),
    "VolumeConfig": (("provisioning.maxSize", "negative", _NEGATIVE_SIZE_SINCE),),
    "UserVolumeConfig": (("provisioning.maxSize", "negative", _NEGATIVE_SIZE_SINCE),),
    "RawVolumeConfig": (("provisioning.maxSize", "negative", _NEGATIVE_SIZE_SINCE),),
    "SwapVolumeConfig": (("provisioning.maxSize", "negative", _NEGATIVE_SIZE_SINCE),),
}


def kind_of(document):
    """The registered kind of a parsed document: its ``kind``, or ``v1alpha1`` for the root document (no kind)."""
    return document.get("kind") or ROOT


def document_label(document):
    """How a sentence names a document: its kind, with ``/name`` for a named one; ``v1alpha1`` for the root."""
    kind = kind_of(document)
    return "%s/%s" % (kind, document["name"]) if kind != ROOT and document.get("name") else kind


def _release(tag):
    """``(major, minor, patch)`` of a version tag, pre-releases counting as their release; None for no version."""
    key = parse_version(tag)
    return key[:3] if key is not None else None


def _gate_releases(gate):
    return [_release(tag) for tag in gate]


def knows(gate, release):
    """Whether Talos ``release`` (``(major, minor, patch)``) is at or past ``gate``."""
    listed = _gate_releases(gate)
    for first in listed:
        if first[:2] == release[:2]:
            return release[2] >= first[2]
    return release[:2] > listed[-1][:2]


def _wording(gate):
    """``Talos v1.14.0 or newer``; ``Talos v1.12.9 or a later v1.12 release, or v1.13.4 or newer``."""
    parts = ["%s or a later v%d.%d release" % ((tag,) + _release(tag)[:2]) for tag in gate[:-1]]
    return "Talos " + ", or ".join(parts + ["%s or newer" % gate[-1]])


def _locations(value, path):
    """Every concrete location of dotted ``path`` (``[]`` for each list item) present in ``value``: a list of
    ``(where, found)``, ``where`` the path with list indexes filled in."""
    found = [("", value)]
    for step in path.split("."):
        over_list = step.endswith("[]")
        key = step[:-2] if over_list else step
        next_found = []
        for where, current in found:
            if not isinstance(current, dict) or key not in current:
                continue
            here = "%s.%s" % (where, key) if where else key
            if over_list:
                if isinstance(current[key], list):
                    next_found.extend(("%s[%d]" % (here, index), item) for index, item in enumerate(current[key]))
            else:
                next_found.append((here, current[key]))
        found = next_found
    return found


def _negative(value):
    return isinstance(value, (int, float)) and value < 0 or isinstance(value, str) and value.strip().startswith("-")


class Requirement:
    """Something a config holds that only some Talos releases know: a document (``what`` None), a field or a value."""

    def __init__(self, document, what, gate):
        self.document = document
        self.what = what
        self.gate = gate

    def sentence_part(self):
        """``KubeletConfig document needs Talos v1.14.0 or newer``, as a sentence's subject and verb."""
        if self.what is None:
            return "%s document needs %s" % (self.document, _wording(self.gate))
        return "%s document %s, which needs %s" % (self.document, self.what, _wording(self.gate))


class UnknownKind(Requirement):
    """A kind no supported Talos release registers (a misspelt kind, or one of a newer release): known, if at all,
    only after the newest supported minor release."""

    def __init__(self, document):
        newest = SUPPORTED_RELEASES[-1]
        Requirement.__init__(self, document, None, ("v%d.%d.0" % (newest[0], newest[1] + 1),))
        self.newest = "v%d.%d" % newest

    def sentence_part(self):
        return "%s document is of a kind no Talos release up to %s knows" % (self.document, self.newest)


def requirements(documents):
    """What ``documents`` (a parsed machine config) hold that Talos v1.9.0 does not know, in the config's order."""
    found = []
    oldest = "v%d.%d.0" % SUPPORTED_RELEASES[0]
    for document in documents:
        if not isinstance(document, dict):
            continue
        kind, label = kind_of(document), document_label(document)
        if kind not in KIND_SINCE:
            found.append(UnknownKind(label))
            continue
        if KIND_SINCE[kind] != oldest:
            found.append(Requirement(label, None, (KIND_SINCE[kind],)))
        for path, gate in FIELD_SINCE.get(kind, ()):
            for where, _value in _locations(document, path):
                found.append(Requirement(label, "sets %s" % where, gate))
        for path, shape, gate in VALUE_SINCE.get(kind, ()):
            for where, value in _locations(document, path):
                if shape == "list values" and isinstance(value, dict):
                    found.extend(Requirement(label, "gives %s.%s a list of values" % (where, key), gate)
                                 for key, item in value.items() if isinstance(item, list))
                elif shape == "negative" and _negative(value):
                    found.append(Requirement(label, "sets %s to a negative size" % where, gate))
    return found


def valid_for(documents):
    """The supported Talos releases that know every document, field and value of ``documents``.

    ``{"min": "v1.12.9", "releases": {"v1.12": "v1.12.9", "v1.13": "v1.13.4", "v1.14": "v1.14.0"}}``: per minor
    release the first patch release that takes the config (a minor release none of whose patches does is left out),
    and the oldest of them (None when none does).
    """
    gates = [requirement.gate for requirement in requirements(documents)]
    releases = {}
    for minor in SUPPORTED_RELEASES:
        patch = 0
        for gate in gates:
            same_minor = [release for release in _gate_releases(gate) if release[:2] == minor]
            if same_minor:
                patch = max(patch, same_minor[0][2])
            elif not knows(gate, minor + (0,)):
                break
        else:
            releases["v%d.%d" % minor] = "v%d.%d.%d" % (minor + (patch,))
    first = next(iter(sorted(releases.values(), key=_release)), None)
    return {"min": first, "releases": releases}


def check_fits(documents, talos_version, target, node=None):
    """Refuse ``documents`` (a parsed machine config) that Talos ``talos_version`` cannot decode, before anything
    is sent or written: TalosConfigError naming the first document, field or value that needs a newer release,
    the release that introduced it and ``target`` (a clause: ``node 10.5.0.2 runs v1.13.4``; ``node`` is the
    error's node).

    ``talos_version`` is a version tag, or a minor release ``(1, 12)`` for a node known to run that release or an
    older one (any patch: only what even its newest patch lacks is refused). A tag that is no version (a development
    build) or a release newer than the newest supported minor release is not judged: the node decides.
    """
    if isinstance(talos_version, tuple):
        release = tuple(talos_version) + (float("inf"),)
    else:
        release = _release(talos_version)
    if release is None or release[:2] > SUPPORTED_RELEASES[-1]:
        return
    unknown = [requirement for requirement in requirements(documents) if not knows(requirement.gate, release)]
    if not unknown:
        return
    more = len(unknown) - 1
    also = "" if not more else " (as does one more of its documents or fields)" if more == 1 else (
        " (as do %d more of its documents and fields)" % more)
    raise TalosConfigError("The config's %s%s; %s." % (unknown[0].sentence_part(), also, target), node=node)
