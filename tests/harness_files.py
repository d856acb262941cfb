# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the launchers of the Go test harnesses (tests/kube_apiserver, tests/etcd_member) share: their build,
the certificates they issue from a cluster's CA, their private files, and the tail of a log for a failure."""

import datetime
import os
import subprocess
import threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

LOG_TAIL_BYTES = 4000


class HarnessBuild:
    """A Go harness built by its ``script`` (which prints the binary's path last) on the first request of the
    process; a failed build raises ``error`` naming ``what`` was built, never a skip."""

    def __init__(self, script, what, error):
        self.script = script
        self.what = what
        self.error = error
        self._lock = threading.Lock()
        self._path = None

    def binary(self):
        with self._lock:
            if self._path is None:
                result = subprocess.run([self.script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
                if result.returncode != 0:
                    raise self.error("building %s failed (%s exited %d):\n%s"
                                     % (self.what, self.script, result.returncode, (result.stderr or result.stdout)[-LOG_TAIL_BYTES:]))
                self._path = result.stdout.strip().splitlines()[-1]
        return self._path


def issue_certificate(ca_cert_pem, ca_key_pem, subject, usages, sans=None, key_agreement=False, days=1):
    """A certificate and key (PEM) signed by the CA for ``subject`` (an x509.Name), with the extended key
    ``usages`` and the subject alternative names ``sans``, valid for ``days``."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, key_agreement, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    # Python 3.13 verifies strictly (VERIFY_X509_STRICT): a certificate must name its issuer's key.
    try:
        issuer_key_id = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_key_id), critical=False)
    except x509.ExtensionNotFound:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_private(path, data):
    """Write ``data`` (bytes) to ``path``, readable by its owner only; returns the path."""
    with open(path, "wb") as output:
        output.write(data)
    os.chmod(path, 0o600)
    return path


def log_tail(path):
    """The last LOG_TAIL_BYTES of a harness's log, for a failure message; empty when it cannot be read."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""
