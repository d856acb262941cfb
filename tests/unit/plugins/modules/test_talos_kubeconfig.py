# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_kubeconfig run(): written once with mode 0600, rewrites, check mode, refused destinations."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.modules import talos_kubeconfig
from fake_talos import FakeTalos
from kubeconfig_samples import archive, certificate, kubeconfig
from module_fakes import run_task


def node_with(ca="Q0EK"):
    """A control plane answering Kubeconfig with a fresh kubeconfig (new credentials) on every call, as Talos does."""
    return FakeTalos(nodes=["10.5.0.2"]).answer(rpc.KUBECONFIG, lambda _request, _node: archive(yaml.safe_dump(kubeconfig(ca=ca))),
                                                node="10.5.0.2")


def run(client, **params):
    return run_task(talos_kubeconfig, client, **params)[:2]


def test_writes_0600_then_is_idempotent(tmp_path):
    dest = tmp_path / "kubeconfig"
    client = node_with()
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
    assert len(client.calls) == 2
    assert os.listdir(str(tmp_path)) == ["kubeconfig"]


def test_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "kubeconfig"
    ok, result = run(node_with(), check_mode=True, dest=str(dest))
    assert ok and result["changed"] is True and not dest.exists()


def test_new_cluster_ca_rewrites_the_file(tmp_path):
    dest = tmp_path / "kubeconfig"
    run(node_with(), dest=str(dest))
    ok, result = run(node_with(ca="TkVXQ0EK"), dest=str(dest))
    assert ok and result["changed"] is True
    assert yaml.safe_load(dest.read_text())["clusters"][0]["cluster"]["certificate-authority-data"] == "TkVXQ0EK"


def test_without_dest_returns_the_kubeconfig_unchanged():
    ok, result = run(node_with())
    assert ok and result["changed"] is False
    assert yaml.safe_load(result["kubeconfig"])["current-context"] == "admin@demo"


def test_missing_directory_fails_before_fetching(tmp_path):
    client = node_with()
    with pytest.raises(TalosError, match=r"^Cannot write the kubeconfig to .*: directory .*missing does not exist\.$"):
        run(client, dest=str(tmp_path / "missing" / "kubeconfig"))
    assert client.calls == []


def test_directory_as_dest_is_refused(tmp_path):
    client = node_with()
    with pytest.raises(TalosError) as raised:
        run(client, dest=str(tmp_path))
    assert raised.value.message == "Cannot write the kubeconfig to %s: it is a directory; set dest to a file path." % tmp_path
    assert client.calls == []


def test_wider_mode_is_narrowed_and_the_credentials_kept(tmp_path):
    dest = tmp_path / "kubeconfig"
    run(node_with(), dest=str(dest))
    dest.chmod(0o644)
    content = dest.read_bytes()
    ok, result = run(node_with(), dest=str(dest))
    assert ok and result["changed"] is True
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600 and dest.read_bytes() == content


def test_expiring_credentials_are_replaced(tmp_path):
    dest = tmp_path / "kubeconfig"
    dest.write_text(yaml.safe_dump(kubeconfig(cert=certificate(0))))
    dest.chmod(0o600)
    ok, result = run(node_with(), dest=str(dest))
    assert ok and result["changed"] is True
    assert yaml.safe_load(dest.read_text())["users"][0]["user"]["client-certificate-data"] != kubeconfig()["users"][0]
