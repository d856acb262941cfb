# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Certificates and keys shaped like the ones Talos generates (siderolabs/crypto).

CAs: self-signed, 128-bit random serial, valid from now for ten years, subject
Organization only, extensions KeyUsage (critical), ExtKeyUsage, BasicConstraints
(critical) and a random 20-byte SubjectKeyIdentifier, in that order. Talos API
client certificates: the roles as Organization values, KeyUsage digitalSignature,
ExtKeyUsage clientAuth, AuthorityKeyIdentifier of the CA.

Private keys are PEM the way Talos writes them: ``EC PRIVATE KEY`` (SEC1),
``RSA PRIVATE KEY`` (PKCS#1) and PKCS#8 under Talos's own label
``ED25519 PRIVATE KEY``, which ``cryptography`` cannot load by itself.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import datetime
import hashlib
import os
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    try:
        from cryptography.x509.name import _ASN1Type
        _PRINTABLE = _ASN1Type.PrintableString
    except ImportError:  # Go's PrintableString is cosmetic; UTF8String verifies the same
        _PRINTABLE = None
    HAS_CRYPTOGRAPHY = True
except ImportError:  # reported by the module through missing_required_lib
    HAS_CRYPTOGRAPHY = False

ED25519_KEY_LABEL = "ED25519 PRIVATE KEY"
CA_VALIDITY = datetime.timedelta(hours=87600)
CLIENT_VALIDITY = datetime.timedelta(hours=8760)
# Go's PrintableString alphabet: names made of it are encoded as PrintableString.
_PRINTABLE_TEXT = re.compile(r"^[A-Za-z0-9 '()+,\-./:=?]*$")
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)


class PKIError(TalosConfigError):
    """Key material that cannot be used; the message names the problem, never the material."""


def now_utc():
    """The current time in UTC without microseconds (X.509 carries seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _name(organizations):
    attributes = []
    for value in organizations:
        if _PRINTABLE is not None and _PRINTABLE_TEXT.match(value):
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, value, _type=_PRINTABLE))
        else:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, value))
    if len(attributes) > 1:  # several roles: one multi-valued RDN, as Go writes them
        return x509.Name([x509.RelativeDistinguishedName(attributes)])
    return x509.Name(attributes)


def _serial_number():
    return int.from_bytes(os.urandom(16), "big") or 1


def _signature_hash(key):
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def generate_key(algorithm):
    """A new private key: ``ed25519``, ``ecdsa`` (P-256) or ``rsa`` (4096 bits)."""
    if algorithm == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if algorithm == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=4096)
    raise ValueError("unknown key algorithm %r" % algorithm)


def key_algorithm(key):
    """``ed25519``, ``ecdsa`` or ``rsa`` for a private or public key."""
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return "ed25519"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return "ecdsa"
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "rsa"
    return type(key).__name__


def private_key_pem(key):
    """PEM text of ``key`` with the label Talos writes."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        body = base64.b64encode(der).decode("ascii")
        lines = [body[i:i + 64] for i in range(0, len(body), 64)]
        return "-----BEGIN %s-----\n%s\n-----END %s-----\n" % (ED25519_KEY_LABEL, "\n".join(lines), ED25519_KEY_LABEL)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode("ascii")


def certificate_pem(certificate):
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def load_private_key(pem, what):
    """A private key from PEM text (any label Talos uses); PKIError names ``what`` on failure."""
    text = pem.decode("ascii", "replace") if isinstance(pem, bytes) else str(pem)
    match = _PEM_BLOCK.search(text)
    if not match or not match.group(1).endswith("PRIVATE KEY"):
        raise PKIError("%s is not a PEM private key" % what)
    try:
        if match.group(1) == ED25519_KEY_LABEL:
            return serialization.load_der_private_key(base64.b64decode("".join(match.group(2).split())), password=None)
        # The collection never signs with an RSA key (only the service account key is one: it is passed on to
        # Kubernetes), so OpenSSL's RSA consistency check, about 0.2 s for a 4096-bit key, buys nothing here.
        return serialization.load_pem_private_key(match.group(0).encode("ascii"), password=None,
                                                  unsafe_skip_rsa_key_validation=True)
    except (ValueError, TypeError, binascii.Error):
        raise PKIError("%s cannot be loaded as a %s" % (what, match.group(1).lower()))


def load_certificate(pem, what):
    text = pem.encode("ascii", "replace") if not isinstance(pem, bytes) else pem
    try:
        return x509.load_pem_x509_certificate(text)
    except ValueError:
        raise PKIError("%s is not a PEM certificate" % what)


def public_key_matches(certificate, key):
    """True when ``key`` is the private key of ``certificate``."""
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    return (certificate.public_key().public_bytes(serialization.Encoding.DER, fmt)
            == key.public_key().public_bytes(serialization.Encoding.DER, fmt))


def _key_usage(cert_sign):
    """Talos's KeyUsage: digital signature, plus certificate signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=cert_sign, crl_sign=False, encipher_only=False, decipher_only=False,
    )


def generate_ca(algorithm, organization, now, validity=CA_VALIDITY, subject=None):
    """A self-signed CA as ``(certificate, key)``; ``organization`` None gives the empty subject.

    ``validity`` is its lifetime: Talos's ten years, or an existing CA's when one is replaced; ``subject`` (an
    ``x509.Name``) replaces the Organization-only subject, to keep an existing CA's when one is replaced.
    """
    key = generate_key(algorithm)
    name = subject if subject is not None else _name([organization] if organization else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + validity)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier(os.urandom(20)), critical=False)
    )
    return builder.sign(key, _signature_hash(key)), key


def issue_client_certificate(ca_certificate, ca_key, roles, now, validity=CLIENT_VALIDITY):
    """A Talos API client certificate for ``roles`` as ``(certificate, key)``; the key type follows the CA's."""
    key = generate_key(key_algorithm(ca_key))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(list(roles)))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + validity)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    try:
        ski = ca_certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    except x509.ExtensionNotFound:
        pass
    return builder.sign(ca_key, _signature_hash(ca_key)), key


def signed_by(certificate, ca_certificate):
    """True when ``certificate`` carries a valid signature of ``ca_certificate``'s key."""
    if certificate.issuer != ca_certificate.subject:
        return False
    public_key = ca_certificate.public_key()
    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(certificate.signature, certificate.tbs_certificate_bytes)
        elif isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(certificate.signature, certificate.tbs_certificate_bytes,
                              ec.ECDSA(certificate.signature_hash_algorithm))
        elif isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(certificate.signature, certificate.tbs_certificate_bytes, padding.PKCS1v15(),
                              certificate.signature_hash_algorithm)
        else:
            return False
    except InvalidSignature:
        return False
    return True


def is_ca(certificate):
    """True when ``certificate`` may issue certificates (BasicConstraints CA, as Go's verifier requires of a CA)."""
    try:
        return certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def organizations(certificate):
    """The Subject Organization values of a certificate (Talos roles for a client certificate)."""
    return [attribute.value for attribute in certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def fingerprint(certificate):
    """SHA-256 of the DER certificate as lower-case hex pairs joined by colons."""
    digest = hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def certificate_facts(certificate):
    """What may be said about a certificate: subject, validity, key algorithm, fingerprint. No key material."""
    return {
        "subject": certificate.subject.rfc4514_string(),
        "not_before": certificate.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "not_after": certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "key_algorithm": key_algorithm(certificate.public_key()),
        "fingerprint_sha256": fingerprint(certificate),
    }


def b64_pem(pem_text):
    """Standard base64 (one line, padded) of PEM text: the form bundles, talosconfigs and v1alpha1 fields hold."""
    return base64.b64encode(pem_text.encode("ascii")).decode("ascii")


def pem_from_b64(value, what):
    """PEM text from the base64 form; PKIError names ``what`` on failure."""
    if not isinstance(value, str) or not value.strip():
        raise PKIError("%s is missing" % what)
    if value.strip() == "******":
        raise PKIError("%s is redacted (******)" % what)
    try:
        text = base64.b64decode("".join(value.split()), validate=True).decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise PKIError("%s is not base64-encoded PEM" % what)
    if "-----BEGIN" not in text:
        raise PKIError("%s is not base64-encoded PEM" % what)
    return text
