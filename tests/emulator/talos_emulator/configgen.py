# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets bundles, machine configs and talosconfigs shaped like Talos's own.

``SecretsBundle`` plays the part of ``talosctl gen secrets``;
``generate_machine_config`` and ``generate_talosconfig`` the part of
``talosctl gen config``. ``parse_machine_config`` is the check the node makes
when a config is applied, raising ``ConfigError`` with the gRPC status name and
the message Talos v1.14 returns.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import secrets as random_source
import string

import yaml
from cryptography.hazmat.primitives.asymmetric import ec

from . import config_validation
from .pki import CertificateAuthority, encode_private_key

# libyaml when PyYAML has it: a fleet of emulated nodes writes and parses one
# config each, ten times faster than the pure Python codec (same output).
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DEFAULT_TALOS_VERSION = "v1.14.0"
DEFAULT_KUBERNETES_VERSION = "v1.35.0"

NO_V1ALPHA1_MESSAGE = "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?"

# Talos accepts "init" (deprecated) and "join" (old name of worker) besides the two current types.
_MACHINE_TYPES = ("init", "controlplane", "worker", "join")
_CONTROL_PLANE_TYPES = ("init", "controlplane")
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


class ConfigError(Exception):
    """A machine config refused on apply.

    ``code`` is the gRPC status name and ``message`` the text Talos v1.14
    returns. ``kind`` says which check failed (``parse``, ``no_v1alpha1`` or
    ``validation``) so that a server imitating another version can reword it:
    the v1.12 maintenance server answers a parse failure with ``Unknown``
    "failed to parse config: ..." and a validation failure with
    "configuration validation failed: ..." followed by the same list.
    """

    def __init__(self, code, message, kind):
        super(ConfigError, self).__init__(message)
        self.code = code
        self.message = message
        self.kind = kind


def _random_token(length):
    return "".join(random_source.choice(_TOKEN_ALPHABET) for dummy in range(length))


def _kubeadm_style_token():
    return "%s.%s" % (_random_token(6), _random_token(16))


def _random_base64(size=32):
    return base64.b64encode(os.urandom(size)).decode()


def _b64(pem):
    return base64.b64encode(pem).decode() if pem else ""


def _unb64(value):
    return base64.b64decode(value) if value else b""


class SecretsBundle:
    """The secrets shared by every machine of one cluster."""

    def __init__(self, os_ca, etcd_ca, k8s_ca, k8s_aggregator_ca, service_account_key_pem,
                 cluster_id, cluster_secret, bootstrap_token, machine_token, secretbox_secret):
        self.os_ca = os_ca
        self.etcd_ca = etcd_ca
        self.k8s_ca = k8s_ca
        self.k8s_aggregator_ca = k8s_aggregator_ca
        self.service_account_key_pem = service_account_key_pem
        self.cluster_id = cluster_id
        self.cluster_secret = cluster_secret
        self.bootstrap_token = bootstrap_token
        self.machine_token = machine_token
        self.secretbox_secret = secretbox_secret

    @classmethod
    def generate(cls):
        return cls(
            os_ca=CertificateAuthority.generate(common_name="talos", organization="talos", algorithm="ed25519"),
            etcd_ca=CertificateAuthority.generate(common_name="etcd", organization="etcd", algorithm="ecdsa"),
            k8s_ca=CertificateAuthority.generate(common_name="kubernetes", organization="kubernetes", algorithm="ecdsa"),
            k8s_aggregator_ca=CertificateAuthority.generate(common_name="front-proxy", organization="front-proxy", algorithm="ecdsa"),
            service_account_key_pem=encode_private_key(ec.generate_private_key(ec.SECP256R1())),
            cluster_id=_random_base64(),
            cluster_secret=_random_base64(),
            bootstrap_token=_kubeadm_style_token(),
            machine_token=_kubeadm_style_token(),
            secretbox_secret=_random_base64(),
        )

    def to_yaml(self):
        """The bundle in the layout of ``talosctl gen secrets``."""
        document = {
            "cluster": {"id": self.cluster_id, "secret": self.cluster_secret},
            "secrets": {"bootstraptoken": self.bootstrap_token, "secretboxencryptionsecret": self.secretbox_secret},
            "trustdinfo": {"token": self.machine_token},
            "certs": {
                "etcd": _ca_pair(self.etcd_ca),
                "k8s": _ca_pair(self.k8s_ca),
                "k8saggregator": _ca_pair(self.k8s_aggregator_ca),
                "k8sserviceaccount": {"key": _b64(self.service_account_key_pem)},
                "os": _ca_pair(self.os_ca),
            },
        }
        return yaml.safe_dump(document, sort_keys=False)

    @classmethod
    def from_yaml(cls, text):
        document = yaml.safe_load(text)
        certs = document["certs"]

        def ca(name):
            return CertificateAuthority.from_pem(_unb64(certs[name]["crt"]), _unb64(certs[name]["key"]))

        return cls(
            os_ca=ca("os"),
            etcd_ca=ca("etcd"),
            k8s_ca=ca("k8s"),
            k8s_aggregator_ca=ca("k8saggregator"),
            service_account_key_pem=_unb64(certs["k8sserviceaccount"]["key"]),
            cluster_id=document["cluster"]["id"],
            cluster_secret=document["cluster"]["secret"],
            bootstrap_token=document["secrets"]["bootstraptoken"],
            machine_token=document["trustdinfo"]["token"],
            secretbox_secret=document["secrets"]["secretboxencryptionsecret"],
        )


def _ca_pair(ca, with_key=True):
    return {"crt": _b64(ca.crt_pem), "key": _b64(ca.key_pem) if with_key else ""}


def _endpoint_host(controlplane_endpoint):
    host = controlplane_endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def generate_machine_config(secrets, machine_type, cluster_name, controlplane_endpoint, talos_version=DEFAULT_TALOS_VERSION,
                            hostname=None, cert_sans=(), install_disk="/dev/sda", kubernetes_version=DEFAULT_KUBERNETES_VERSION):
    """A Talos v1alpha1 machine config for a control plane or a worker, as YAML."""
    if machine_type not in ("controlplane", "worker"):
        raise ValueError("machine_type must be 'controlplane' or 'worker', not %r" % machine_type)
    control_plane = machine_type == "controlplane"

    network = {"hostname": hostname} if hostname else {}
    machine = {
        "type": machine_type,
        "token": secrets.machine_token,
        "ca": _ca_pair(secrets.os_ca, with_key=control_plane),
        "certSANs": list(cert_sans),
        "kubelet": {
            "image": "ghcr.io/siderolabs/kubelet:%s" % kubernetes_version,
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        },
        "network": network,
        "install": {
            "disk": install_disk,
            "image": "ghcr.io/siderolabs/installer:%s" % talos_version,
            "wipe": False,
        },
        "features": {
            "rbac": True,
            "stableHostname": True,
            "apidCheckExtKeyUsage": True,
            "diskQuotaSupport": True,
            "kubePrism": {"enabled": True, "port": 7445},
            "hostDNS": {"enabled": True, "forwardKubeDNSToHost": True},
        },
    }
    if control_plane:
        machine["nodeLabels"] = {"node.kubernetes.io/exclude-from-external-load-balancers": ""}

    cluster = {
        "id": secrets.cluster_id,
        "secret": secrets.cluster_secret,
        "controlPlane": {"endpoint": controlplane_endpoint},
        "clusterName": cluster_name,
        "network": {
            "dnsDomain": "cluster.local",
            "podSubnets": ["10.244.0.0/16"],
            "serviceSubnets": ["10.96.0.0/12"],
        },
        "token": secrets.bootstrap_token,
    }
    if control_plane:
        cluster["secretboxEncryptionSecret"] = secrets.secretbox_secret
    cluster["ca"] = _ca_pair(secrets.k8s_ca, with_key=control_plane)
    if control_plane:
        cluster.update({
            "aggregatorCA": _ca_pair(secrets.k8s_aggregator_ca),
            "serviceAccount": {"key": _b64(secrets.service_account_key_pem)},
            "apiServer": {
                "image": "registry.k8s.io/kube-apiserver:%s" % kubernetes_version,
                "certSANs": [_endpoint_host(controlplane_endpoint)],
                "disablePodSecurityPolicy": True,
            },
            "controllerManager": {"image": "registry.k8s.io/kube-controller-manager:%s" % kubernetes_version},
            "proxy": {"image": "registry.k8s.io/kube-proxy:%s" % kubernetes_version},
            "scheduler": {"image": "registry.k8s.io/kube-scheduler:%s" % kubernetes_version},
            "etcd": {"ca": _ca_pair(secrets.etcd_ca)},
        })
    cluster["discovery"] = {"enabled": True, "registries": {"kubernetes": {"disabled": True}, "service": {}}}

    document = {"version": "v1alpha1", "debug": False, "persist": True, "machine": machine, "cluster": cluster}
    return yaml.dump(document, Dumper=DUMPER, sort_keys=False)


def generate_talosconfig(secrets, context_name, endpoints, nodes=(), roles=("os:admin",)):
    """A talosconfig with one context whose client certificate carries ``roles``."""
    crt_pem, key_pem = secrets.os_ca.issue_client(roles)
    document = {
        "context": context_name,
        "contexts": {
            context_name: {
                "endpoints": list(endpoints),
                "nodes": list(nodes),
                "ca": _b64(secrets.os_ca.crt_pem),
                "crt": _b64(crt_pem),
                "key": _b64(key_pem),
            },
        },
    }
    return yaml.safe_dump(document, sort_keys=False)


def _multierror(messages):
    # The list format of the error aggregation Talos uses in validation.
    count = "1 error occurred" if len(messages) == 1 else "%d errors occurred" % len(messages)
    return "%s:\n%s\n\n" % (count, "\n".join("\t* %s" % message for message in messages))


def _parse_documents(data):
    try:
        try:
            documents = [document for document in yaml.load_all(data, Loader=LOADER) if document is not None]
        except yaml.YAMLError:  # the pure Python parser words the error as before
            documents = [document for document in yaml.safe_load_all(data) if document is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = "line %d: " % (mark.line + 1) if mark is not None else ""
        raise ConfigError("InvalidArgument", "yaml: %s%s" % (where, problem), "parse")
    for document in documents:
        if not isinstance(document, dict):
            raise ConfigError("InvalidArgument", "yaml: unmarshal errors: document is not a mapping", "parse")
    return documents


def _validation_errors(config):
    machine = config.get("machine")
    if not isinstance(machine, dict):
        return ["machine instructions are required"]

    errors = []
    machine_type = machine.get("type", "")
    issuing_ca = machine.get("ca") or {}
    if not issuing_ca and not machine.get("acceptedCAs"):
        errors.append("issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)")
    if machine_type in _CONTROL_PLANE_TYPES:
        if not issuing_ca:
            errors.append("issuing CA is required (.machine.ca)")
        elif not issuing_ca.get("key"):
            errors.append("issuing CA key is required for controlplane nodes (.machine.ca.key)")
    elif machine_type in _MACHINE_TYPES:
        if issuing_ca.get("key"):
            errors.append("issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)")
        cluster_ca = (config.get("cluster") or {}).get("ca") or {}
        if cluster_ca.get("key"):
            errors.append("issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)")
    else:
        errors.append('unknown machine type "%s"' % machine_type)
    if config.get("persist") is False:
        errors.append(".persist should be enabled")
    return errors


def parse_documents(data):
    """Every document of an applied config; ConfigError when it is not YAML mappings."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError("InvalidArgument", "yaml: invalid UTF-8: %s" % exc, "parse")
    return _parse_documents(data)


def parse_machine_config(data, talos_version=DEFAULT_TALOS_VERSION):
    """Parse and validate an applied machine config; return its v1alpha1 document as a dict.

    Raises ``ConfigError`` the way ApplyConfiguration of a node running
    ``talos_version`` refuses a config: strict decoding (unknown keys, kinds
    that version does not register), then the v1alpha1 checks, each
    document's own checks and its conflicts with v1alpha1 fields.
    """
    documents = parse_documents(data)
    decoding = config_validation.decode_problem(documents, talos_version, data)
    if decoding:
        raise ConfigError("InvalidArgument", decoding, "parse")
    v1alpha1 = [document for document in documents if document.get("version") == "v1alpha1" and "kind" not in document]
    if not v1alpha1:
        raise ConfigError("InvalidArgument", NO_V1ALPHA1_MESSAGE, "no_v1alpha1")
    config = v1alpha1[0]
    errors = _validation_errors(config)
    if isinstance(config.get("machine"), dict):
        errors += config_validation.v1alpha1_problems(config, documents)
    container_errors = ["v1alpha1.Config: " + _multierror(errors)] if errors else []
    container_errors += config_validation.document_problems(documents, config)
    if container_errors:
        # Talos wraps the document's own error list as one entry of the container's list.
        raise ConfigError("InvalidArgument", _multierror(container_errors), "validation")
    return config


def kubernetes_settings(data):
    """The cluster name, API endpoint, Kubernetes CA (PEM bytes) and accepted CAs (``accepted_crts``, PEM bytes
    each) of a validated config, from either layout.

    v1.14 configs keep them in KubeClusterConfig and KubeAPIServerCAConfig,
    older ones in the v1alpha1 ``cluster`` section (base64 of PEM).
    """
    documents = parse_documents(data)
    by_kind = dict((document.get("kind"), document) for document in documents)
    cluster = (by_kind.get(None) or {}).get("cluster") or {}
    kube_cluster = by_kind.get("KubeClusterConfig") or {}
    ca_document = by_kind.get("KubeAPIServerCAConfig")
    issuing = (ca_document or {}).get("issuingCA") or {}
    ca = cluster.get("ca") or {}
    if ca_document is not None:
        accepted = [pem.encode() for pem in ca_document.get("acceptedCAs") or [] if pem]
    else:
        accepted = [_unb64((entry or {}).get("crt")) for entry in cluster.get("acceptedCAs") or []]
    return {
        "accepted_crts": accepted,
        "cluster_name": kube_cluster.get("clusterName") or cluster.get("clusterName") or "talos",
        "endpoint": kube_cluster.get("endpoint") or (cluster.get("controlPlane") or {}).get("endpoint"),
        "ca_crt": issuing.get("cert", "").encode() or _unb64(ca.get("crt")),
        "ca_key": issuing.get("key", "").encode() or _unb64(ca.get("key")),
    }


def configured_hostname(data):
    """The static hostname an (already validated) config sets, or None."""
    return config_validation.configured_hostname(parse_documents(data))


def machine_os_ca(config):
    """The Talos OS CA of a parsed machine config: ``(crt_pem, key_pem or None)``."""
    issuing_ca = (config.get("machine") or {}).get("ca") or {}
    key_pem = _unb64(issuing_ca.get("key"))
    return _unb64(issuing_ca.get("crt")), key_pem or None


def load_machine_os_ca(config):
    """The OS CA of a control-plane config as a ``CertificateAuthority`` that can issue certificates."""
    crt_pem, key_pem = machine_os_ca(config)
    if key_pem is None:
        raise ValueError("the machine config carries no OS CA key (.machine.ca.key)")
    return CertificateAuthority.from_pem(crt_pem, key_pem)
