# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_kubeconfig: archive extraction, rewrites and the credential-blind comparison."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import gzip
import io
import os
import stat
import tarfile

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.modules import talos_kubeconfig
from module_fakes import run_module

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
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o600
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


class FakeClient:
    """Answers Kubeconfig with a fresh kubeconfig (new credentials) on every call, as Talos does."""

    nodes = ["10.5.0.2"]

    def __init__(self, ca="Q0EK"):
        self.ca = ca
        self.calls = 0

    def read_bytes(self, method, request=None, node=None):
        assert method == "machine.MachineService/Kubeconfig" and node == "10.5.0.2"
        self.calls += 1
        return archive(yaml.safe_dump(kubeconfig(ca=self.ca)))


DEFAULTS = dict(dest=None, server=None, context_name=None, cluster_name=None)


def run(client, **params):
    return run_module(talos_kubeconfig.run, client, DEFAULTS, **params)[:2]


def test_extract_takes_the_kubeconfig_file_from_the_archive():
    assert talos_kubeconfig.extract_kubeconfig(archive("apiVersion: v1\n"), "n") == "apiVersion: v1\n"
    with pytest.raises(TalosError, match="holds no file named kubeconfig"):
        talos_kubeconfig.extract_kubeconfig(archive("x", name="other"), "n")
    with pytest.raises(TalosError, match="could not be read .*gzip-compressed tar"):
        talos_kubeconfig.extract_kubeconfig(b"plain text", "n")


def test_rewrite_server_cluster_and_context():
    config = talos_kubeconfig.rewrite(kubeconfig(), server="https://lb:6443", context="prod", cluster="prod-cluster")
    assert config["clusters"][0] == {"name": "prod-cluster", "cluster": {"server": "https://lb:6443", "certificate-authority-data": "Q0EK"}}
    assert config["contexts"][0]["name"] == "prod" and config["contexts"][0]["context"]["cluster"] == "prod-cluster"
    assert config["current-context"] == "prod"
    assert config["users"][0]["name"] == "admin@demo"


def test_rewrite_refuses_ambiguous_renames():
    config = kubeconfig()
    config["clusters"].append({"name": "other", "cluster": {}})
    with pytest.raises(TalosError, match="has 2 cluster entries"):
        talos_kubeconfig.rewrite(config, cluster="x")


def test_comparison_ignores_fresh_credentials_only(tmp_path):
    path = tmp_path / "kubeconfig"
    existing = kubeconfig()
    path.write_text(yaml.safe_dump(existing))
    path.chmod(0o600)
    assert not talos_kubeconfig.needs_write(existing, kubeconfig(), str(path))
    assert talos_kubeconfig.needs_write(existing, kubeconfig(ca="TkVXQ0EK"), str(path))
    assert talos_kubeconfig.needs_write(existing, kubeconfig(server="https://lb:6443"), str(path))
    path.chmod(0o644)
    assert talos_kubeconfig.needs_write(existing, kubeconfig(), str(path))


def test_expiring_or_unreadable_credentials_are_replaced():
    assert talos_kubeconfig.credentials_expire_soon(kubeconfig(cert=certificate(0)), NOW)
    assert not talos_kubeconfig.credentials_expire_soon(kubeconfig(cert=certificate(30)), NOW)
    assert talos_kubeconfig.credentials_expire_soon(kubeconfig(cert="bm90IGEgY2VydAo="), NOW)


def test_writes_0600_then_is_idempotent(tmp_path):
    dest = tmp_path / "kubeconfig"
    client = FakeClient()
    ok, result = run(client, dest=str(dest), server="https://lb:6443", context_name="prod")
    assert ok and result["changed"] is True and "kubeconfig" not in result
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    written = yaml.safe_load(dest.read_text())
    assert written["clusters"][0]["cluster"]["server"] == "https://lb:6443" and written["current-context"] == "prod"
    assert (result["server"], result["context"], result["cluster"]) == ("https://lb:6443", "prod", "demo")
    assert "<redacted>" in result["diff"]["after"] and written["users"][0]["user"]["client-key-data"] not in result["diff"]["after"]

    content = dest.read_bytes()
    ok, result = run(client, dest=str(dest), server="https://lb:6443", context_name="prod")
    assert ok and result["changed"] is False and dest.read_bytes() == content
    assert client.calls == 2
    assert os.listdir(str(tmp_path)) == ["kubeconfig"]


def test_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "kubeconfig"
    ok, result = run(FakeClient(), check_mode=True, dest=str(dest))
    assert ok and result["changed"] is True and not dest.exists()


def test_new_cluster_ca_rewrites_the_file(tmp_path):
    dest = tmp_path / "kubeconfig"
    run(FakeClient(), dest=str(dest))
    ok, result = run(FakeClient(ca="TkVXQ0EK"), dest=str(dest))
    assert ok and result["changed"] is True
    assert yaml.safe_load(dest.read_text())["clusters"][0]["cluster"]["certificate-authority-data"] == "TkVXQ0EK"


def test_without_dest_returns_the_kubeconfig_unchanged():
    ok, result = run(FakeClient())
    assert ok and result["changed"] is False
    assert yaml.safe_load(result["kubeconfig"])["current-context"] == "admin@demo"


def test_missing_directory_fails_before_fetching(tmp_path):
    client = FakeClient()
    ok, result = run(client, dest=str(tmp_path / "missing" / "kubeconfig"))
    assert not ok and "directory" in result["msg"] and client.calls == 0


def test_directory_as_dest_is_refused(tmp_path):
    client = FakeClient()
    ok, result = run(client, dest=str(tmp_path))
    assert not ok and result["msg"] == "Cannot write the kubeconfig to %s: it is a directory; set dest to a file path." % tmp_path
    assert client.calls == 0
