# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Talos node checks in a machine config before it accepts it.

Decoding is strict (unknown keys and unregistered document kinds are refused);
then every document validates itself, and each multi-document kind refuses the
v1alpha1 fields it replaces. The kinds a node knows depend on its version.
``decode_problems`` and ``validation_problems`` return the messages; configgen
turns them into the errors ApplyConfiguration returns.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import re

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .versions import older_than, parse_version

V1ALPHA1_KEYS = {
    None: ("version", "debug", "persist", "machine", "cluster"),
    "machine": ("type", "token", "ca", "acceptedCAs", "certSANs", "controlPlane", "kubelet", "pods", "network", "disks",
                "install", "files", "env", "time", "sysctls", "sysfs", "registries", "systemDiskEncryption", "features",
                "udev", "logging", "kernel", "seccompProfiles", "baseRuntimeSpecOverrides", "nodeLabels",
                "nodeAnnotations", "nodeTaints"),
    "cluster": ("id", "secret", "controlPlane", "clusterName", "network", "token", "aescbcEncryptionSecret",
                "secretboxEncryptionSecret", "ca", "acceptedCAs", "aggregatorCA", "serviceAccount", "apiServer",
                "controllerManager", "proxy", "scheduler", "discovery", "etcd", "coreDNS", "externalCloudProvider",
                "extraManifests", "extraManifestHeaders", "inlineManifests", "adminKubeconfig",
                "allowSchedulingOnMasters", "allowSchedulingOnControlPlanes"),
}

# Top-level keys (besides apiVersion and kind) of the documents talosctl generates.
DOCUMENT_KEYS = {
    "DiscoveryServiceConfig": ("name", "endpoint"),
    "DiscoveryIdentityConfig": ("clusterID", "clusterSecret"),
    "UnattendedInstallConfig": ("reboot", "installer", "provisioning"),
    "ResolverConfig": ("nameservers", "searchDomains", "hostDNS"),
    "VolumeConfig": ("name", "provisioning", "filesystem", "encryption", "mount", "trim", "scrub"),
    "FilesystemTrimConfig": ("interval",),
    "SecurityProfileConfig": ("workloadIsolation",),
    "HostnameConfig": ("auto", "hostname"),
    "KubeClusterConfig": ("clusterName", "endpoint"),
    "KubeNodeConfig": ("skipNodeRegistration", "registerWithFQDN", "nodeIP", "labels", "annotations", "taints"),
    "KubeletConfig": ("image", "config", "extraArgs", "clusterDNS", "defaultRuntimeSeccompProfileEnabled"),
    "KubeNetworkConfig": ("dnsDomain", "podSubnets", "serviceSubnets", "nodeCIDRMaskSizeIPv4", "nodeCIDRMaskSizeIPv6"),
    "KubeAPIServerCAConfig": ("issuingCA", "acceptedCAs"),
    "KubePrismConfig": ("port", "tlsServerName"),
    "KubeAggregatorCAConfig": ("issuingCA", "acceptedCAs"),
    "KubeAdmissionControlConfig": ("name", "configuration"),
    "KubeAuditPolicyConfig": ("configuration",),
    "KubeAuthenticationConfig": ("configuration",),
    "KubeAuthorizerConfig": ("name", "type", "webhook"),
    "KubeEtcdEncryptionConfig": ("config",),
    "KubeServiceAccountConfig": ("issuer", "accepted"),
    "KubeAPIServerConfig": ("image", "extraArgs", "env", "resources", "apiPort", "certExtraSANs", "startupProbes"),
    "KubeControllerManagerConfig": ("enabled", "image", "extraArgs", "env", "resources"),
    "KubeSchedulerConfig": ("enabled", "image", "config", "extraArgs", "env", "resources"),
    "KubeProxyConfig": ("enabled", "image", "mode", "config", "extraArgs", "resources"),
    "KubeFlannelCNIConfig": ("backendType", "backendPort", "backendMTU", "backendExtraConfig", "resources", "extraArgs",
                             "kubeNetworkPoliciesEnabled"),
    "KubeCoreDNSConfig": ("enabled", "image"),
    "SysctlConfig": ("params",),
    "KubeSpanConfig": ("enabled", "advertiseKubernetesNetworks", "allowDownPeerBypass", "harvestExtraEndpoints", "mtu", "filters"),
    "RegistryMirrorConfig": ("name", "endpoints", "skipFallback"),
    "RegistryTLSConfig": ("name", "clientIdentity", "ca", "insecureSkipVerify"),
}

# Keys of the nested mappings the node decodes strictly, per kind (path of the mapping: its keys).
NESTED_KEYS = {
    "UnattendedInstallConfig": {
        ("installer",): ("image",),
        ("provisioning",): ("diskSelector", "wipe"),
        ("provisioning", "diskSelector"): ("match",),
    },
}

# The release that first registers each kind (upstream's registry.Register calls, release by release; patch releases
# never added a kind). The legacy v1alpha1 document and these kinds are registered by every release from v1.9.
_KINDS_SINCE = {
    "v1.9.0": ("EventSinkConfig", "ExtensionServiceConfig", "KmsgLogConfig", "KubeSpanEndpointsConfig",
               "NetworkDefaultActionConfig", "NetworkRuleConfig", "SideroLinkConfig", "TrustedRootsConfig", "VolumeConfig",
               "WatchdogTimerConfig"),
    "v1.10.0": ("UserVolumeConfig", "PCIDriverRebindConfig", "EthernetConfig"),
    "v1.11.0": ("ExistingVolumeConfig", "RawVolumeConfig", "SwapVolumeConfig", "ZswapConfig"),
    "v1.12.0": ("RegistryAuthConfig", "RegistryMirrorConfig", "RegistryTLSConfig", "BondConfig", "BridgeConfig",
                "DHCPv4Config", "DHCPv6Config", "DummyLinkConfig", "HCloudVIPConfig", "HostnameConfig", "Layer2VIPConfig",
                "LinkConfig", "LinkAliasConfig", "ResolverConfig", "StaticHostConfig", "TimeSyncConfig", "VLANConfig",
                "WireguardConfig", "OOMConfig"),
    "v1.13.0": ("ExternalVolumeConfig", "BlackholeRouteConfig", "KubeSpanConfig", "RoutingRuleConfig", "TCPProbeConfig",
                "VRFConfig", "EnvironmentConfig", "ImageVerificationConfig"),
    "v1.14.0": ("FilesystemTrimConfig", "FilesystemScrubConfig", "DiscoveryIdentityConfig", "DiscoveryServiceConfig",
                "ContainerConfig", "CRIBaseRuntimeSpecConfig", "CRICustomizationConfig", "ImageCacheConfig",
                "KubeAdmissionControlConfig", "KubeAggregatorCAConfig", "KubeAPIServerConfig", "KubeAPIServerCAConfig",
                "KubeAuditPolicyConfig", "KubeAuthenticationConfig", "KubeAuthorizerConfig", "KubeClusterConfig",
                "KubeControllerManagerConfig", "KubeCoreDNSConfig", "KubeCredentialProviderConfig",
                "KubeEtcdEncryptionConfig", "KubeExternalManifestConfig", "KubeFlannelCNIConfig",
                "KubeInlineManifestConfig", "KubeletConfig", "KubePrismConfig", "KubeNetworkConfig", "KubeNodeConfig",
                "KubeProxyConfig", "KubeSchedulerConfig", "KubeServiceAccountConfig", "KubeStaticPodConfig",
                "KubeTalosAPIAccessConfig", "BGPInstanceConfig", "HTTPProbeConfig", "VethConfig", "EtcFileConfig",
                "KernelModuleConfig", "SecurityProfileConfig", "SysctlConfig", "SysfsConfig", "UdevRulesConfig",
                "UnattendedInstallConfig", "LVMLogicalVolumeConfig", "LVMVolumeGroupConfig", "RAIDArrayConfig"),
}

# Fields a release added to a kind it already registered, as dotted paths (None: the v1alpha1 document), with the
# first release of each minor release that knows them (later minor releases from their .0): an older node finds an
# unknown key. The fields the emulated configs and tests use; upstream's Go types and schema per release.
_FIELDS_SINCE = {
    None: (("machine.install.grubUseUKICmdline", ("v1.12.0",)),
           ("machine.network.kubespan.filters.excludeAdvertisedNetworks", ("v1.12.4", "v1.13.0")),
           ("cluster.network.cni.flannel.kubeNetworkPoliciesEnabled", ("v1.13.0",))),
    "OOMConfig": (("strictCgroupClassOrdering", ("v1.12.9", "v1.13.4")),),
    "ResolverConfig": (("hostDNS", ("v1.14.0",)),),
    "VolumeConfig": (("encryption", ("v1.11.0",)), ("mount", ("v1.13.0",)), ("mount.disableAccessTime", ("v1.14.0",)),
                     ("filesystem", ("v1.14.0",)), ("trim", ("v1.14.0",)), ("scrub", ("v1.14.0",))),
}

# The v1alpha1 extraArgs that take a list of strings per key from v1.13 (type Args); older releases decode them into a
# map of strings.
_EXTRA_ARGS = (("machine", "kubelet"), ("cluster", "apiServer"), ("cluster", "controllerManager"), ("cluster", "proxy"),
               ("cluster", "scheduler"), ("cluster", "etcd"))
_EXTRA_ARGS_LISTS_SINCE = "v1.13.0"
# From this release on, a document that fails to decode is named with its line (error decoding document ...).
_DOCUMENT_PREFIX_SINCE = "v1.12.3"

# Each new document and the v1alpha1 fields it refuses to coexist with.
_CONFLICTS = {
    "KubeClusterConfig": (("cluster", "clusterName"), ("cluster", "controlPlane", "endpoint")),
    "DiscoveryIdentityConfig": (("cluster", "id"), ("cluster", "secret")),
    "DiscoveryServiceConfig": (("cluster", "discovery"),),
    "KubeAPIServerCAConfig": (("cluster", "ca"),),
    "KubeAggregatorCAConfig": (("cluster", "aggregatorCA"),),
    "KubeServiceAccountConfig": (("cluster", "serviceAccount"),),
}


def registered(kind, talos_version):
    for since, kinds in _KINDS_SINCE.items():
        if kind in kinds:
            return not older_than(talos_version, since)
    return False


def _knows(firsts, talos_version):
    """Whether ``talos_version`` knows what came with ``firsts`` (the first release of each minor release)."""
    release = parse_version(talos_version)[:3]
    for first in (parse_version(tag)[:3] for tag in firsts):
        if first[:2] == release[:2]:
            return release >= first
    return release[:2] > parse_version(firsts[-1])[:2]


def _lookup(document, path):
    value = document
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _nest(unknown, path, value):
    for key in path[:-1]:
        unknown = unknown.setdefault(key, {})
    unknown[path[-1]] = value


def _unknown_keys(document, kind, talos_version):
    """The unknown part of a document as a nested mapping (empty when every key is known)."""
    unknown = {}
    if kind is None:
        for key in document:
            if key not in V1ALPHA1_KEYS[None]:
                _nest(unknown, (key,), document[key])
        for section in ("machine", "cluster"):
            if isinstance(document.get(section), dict):
                for key, value in document[section].items():
                    if key not in V1ALPHA1_KEYS[section]:
                        _nest(unknown, (section, key), value)
    else:
        allowed = DOCUMENT_KEYS.get(kind)
        if allowed:
            for key in document:
                if key not in allowed + ("apiVersion", "kind"):
                    _nest(unknown, (key,), document[key])
        for path, keys in NESTED_KEYS.get(kind, {}).items():
            nested = _lookup(document, path)
            if isinstance(nested, dict):
                for key, value in nested.items():
                    if key not in keys:
                        _nest(unknown, path + (key,), value)
    for dotted, firsts in _FIELDS_SINCE.get(kind, ()):
        path = tuple(dotted.split("."))
        parent = _lookup(document, path[:-1])
        if isinstance(parent, dict) and path[-1] in parent and not _knows(firsts, talos_version):
            _nest(unknown, path, parent[path[-1]])
    return unknown


def _decode_problem(document, talos_version):
    """Why a node running ``talos_version`` cannot decode ``document``, as its decoder words it; None when it can."""
    kind = document.get("kind")
    if kind is not None and (document.get("apiVersion") != "v1alpha1" or not registered(kind, talos_version)):
        return '"%s" "%s": not registered' % (kind, document.get("apiVersion", ""))
    if kind is None and older_than(talos_version, _EXTRA_ARGS_LISTS_SINCE):
        for path in _EXTRA_ARGS:
            args = _lookup(document, path + ("extraArgs",))
            if isinstance(args, dict) and any(isinstance(value, list) for value in args.values()):
                return "yaml: unmarshal errors:\n  cannot unmarshal !!seq into string"
    unknown = _unknown_keys(document, kind, talos_version)
    if unknown:
        return "unknown keys found during decoding:\n%s" % yaml.dump(unknown, Dumper=_GoDumper, sort_keys=False, indent=4)
    return None


class _GoDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    """YAML as Go's encoder writes the unknown part of a document (4-space indentation)."""


def document_lines(data):
    """The line (1-based) where each non-empty document of ``data`` starts, as Talos's decoder counts them."""
    return [node.start_mark.line + 1 for node in yaml.compose_all(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            if node is not None and not (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null")]


def decode_problem(documents, talos_version, data):
    """Strict decoding as a node running ``talos_version`` does it: the message of the first document that fails
    (unregistered kind, unknown key, a value of the wrong type), or None. ``data`` is the config's text."""
    for index, document in enumerate(documents):
        problem = _decode_problem(document, talos_version)
        if problem is None:
            continue
        if older_than(talos_version, _DOCUMENT_PREFIX_SINCE):
            return problem
        kind = document.get("kind")
        return "error decoding document %s/%s/%s (line %d): %s" % (
            document.get("apiVersion", "") if kind else "", kind or "v1alpha1", document.get("name", "") if kind else "",
            document_lines(data)[index], problem)
    return None


def endpoint_problem(endpoint):
    """siderolabs/net ValidateEndpointURI: a host, IPv6 in brackets, a numeric port in range."""
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^/?#]*)", endpoint or "")
    if not match:
        return "invalid URL %r" % endpoint
    authority = match.group(1).rsplit("@", 1)[-1]
    if authority.startswith("["):
        host, _bracket, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif authority.count(":") > 1:
        return "IPv6 address in %r must be in brackets" % endpoint
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
    if not host:
        return "no host in %r" % endpoint
    if port is not None and (not port.isdigit() or not 0 < int(port) < 65536):
        return "invalid port in %r" % endpoint
    return None


def _pem_problems(value, what, private=False):
    text = value if isinstance(value, str) else ""
    try:
        if private:
            body = text.replace("ED25519 PRIVATE KEY", "PRIVATE KEY").encode()
            # Go's key parsing checks an RSA key's numbers but, unlike OpenSSL's check, not that its primes are prime
            # (80 ms a key here).
            serialization.load_pem_private_key(body, password=None, unsafe_skip_rsa_key_validation=True)
        else:
            x509.load_pem_x509_certificate(text.encode())
    except (ValueError, TypeError):
        return ["%s: failed to parse PEM block" % what]
    return []


def _ca_document_problems(kind, document):
    problems = []
    issuing = document.get("issuingCA")
    if issuing:
        problems += _pem_problems(issuing.get("cert"), "%s issuing CA certificate" % kind)
        problems += _pem_problems(issuing.get("key"), "%s issuing CA key" % kind, private=True)
    for index, accepted in enumerate(document.get("acceptedCAs") or []):
        problems += _pem_problems(accepted, "%s accepted CA #%d" % (kind, index))
    if not issuing and not document.get("acceptedCAs"):
        problems.append("%s: issuing CA is not set" % kind)
    return problems


def _document_problems(kind, document):
    if kind == "KubeClusterConfig":
        problems = [] if document.get("clusterName") else ["clusterName must be specified"]
        if not document.get("endpoint"):
            problems.append("endpoint must be specified")
        elif endpoint_problem(document["endpoint"]):
            problems.append("cluster endpoint is invalid: %s" % endpoint_problem(document["endpoint"]))
        return problems
    if kind == "DiscoveryIdentityConfig":
        problems = [] if document.get("clusterID") else ["clusterID must be specified"]
        try:
            valid = len(base64.b64decode(document.get("clusterSecret") or "", validate=True)) == 32
        except (binascii.Error, ValueError):
            valid = False
        return problems + ([] if valid else ["clusterSecret must be 32 bytes in standard base64"])
    if kind == "DiscoveryServiceConfig":
        endpoint = document.get("endpoint") or ""
        ok = re.match(r"^(https?|grpc)://[^/]+", endpoint)
        return ([] if document.get("name") else ["name must be specified"]) + ([] if ok else ["invalid endpoint %r" % endpoint])
    if kind in ("KubeAPIServerCAConfig", "KubeAggregatorCAConfig"):
        return _ca_document_problems(kind, document)
    if kind == "KubeServiceAccountConfig":
        issuer = document.get("issuer") or {}
        problems = _pem_problems(issuer.get("privateKey"), "service account key", private=True)
        return problems + ([] if issuer.get("issuerURL") else ["issuer URL must be specified"])
    if kind == "UnattendedInstallConfig":
        # runtime.ProvisioningSpec.Validate; the node also parses the CEL expression, which is not imitated here.
        match = _lookup(document, ("provisioning", "diskSelector", "match"))
        if not match or not isinstance(match, str):
            return ["UnattendedInstallConfig: provisioning.volumeSelector.match is required"]
    if kind == "HostnameConfig":
        if document.get("auto") and document.get("hostname"):
            return ["'auto' and 'hostname' cannot be set at the same time"]
        if not document.get("auto") and not document.get("hostname"):
            return ["either 'auto' or 'hostname' must be set"]
    return []


def _has(config, path):
    value = config
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return value not in (None, "", {}, [])


def document_problems(documents, config):
    """Each multi-document kind's own validation and its conflicts with the v1alpha1 document ``config``."""
    problems = []
    machine = config.get("machine") or {}
    for document in documents:
        kind = document.get("kind")
        if kind is None:
            continue
        problems += _document_problems(kind, document)
        for path in _CONFLICTS.get(kind, ()):
            if _has(config, path):
                problems.append("%s: .%s is already set in the v1alpha1 config, remove it to use the %s document"
                                % (kind, ".".join(path), kind))
        # Any .machine.install section, even an empty one, is refused next to this document.
        if kind == "UnattendedInstallConfig" and machine.get("install") is not None:
            problems.append("UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)")
        if kind == "HostnameConfig":
            if (machine.get("network") or {}).get("hostname"):
                problems.append("static hostname is already set in v1alpha1 config")
            elif (machine.get("features") or {}).get("stableHostname"):
                problems.append("stable hostname is already set in v1alpha1 config")
    return problems


def v1alpha1_problems(config, documents):
    """Checks of the v1alpha1 document beyond the CA rules configgen makes."""
    problems = []
    cluster = config.get("cluster") or {}
    endpoint = (cluster.get("controlPlane") or {}).get("endpoint")
    if endpoint and endpoint_problem(endpoint):
        problems.append("cluster endpoint is invalid: %s" % endpoint_problem(endpoint))
    discovery = cluster.get("discovery") or {}
    service = (discovery.get("registries") or {}).get("service") or {}
    identity = any(document.get("kind") == "DiscoveryIdentityConfig" for document in documents)
    if discovery.get("enabled") and not service.get("disabled") and not identity:
        if not cluster.get("id") or not cluster.get("secret"):
            problems.append("cluster discovery service registry requires .cluster.id and .cluster.secret")
    return problems


def configured_hostname(documents):
    """The static hostname a config sets: v1alpha1 ``machine.network.hostname`` or HostnameConfig ``hostname``."""
    for document in documents:
        if document.get("kind") == "HostnameConfig" and document.get("hostname"):
            return document["hostname"]
        if document.get("kind") is None:
            hostname = ((document.get("machine") or {}).get("network") or {}).get("hostname")
            if hostname:
                return hostname
    return None
