# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The secrets bundle against the facts of talosctl gen secrets (config-generation.md section 1)."""

import base64
import datetime
import re

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle, random_token

NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14", now=NOW)


@pytest.fixture(scope="module")
def document(bundle):
    return yaml.safe_load(bundle.to_yaml())


def _pem(document, name, part):
    return base64.b64decode(document["certs"][name][part], validate=True).decode()


def test_layout_and_key_order(bundle):
    text = bundle.to_yaml()
    top = [line.split(":")[0] for line in text.splitlines() if not line.startswith(" ")]
    assert top == ["cluster", "secrets", "trustdinfo", "certs"]
    certs = [line.strip().rstrip(":") for line in text.splitlines() if re.match(r"^    [a-z0-9]+:$", line)]
    assert certs == ["etcd", "k8s", "k8saggregator", "k8sserviceaccount", "os"]
    assert "\n    id: " in text and "\n        crt: " in text  # 4-space indentation
    assert "aescbcencryptionsecret" not in text


def test_scalar_secrets(document):
    for value in (document["cluster"]["id"], document["cluster"]["secret"], document["secrets"]["secretboxencryptionsecret"]):
        assert len(value) == 44
        assert len(base64.b64decode(value, validate=True)) == 32
    for token in (document["secrets"]["bootstraptoken"], document["trustdinfo"]["token"]):
        assert re.match(r"^[a-z0-9]{6}\.[a-z0-9]{16}$", token)


def test_tokens_cover_the_alphabet():
    characters = set("".join(random_token().replace(".", "") for _round in range(200)))
    assert characters == set("0123456789abcdefghijklmnopqrstuvwxyz")


@pytest.mark.parametrize("name,organization,curve", [("etcd", "etcd", True), ("k8s", "kubernetes", True),
                                                     ("k8saggregator", None, True), ("os", "talos", False)])
def test_certificate_authorities(document, name, organization, curve):
    pem = _pem(document, name, "crt")
    assert pem.startswith("-----BEGIN CERTIFICATE-----\n") and pem.endswith("-----END CERTIFICATE-----\n")
    certificate = x509.load_pem_x509_certificate(pem.encode())
    if organization:
        assert certificate.subject.rfc4514_string() == "O=%s" % organization
        attribute = certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0]
        assert attribute._type.name == "PrintableString"
    else:
        assert len(certificate.subject) == 0
    assert certificate.issuer == certificate.subject
    assert certificate.not_valid_before_utc == NOW
    assert certificate.not_valid_after_utc - certificate.not_valid_before_utc == datetime.timedelta(days=3650)
    assert 0 < certificate.serial_number < 2 ** 128
    extensions = [extension.oid._name for extension in certificate.extensions]
    assert extensions == ["keyUsage", "extendedKeyUsage", "basicConstraints", "subjectKeyIdentifier"]
    usage = certificate.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and usage.value.key_cert_sign and not usage.value.crl_sign
    assert list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length is None
    assert len(certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest) == 20

    key_pem = _pem(document, name, "key")
    if curve:
        assert key_pem.startswith("-----BEGIN EC PRIVATE KEY-----\n")
        assert isinstance(certificate.public_key(), ec.EllipticCurvePublicKey)
        assert certificate.public_key().curve.name == "secp256r1"
        assert certificate.signature_hash_algorithm.name == "sha256"
    else:
        lines = key_pem.splitlines()
        assert lines[0] == "-----BEGIN ED25519 PRIVATE KEY-----" and lines[-1] == "-----END ED25519 PRIVATE KEY-----"
        assert len(lines) == 3 and len(lines[1]) == 64
        assert isinstance(certificate.public_key(), ed25519.Ed25519PublicKey)
    assert talos_pki.public_key_matches(certificate, talos_pki.load_private_key(key_pem, name))


def test_service_account_key_is_rsa_4096(document):
    pem = _pem(document, "k8sserviceaccount", "key")
    assert pem.startswith("-----BEGIN RSA PRIVATE KEY-----\n")
    key = talos_pki.load_private_key(pem, "sa")
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 4096 and key.public_key().public_numbers().e == 65537


def test_round_trip_is_byte_identical(bundle, tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text(bundle.to_yaml())
    assert SecretsBundle.load(str(path)).to_yaml() == bundle.to_yaml()


def test_two_bundles_differ(bundle):
    other = SecretsBundle.generate("v1.9")
    assert other.cluster_id != bundle.cluster_id
    assert other.os_ca.key_pem != bundle.os_ca.key_pem


def test_facts_carry_no_secret(bundle):
    facts = repr(bundle.facts())
    for secret in bundle.secret_values():
        assert secret not in facts
    assert bundle.facts()["certificates"]["os"]["subject"] == "O=talos"
    assert bundle.facts()["service_account_key_algorithm"] == "rsa"


@pytest.mark.parametrize("damage,expected", [
    (lambda d: d["cluster"].pop("id"), "cluster.id is missing"),
    (lambda d: d["secrets"].update(bootstraptoken="NOT-A-TOKEN"), "secrets.bootstraptoken is not a token"),
    (lambda d: d["secrets"].update(aescbcencryptionsecret="x" * 44), "exactly one of"),
    (lambda d: d["certs"]["os"].update(key="******"), "certs.os.key is redacted"),
    (lambda d: d["certs"]["etcd"].update(crt="bm90IHBlbQ=="), "certs.etcd.crt is not base64-encoded PEM"),
    (lambda d: d["certs"]["k8s"].update(key=d["certs"]["etcd"]["key"]), "certs.k8s.key is not the private key of certs.k8s.crt"),
])
def test_damaged_bundles_fail_naming_the_field(document, damage, expected, tmp_path):
    import copy
    damaged = copy.deepcopy(document)
    damage(damaged)
    with pytest.raises(TalosConfigError) as caught:
        SecretsBundle.from_yaml(yaml.safe_dump(damaged), "secrets.yaml")
    assert expected in caught.value.message
    for value in (document["certs"]["os"]["key"], document["secrets"]["bootstraptoken"]):
        assert value not in caught.value.message
