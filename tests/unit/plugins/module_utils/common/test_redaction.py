# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction on configs full of secrets (v1alpha1 and the multi-document kinds), diffs and patch failures."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import difflib
import json

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from ansible_collections.talos_linux.talos.plugins.module_utils.config import machine_config as mc
from ansible_collections.talos_linux.talos.plugins.module_utils.common import redaction
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError


def _ec_key_pem():
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()


def _ed25519_key_pem():
    der = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return "-----BEGIN ED25519 PRIVATE KEY-----\n%s\n-----END ED25519 PRIVATE KEY-----\n" % base64.b64encode(der).decode()


def _b64(text):
    return base64.b64encode(text.encode()).decode()


class Secrets:
    """One value per secret field, each distinct so a leak names its field."""

    def __init__(self):
        self.values = {}

    def __call__(self, name, value=None):
        self.values[name] = value or "s3cr3t-%s-value" % name
        return self.values[name]


def v1alpha1_config(secret):
    """A legacy single-document controlplane config with every secret field set (contracts up to v1.13)."""
    return {
        "version": "v1alpha1",
        "machine": {
            "type": "controlplane",
            "token": secret("machine.token", "wxyz12.abcdefghijklmnop"),
            "ca": {"crt": _b64("PUBLIC CERTIFICATE"), "key": secret("machine.ca.key", _b64(_ed25519_key_pem()))},
            "network": {"hostname": "cp-1", "interfaces": [{"interface": "wg0", "wireguard": {
                "privateKey": secret("wireguard.privateKey", "aGVsbG8td2lyZWd1YXJkLXByaXZhdGUta2V5LXZhbHVl"),
                "peers": [{"endpoint": "192.0.2.1:51820", "allowedIPs": ["10.9.0.0/24"]}]}}]},
            "registries": {"config": {"registry.example.com": {"auth": {
                "username": secret("registries.auth.username", "robot-account"),
                "password": secret("registries.auth.password"),
                "auth": secret("registries.auth.auth", _b64("robot:pw-inside-auth")),
                "identityToken": secret("registries.auth.identityToken"),
            }}}},
            "systemDiskEncryption": {"ephemeral": {"provider": "luks2", "keys": [
                {"slot": 0, "static": {"passphrase": secret("disk.passphrase")}}]}},
            "env": {"https_proxy": secret("env.proxy", "http://proxyuser:proxy-pass-word@proxy.example.com:3128")},
            "features": {"apidCheckExtKeyUsage": True},
        },
        "cluster": {
            "id": "Y2x1c3Rlci1pZA==",
            "clusterName": "demo",
            "secret": secret("cluster.secret", "Y2x1c3Rlci1zZWNyZXQtdmFsdWUtMzItYnl0ZXMtbG9uZw=="),
            "token": secret("cluster.token", "abcdef.0123456789abcdef"),
            "secretboxEncryptionSecret": secret("cluster.secretbox"),
            "aescbcEncryptionSecret": secret("cluster.aescbc"),
            "ca": {"crt": _b64("K8S CERT"), "key": secret("cluster.ca.key", _b64(_ec_key_pem()))},
            "aggregatorCA": {"crt": _b64("AGG CERT"), "key": secret("cluster.aggregatorCA.key", _b64(_ec_key_pem()))},
            "serviceAccount": {"key": secret("cluster.serviceAccount.key", _b64(_ec_key_pem()))},
            "etcd": {"ca": {"crt": _b64("ETCD CERT"), "key": secret("cluster.etcd.ca.key", _b64(_ec_key_pem()))}},
            "extraManifestHeaders": {"Token": secret("headers.Token"),
                                     "X-Custom": secret("headers.custom", "Bearer abcdefghijklmnopqrstuvwxyz")},
        },
    }


def multi_document_config(secret):
    """A v1.14 controlplane config: the v1alpha1 identity document and the secret-bearing documents."""
    return [
        {"version": "v1alpha1", "machine": {"type": "controlplane", "token": secret("machine.token", "wxyz12.abcdefghijklmnop"),
                                            "ca": {"crt": _b64("PUBLIC"), "key": secret("machine.ca.key", _b64(_ed25519_key_pem()))}},
         "cluster": {"token": secret("cluster.token", "abcdef.0123456789abcdef"),
                     "etcd": {"ca": {"crt": _b64("ETCD"), "key": secret("cluster.etcd.ca.key", _b64(_ec_key_pem()))}}}},
        {"apiVersion": "v1alpha1", "kind": "DiscoveryIdentityConfig", "clusterID": "Y2x1c3Rlci1pZA==",
         "clusterSecret": secret("DiscoveryIdentityConfig.clusterSecret", "ZGlzY292ZXJ5LWNsdXN0ZXItc2VjcmV0LTMyLWJ5dGVz")},
        {"apiVersion": "v1alpha1", "kind": "KubeAPIServerCAConfig",
         "issuingCA": {"cert": "-----BEGIN CERTIFICATE-----\nMIIBpublic\n-----END CERTIFICATE-----\n",
                       "key": secret("KubeAPIServerCAConfig.key", _ec_key_pem())}},
        {"apiVersion": "v1alpha1", "kind": "KubeAggregatorCAConfig",
         "issuingCA": {"cert": "-----BEGIN CERTIFICATE-----\nMIIBagg\n-----END CERTIFICATE-----\n",
                       "key": secret("KubeAggregatorCAConfig.key", _ec_key_pem())}},
        {"apiVersion": "v1alpha1", "kind": "KubeEtcdEncryptionConfig", "config": {"resources": [{
            "resources": ["secrets"],
            "providers": [{"secretbox": {"keys": [{"name": "key2", "secret": secret("etcd-encryption.secretbox")}]}},
                          {"aescbc": {"keys": [{"name": "key1", "secret": secret("etcd-encryption.aescbc")}]}},
                          {"identity": {}}]}]}},
        {"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig",
         "issuer": {"privateKey": secret("KubeServiceAccountConfig.privateKey", _ec_key_pem()),
                    "issuerURL": "https://cp.example.com:6443"}},
        {"apiVersion": "v1alpha1", "kind": "RegistryAuthConfig", "name": "registry.example.com",
         "username": "robot", "password": secret("RegistryAuthConfig.password"),
         "auth": secret("RegistryAuthConfig.auth", _b64("robot:auth-field")),
         "identityToken": secret("RegistryAuthConfig.identityToken"),
         "registryToken": secret("RegistryAuthConfig.registryToken")},
        {"apiVersion": "v1alpha1", "kind": "WireguardConfig", "name": "wg1",
         "privateKey": secret("WireguardConfig.privateKey", "d2lyZWd1YXJkLWRvY3VtZW50LXByaXZhdGUta2V5")},
        {"apiVersion": "v1alpha1", "kind": "UserVolumeConfig", "name": "data",
         "encryption": {"provider": "luks2", "keys": [{"slot": 0, "static": {"passphrase": secret("UserVolume.passphrase")}}]}},
        {"apiVersion": "v1alpha1", "kind": "KubeExternalManifestConfig", "name": "cni", "url": "https://example.com/cni.yaml",
         "headers": {"Authorization": secret("KubeExternalManifestConfig.Authorization", "Basic cm9ib3Q6bWFuaWZlc3Q=")}},
        {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"},
    ]


LAYOUTS = {
    "v1alpha1": lambda secret: [v1alpha1_config(secret)],
    "multi-document": multi_document_config,
}

PUBLIC = ["cp-1", "Y2x1c3Rlci1pZA==", _b64("PUBLIC CERTIFICATE"), "MIIBpublic", "https://cp.example.com:6443", "192.0.2.1:51820",
          "registry.example.com", "stable"]


def _leaks(text, secret):
    """The secret fields whose value, or a line of it, appears in ``text``."""
    leaked = []
    for name, value in secret.values.items():
        pieces = [value] + [line for line in value.splitlines() if len(line) > 20 and not line.startswith("-----")]
        if any(piece in text for piece in pieces):
            leaked.append(name)
    return leaked


@pytest.fixture(params=sorted(LAYOUTS))
def config(request):
    secret = Secrets()
    documents = LAYOUTS[request.param](secret)
    return documents, secret


class TestEveryField:
    def test_redact_replaces_every_secret_and_keeps_public_fields(self, config):
        documents, secret = config
        text = json.dumps(redaction.redact(documents))
        assert _leaks(text, secret) == []
        for public in PUBLIC:
            if public in json.dumps(documents):
                assert public in text

    def test_secret_values_finds_every_secret(self, config):
        documents, secret = config
        assert set(secret.values.values()) <= redaction.secret_values(documents)
        assert not set(PUBLIC) & redaction.secret_values(documents)

    def test_yaml_text_is_redacted_without_knowing_the_values(self, config):
        documents, secret = config
        text = yaml.safe_dump_all(documents, default_flow_style=False)
        assert _leaks(redaction.redact_text(text), secret) == []

    def test_go_style_text_with_literal_blocks_is_redacted(self, config):
        documents, secret = config
        text = mc.dump_documents(documents)  # PEM material as literal blocks, as Talos writes it
        assert "|" in text or len(documents) == 1
        redacted = redaction.redact_text(text)
        assert _leaks(redacted, secret) == []
        assert "hostname: cp-1" in redacted or len(documents) > 1

    def test_machine_config_redacted_text(self, config):
        documents, secret = config
        loaded = mc.load_config(config=mc.dump_documents(documents))
        assert _leaks(loaded.redacted_text(), secret) == []


class TestDiffs:
    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    def test_node_dry_run_diff_of_rotated_secrets(self, layout):
        old, new = Secrets(), Secrets()
        before = mc.dump_documents(LAYOUTS[layout](old))
        after = mc.dump_documents(LAYOUTS[layout](new))
        diff = "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), "a", "b", lineterm="", n=1))
        details = "Applied configuration with a reboot\n%s\n%s" % (mc.DRY_RUN_DIFF_MARKER, diff)
        redacted = mc.redact_mode_details(details, known_secrets=redaction.secret_values(LAYOUTS[layout](new)))
        # The old values are only known as text: redaction must not depend on knowing them.
        assert _leaks(redacted, old) == [] and _leaks(redacted, new) == []
        assert redacted.startswith("Applied configuration with a reboot\n")

    def test_hunk_starting_inside_a_pem_block(self):
        key = _ec_key_pem()
        body = key.splitlines()[1:-1]
        diff = "--- a\n+++ b\n@@ -5,3 +5,3 @@\n %s\n-%s\n+%s\n" % ("    " + body[0], "    " + body[1], "    " + body[1][::-1])
        redacted = redaction.redact_text(diff, diff=True)
        assert body[0] not in redacted and body[1] not in redacted and body[1][::-1] not in redacted

    def test_registry_auth_mapping_in_text(self):
        text = "registries:\n  config:\n    r.example.com:\n      auth:\n        username: robot\n        auth: cm9ib3Q6cHc=\n    tls: {}\n"
        redacted = redaction.redact_text(text)
        assert "robot" not in redacted and "cm9ib3Q6cHc=" not in redacted
        assert "    tls: {}" in redacted

    def test_list_under_a_secret_key_at_the_same_indent(self):
        text = "keys:\n- name: key2\n  secret: abc\nother: value\n"
        redacted = redaction.redact_text(text)
        assert "abc" not in redacted and "other: value" in redacted


class TestShapes:
    @pytest.mark.parametrize("value", [
        _ec_key_pem(), _b64(_ec_key_pem()), _ed25519_key_pem(), "Bearer abcdefghijklmnop", "Basic cm9ib3Q6cGFzc3dvcmQ=",
        "https://user:pass-word@example.com/path",
    ])
    def test_secret_by_shape_anywhere(self, value):
        assert redaction.redact({"machine": {"files": [{"content": value}]}}) == {"machine": {"files": [{"content": redaction.REDACTED}]}}

    @pytest.mark.parametrize("value", ["Basic setup", "https://example.com/path", "-----BEGIN CERTIFICATE-----\nMIIB\n", "v1alpha1"])
    def test_public_shapes_stay(self, value):
        assert redaction.redact({"note": value}) == {"note": value}


class TestPatchFailures:
    """A failing JSON patch names the operation and the path, never a value of the document."""

    @pytest.mark.parametrize("operations, expected", [
        ([{"op": "remove", "path": "/machine/missing"}], r"operation 1 \(remove /machine/missing\) cannot be applied"),
        ([{"op": "replace", "path": "/cluster/nothing/here", "value": 1}], r"operation 1 \(replace /cluster/nothing/here\)"),
        ([{"op": "add", "path": "/machine/network/interfaces/7", "value": {}}], r"list index is out of range"),
        ([{"op": "add", "path": "/machine/network/interfaces/x", "value": {}}], r"operation 1 \(add /machine/network/interfaces/x\)"),
        ([{"op": "test", "path": "/machine/token", "value": "guess"}], r"is not the one the test expects"),
        ([{"op": "move", "from": "/machine/none", "path": "/machine/x"}], r"\(move /machine/none to /machine/x\)"),
        ([{"op": "frobnicate", "path": "/machine"}], r"operation 1 has no valid op: a JSON patch operation is one of add"),
        ([{"op": "add", "path": "/machine/x"}], r"operation 1 \(add /machine/x\) needs a value"),
        ([{"op": "add", "path": "machine", "value": 1}], r"operation 1 \(add\) needs path: a JSON pointer"),
        ([{"op": "copy", "path": "/machine/y", "value": 1}], r"operation 1 \(copy\) needs from"),
        ([{"op": "add", "path": "/machine/a", "value": 1}, {"op": "remove", "path": "/machine/b"}], r"operation 2 \(remove /machine/b\)"),
    ])
    def test_message_holds_no_secret(self, operations, expected):
        secret = Secrets()
        text = mc.dump_documents(LAYOUTS["v1alpha1"](secret))
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] .*" + expected) as failure:
            mc.load_config(config=text, config_patches=[operations])
        assert _leaks(str(failure.value), secret) == []
        assert "{" not in str(failure.value)

    def test_refusal_on_a_multi_document_config_holds_no_secret(self):
        secret = Secrets()
        text = mc.dump_documents(LAYOUTS["multi-document"](secret))
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] is a JSON patch \(RFC 6902\)") as failure:
            mc.load_config(config=text, config_patches=[[{"op": "test", "path": "/machine/token", "value": "guess"}]])
        assert _leaks(str(failure.value), secret) == []
