# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The admin kubeconfig: fetching through the Kubeconfig RPC, renames and the credential-blind comparison."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import kubeconfig as kc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from fake_talos import FakeTalos
from kubeconfig_samples import NOW, archive, certificate, kubeconfig


def test_fetch_returns_the_text_as_talos_wrote_it_and_parsed():
    text = yaml.safe_dump(kubeconfig())
    client = FakeTalos(answers={rpc.KUBECONFIG: archive(text)})
    assert kc.fetch_kubeconfig(client, "10.5.0.2") == (text, yaml.safe_load(text))
    assert [(call.method, call.node) for call in client.calls] == [(rpc.KUBECONFIG, "10.5.0.2")]


@pytest.mark.parametrize("text, message", [
    ("clusters: [unclosed\n", r"^The kubeconfig from node 10.5.0.2 is not valid YAML"),
    ("- just\n- a list\n", r"^The kubeconfig from node 10.5.0.2 is not a YAML mapping\.$"),
])
def test_fetch_refuses_what_is_no_kubeconfig(text, message):
    with pytest.raises(TalosError, match=message):
        kc.fetch_kubeconfig(FakeTalos(answers={rpc.KUBECONFIG: archive(text)}), "10.5.0.2")


def test_extract_takes_the_kubeconfig_file_from_the_archive():
    assert kc.extract_kubeconfig(archive("apiVersion: v1\n"), "n") == "apiVersion: v1\n"
    with pytest.raises(TalosError, match="holds no file named kubeconfig"):
        kc.extract_kubeconfig(archive("x", name="other"), "n")
    with pytest.raises(TalosError, match="could not be read .*gzip-compressed tar"):
        kc.extract_kubeconfig(b"plain text", "n")


def test_rewrite_server_cluster_and_context():
    config = kubeconfig()
    text = kc.rewrite(config, server="https://lb:6443", context="prod", cluster="prod-cluster")
    assert yaml.safe_load(text) == config
    assert config["clusters"][0] == {"name": "prod-cluster", "cluster": {"server": "https://lb:6443", "certificate-authority-data": "Q0EK"}}
    assert config["contexts"][0]["name"] == "prod" and config["contexts"][0]["context"]["cluster"] == "prod-cluster"
    assert config["current-context"] == "prod"
    assert config["users"][0]["name"] == "admin@demo"
    assert kc.summary(config) == {"server": "https://lb:6443", "cluster": "prod-cluster", "context": "prod"}


def test_rewrite_refuses_ambiguous_renames():
    config = kubeconfig()
    config["clusters"].append({"name": "other", "cluster": {}})
    with pytest.raises(TalosError, match="has 2 cluster entries"):
        kc.rewrite(config, cluster="x")


def test_a_file_stays_when_only_fresh_credentials_differ():
    existing = kubeconfig()
    assert kc.may_stay(existing, kubeconfig(), NOW)
    assert not kc.may_stay(existing, kubeconfig(ca="TkVXQ0EK"), NOW)
    assert not kc.may_stay(existing, kubeconfig(server="https://lb:6443"), NOW)
    assert not kc.may_stay(None, kubeconfig(), NOW)
    assert not kc.may_stay(kubeconfig(cert=certificate(0)), kubeconfig(), NOW)


def test_expiring_or_unreadable_credentials_are_replaced():
    assert kc.credentials_expire_soon(kubeconfig(cert=certificate(0)), NOW)
    assert not kc.credentials_expire_soon(kubeconfig(cert=certificate(30)), NOW)
    assert kc.credentials_expire_soon(kubeconfig(cert="bm90IGEgY2VydAo="), NOW)


def test_read_kubeconfig_ignores_what_is_no_kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    assert kc.read_kubeconfig(str(path)) is None
    path.write_text("clusters: [unclosed\n")
    assert kc.read_kubeconfig(str(path)) is None
    path.write_text(yaml.safe_dump(kubeconfig(ca="X")))
    assert kc.read_kubeconfig(str(path))["clusters"][0]["cluster"]["certificate-authority-data"] == "X"


def test_file_diff_redacts_the_client_keys():
    existing, fetched = kubeconfig(), kubeconfig()
    diff = kc.file_diff(existing, fetched, "/k")
    for config in (existing, fetched):
        assert config["users"][0]["user"]["client-key-data"] not in diff["before"] + diff["after"]
    assert "<redacted>" in diff["after"] and diff["before_header"] == "/k"
    assert kc.file_diff(None, fetched, "/k")["before"] == ""
