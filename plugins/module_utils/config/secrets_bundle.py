# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster's secrets bundle in the layout of ``talosctl gen secrets``.

One bundle per cluster: the CAs (etcd, Kubernetes, aggregator, Talos OS), the
service-account key, the bootstrap and machine (trustd) tokens, the cluster id
and secret, and the secretbox key that encrypts Kubernetes secrets in etcd.
Every ``crt``/``key`` holds standard base64 of the complete PEM text. A bundle
written by talosctl loads here, and one written here loads in talosctl.

Errors raise TalosConfigError with a message naming the field at fault, never
its value.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import os
import re

try:
    import yaml
except ImportError:  # reported by the module through missing_required_lib
    yaml = None

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import parse_contract
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import read_text_file
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import is_v1alpha1, parse_yaml_stream

_TOKEN_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
TOKEN_FORMAT = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")

# Bundle key -> (key algorithm, subject Organization or None for the empty subject).
CERTIFICATE_AUTHORITIES = (
    ("etcd", "ecdsa", "etcd"),
    ("k8s", "ecdsa", "kubernetes"),
    ("k8saggregator", "ecdsa", None),
    ("os", "ed25519", "talos"),
)


def random_token():
    """A kubeadm-style token ``[a-z0-9]{6}.[a-z0-9]{16}``, each character by unbiased rejection sampling."""
    def part(length):
        chars = []
        while len(chars) < length:
            byte = os.urandom(1)[0]
            if byte < 252:  # 252 = 7 * 36: larger bytes would favour the first characters
                chars.append(_TOKEN_ALPHABET[byte % 36])
        return "".join(chars)
    return "%s.%s" % (part(6), part(16))


def random_secret():
    """32 random bytes in standard base64."""
    return base64.b64encode(os.urandom(32)).decode("ascii")


class CertificateAuthority:
    """A CA of the bundle: PEM texts and the loaded objects."""

    def __init__(self, crt_pem, key_pem, certificate, key):
        self.crt_pem = crt_pem
        self.key_pem = key_pem
        self.certificate = certificate
        self.key = key

    @classmethod
    def generate(cls, algorithm, organization, now):
        certificate, key = talos_pki.generate_ca(algorithm, organization, now)
        return cls(talos_pki.certificate_pem(certificate), talos_pki.private_key_pem(key), certificate, key)

    @classmethod
    def from_pem(cls, crt_pem, key_pem, field):
        certificate = talos_pki.load_certificate(crt_pem, "%s.crt" % field)
        key = talos_pki.load_private_key(key_pem, "%s.key" % field)
        if not talos_pki.public_key_matches(certificate, key):
            raise talos_pki.PKIError("%s.key is not the private key of %s.crt" % (field, field))
        return cls(crt_pem, key_pem, certificate, key)


class SecretsBundle:
    """A loaded, validated secrets bundle.

    ``cas`` maps the bundle's certificate names (``etcd``, ``k8s``,
    ``k8saggregator``, ``os``) to CertificateAuthority; ``service_account_key_pem``
    is PEM text; exactly one of ``secretbox_secret``/``aescbc_secret`` is set.
    """

    def __init__(self, cluster_id, cluster_secret, bootstrap_token, trustd_token, cas, service_account_key_pem,
                 secretbox_secret=None, aescbc_secret=None):
        self.cluster_id = cluster_id
        self.cluster_secret = cluster_secret
        self.bootstrap_token = bootstrap_token
        self.trustd_token = trustd_token
        self.cas = cas
        self.service_account_key_pem = service_account_key_pem
        self.secretbox_secret = secretbox_secret
        self.aescbc_secret = aescbc_secret

    @property
    def os_ca(self):
        return self.cas["os"]

    # Making bundles.

    @classmethod
    def generate(cls, talos_version=None, now=None):
        """A new bundle as ``talosctl gen secrets`` makes it for the version contract ``talos_version``."""
        contract = parse_contract(talos_version)
        now = now or talos_pki.now_utc()
        bundle = cls(None, None, None, None, {}, None)
        bundle._populate(contract, now)
        return bundle

    def _populate(self, contract, now):
        """Generate every missing part (also used when adopting a control-plane config)."""
        self.cluster_id = self.cluster_id or random_secret()
        self.cluster_secret = self.cluster_secret or random_secret()
        self.bootstrap_token = self.bootstrap_token or random_token()
        self.trustd_token = self.trustd_token or random_token()
        if not self.secretbox_secret and not self.aescbc_secret:
            self.secretbox_secret = random_secret()
        for name, algorithm, organization in CERTIFICATE_AUTHORITIES:
            if name not in self.cas:
                self.cas[name] = CertificateAuthority.generate(algorithm, organization, now)
        if not self.service_account_key_pem:
            # RSA-4096 (RS256 tokens) since the v1.7 contract, ECDSA P-256 before.
            algorithm = "rsa" if contract >= (1, 7) else "ecdsa"
            self.service_account_key_pem = talos_pki.private_key_pem(talos_pki.generate_key(algorithm))

    # Reading bundles.

    @classmethod
    def from_yaml(cls, text, source):
        """Load and validate a bundle; ``source`` (a path) names it in errors."""
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            raise TalosConfigError("The secrets bundle %s is not valid YAML." % source)
        if not isinstance(document, dict):
            raise TalosConfigError("The secrets bundle %s is not a mapping of cluster, secrets, trustdinfo and certs." % source)

        def field(path):
            value = document
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return value if isinstance(value, str) and value.strip() else None

        problems = []
        for path in ("cluster.id", "cluster.secret", "secrets.bootstraptoken", "trustdinfo.token"):
            if field(path) is None:
                problems.append("%s is missing" % path)
        for path in ("secrets.bootstraptoken", "trustdinfo.token"):
            if field(path) is not None and not TOKEN_FORMAT.match(field(path)):
                problems.append("%s is not a token of the form [a-z0-9]{6}.[a-z0-9]{16}" % path)
        if field("cluster.secret") is not None and not _is_32_byte_base64(field("cluster.secret")):
            problems.append("cluster.secret is not 32 bytes in standard base64")
        secretbox, aescbc = field("secrets.secretboxencryptionsecret"), field("secrets.aescbcencryptionsecret")
        if bool(secretbox) == bool(aescbc):
            problems.append("exactly one of secrets.secretboxencryptionsecret and secrets.aescbcencryptionsecret must be set")

        cas = {}
        for name, _algorithm, _organization in CERTIFICATE_AUTHORITIES:
            try:
                crt = talos_pki.pem_from_b64(field("certs.%s.crt" % name), "certs.%s.crt" % name)
                key = talos_pki.pem_from_b64(field("certs.%s.key" % name), "certs.%s.key" % name)
                cas[name] = CertificateAuthority.from_pem(crt, key, "certs.%s" % name)
            except talos_pki.PKIError as error:
                problems.append(str(error))
        service_account_key = None
        try:
            service_account_key = talos_pki.pem_from_b64(field("certs.k8sserviceaccount.key"), "certs.k8sserviceaccount.key")
            talos_pki.load_private_key(service_account_key, "certs.k8sserviceaccount.key")
        except talos_pki.PKIError as error:
            problems.append(str(error))
        if problems:
            raise TalosConfigError("The secrets bundle %s is damaged or incomplete: %s." % (source, "; ".join(problems)))
        return cls(field("cluster.id"), field("cluster.secret"), field("secrets.bootstraptoken"), field("trustdinfo.token"),
                   cas, service_account_key, secretbox_secret=secretbox, aescbc_secret=aescbc)

    @classmethod
    def load(cls, path):
        """The bundle at ``path``, validated."""
        return cls.from_yaml(read_text_file(path, "The secrets bundle"), path)

    @classmethod
    def from_controlplane_config(cls, text, source, talos_version=None, now=None):
        """The bundle of an existing cluster, read from one of its control-plane configs.

        Reads both layouts (v1alpha1 fields, and the documents of the v1.14
        contract); parts the config does not carry are generated, as
        ``talosctl gen secrets --from-controlplane-config`` does.
        """
        documents = [document for document in parse_yaml_stream(text, "from_controlplane_config") if isinstance(document, dict)]
        v1alpha1 = next((document for document in documents if is_v1alpha1(document)), None)
        if v1alpha1 is None:
            raise TalosConfigError("from_controlplane_config %s holds no v1alpha1 document." % source)
        machine, cluster = v1alpha1.get("machine") or {}, v1alpha1.get("cluster") or {}
        if machine.get("type") not in ("controlplane", "init"):
            raise TalosConfigError("from_controlplane_config %s is a %s config: give a control-plane config, only it "
                                   "carries the cluster's CA keys." % (source, machine.get("type") or "typeless"))
        kinds = dict(((document.get("kind"), document.get("name")), document) for document in documents if "kind" in document)

        def doc(kind, name=None):
            return kinds.get((kind, name)) or {}

        cas = {}
        try:
            pairs = {
                "os": _b64_pair(machine.get("ca"), "machine.ca"),
                "etcd": _b64_pair((cluster.get("etcd") or {}).get("ca"), "cluster.etcd.ca"),
                "k8s": (_b64_pair(cluster.get("ca"), "cluster.ca")
                        or _pem_pair(doc("KubeAPIServerCAConfig").get("issuingCA"), "KubeAPIServerCAConfig.issuingCA")),
                "k8saggregator": (_b64_pair(cluster.get("aggregatorCA"), "cluster.aggregatorCA")
                                  or _pem_pair(doc("KubeAggregatorCAConfig").get("issuingCA"), "KubeAggregatorCAConfig.issuingCA")),
            }
            for name, pair in pairs.items():
                if pair:
                    cas[name] = CertificateAuthority.from_pem(pair[0], pair[1], pair[2])
            service_account_key = None
            if (cluster.get("serviceAccount") or {}).get("key"):
                service_account_key = talos_pki.pem_from_b64(cluster["serviceAccount"]["key"], "cluster.serviceAccount.key")
            elif (doc("KubeServiceAccountConfig").get("issuer") or {}).get("privateKey"):
                service_account_key = doc("KubeServiceAccountConfig")["issuer"]["privateKey"]
            if service_account_key:
                talos_pki.load_private_key(service_account_key, "the service account key")
        except talos_pki.PKIError as error:
            raise TalosConfigError("from_controlplane_config %s cannot be used: %s." % (source, error))

        token = cluster.get("token")
        identity = doc("DiscoveryIdentityConfig")
        bundle = cls(
            cluster_id=identity.get("clusterID") or cluster.get("id"),
            cluster_secret=identity.get("clusterSecret") or cluster.get("secret"),
            bootstrap_token=token if isinstance(token, str) and TOKEN_FORMAT.match(token) else None,
            trustd_token=machine.get("token"),
            cas=cas,
            service_account_key_pem=service_account_key,
            secretbox_secret=cluster.get("secretboxEncryptionSecret") or _first_secretbox_key(doc("KubeEtcdEncryptionConfig")),
            aescbc_secret=cluster.get("aescbcEncryptionSecret"),
        )
        if bundle.secretbox_secret and bundle.aescbc_secret:
            bundle.aescbc_secret = None
        bundle._populate(parse_contract(talos_version), now or talos_pki.now_utc())
        return bundle

    # Writing bundles.

    def to_document(self):
        secrets = {"bootstraptoken": self.bootstrap_token}
        if self.aescbc_secret:
            secrets["aescbcencryptionsecret"] = self.aescbc_secret
        if self.secretbox_secret:
            secrets["secretboxencryptionsecret"] = self.secretbox_secret
        certs = {}
        for name, _algorithm, _organization in CERTIFICATE_AUTHORITIES:
            certs[name] = {"crt": talos_pki.b64_pem(self.cas[name].crt_pem), "key": talos_pki.b64_pem(self.cas[name].key_pem)}
            if name == "k8saggregator":
                certs["k8sserviceaccount"] = {"key": talos_pki.b64_pem(self.service_account_key_pem)}
        return {
            "cluster": {"id": self.cluster_id, "secret": self.cluster_secret},
            "secrets": secrets,
            "trustdinfo": {"token": self.trustd_token},
            "certs": certs,
        }

    def to_yaml(self):
        """The bundle as ``talosctl gen secrets`` writes it."""
        return go_yaml.dump(self.to_document())

    def secret_values(self):
        """Every secret string of the bundle (PEM texts, their base64, tokens), to keep them out of output."""
        values = {self.cluster_secret, self.bootstrap_token, self.trustd_token, self.service_account_key_pem,
                  talos_pki.b64_pem(self.service_account_key_pem)}
        values.update(value for value in (self.secretbox_secret, self.aescbc_secret) if value)
        for ca in self.cas.values():
            values.update((ca.key_pem, talos_pki.b64_pem(ca.key_pem)))
        return values

    def facts(self):
        """What may be reported about the bundle: CA certificates' subjects, validity, fingerprints. No secret."""
        certificates = dict((name, talos_pki.certificate_facts(ca.certificate)) for name, ca in self.cas.items())
        return {
            "certificates": certificates,
            "service_account_key_algorithm": talos_pki.key_algorithm(
                talos_pki.load_private_key(self.service_account_key_pem, "certs.k8sserviceaccount.key")),
            "encryption": "secretbox" if self.secretbox_secret else "aescbc",
        }


def _is_32_byte_base64(value):
    try:
        return len(base64.b64decode(value, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _b64_pair(pair, field):
    """``(crt_pem, key_pem, field)`` from a v1alpha1 ``{crt, key}`` of base64 PEM, or None when it has no key."""
    if not isinstance(pair, dict) or not pair.get("crt") or not pair.get("key"):
        return None
    return (talos_pki.pem_from_b64(pair["crt"], "%s.crt" % field), talos_pki.pem_from_b64(pair["key"], "%s.key" % field), field)


def _pem_pair(pair, field):
    """``(crt_pem, key_pem, field)`` from a v1.14 document's ``{cert, key}`` of raw PEM, or None."""
    if not isinstance(pair, dict) or not pair.get("cert") or not pair.get("key"):
        return None
    return (pair["cert"], pair["key"], field)


def _first_secretbox_key(encryption_document):
    """The first secretbox key of the first provider of the block that encrypts ``secrets``."""
    for block in ((encryption_document.get("config") or {}).get("resources") or []):
        if not isinstance(block, dict) or "secrets" not in (block.get("resources") or []):
            continue
        providers = block.get("providers") or []
        if providers and isinstance(providers[0], dict):
            keys = (providers[0].get("secretbox") or {}).get("keys") or []
            if keys and isinstance(keys[0], dict):
                return keys[0].get("secret")
        return None
    return None
