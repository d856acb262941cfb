# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import ssl
import tempfile

import pytest
import yaml

from talos_emulator.pki import CertificateAuthority

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import (
    ConnectionSettings,
    default_talosconfig_paths,
    normalize_endpoint,
    relabel_private_key,
)


@pytest.fixture(scope="module")
def pki():
    ca = CertificateAuthority.generate()
    crt, key = ca.issue_client(["os:admin"])
    other_ca = CertificateAuthority.generate(common_name="other")
    other_crt, other_key = other_ca.issue_client(["os:reader"])
    return {
        "ca": ca.crt_pem.decode(), "crt": crt.decode(), "key": key.decode(),
        "other_ca": other_ca.crt_pem.decode(), "other_crt": other_crt.decode(), "other_key": other_key.decode(),
    }


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def write_config(tmp_path, pki, name="talosconfig", current="prod", contexts=None):
    if contexts is None:
        contexts = {
            "prod": {"endpoints": ["10.5.0.2", "cp.example.com:50001"], "nodes": ["10.5.0.3"],
                     "ca": _b64(pki["ca"]), "crt": _b64(pki["crt"]), "key": _b64(pki["key"])},
            "lab": {"endpoints": ["192.168.1.10"], "ca": _b64(pki["other_ca"]), "crt": _b64(pki["other_crt"]),
                    "key": _b64(pki["other_key"]), "cluster": "lab-cluster"},
        }
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"context": current, "contexts": contexts}))
    return str(path)


def params(**values):
    base = dict(talosconfig=None, context=None, endpoints=None, node=None, nodes=None, ca=None, crt=None, key=None,
                insecure=False, timeout=60)
    base.update(values)
    return base


def test_file_context_gives_endpoints_nodes_and_decoded_credentials(tmp_path, pki):
    path = write_config(tmp_path, pki)
    settings = ConnectionSettings.from_params(params(talosconfig=path), environ={})
    assert settings.endpoints == ["10.5.0.2:50000", "cp.example.com:50001"]
    assert settings.nodes == ["10.5.0.3"]
    assert settings.context == "prod"
    assert settings.config_path == path
    assert settings.ca.strip() == pki["ca"].strip()
    assert settings.crt.strip() == pki["crt"].strip()
    assert "ED25519 PRIVATE KEY" in pki["key"]
    assert "-----BEGIN PRIVATE KEY-----" in settings.key and "ED25519" not in settings.key
    assert settings.client_roles == ["os:admin"]
    assert "prod" in settings.ca_source and path in settings.ca_source


def test_context_option_selects_another_context(tmp_path, pki):
    path = write_config(tmp_path, pki)
    settings = ConnectionSettings.from_params(params(talosconfig=path, context="lab"), environ={})
    assert settings.endpoints == ["192.168.1.10:50000"]
    assert settings.nodes == [None]
    assert settings.cluster == "lab-cluster"
    assert settings.client_roles == ["os:reader"]


def test_explicit_options_override_the_file_field_by_field(tmp_path, pki):
    path = write_config(tmp_path, pki)
    settings = ConnectionSettings.from_params(
        params(talosconfig=path, endpoints=["10.9.9.9"], nodes=["10.9.9.10", "10.9.9.11"], ca=pki["other_ca"]),
        environ={})
    assert settings.endpoints == ["10.9.9.9:50000"]
    assert settings.nodes == ["10.9.9.10", "10.9.9.11"]
    assert settings.ca.strip() == pki["other_ca"].strip()
    assert settings.ca_source == "the ca option"
    # not overridden: still from the file
    assert settings.crt.strip() == pki["crt"].strip()


def test_node_option_targets_one_node(tmp_path, pki):
    path = write_config(tmp_path, pki)
    settings = ConnectionSettings.from_params(params(talosconfig=path, node="10.5.0.9"), environ={})
    assert settings.nodes == ["10.5.0.9"]


@pytest.mark.parametrize("options, listed", [
    (dict(nodes=["10.9.9.10"]), True),                # the nodes option, even of one node
    (dict(nodes=["10.9.9.10", "10.9.9.11"]), True),
    (dict(), True),                                    # the context's nodes (10.5.0.3)
    (dict(node="10.5.0.9"), False),                    # the node option (or the host's node the door fills in)
    (dict(context="lab"), False),                      # no node: the endpoint answers for itself
])
def test_settings_say_whether_the_nodes_came_as_a_list(tmp_path, pki, options, listed):
    # The shape of a task's result follows it (several_nodes.result).
    settings = ConnectionSettings.from_params(params(talosconfig=write_config(tmp_path, pki), **options), environ={})
    assert settings.nodes_listed is listed
    assert settings.replace(timeout=5).nodes_listed is listed


def test_options_alone_need_no_file(tmp_path, pki, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = ConnectionSettings.from_params(
        params(endpoints=["10.0.0.1"], ca=pki["ca"], crt=_b64(pki["crt"]), key=pki["key"], timeout=5),
        environ={"HOME": str(tmp_path)})
    assert settings.config_path is None
    assert settings.nodes == [None]
    assert settings.timeout == 5.0
    assert settings.crt.strip() == pki["crt"].strip()


def test_no_file_and_no_endpoints_says_where_the_talosconfig_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TalosConfigError) as raised:
        ConnectionSettings.from_params(params(), environ={"TALOS_HOME": "/opt/talos"})
    assert raised.value.message == (
        "No Talos endpoint is configured and no talosconfig file was found: the talosconfig option and TALOSCONFIG are "
        "unset and neither /opt/talos/config nor /var/run/secrets/talos.dev/config exists. Point one of them at a "
        "talosconfig file, or give the endpoints, ca, crt and key options.")


def test_talosconfig_environment_variable_is_used(tmp_path, pki):
    path = write_config(tmp_path, pki, name="from-env")
    settings = ConnectionSettings.from_params(params(), environ={"TALOSCONFIG": path})
    assert settings.config_path == path


def test_talos_home_and_home_directory_lookup(tmp_path, pki, monkeypatch):
    home = tmp_path / "home"
    (home / ".talos").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert default_talosconfig_paths({"TALOS_HOME": "relative/dir"})[0] == str(home / ".talos" / "config")
    assert default_talosconfig_paths({"TALOS_HOME": "/opt/talos"})[0] == "/opt/talos/config"

    path = write_config(home / ".talos", pki, name="config")
    assert ConnectionSettings.from_params(params(), environ={}).config_path == path

    talos_home = tmp_path / "talos-home"
    talos_home.mkdir()
    other = write_config(talos_home, pki, name="config")
    assert ConnectionSettings.from_params(params(), environ={"TALOS_HOME": str(talos_home)}).config_path == other


def test_legacy_target_becomes_the_endpoint(tmp_path, pki):
    contexts = {"old": {"target": "10.1.1.1", "ca": _b64(pki["ca"]), "crt": _b64(pki["crt"]), "key": _b64(pki["key"])}}
    path = write_config(tmp_path, pki, current="old", contexts=contexts)
    assert ConnectionSettings.from_params(params(talosconfig=path), environ={}).endpoints == ["10.1.1.1:50000"]


def test_empty_file_is_named_in_the_error(tmp_path):
    path = tmp_path / "empty"
    path.write_text("")
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(talosconfig=str(path)), environ={})
    assert err.value.message == "The talos config file %s is empty." % path


def test_unknown_context_names_the_context_the_file_and_the_choices(tmp_path, pki):
    path = write_config(tmp_path, pki)
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(talosconfig=path, context="staging"), environ={})
    assert "'staging'" in err.value.message and path in err.value.message
    assert "lab, prod" in err.value.message


def test_missing_default_context_is_reported(tmp_path, pki):
    path = write_config(tmp_path, pki, current="gone")
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(talosconfig=path), environ={})
    assert "default context 'gone' was not found" in err.value.message


def test_explicit_path_that_does_not_exist(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(talosconfig=missing), environ={})
    assert err.value.message == "The talosconfig file %s does not exist." % missing


def test_missing_credentials_without_insecure(tmp_path, monkeypatch, pki):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(endpoints=["10.0.0.1"], ca=pki["ca"], crt=pki["crt"]), environ={})
    assert "needs key" in err.value.message and "insecure" in err.value.message


def test_insecure_needs_no_credentials_and_skips_verification(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = ConnectionSettings.from_params(params(endpoints=["10.0.0.1"], insecure=True), environ={})
    context = settings.ssl_context()
    assert context.verify_mode == ssl.CERT_NONE
    assert context.check_hostname is False
    assert settings.client_roles is None


def test_insecure_is_not_the_default(tmp_path, pki):
    settings = ConnectionSettings.from_params(params(talosconfig=write_config(tmp_path, pki)), environ={})
    assert settings.insecure is False


def test_ssl_context_verifies_and_loads_the_ed25519_client_key(tmp_path, pki, monkeypatch):
    created = []
    real_mkstemp = tempfile.mkstemp

    def recording_mkstemp(*args, **kwargs):
        handle, path = real_mkstemp(*args, **kwargs)
        created.append((path, os.stat(path).st_mode & 0o777))
        return handle, path

    monkeypatch.setattr(tempfile, "mkstemp", recording_mkstemp)
    settings = ConnectionSettings.from_params(params(talosconfig=write_config(tmp_path, pki)), environ={})
    context = settings.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(context.get_ca_certs()) == 1
    assert len(created) == 1
    path, mode = created[0]
    assert mode == 0o600
    assert not os.path.exists(path), "the temporary key file must be removed at once"


def test_mismatched_key_is_a_config_error_without_key_material(tmp_path, pki, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = ConnectionSettings.from_params(
        params(endpoints=["10.0.0.1"], ca=pki["ca"], crt=pki["crt"], key=pki["other_key"]), environ={})
    with pytest.raises(TalosConfigError) as err:
        settings.ssl_context()
    assert err.value.message.startswith("The client certificate and key from the crt and key options cannot be loaded")
    body = "".join(pki["other_key"].splitlines()[1:-1])
    assert body[:20] not in err.value.message and "PRIVATE KEY" not in err.value.message


def test_garbage_instead_of_pem_is_rejected(tmp_path, pki, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(TalosConfigError) as err:
        ConnectionSettings.from_params(params(endpoints=["10.0.0.1"], ca="not a certificate", crt=pki["crt"],
                                              key=pki["key"]), environ={})
    assert err.value.message == "The ca from the ca option is neither PEM text nor base64-encoded PEM."


def test_replace_rebuilds_from_the_same_options(tmp_path, pki):
    path = write_config(tmp_path, pki)
    insecure = ConnectionSettings.from_params(params(talosconfig=path, insecure=True, endpoints=["10.7.0.2"]), environ={})
    secure = insecure.replace(insecure=False, node="10.7.0.3")
    assert secure.insecure is False
    assert secure.endpoints == ["10.7.0.2:50000"]
    assert secure.nodes == ["10.7.0.3"]
    assert secure.client_roles == ["os:admin"]


@pytest.mark.parametrize("endpoint, expected", [
    ("10.5.0.2", "10.5.0.2:50000"),
    ("10.5.0.2:6443", "10.5.0.2:6443"),
    ("cp.example.com", "cp.example.com:50000"),
    ("https://cp.example.com", "cp.example.com:443"),
    ("https://cp.example.com:8443/", "cp.example.com:8443"),
    ("fd00::1", "[fd00::1]:50000"),
    ("[fd00::1]:50001", "[fd00::1]:50001"),
])
def test_normalize_endpoint(endpoint, expected):
    assert normalize_endpoint(endpoint) == expected


def test_invalid_port_is_reported():
    with pytest.raises(TalosConfigError):
        normalize_endpoint("10.0.0.1:http")


def test_relabel_private_key_only_touches_the_talos_label():
    talos = "-----BEGIN ED25519 PRIVATE KEY-----\nAAAA\n-----END ED25519 PRIVATE KEY-----\n"
    assert relabel_private_key(talos) == "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    ec = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"
    assert relabel_private_key(ec) == ec


def test_directly_built_settings_can_be_replaced(pki, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = ConnectionSettings(["10.0.0.1"], nodes=["10.0.0.2"], ca=pki["ca"], crt=pki["crt"], key=pki["key"], timeout=5)
    assert settings.nodes_listed is False and settings.replace().nodes == ["10.0.0.2"]
    assert settings.replace().nodes_listed is False
    other = settings.replace(node="10.0.0.3")
    assert other.endpoints == ["10.0.0.1:50000"]
    assert other.nodes == ["10.0.0.3"]
    assert other.timeout == 5.0 and other.client_roles == ["os:admin"]


@pytest.mark.parametrize("endpoint, port", [("10.0.0.1:http", "http"), ("10.0.0.1:0", "0"), ("10.0.0.1:65536", "65536"),
                                            ("[fd00::1]:99999", "99999"), ("https://cp:70000", "70000")])
def test_port_out_of_range_names_the_option(endpoint, port):
    with pytest.raises(TalosConfigError, match=r"^Endpoint '.*' from the endpoints option has port '%s': expected a number "
                                               r"from 1 to 65535\.$" % port):
        ConnectionSettings.from_params(params(endpoints=[endpoint], insecure=True), environ={"HOME": "/nonexistent"})


def test_port_out_of_range_in_the_file_names_the_file(tmp_path, pki):
    path = write_config(tmp_path, pki, contexts={"prod": {"endpoints": ["10.5.0.2:123456"], "ca": _b64(pki["ca"]),
                                                          "crt": _b64(pki["crt"]), "key": _b64(pki["key"])}})
    with pytest.raises(TalosConfigError, match=r"from talosconfig context 'prod' \(%s\) has port '123456'" % path):
        ConnectionSettings.from_params(params(talosconfig=path))


def test_directory_is_not_reported_as_missing(tmp_path):
    with pytest.raises(TalosConfigError, match=r"^The talosconfig path %s is a directory: expected a talosconfig file\.$" % tmp_path):
        ConnectionSettings.from_params(params(talosconfig=str(tmp_path)))


def test_binary_file_is_named(tmp_path):
    path = tmp_path / "talosconfig"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    with pytest.raises(TalosConfigError, match=r"^The talosconfig file %s is not a text file" % path):
        ConnectionSettings.from_params(params(talosconfig=str(path)))


@pytest.mark.parametrize("data, expected", [
    ({"context": "a", "contexts": ["a"]}, r"contexts of talosconfig .* must be a mapping"),
    ({"context": "a", "contexts": {"a": {"endpoints": "10.0.0.1"}}}, r"endpoints of context 'a' .* must be a list of addresses"),
    ({"context": "a", "contexts": {"a": {"endpoints": ["10.0.0.1"], "nodes": [1]}}}, r"nodes of context 'a' .* must be a list"),
    ({"context": "a", "contexts": {"a": {"endpoints": ["10.0.0.1"], "ca": ["x"]}}}, r"ca of context 'a' .* must be a string"),
])
def test_malformed_context_fields_are_named(tmp_path, data, expected):
    path = tmp_path / "talosconfig"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TalosConfigError, match=expected):
        ConnectionSettings.from_params(params(talosconfig=str(path)))
