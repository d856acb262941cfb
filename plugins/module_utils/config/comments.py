# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The YAML comments of ``talos_machine_config``'s ``with_docs`` and ``with_examples``.

``FIELD_DOCS`` holds one line per document kind and key path the generator
emits (``""`` is the document itself; the v1alpha1 document is ``v1alpha1``).
``EXAMPLES`` holds commented snippets of what a user may add, each for the
contracts where it applies. Everything here is static text: a comment can
never carry a key, a token or any other value of the cluster.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml

V1ALPHA1 = "v1alpha1"

_CA_PAIR = {
    "crt": "The certificate, base64 of its PEM.",
    "key": "Its private key, base64 of its PEM; empty where the node does not sign with this CA.",
}


def _with_ca(prefix, description):
    fields = {prefix: description}
    fields.update(("%s.%s" % (prefix, key), text) for key, text in _CA_PAIR.items())
    return fields


_V1ALPHA1_DOCS = {
    "": "The machine config (v1alpha1): this node's identity, its role and the cluster's shared secrets.",
    "version": "Format version of this document; always v1alpha1.",
    "debug": "Send kernel and service logs to the console as well.",
    "persist": "Keep this config across reboots.",
    "machine": "Settings of this node.",
    "machine.type": "Role of the node: controlplane runs etcd and the Kubernetes control plane, worker runs workloads only.",
    "machine.token": "Shared token nodes present to trustd to obtain their Talos API certificates.",
    "machine.certSANs": "Extra names and addresses in the certificate of the Talos API (port 50000).",
    "machine.kubelet": "The kubelet of this node.",
    "machine.kubelet.image": "Kubelet container image; its tag is the Kubernetes version.",
    "machine.kubelet.defaultRuntimeSeccompProfileEnabled": "Run pods with the container runtime's default seccomp profile.",
    "machine.kubelet.disableManifestsDirectory": "Ignore static pod manifests dropped into the kubelet's manifests directory.",
    "machine.network": "Network interfaces, addresses, routes and resolvers; empty keeps the defaults (DHCP).",
    "machine.install": "How Talos installs itself to disk.",
    "machine.install.disk": "Disk Talos installs to.",
    "machine.install.image": "Installer image; its tag is the Talos version installed.",
    "machine.install.wipe": "Wipe the whole disk before installing.",
    "machine.install.grubUseUKICmdline": "Boot GRUB with the kernel command line built into the UKI instead of extraKernelArgs.",
    "machine.features": "Opt-in Talos features.",
    "machine.features.rbac": "Enforce the roles of client certificates on the Talos API.",
    "machine.features.stableHostname": "Give the node a hostname derived from its machine identity when none is set.",
    "machine.features.apidCheckExtKeyUsage": "Check the extended key usage of certificates between apid instances.",
    "machine.features.diskQuotaSupport": "Turn on XFS project quotas on EPHEMERAL so kubelet can enforce ephemeral storage limits.",
    "machine.features.kubePrism": "A local load balancer for the Kubernetes API on every node.",
    "machine.features.kubePrism.enabled": "Run KubePrism.",
    "machine.features.kubePrism.port": "Local port KubePrism listens on.",
    "machine.features.hostDNS": "A caching DNS resolver on the node.",
    "machine.features.hostDNS.enabled": "Run the node's DNS resolver.",
    "machine.features.hostDNS.forwardKubeDNSToHost": "Let CoreDNS forward to the node's resolver.",
    "machine.nodeLabels": "Labels set on this node's Kubernetes Node object.",
    "cluster": "Settings shared by every node of the cluster.",
    "cluster.id": "Cluster identity for the discovery service.",
    "cluster.secret": "Key that encrypts what nodes publish to the discovery service.",
    "cluster.controlPlane": "How nodes reach the Kubernetes API.",
    "cluster.controlPlane.endpoint": "URL of the Kubernetes API: a load balancer or shared address of the control planes.",
    "cluster.clusterName": "Name of the cluster.",
    "cluster.network": "Kubernetes networking.",
    "cluster.network.dnsDomain": "DNS domain of Kubernetes services.",
    "cluster.network.podSubnets": "Address ranges pods get their addresses from.",
    "cluster.network.serviceSubnets": "Address ranges services get their cluster IPs from.",
    "cluster.token": "Bootstrap token kubelets use to join the cluster.",
    "cluster.aescbcEncryptionSecret": "Older key that encrypts Kubernetes secrets in etcd (AES-CBC).",
    "cluster.secretboxEncryptionSecret": "Key that encrypts Kubernetes secrets in etcd (secretbox).",
    "cluster.serviceAccount": "Key that signs Kubernetes service account tokens.",
    "cluster.serviceAccount.key": "The private key, base64 of its PEM.",
    "cluster.apiServer": "The Kubernetes API server.",
    "cluster.apiServer.image": "kube-apiserver container image.",
    "cluster.apiServer.certSANs": "Extra names and addresses in the API server's certificate.",
    "cluster.apiServer.disablePodSecurityPolicy": "Leave the removed PodSecurityPolicy admission plugin off.",
    "cluster.apiServer.admissionControl": "Admission plugins and their configuration (Pod Security defaults here).",
    "cluster.apiServer.auditPolicy": "What the API server writes to its audit log.",
    "cluster.controllerManager": "The Kubernetes controller manager.",
    "cluster.controllerManager.image": "kube-controller-manager container image.",
    "cluster.proxy": "kube-proxy on every node.",
    "cluster.proxy.image": "kube-proxy container image.",
    "cluster.scheduler": "The Kubernetes scheduler.",
    "cluster.scheduler.image": "kube-scheduler container image.",
    "cluster.discovery": "Cluster membership discovery (used by KubeSpan and talosctl get members).",
    "cluster.discovery.enabled": "Publish and read cluster members.",
    "cluster.discovery.registries": "Where members are published.",
    "cluster.discovery.registries.kubernetes": "The registry on Kubernetes Node annotations.",
    "cluster.discovery.registries.kubernetes.disabled": "Leave the Kubernetes registry off.",
    "cluster.discovery.registries.service": "The discovery service registry (end-to-end encrypted with cluster.secret).",
    "cluster.etcd": "etcd on the control planes.",
}
_V1ALPHA1_DOCS.update(_with_ca("machine.ca", "Talos API certificate authority."))
_V1ALPHA1_DOCS.update(_with_ca("cluster.ca", "Kubernetes certificate authority."))
_V1ALPHA1_DOCS.update(_with_ca("cluster.aggregatorCA", "Certificate authority of the Kubernetes API aggregation layer."))
_V1ALPHA1_DOCS.update(_with_ca("cluster.etcd.ca", "etcd certificate authority."))

_ISSUING_CA = {
    "issuingCA": "Certificate authority this control plane issues certificates with.",
    "issuingCA.cert": "The certificate (PEM).",
    "issuingCA.key": "Its private key (PEM).",
}
_KUBE_IMAGE = {"image": "Container image; its tag is the Kubernetes version."}
_KUBE_CONFIG = {"config": "Component configuration passed to it as is; empty keeps its defaults."}

FIELD_DOCS = {
    V1ALPHA1: _V1ALPHA1_DOCS,
    "HostnameConfig": {
        "": "How the node gets its hostname.",
        "auto": "stable: a hostname derived from the machine identity; remove it and set hostname to choose one.",
    },
    "DiscoveryServiceConfig": {
        "": "The discovery service nodes publish cluster membership to.",
        "name": "Name of this discovery service.",
        "endpoint": "URL of the discovery service.",
    },
    "DiscoveryIdentityConfig": {
        "": "The cluster's identity for discovery.",
        "clusterID": "Cluster identity.",
        "clusterSecret": "Key that encrypts what nodes publish.",
    },
    "UnattendedInstallConfig": {
        "": "How Talos installs itself to disk without an operator.",
        "installer": "The installer.",
        "installer.image": "Installer image; its tag is the Talos version installed.",
        "provisioning": "Which disk to install to.",
        "provisioning.diskSelector": "Chooses the disk.",
        "provisioning.diskSelector.match": "CEL expression a disk must match.",
        "provisioning.wipe": "Wipe the whole disk before installing.",
    },
    "ResolverConfig": {
        "": "Name resolution on the node.",
        "hostDNS": "A caching DNS resolver on the node.",
        "hostDNS.enabled": "Run the node's DNS resolver.",
        "hostDNS.forwardKubeDNSToHost": "Let CoreDNS forward to the node's resolver.",
    },
    "VolumeConfig": {
        "": "Settings of a system volume.",
        "name": "The volume (EPHEMERAL holds containers, images and pod data).",
        "mount": "How it is mounted.",
        "mount.secure": "Mount it without device files and set-user-ID programs.",
    },
    "FilesystemTrimConfig": {
        "": "Periodic TRIM of the node's filesystems.",
        "interval": "Time between two runs (a Go duration).",
    },
    "SecurityProfileConfig": {
        "": "Node-wide security settings.",
        "workloadIsolation": "Run Kubernetes workloads with stricter isolation from the node.",
    },
    "KubeClusterConfig": {
        "": "The Kubernetes cluster this node belongs to.",
        "clusterName": "Name of the cluster.",
        "endpoint": "URL of the Kubernetes API: a load balancer or shared address of the control planes.",
    },
    "KubeNodeConfig": {
        "": "This node's Kubernetes Node object.",
        "nodeIP": "Which address the kubelet reports; empty chooses one automatically.",
        "labels": "Labels set on the Node.",
        "taints": "Taints set on the Node.",
    },
    "KubeletConfig": dict(_KUBE_IMAGE, **{
        "": "The kubelet of this node.",
        "config": "KubeletConfiguration fields merged over Talos's defaults.",
        "defaultRuntimeSeccompProfileEnabled": "Run pods with the container runtime's default seccomp profile.",
    }),
    "KubeNetworkConfig": {
        "": "Kubernetes networking.",
        "dnsDomain": "DNS domain of Kubernetes services.",
        "podSubnets": "Address ranges pods get their addresses from.",
        "serviceSubnets": "Address ranges services get their cluster IPs from.",
    },
    "KubeAPIServerCAConfig": dict(_ISSUING_CA, **{
        "": "The Kubernetes certificate authority.",
        "acceptedCAs": "Certificates (PEM) this node trusts for the Kubernetes API.",
    }),
    "KubePrismConfig": {
        "": "KubePrism, a local load balancer for the Kubernetes API; without this document it is off.",
        "port": "Local port KubePrism listens on.",
    },
    "KubeAggregatorCAConfig": dict(_ISSUING_CA, **{"": "Certificate authority of the Kubernetes API aggregation layer."}),
    "KubeAdmissionControlConfig": {
        "": "One admission plugin of the API server.",
        "name": "The plugin.",
        "configuration": "Its configuration (Pod Security defaults here).",
    },
    "KubeAuditPolicyConfig": {
        "": "What the API server writes to its audit log.",
        "configuration": "The audit policy.",
    },
    "KubeAuthenticationConfig": {
        "": "How the API server authenticates requests.",
        "configuration": "The AuthenticationConfiguration (anonymous access only to the health endpoints here).",
    },
    "KubeAuthorizerConfig": {
        "": "One authorizer of the API server, in the order of these documents.",
        "name": "Name of the authorizer.",
        "type": "Kind of authorizer.",
    },
    "KubeEtcdEncryptionConfig": {
        "": "How the API server encrypts Kubernetes secrets in etcd.",
        "config": "The EncryptionConfiguration; the first provider encrypts, all of them decrypt.",
    },
    "KubeServiceAccountConfig": {
        "": "Kubernetes service account tokens.",
        "issuer": "Who signs them.",
        "issuer.privateKey": "The signing key (PEM).",
        "issuer.issuerURL": "Issuer written into the tokens.",
    },
    "KubeAPIServerConfig": dict(_KUBE_IMAGE, **{
        "": "The Kubernetes API server.",
        "certExtraSANs": "Extra names and addresses in the API server's certificate.",
    }),
    "KubeControllerManagerConfig": dict(_KUBE_IMAGE, **{"": "The Kubernetes controller manager."}),
    "KubeSchedulerConfig": dict(_KUBE_IMAGE, **dict(_KUBE_CONFIG, **{"": "The Kubernetes scheduler."})),
    "KubeProxyConfig": dict(_KUBE_IMAGE, **dict(_KUBE_CONFIG, **{"": "kube-proxy on every node."})),
    "KubeFlannelCNIConfig": {
        "": "Flannel, the pod network Talos deploys; without this document Talos deploys none.",
        "backendType": "How Flannel carries traffic between nodes.",
        "backendPort": "UDP port of that traffic.",
    },
    "KubeCoreDNSConfig": {
        "": "CoreDNS, the cluster's DNS.",
        "enabled": "Deploy CoreDNS.",
    },
}

# (kind, key path, first contract, last contract, title, snippet): the snippet goes above the key when the
# document has it, else after the last key of the parent mapping (path "" : after the whole document).
_LAST = (99, 0)
EXAMPLES = (
    (V1ALPHA1, "machine.network", (1, 9), (1, 13), "a static address, a default route and resolvers", {"network": {
        "interfaces": [{"interface": "eth0", "addresses": ["192.0.2.10/24"],
                        "routes": [{"network": "0.0.0.0/0", "gateway": "192.0.2.1"}]}],
        "nameservers": ["192.0.2.53"],
    }}),
    (V1ALPHA1, "machine.network", (1, 9), (1, 12), "KubeSpan, a WireGuard mesh between the nodes",
     {"network": {"kubespan": {"enabled": True}}}),
    (V1ALPHA1, "machine.install.extraKernelArgs", (1, 9), (1, 11), "extra kernel arguments",
     {"extraKernelArgs": ["console=ttyS0", "net.ifnames=0"]}),
    (V1ALPHA1, "machine.install.extraKernelArgs", (1, 12), (1, 13),
     "extra kernel arguments (set grubUseUKICmdline to false with them)",
     {"extraKernelArgs": ["console=ttyS0", "net.ifnames=0"]}),
    (V1ALPHA1, "machine.sysctls", (1, 9), (1, 13), "kernel parameters", {"sysctls": {"vm.max_map_count": "262144"}}),
    (V1ALPHA1, "machine.registries", (1, 9), (1, 11), "a pull-through mirror of a registry",
     {"registries": {"mirrors": {"docker.io": {"endpoints": ["https://mirror.example.com"]}}}}),
    (V1ALPHA1, "cluster.network.cni", (1, 9), (1, 13), "another CNI than Flannel, from a manifest URL",
     {"cni": {"name": "custom", "urls": ["https://cni.example.com/manifest.yaml"]}}),
    ("HostnameConfig", "", (1, 12), _LAST, "a pull-through mirror of a registry, as a document of its own", {
        "apiVersion": "v1alpha1", "kind": "RegistryMirrorConfig", "name": "docker.io",
        "endpoints": [{"url": "https://mirror.example.com"}],
    }),
    ("HostnameConfig", "", (1, 13), _LAST, "KubeSpan, a WireGuard mesh between the nodes, as a document of its own",
     {"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": True}),
    ("ResolverConfig", "", (1, 14), _LAST, "kernel parameters, as a document of its own",
     {"apiVersion": "v1alpha1", "kind": "SysctlConfig", "params": {"vm.max_map_count": "262144"}}),
    ("KubeFlannelCNIConfig", "", (1, 14), _LAST, "another CNI: remove the document above and add this one",
     {"apiVersion": "v1alpha1", "kind": "KubeExternalManifestConfig", "name": "custom-cni",
      "url": "https://cni.example.com/manifest.yaml"}),
)


_MISSING = object()


def document_kind(document):
    """``v1alpha1`` for the v1alpha1 document, else its ``kind``."""
    kind = document.get("kind")
    return kind if kind and isinstance(kind, str) else V1ALPHA1


def _split(path):
    return tuple(path.split(".")) if path else ()


def _lookup(document, path):
    """The value at ``path`` (a tuple), or ``_MISSING``."""
    value = document
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _example_lines(title, snippet):
    return ["Example, %s:" % title] + ["    " + line for line in go_yaml.dump(snippet).splitlines()]


def comments_for(contract, with_docs, with_examples):
    """A function giving each document its ``go_yaml.Comments``, or None when neither option is set."""
    if not (with_docs or with_examples):
        return None

    def comments(document):
        kind = document_kind(document)
        above, after = {}, {}
        if with_docs:
            for path, text in FIELD_DOCS.get(kind, {}).items():
                above[_split(path)] = [text]
        if with_examples:
            for example_kind, path, first, last, title, snippet in EXAMPLES:
                if example_kind != kind or not first <= contract <= last:
                    continue
                key_path = _split(path)
                lines = _example_lines(title, snippet)
                if key_path and _lookup(document, key_path) is not _MISSING:
                    above.setdefault(key_path, []).extend(lines)
                    continue
                parent = _lookup(document, key_path[:-1] if key_path else ())
                if isinstance(parent, dict) and parent:
                    after.setdefault(key_path[:-1] if key_path else (), []).extend(lines)
        return go_yaml.Comments(above, after)

    return comments
