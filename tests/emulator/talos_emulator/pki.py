# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Certificates and keys shaped like the ones Talos makes.

The OS CA is Ed25519 and certificates issued by a CA carry a key of the CA's
type, as Talos does. Talos writes Ed25519 private keys as PKCS#8 under the
non-standard PEM label ``ED25519 PRIVATE KEY`` and ECDSA keys as SEC1 under
``EC PRIVATE KEY``; stdlib ``ssl`` only knows the standard label, so
``to_standard_pem`` relabels before a key is handed to it.

Client certificate EKU: stdlib ``ssl`` on the server side (OpenSSL's TLS
client purpose check) already refuses a client certificate whose EKU lacks
clientAuth, with "unsuitable certificate purpose". Talos is stricter: every
non-CA certificate in the chain must have EKU exactly ``[clientAuth]``, so a
certificate with ``[clientAuth, serverAuth]`` passes OpenSSL but not Talos. A
server imitating Talos checks ``client_certificate_has_client_auth`` on the
peer certificate after the handshake and drops the connection when it is False.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import hashlib
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TALOS_ED25519_KEY_LABEL = "ED25519 PRIVATE KEY"
MAINTENANCE_COMMON_NAME = "maintenance-service.talos.dev"

_STANDARD_PKCS8_LABEL = "PRIVATE KEY"
_CLOCK_SKEW = datetime.timedelta(minutes=5)


def _relabel(pem, old_label, new_label):
    return pem.replace(
        b"-----BEGIN " + old_label.encode() + b"-----", b"-----BEGIN " + new_label.encode() + b"-----"
    ).replace(
        b"-----END " + old_label.encode() + b"-----", b"-----END " + new_label.encode() + b"-----"
    )


def encode_private_key(key):
    """Serialise a private key to PEM the way Talos writes it."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        return _relabel(pem, _STANDARD_PKCS8_LABEL, TALOS_ED25519_KEY_LABEL)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    raise TypeError("unsupported private key type %s" % type(key).__name__)


def to_standard_pem(pem):
    """Relabel a Talos Ed25519 key PEM so that ssl and cryptography accept it."""
    return _relabel(pem, TALOS_ED25519_KEY_LABEL, _STANDARD_PKCS8_LABEL)


def load_private_key(pem):
    """Load a private key written either with Talos's label or a standard one."""
    return serialization.load_pem_private_key(to_standard_pem(pem), password=None)


def _new_key_like(key):
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP256R1())


def _generate_key(algorithm):
    if algorithm == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if algorithm == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    raise ValueError("unknown key algorithm %r, expected 'ed25519' or 'ecdsa'" % algorithm)


def _signature_hash(signing_key):
    # Ed25519 signs the message itself; ECDSA needs a digest.
    return None if isinstance(signing_key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _validity(builder, days):
    now = datetime.datetime.now(datetime.timezone.utc)
    return builder.not_valid_before(now - _CLOCK_SKEW).not_valid_after(now + datetime.timedelta(days=days))


def _serial_number():
    # Positive 127-bit serial: unique enough and always a valid DER INTEGER for X.509.
    return int.from_bytes(os.urandom(16), "big") >> 1


def _certificate_pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


class CertificateAuthority:
    """A self-signed CA that issues Talos API server and client certificates."""

    def __init__(self, cert, key):
        self.cert = cert
        self.key = key
        self.crt_pem = _certificate_pem(cert)
        self.key_pem = encode_private_key(key)

    @classmethod
    def generate(cls, common_name="talos", organization="talos", algorithm="ed25519", days=3650):
        key = _generate_key(algorithm)
        name = x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, key_cert_sign=True, crl_sign=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        )
        cert = _validity(builder, days).sign(key, _signature_hash(key))
        return cls(cert, key)

    @classmethod
    def from_pem(cls, crt_pem, key_pem):
        return cls(x509.load_pem_x509_certificate(crt_pem), load_private_key(key_pem))

    def _authority_key_identifier(self):
        # Go copies the CA's SubjectKeyIdentifier, which Talos CAs fill with random bytes:
        # a digest of the CA's key would name no issuer a verifier can find.
        try:
            ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
            return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
        except x509.ExtensionNotFound:
            return x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key())

    def _issue(self, subject, key_usage, extended_key_usage, days, sans=None):
        key = _new_key_like(self.key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(_serial_number())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(key_usage, critical=True)
            .add_extension(x509.ExtendedKeyUsage(extended_key_usage), critical=False)
            .add_extension(self._authority_key_identifier(), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = _validity(builder, days).sign(self.key, _signature_hash(self.key))
        return _certificate_pem(cert), encode_private_key(key)

    def issue_server(self, common_name, ip_addresses=(), dns_names=(), days=365):
        """Issue an API server certificate: SANs as given, EKU serverAuth only."""
        sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in _unique(ip_addresses)]
        sans += [x509.DNSName(name) for name in _unique(dns_names)]
        # ECDSA keys are used for key agreement in TLS 1.2 as well as signing.
        is_ecdsa = isinstance(self.key, ec.EllipticCurvePrivateKey)
        key_usage = x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=is_ecdsa, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
        )
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(subject, key_usage, [ExtendedKeyUsageOID.SERVER_AUTH], days, sans)

    def issue_client(self, roles, common_name="admin", client_auth=True, days=365):
        """Issue a client certificate whose Subject Organization values are the roles.

        With ``client_auth=False`` the EKU is serverAuth instead, the shape Talos
        refuses at the handshake.
        """
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, role) for role in roles]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        key_usage = x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
        )
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client_auth else ExtendedKeyUsageOID.SERVER_AUTH
        return self._issue(x509.Name(attributes), key_usage, [usage], days)


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def maintenance_certificate(ip_addresses, dns_names=()):
    """A maintenance-mode server certificate signed by a fresh self-signed Ed25519 CA.

    Returns ``(ca_crt_pem, crt_pem, key_pem)``.
    """
    ca = CertificateAuthority.generate(common_name="talos", organization="talos", algorithm="ed25519")
    ips = [str(ipaddress.ip_address(ip)) for ip in ip_addresses] + ["127.0.0.1", "::1"]
    crt_pem, key_pem = ca.issue_server(MAINTENANCE_COMMON_NAME, ip_addresses=ips, dns_names=dns_names)
    return ca.crt_pem, crt_pem, key_pem


def certificate_roles(crt_pem):
    """The roles a client certificate carries: its Subject Organization values."""
    cert = x509.load_pem_x509_certificate(crt_pem)
    return [attribute.value for attribute in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) if attribute.value]


def client_certificate_has_client_auth(cert):
    """True when a leaf certificate's EKU is exactly ``[clientAuth]``, as Talos requires.

    ``cert`` is a ``cryptography`` certificate, PEM bytes, or DER bytes (what
    ``SSLSocket.getpeercert(binary_form=True)`` returns).
    """
    if isinstance(cert, bytes):
        cert = x509.load_pem_x509_certificate(cert) if cert.lstrip().startswith(b"-----") else x509.load_der_x509_certificate(cert)
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def accepted_client_cas(config):
    """PEM bytes of every CA apid verifies client certificates against, for a parsed machine config.

    Talos's OSRoot: ``machine.acceptedCAs`` in config order, then the issuing
    CA ``machine.ca`` (its certificate; a worker's has no key). Both forms of
    the config keep them in the v1alpha1 document. A worker's apid takes this
    list from trustd (the control plane's OSRoot); the rotation changes the
    configs of all nodes alike, so the worker's own config gives the same list.
    """
    machine = (config or {}).get("machine") or {}
    entries = list(machine.get("acceptedCAs") or []) + [machine.get("ca") or {}]
    return b"".join(base64.b64decode(entry["crt"]) for entry in entries if isinstance(entry, dict) and entry.get("crt"))


def spki_fingerprint(crt_pem):
    """SHA-256 of the certificate's SubjectPublicKeyInfo in standard base64, as Talos prints it for maintenance mode and
    talosctl --cert-fingerprint takes it (siderolabs/crypto ``x509.Fingerprint``)."""
    cert = x509.load_pem_x509_certificate(crt_pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()
