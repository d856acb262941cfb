# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""talosconfig generation against the facts (config-generation.md section 2)."""

import base64
import datetime

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID

from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14")


def context_of(text, name="prod"):
    document = yaml.safe_load(text)
    assert document["context"] == name
    return document["contexts"][name]


def test_layout_and_client_certificate(bundle):
    text, issued, _crt = client_config.render_talosconfig(bundle, "prod", endpoints=["10.5.0.2"], now=NOW)
    assert issued
    assert text.startswith("context: prod\ncontexts:\n    prod:\n        endpoints:\n            - 10.5.0.2\n        ca: ")
    context = context_of(text)
    assert list(context) == ["endpoints", "ca", "crt", "key"]  # nodes left out when empty
    assert base64.b64decode(context["ca"]).decode() == bundle.os_ca.crt_pem
    key_pem = base64.b64decode(context["key"]).decode()
    assert key_pem.startswith("-----BEGIN ED25519 PRIVATE KEY-----\n")
    certificate = x509.load_pem_x509_certificate(base64.b64decode(context["crt"]))
    assert isinstance(certificate.public_key(), ed25519.Ed25519PublicKey)
    assert certificate.subject.rfc4514_string() == "O=os:admin"
    assert certificate.issuer == bundle.os_ca.certificate.subject
    assert certificate.not_valid_before_utc == NOW
    assert certificate.not_valid_after_utc - NOW == datetime.timedelta(hours=8760)
    assert [extension.oid._name for extension in certificate.extensions] == [
        "keyUsage", "extendedKeyUsage", "authorityKeyIdentifier"]
    usage = certificate.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    ski = bundle.os_ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    assert certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == ski
    assert talos_pki.signed_by(certificate, bundle.os_ca.certificate)
    assert talos_pki.public_key_matches(certificate, talos_pki.load_private_key(key_pem, "key"))


def test_certificate_is_kept_until_it_must_change(bundle):
    text, _issued, _crt = client_config.render_talosconfig(bundle, "prod", endpoints=["10.5.0.2"], now=NOW)
    existing = yaml.safe_load(text)
    again, issued, _crt = client_config.render_talosconfig(bundle, "prod", endpoints=["10.5.0.2"], existing=existing, now=NOW)
    assert (again, issued) == (text, False)
    moved, issued, _crt = client_config.render_talosconfig(
        bundle, "prod", endpoints=["10.5.0.3"], nodes=["10.5.0.4"], existing=existing, now=NOW)
    assert not issued and context_of(moved)["crt"] == context_of(text)["crt"]
    assert context_of(moved)["nodes"] == ["10.5.0.4"]
    _text, issued, _crt = client_config.render_talosconfig(bundle, "prod", roles=["os:reader"], existing=existing, now=NOW)
    assert issued
    late = NOW + datetime.timedelta(days=340)
    _text, issued, _crt = client_config.render_talosconfig(bundle, "prod", existing=existing, now=late)
    assert issued
    other = SecretsBundle.generate("v1.14")
    _text, issued, _crt = client_config.render_talosconfig(other, "prod", existing=existing, now=NOW)
    assert issued


def test_other_contexts_are_kept_and_roles_combine(bundle):
    first, _issued, _crt = client_config.render_talosconfig(bundle, "prod", now=NOW)
    text, _issued, crt = client_config.render_talosconfig(bundle, "backup", roles=["os:reader", "os:etcd:backup"],
                                                          existing=yaml.safe_load(first), now=NOW)
    document = yaml.safe_load(text)
    assert document["context"] == "backup" and list(document["contexts"]) == ["prod", "backup"]
    assert document["contexts"]["prod"]["endpoints"] == []
    assert sorted(client_config.certificate_facts(crt)["roles"]) == ["os:etcd:backup", "os:reader"]


@pytest.mark.parametrize("options,message", [
    ({"roles": ["os:root"]}, "not Talos client roles"),
    ({"ttl": "1 year"}, "ttl must be a duration"),
    ({"ttl": "24h"}, "must be longer than renew_before"),
])
def test_bad_options(bundle, options, message):
    with pytest.raises(TalosConfigError) as caught:
        client_config.render_talosconfig(bundle, "prod", **options)
    assert message in caught.value.message
