# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of the emulator's PKI and config generator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import ipaddress
import os
import socket
import ssl
import tempfile
import threading

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from talos_emulator import configgen, pki


def _cert(pem):
    return x509.load_pem_x509_certificate(pem)


def _eku(cert):
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _verify_signed_by(cert, ca):
    cert.verify_directly_issued_by(ca.cert)


@pytest.fixture(scope="module")
def os_ca():
    return pki.CertificateAuthority.generate()


@pytest.fixture(scope="module")
def bundle():
    return configgen.SecretsBundle.generate()


# --- keys -------------------------------------------------------------------

def test_ed25519_key_uses_talos_label_and_round_trips():
    key = ed25519.Ed25519PrivateKey.generate()
    pem = pki.encode_private_key(key)
    assert pem.startswith(b"-----BEGIN ED25519 PRIVATE KEY-----\n")
    assert pem.rstrip().endswith(b"-----END ED25519 PRIVATE KEY-----")
    standard = pki.to_standard_pem(pem)
    assert standard.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    for variant in (pem, standard):
        loaded = pki.load_private_key(variant)
        assert isinstance(loaded, ed25519.Ed25519PrivateKey)
        assert loaded.private_bytes_raw() == key.private_bytes_raw()


def test_ecdsa_key_uses_sec1_label_and_round_trips():
    key = ec.generate_private_key(ec.SECP256R1())
    pem = pki.encode_private_key(key)
    assert pem.startswith(b"-----BEGIN EC PRIVATE KEY-----\n")
    assert pki.to_standard_pem(pem) == pem
    assert pki.load_private_key(pem).private_numbers() == key.private_numbers()


# --- certificate authority and issued certificates ---------------------------

def test_generated_ca_is_self_signed_ed25519(os_ca):
    assert isinstance(os_ca.key, ed25519.Ed25519PrivateKey)
    assert os_ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert os_ca.cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "talos"
    _verify_signed_by(os_ca.cert, os_ca)
    assert os_ca.key_pem.startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")
    again = pki.CertificateAuthority.from_pem(os_ca.crt_pem, os_ca.key_pem)
    assert again.cert == os_ca.cert
    assert again.key.private_bytes_raw() == os_ca.key.private_bytes_raw()


def test_ecdsa_ca_issues_ecdsa_keys():
    ca = pki.CertificateAuthority.generate(common_name="etcd", algorithm="ecdsa")
    assert isinstance(ca.key.curve, ec.SECP256R1)
    crt_pem, key_pem = ca.issue_server("etcd", ip_addresses=["10.0.0.1"])
    assert key_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    assert isinstance(_cert(crt_pem).public_key(), ec.EllipticCurvePublicKey)
    _verify_signed_by(_cert(crt_pem), ca)


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown key algorithm"):
        pki.CertificateAuthority.generate(algorithm="rsa")


def test_server_certificate_sans_and_eku(os_ca):
    crt_pem, key_pem = os_ca.issue_server("cp-1.example", ip_addresses=["127.0.0.5", "127.0.0.1", "127.0.0.5"], dns_names=["cp-1"])
    cert = _cert(crt_pem)
    _verify_signed_by(cert, os_ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.5"), ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["cp-1"]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "cp-1.example"
    assert _eku(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert isinstance(pki.load_private_key(key_pem), ed25519.Ed25519PrivateKey)
    assert key_pem.startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")


def test_client_certificate_roles_and_eku(os_ca):
    crt_pem, key_pem = os_ca.issue_client(["os:operator", "os:etcd:backup"], common_name="ops")
    cert = _cert(crt_pem)
    _verify_signed_by(cert, os_ca)
    assert pki.certificate_roles(crt_pem) == ["os:operator", "os:etcd:backup"]
    assert _eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key_usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert key_usage.digital_signature and not key_usage.key_cert_sign
    assert pki.client_certificate_has_client_auth(crt_pem) is True
    assert isinstance(pki.load_private_key(key_pem), ed25519.Ed25519PrivateKey)


def test_client_certificate_without_client_auth(os_ca):
    crt_pem, dummy_key = os_ca.issue_client(["os:admin"], client_auth=False)
    assert _eku(_cert(crt_pem)) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert pki.client_certificate_has_client_auth(crt_pem) is False
    assert pki.client_certificate_has_client_auth(_cert(crt_pem).public_bytes(Encoding.DER)) is False


def test_maintenance_certificate():
    ca_pem, crt_pem, key_pem = pki.maintenance_certificate(["127.0.0.9"], dns_names=["talos-abc"])
    cert = _cert(crt_pem)
    ca_cert = _cert(ca_pem)
    cert.verify_directly_issued_by(ca_cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "maintenance-service.talos.dev"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(ip) for ip in ("127.0.0.9", "127.0.0.1", "::1")]
    assert sans.get_values_for_type(x509.DNSName) == ["talos-abc"]
    assert _eku(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert isinstance(ca_cert.public_key(), ed25519.Ed25519PublicKey)
    assert isinstance(pki.load_private_key(key_pem), ed25519.Ed25519PrivateKey)
    other_ca_pem = pki.maintenance_certificate(["127.0.0.9"])[0]
    assert other_ca_pem != ca_pem


def test_spki_fingerprint_depends_on_the_key_only(os_ca):
    crt_pem = os_ca.issue_server("node", ip_addresses=["127.0.0.2"])[0]
    fingerprint = pki.spki_fingerprint(crt_pem)
    # Base64 of the SHA-256, as Talos prints it and talosctl --cert-fingerprint takes it.
    assert len(base64.b64decode(fingerprint)) == 32
    assert fingerprint == pki.spki_fingerprint(crt_pem)
    assert fingerprint != pki.spki_fingerprint(os_ca.crt_pem)


# --- a real TLS 1.3 handshake with these certificates --------------------------

def _write(directory, name, data):
    path = os.path.join(directory, name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _context(purpose, directory, crt_pem, key_pem, ca_pem):
    if purpose == "server":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cadata=ca_pem.decode())
    if crt_pem:
        context.load_cert_chain(_write(directory, purpose + ".crt", crt_pem), _write(directory, purpose + ".key", pki.to_standard_pem(key_pem)))
    return context


def _handshake(server_ca, server_pair, client_ca_pem, client_pair, server_hostname="127.0.0.1"):
    """Run one TLS exchange on loopback; return (server outcome, client outcome).

    An outcome is ``("ok", detail)`` or ``("error", exception)``; the server's
    detail is the peer certificate (DER), the client's the bytes it read.
    """
    with tempfile.TemporaryDirectory() as directory:
        server_context = _context("server", directory, server_pair[0], server_pair[1], server_ca.crt_pem)
        client_context = _context("client", directory, client_pair[0], client_pair[1], client_ca_pem)
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(10)
        outcome = {}

        def serve():
            try:
                raw = listener.accept()[0]
                raw.settimeout(10)
                with server_context.wrap_socket(raw, server_side=True) as tls:
                    outcome["server"] = ("ok", tls.getpeercert(binary_form=True), tls.version())
                    tls.sendall(b"hello")
            except (ssl.SSLError, OSError) as exc:
                outcome["server"] = ("error", exc, None)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=10) as raw:
                with client_context.wrap_socket(raw, server_hostname=server_hostname) as tls:
                    # In TLS 1.3 the server judges the client certificate after the
                    # client's handshake finished: the refusal shows on the first read.
                    data = tls.recv(5)
                    outcome["client"] = ("ok", data) if data else ("error", ConnectionError("closed"))
        except (ssl.SSLError, OSError) as exc:
            outcome["client"] = ("error", exc)
        finally:
            thread.join(10)
            listener.close()
        return outcome["server"], outcome["client"]


def test_mutual_tls_with_ed25519_certificates(os_ca):
    server_pair = os_ca.issue_server("cp-1", ip_addresses=["127.0.0.1"])
    client_pair = os_ca.issue_client(["os:admin"])
    server, client = _handshake(os_ca, server_pair, os_ca.crt_pem, client_pair)
    assert client == ("ok", b"hello")
    assert server[0] == "ok" and server[2] == "TLSv1.3"
    peer = x509.load_der_x509_certificate(server[1])
    assert pki.certificate_roles(peer.public_bytes(Encoding.PEM)) == ["os:admin"]
    assert pki.client_certificate_has_client_auth(server[1]) is True


def test_hostname_check_uses_the_ip_san(os_ca):
    server_pair = os_ca.issue_server("cp-1", ip_addresses=["127.0.0.5"])
    client_pair = os_ca.issue_client(["os:admin"])
    client = _handshake(os_ca, server_pair, os_ca.crt_pem, client_pair)[1]
    assert client[0] == "error"
    assert isinstance(client[1], ssl.SSLCertVerificationError)
    assert "IP address mismatch" in client[1].verify_message


def test_client_certificate_from_another_ca_fails(os_ca):
    other = pki.CertificateAuthority.generate()
    server_pair = os_ca.issue_server("cp-1", ip_addresses=["127.0.0.1"])
    server, client = _handshake(os_ca, server_pair, os_ca.crt_pem, other.issue_client(["os:admin"]))
    assert server[0] == "error" and "certificate verify failed" in str(server[1])
    assert client[0] == "error"


def test_missing_client_certificate_fails(os_ca):
    server_pair = os_ca.issue_server("cp-1", ip_addresses=["127.0.0.1"])
    server, client = _handshake(os_ca, server_pair, os_ca.crt_pem, (None, None))
    assert server[0] == "error" and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in str(server[1])
    assert client[0] == "error"


def test_client_certificate_without_client_auth_eku_fails(os_ca):
    # OpenSSL's server applies its TLS-client purpose check, which already refuses a leaf
    # whose EKU lacks clientAuth, as Talos does.
    server_pair = os_ca.issue_server("cp-1", ip_addresses=["127.0.0.1"])
    server, client = _handshake(os_ca, server_pair, os_ca.crt_pem, os_ca.issue_client(["os:admin"], client_auth=False))
    assert server[0] == "error" and "unsuitable certificate purpose" in str(server[1])
    assert client[0] == "error"


# --- secrets bundle -------------------------------------------------------------

def test_secrets_bundle_shapes(bundle):
    assert isinstance(bundle.os_ca.key, ed25519.Ed25519PrivateKey)
    for ca in (bundle.etcd_ca, bundle.k8s_ca, bundle.k8s_aggregator_ca):
        assert isinstance(ca.key, ec.EllipticCurvePrivateKey)
    assert isinstance(pki.load_private_key(bundle.service_account_key_pem), ec.EllipticCurvePrivateKey)
    for token in (bundle.bootstrap_token, bundle.machine_token):
        prefix, separator, suffix = token.partition(".")
        assert separator == "."
        assert len(prefix) == 6 and len(suffix) == 16
        assert (prefix + suffix).isalnum() and (prefix + suffix).lower() == prefix + suffix
    assert bundle.bootstrap_token != bundle.machine_token
    assert len(base64.b64decode(bundle.secretbox_secret)) == 32
    assert len(base64.b64decode(bundle.cluster_id)) == 32
    assert bundle.cluster_id != configgen.SecretsBundle.generate().cluster_id


def test_secrets_bundle_yaml_round_trip(bundle):
    text = bundle.to_yaml()
    document = yaml.safe_load(text)
    assert set(document) == {"cluster", "secrets", "trustdinfo", "certs"}
    assert set(document["certs"]) == {"etcd", "k8s", "k8saggregator", "k8sserviceaccount", "os"}
    assert base64.b64decode(document["certs"]["os"]["key"]).startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")
    again = configgen.SecretsBundle.from_yaml(text)
    assert again.os_ca.cert == bundle.os_ca.cert
    assert again.etcd_ca.crt_pem == bundle.etcd_ca.crt_pem
    assert again.service_account_key_pem == bundle.service_account_key_pem
    assert (again.cluster_id, again.cluster_secret, again.bootstrap_token, again.machine_token, again.secretbox_secret) == (
        bundle.cluster_id, bundle.cluster_secret, bundle.bootstrap_token, bundle.machine_token, bundle.secretbox_secret)
    assert again.to_yaml() == text


# --- machine configs ----------------------------------------------------------

def _generate(bundle, machine_type, **kwargs):
    return configgen.generate_machine_config(bundle, machine_type, "demo", "https://127.0.0.2:6443", **kwargs)


def test_controlplane_config(bundle):
    text = _generate(bundle, "controlplane", hostname="cp-1", cert_sans=["127.0.0.2", "cp.example"])
    config = yaml.safe_load(text)
    assert (config["version"], config["debug"], config["persist"]) == ("v1alpha1", False, True)
    machine, cluster = config["machine"], config["cluster"]
    assert machine["type"] == "controlplane"
    assert machine["token"] == bundle.machine_token
    assert base64.b64decode(machine["ca"]["crt"]) == bundle.os_ca.crt_pem
    assert base64.b64decode(machine["ca"]["key"]) == bundle.os_ca.key_pem
    assert base64.b64decode(machine["ca"]["key"]).startswith(b"-----BEGIN ED25519 PRIVATE KEY-----")
    assert machine["certSANs"] == ["127.0.0.2", "cp.example"]
    assert machine["kubelet"]["image"] == "ghcr.io/siderolabs/kubelet:" + configgen.DEFAULT_KUBERNETES_VERSION
    assert machine["network"] == {"hostname": "cp-1"}
    assert machine["install"] == {"disk": "/dev/sda", "image": "ghcr.io/siderolabs/installer:v1.14.0", "wipe": False}
    assert machine["features"]["rbac"] is True
    assert (cluster["id"], cluster["secret"], cluster["token"]) == (bundle.cluster_id, bundle.cluster_secret, bundle.bootstrap_token)
    assert cluster["controlPlane"] == {"endpoint": "https://127.0.0.2:6443"}
    assert cluster["clusterName"] == "demo"
    assert cluster["network"] == {"dnsDomain": "cluster.local", "podSubnets": ["10.244.0.0/16"], "serviceSubnets": ["10.96.0.0/12"]}
    assert cluster["secretboxEncryptionSecret"] == bundle.secretbox_secret
    assert base64.b64decode(cluster["ca"]["key"]) == bundle.k8s_ca.key_pem
    assert base64.b64decode(cluster["etcd"]["ca"]["crt"]) == bundle.etcd_ca.crt_pem
    assert base64.b64decode(cluster["aggregatorCA"]["crt"]) == bundle.k8s_aggregator_ca.crt_pem
    assert base64.b64decode(cluster["serviceAccount"]["key"]) == bundle.service_account_key_pem
    assert cluster["apiServer"]["certSANs"] == ["127.0.0.2"]
    assert {"controllerManager", "scheduler", "discovery"} <= set(cluster)
    assert configgen.parse_machine_config(text.encode()) == config
    assert configgen.machine_os_ca(config) == (bundle.os_ca.crt_pem, bundle.os_ca.key_pem)
    assert configgen.load_machine_os_ca(config).cert == bundle.os_ca.cert


def test_worker_config(bundle):
    text = _generate(bundle, "worker", talos_version="v1.12.0", install_disk="/dev/vda")
    config = yaml.safe_load(text)
    machine, cluster = config["machine"], config["cluster"]
    assert machine["type"] == "worker"
    assert machine["ca"] == {"crt": base64.b64encode(bundle.os_ca.crt_pem).decode(), "key": ""}
    assert machine["network"] == {}
    assert machine["install"]["image"] == "ghcr.io/siderolabs/installer:v1.12.0"
    assert machine["install"]["disk"] == "/dev/vda"
    assert cluster["ca"]["key"] == ""
    assert base64.b64decode(cluster["ca"]["crt"]) == bundle.k8s_ca.crt_pem
    for controlplane_only in ("secretboxEncryptionSecret", "etcd", "aggregatorCA", "serviceAccount", "apiServer"):
        assert controlplane_only not in cluster
    assert configgen.parse_machine_config(text.encode()) == config
    assert configgen.machine_os_ca(config) == (bundle.os_ca.crt_pem, None)
    with pytest.raises(ValueError, match="no OS CA key"):
        configgen.load_machine_os_ca(config)


def test_unknown_machine_type_for_generation_is_refused(bundle):
    with pytest.raises(ValueError, match="machine_type"):
        _generate(bundle, "init")


# --- parse_machine_config errors ------------------------------------------------

def _refusal(data):
    with pytest.raises(configgen.ConfigError) as caught:
        configgen.parse_machine_config(data)
    return caught.value


def test_parse_accepts_multiple_documents(bundle):
    # The generator writes the v1.11 contract (features.stableHostname), which a HostnameConfig may not join.
    text = _generate(bundle, "worker").replace("    stableHostname: true\n", "")
    extra = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: worker-1\n"
    config = configgen.parse_machine_config(("%s---\n%s" % (extra, text)).encode())
    assert config["machine"]["type"] == "worker"
    assert configgen.configured_hostname(("%s---\n%s" % (extra, text)).encode()) == "worker-1"


def test_parse_refuses_unparseable_yaml():
    error = _refusal(b"version: v1alpha1\nmachine: [unclosed\n")
    assert (error.code, error.kind) == ("InvalidArgument", "parse")
    assert error.message.startswith("yaml: line ")


def test_parse_refuses_config_without_v1alpha1_document():
    error = _refusal(b"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: worker-1\n")
    assert (error.code, error.kind) == ("InvalidArgument", "no_v1alpha1")
    assert error.message == (
        "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?"
    )
    assert _refusal(b"").message == error.message


def test_parse_refuses_unknown_machine_type(bundle):
    config = yaml.safe_load(_generate(bundle, "worker"))
    config["machine"]["type"] = "gateway"
    error = _refusal(yaml.safe_dump(config).encode())
    assert (error.code, error.kind) == ("InvalidArgument", "validation")
    assert error.message == (
        '1 error occurred:\n\t* v1alpha1.Config: 1 error occurred:\n\t* unknown machine type "gateway"\n\n\n\n'
    )


def test_parse_refuses_ca_key_mismatches(bundle):
    controlplane = yaml.safe_load(_generate(bundle, "controlplane"))
    controlplane["machine"]["ca"]["key"] = ""
    error = _refusal(yaml.safe_dump(controlplane).encode())
    assert "issuing CA key is required for controlplane nodes (.machine.ca.key)" in error.message

    worker = yaml.safe_load(_generate(bundle, "worker"))
    worker["machine"]["ca"]["key"] = controlplane["cluster"]["ca"]["key"]
    worker["cluster"]["ca"]["key"] = controlplane["cluster"]["ca"]["key"]
    error = _refusal(yaml.safe_dump(worker).encode())
    assert error.message.startswith("1 error occurred:\n\t* v1alpha1.Config: 2 errors occurred:\n")
    assert "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)" in error.message
    assert "issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)" in error.message


# --- talosconfig ------------------------------------------------------------------

def test_talosconfig(bundle):
    text = configgen.generate_talosconfig(bundle, "demo", ["127.0.0.2"], nodes=["127.0.0.3"], roles=("os:reader",))
    document = yaml.safe_load(text)
    assert document["context"] == "demo"
    context = document["contexts"]["demo"]
    assert context["endpoints"] == ["127.0.0.2"]
    assert context["nodes"] == ["127.0.0.3"]
    assert base64.b64decode(context["ca"]) == bundle.os_ca.crt_pem
    crt_pem = base64.b64decode(context["crt"])
    key_pem = base64.b64decode(context["key"])
    _verify_signed_by(_cert(crt_pem), bundle.os_ca)
    assert pki.certificate_roles(crt_pem) == ["os:reader"]
    assert pki.client_certificate_has_client_auth(crt_pem)
    assert key_pem.startswith(b"-----BEGIN ED25519 PRIVATE KEY-----\n")
    key = pki.load_private_key(key_pem)
    assert key.public_key().public_bytes_raw() == _cert(crt_pem).public_key().public_bytes_raw()
    default = yaml.safe_load(configgen.generate_talosconfig(bundle, "admin", ["127.0.0.2"]))
    assert pki.certificate_roles(base64.b64decode(default["contexts"]["admin"]["crt"])) == ["os:admin"]
    assert default["contexts"]["admin"]["nodes"] == []
