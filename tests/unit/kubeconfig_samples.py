# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubeconfigs as Talos issues them, for the kubeconfig unit tests."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import gzip
import io
import os
import tarfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)


def certificate(days):
    """A base64 PEM client certificate valid from yesterday for ``days`` more days."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, u"admin")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256()))
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def kubeconfig(cert=None, ca="Q0EK", server="https://10.5.0.2:6443"):
    """An admin kubeconfig with fresh client credentials (a certificate valid for a year unless ``cert`` is given)."""
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "demo", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "admin@demo", "user": {
            "client-certificate-data": cert or certificate(365),
            "client-key-data": base64.b64encode(os.urandom(32)).decode(),
        }}],
        "contexts": [{"name": "admin@demo", "context": {"cluster": "demo", "namespace": "default", "user": "admin@demo"}}],
        "current-context": "admin@demo",
    }


def archive(text, name="kubeconfig"):
    """``text`` as the gzip-compressed tar the Kubeconfig RPC streams, in a file called ``name``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o600
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())
