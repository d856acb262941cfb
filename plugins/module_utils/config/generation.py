# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Machine configs as ``talosctl gen config`` renders them, per version contract.

Contracts v1.9 to v1.13 give one v1alpha1 document (v1.12 and v1.13 followed
by a ``HostnameConfig``); v1.14 gives a short v1alpha1 document (identity and
PKI) followed by one document per subsystem. The installer image and its disk
go in ``.machine.install`` or, from v1.14 and there by default, in the
``UnattendedInstallConfig`` document (``install_home``). Certificates and keys
are base64 of PEM in v1alpha1 fields and raw PEM in the v1.14 documents. The
same inputs always give the same bytes: nothing here depends on the clock.

``render_machine_config`` is the entry point for callers outside Ansible:
bundle path and options in, YAML text out.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible_collections.talos_linux.talos.plugins.module_utils.config import comments as config_comments
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config import installer_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import (
    default_installer_image, install_home as resolve_install_home, kubernetes_version as resolve_kubernetes_version,
    parse_contract, release_tag, validate_cluster_endpoint,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents as config_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import apply_patches
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

MACHINE_TYPES = ("controlplane", "worker")
DEFAULT_INSTALL_DISK = "/dev/sda"
POD_SUBNETS = ["10.244.0.0/16"]
SERVICE_SUBNETS = ["10.96.0.0/12"]
DNS_DOMAIN = "cluster.local"
KUBEPRISM_PORT = 7445
DISCOVERY_ENDPOINT = "https://discovery.talos.dev/"
EXCLUDE_FROM_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
CONTROL_PLANE_ROLE_LABEL = "node-role.kubernetes.io/control-plane"


def _pod_security_configuration():
    # A Go map: its keys come out sorted.
    return {
        "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
        "defaults": {
            "audit": "restricted", "audit-version": "latest",
            "enforce": "baseline", "enforce-version": "latest",
            "warn": "restricted", "warn-version": "latest",
        },
        "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": [], "usernames": []},
        "kind": "PodSecurityConfiguration",
    }


def audit_policy():
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}


class GenerationInput:
    """The validated inputs of one rendering."""

    def __init__(self, bundle, machine_type, cluster_name, cluster_endpoint, talos_version=None, kubernetes_version=None,
                 install_disk=DEFAULT_INSTALL_DISK, install_image=None, additional_sans=(), install_home=None):
        if machine_type not in MACHINE_TYPES:
            raise TalosConfigError("machine_type must be controlplane or worker, got %r." % machine_type)
        if not cluster_name or not str(cluster_name).strip():
            raise TalosConfigError("cluster_name must not be empty.")
        self.bundle = bundle
        self.machine_type = machine_type
        self.controlplane = machine_type == "controlplane"
        self.cluster_name = str(cluster_name)
        self.endpoint, self.endpoint_host = validate_cluster_endpoint(cluster_endpoint)
        self.contract = parse_contract(talos_version)
        # The oldest Talos the config is for: the documents and fields it may hold (documents.check_fits).
        self.talos_version = str(talos_version).strip() if talos_version else None
        self.oldest_release = release_tag(talos_version)
        self.kubernetes_version = resolve_kubernetes_version(kubernetes_version, self.contract)
        self.install_disk = install_disk or None
        self.install_image = install_image or default_installer_image(talos_version)
        self.install_home = resolve_install_home(install_home, self.contract)
        self.additional_sans = [str(san) for san in (additional_sans or [])]

    def image(self, name):
        return "%s:v%s" % (name, self.kubernetes_version)

    def at_least(self, minor):
        return self.contract >= (1, minor)


def _b64_pair(ca, with_key):
    return {"crt": talos_pki.b64_pem(ca.crt_pem), "key": talos_pki.b64_pem(ca.key_pem) if with_key else ""}


def new_document(kind, **fields):
    document = {"apiVersion": "v1alpha1", "kind": kind}
    document.update(fields)
    return document


def _ordered(*pairs):
    """A dict from ``(key, value)`` pairs, leaving out pairs whose value is None."""
    return dict((key, value) for key, value in pairs if value is not None)


def _machine_install(gen):
    """The v1alpha1 ``.machine.install`` section: installer image and disk."""
    return _ordered(
        ("disk", gen.install_disk),
        ("image", gen.install_image),
        ("wipe", False),
        ("grubUseUKICmdline", True if gen.at_least(12) else None),
    )


def legacy_documents(gen):
    """Contracts v1.9 to v1.13: the full v1alpha1 document, then HostnameConfig from v1.12."""
    bundle, cp = gen.bundle, gen.controlplane
    features = _ordered(
        ("rbac", True if not gen.at_least(12) else None),
        ("stableHostname", True if not gen.at_least(12) else None),
        ("apidCheckExtKeyUsage", True if not gen.at_least(12) else None),
        ("diskQuotaSupport", True),
        ("kubePrism", {"enabled": True, "port": KUBEPRISM_PORT}),
        ("hostDNS", {"enabled": True, "forwardKubeDNSToHost": True}),
    )
    machine = _ordered(
        ("type", gen.machine_type),
        ("token", bundle.trustd_token),
        ("ca", _b64_pair(bundle.os_ca, cp)),
        ("certSANs", list(gen.additional_sans)),
        ("kubelet", {
            "image": gen.image("ghcr.io/siderolabs/kubelet"),
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        }),
        ("network", {} if not gen.at_least(13) else None),
        ("install", _machine_install(gen)),
        ("features", features),
        ("nodeLabels", {EXCLUDE_FROM_LB_LABEL: ""} if cp else None),
    )
    cluster = _ordered(
        ("id", bundle.cluster_id),
        ("secret", bundle.cluster_secret),
        ("controlPlane", {"endpoint": gen.endpoint}),
        ("clusterName", gen.cluster_name),
        ("network", {"dnsDomain": DNS_DOMAIN, "podSubnets": list(POD_SUBNETS), "serviceSubnets": list(SERVICE_SUBNETS)}),
        ("token", bundle.bootstrap_token),
        ("aescbcEncryptionSecret", bundle.aescbc_secret if cp and bundle.aescbc_secret else None),
        ("secretboxEncryptionSecret", bundle.secretbox_secret if cp and bundle.secretbox_secret else None),
        ("ca", _b64_pair(bundle.cas["k8s"], cp)),
    )
    if cp:
        api_server_sans = ([gen.endpoint_host] if not gen.at_least(12) else []) + gen.additional_sans
        cluster.update(_ordered(
            ("aggregatorCA", _b64_pair(bundle.cas["k8saggregator"], True)),
            ("serviceAccount", {"key": talos_pki.b64_pem(bundle.service_account_key_pem)}),
            ("apiServer", _ordered(
                ("image", gen.image("registry.k8s.io/kube-apiserver")),
                ("certSANs", api_server_sans or None),
                ("disablePodSecurityPolicy", True if not gen.at_least(12) else None),
                ("admissionControl", [{"name": "PodSecurity", "configuration": _pod_security_configuration()}]),
                ("auditPolicy", audit_policy()),
            )),
            ("controllerManager", {"image": gen.image("registry.k8s.io/kube-controller-manager")}),
            ("proxy", {"image": gen.image("registry.k8s.io/kube-proxy")}),
            ("scheduler", {"image": gen.image("registry.k8s.io/kube-scheduler")}),
        ))
    cluster["discovery"] = {"enabled": True, "registries": {"kubernetes": {"disabled": True}, "service": {}}}
    if cp:
        cluster["etcd"] = {"ca": _b64_pair(bundle.cas["etcd"], True)}
    documents = [{"version": "v1alpha1", "debug": False, "persist": True, "machine": machine, "cluster": cluster}]
    if gen.at_least(12):
        documents.append(new_document("HostnameConfig", auto="stable"))
    return documents


def multi_documents(gen):
    """Contract v1.14: a v1alpha1 document with identity and PKI, then one document per subsystem."""
    bundle, cp = gen.bundle, gen.controlplane
    k8s_ca = bundle.cas["k8s"]
    cluster = {"token": bundle.bootstrap_token}
    if cp:
        cluster["etcd"] = {"ca": _b64_pair(bundle.cas["etcd"], True)}
    documents = [{
        "version": "v1alpha1", "debug": False, "persist": True,
        "machine": _ordered(
            ("type", gen.machine_type),
            ("token", bundle.trustd_token),
            ("ca", _b64_pair(bundle.os_ca, cp)),
            ("certSANs", list(gen.additional_sans)),
            ("install", _machine_install(gen) if gen.install_home == "machine" else None),
            ("features", {"diskQuotaSupport": True}),
        ),
        "cluster": cluster,
    }]
    documents.append(new_document("DiscoveryServiceConfig", name="default", endpoint=DISCOVERY_ENDPOINT))
    documents.append(new_document("DiscoveryIdentityConfig", clusterID=bundle.cluster_id, clusterSecret=bundle.cluster_secret))
    # The document needs a disk selector: without an install disk talosctl writes none.
    if gen.install_home == "unattended" and gen.install_disk:
        documents.append(new_document(
            installer_reference.UNATTENDED_INSTALL_KIND,
            installer={"image": gen.install_image} if gen.install_image else {},
            provisioning={"diskSelector": {"match": "disk.dev_path == %s" % json.dumps(gen.install_disk)}, "wipe": False},
        ))
    documents += [
        new_document("ResolverConfig", hostDNS={"enabled": True, "forwardKubeDNSToHost": True}),
        new_document("VolumeConfig", name="EPHEMERAL", mount={"secure": True}),
        new_document("FilesystemTrimConfig", interval="168h0m0s"),
        new_document("SecurityProfileConfig", workloadIsolation=True),
        new_document("HostnameConfig", auto="stable"),
        new_document("KubeClusterConfig", clusterName=gen.cluster_name, endpoint=gen.endpoint),
    ]
    node = new_document("KubeNodeConfig", nodeIP={})
    if cp:
        node["labels"] = {CONTROL_PLANE_ROLE_LABEL: "", EXCLUDE_FROM_LB_LABEL: ""}
        node["taints"] = {CONTROL_PLANE_ROLE_LABEL: "NoSchedule"}
    documents += [
        node,
        new_document("KubeletConfig", image=gen.image("ghcr.io/siderolabs/kubelet"), config={}, defaultRuntimeSeccompProfileEnabled=True),
        new_document("KubeNetworkConfig", dnsDomain=DNS_DOMAIN, podSubnets=list(POD_SUBNETS), serviceSubnets=list(SERVICE_SUBNETS)),
        (new_document("KubeAPIServerCAConfig", issuingCA={"cert": k8s_ca.crt_pem, "key": k8s_ca.key_pem}) if cp
         else new_document("KubeAPIServerCAConfig", acceptedCAs=[k8s_ca.crt_pem])),
        new_document("KubePrismConfig", port=KUBEPRISM_PORT),
    ]
    if not cp:
        return documents
    aggregator = bundle.cas["k8saggregator"]
    api_server = new_document("KubeAPIServerConfig", image=gen.image("registry.k8s.io/kube-apiserver"))
    if gen.additional_sans:
        api_server["certExtraSANs"] = list(gen.additional_sans)
    documents += [
        new_document("KubeAggregatorCAConfig", issuingCA={"cert": aggregator.crt_pem, "key": aggregator.key_pem}),
        new_document("KubeAdmissionControlConfig", name="PodSecurity", configuration=_pod_security_configuration()),
        new_document("KubeAuditPolicyConfig", configuration=audit_policy()),
        new_document("KubeAuthenticationConfig", configuration={
            "anonymous": {"conditions": [{"path": "/livez"}, {"path": "/readyz"}, {"path": "/healthz"}], "enabled": True},
            "jwt": [],
        }),
        new_document("KubeAuthorizerConfig", name="node", type="Node"),
        new_document("KubeAuthorizerConfig", name="rbac", type="RBAC"),
        new_document("KubeEtcdEncryptionConfig", config={"resources": [{
            "providers": _encryption_providers(bundle), "resources": ["secrets"],
        }]}),
        new_document("KubeServiceAccountConfig", issuer={"privateKey": bundle.service_account_key_pem, "issuerURL": gen.endpoint}),
        api_server,
        new_document("KubeControllerManagerConfig", image=gen.image("registry.k8s.io/kube-controller-manager")),
        new_document("KubeSchedulerConfig", image=gen.image("registry.k8s.io/kube-scheduler"), config={}),
        new_document("KubeProxyConfig", image=gen.image("registry.k8s.io/kube-proxy"), config={}),
        new_document("KubeFlannelCNIConfig", backendType="vxlan", backendPort=4789),
        new_document("KubeCoreDNSConfig", enabled=True),
    ]
    return documents


def _encryption_providers(bundle):
    # The key names are those nodes render from the legacy fields (secretbox key2, then the
    # aescbc-era secret as key1), so kube-apiserver still decrypts what it stored before.
    providers = []
    if bundle.secretbox_secret:
        providers.append({"secretbox": {"keys": [{"name": "key2", "secret": bundle.secretbox_secret}]}})
    if bundle.aescbc_secret:
        providers.append({"secretbox": {"keys": [{"name": "key1", "secret": bundle.aescbc_secret}]}})
    return providers


def generate_documents(gen):
    return multi_documents(gen) if gen.at_least(14) else legacy_documents(gen)


def generate_machine_config(bundle, machine_type, cluster_name, cluster_endpoint, talos_version=None, kubernetes_version=None,
                            install_disk=DEFAULT_INSTALL_DISK, install_image=None, additional_sans=(), config_patches=None,
                            with_docs=False, with_examples=False, install_home=None):
    """The machine config text for ``machine_type`` from a loaded SecretsBundle; patches applied last."""
    gen = GenerationInput(bundle, machine_type, cluster_name, cluster_endpoint, talos_version=talos_version,
                          kubernetes_version=kubernetes_version, install_disk=install_disk, install_image=install_image,
                          additional_sans=additional_sans, install_home=install_home)
    return render(gen, config_patches, with_docs=with_docs, with_examples=with_examples)


def _version_target(gen):
    """How a refusal names the release the config is for: ``talos_version v1.13 (v1.13.0) is the oldest ...``."""
    given = gen.talos_version or gen.oldest_release
    spelled = "" if given == gen.oldest_release else " (%s)" % gen.oldest_release
    return "talos_version %s%s is the oldest Talos the config is for" % (given, spelled)


def render(gen, config_patches=None, with_docs=False, with_examples=False):
    """The YAML text of the documents for ``gen`` with ``config_patches`` applied in order.

    A config holding a document or field that Talos ``gen.oldest_release`` does not know is refused
    (documents.check_fits): nothing is rendered.

    ``with_docs`` adds a comment describing each generated document and field, ``with_examples``
    commented snippets of settings users often add; neither changes what the text parses to.
    """
    documents = generate_documents(gen)
    if config_patches:
        documents = apply_patches(documents, config_patches)
        if installer_reference.both_install_homes(documents):
            raise TalosConfigError(
                "config_patches give the machine config both a .machine.install section and an UnattendedInstallConfig "
                "document, which Talos refuses together: patch only the home install_home chooses (%s here), or set "
                "install_home to the other one." % gen.install_home)
    config_documents.check_fits(documents, gen.oldest_release, _version_target(gen))
    return go_yaml.dump_documents(documents, config_comments.comments_for(gen.contract, with_docs, with_examples))


def render_machine_config(secrets_path, machine_type, cluster_name, cluster_endpoint, **options):
    """``generate_machine_config`` for the bundle at ``secrets_path``: usable without Ansible.

    ``options``: talos_version, kubernetes_version, install_disk, install_image,
    install_home, additional_sans, config_patches, with_docs, with_examples. Returns the YAML text.
    """
    return generate_machine_config(SecretsBundle.load(secrets_path), machine_type, cluster_name, cluster_endpoint, **options)
