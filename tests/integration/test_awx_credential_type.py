# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The AWX credential type (docs/awx/credential_type_inputs.yml and _injectors.yml) rendered as AWX renders it,
read by the collection, used against the emulator.

Every way a user may fill in the credential (a whole talosconfig, with a context chosen or not; endpoints with the
CA, certificate and key as PEM or as base64; one endpoint, several, with spaces,
newlines or a trailing comma; text pasted with CRLF line ends) must give a file the
collection reads and connects with.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings, relabel_private_key

from awx_job import CredentialType

VERSION = "machine.MachineService/Version"


@pytest.fixture(scope="module")
def cluster(module_emulator):
    return module_emulator(controlplanes=2, workers=1)


@pytest.fixture(scope="module")
def credential_type():
    return CredentialType.load()


def talosconfig_context(cluster):
    with open(cluster.talosconfig_path()) as talosconfig:
        document = yaml.safe_load(talosconfig)
    return document["contexts"][document["context"]]


def pem(value):
    return base64.b64decode(value).decode()


def whole_talosconfig(cluster):
    with open(cluster.talosconfig_path()) as talosconfig:
        return {"talosconfig": talosconfig.read()}, [n.endpoint for n in cluster.controlplanes]


def talosconfig_of_several_contexts(cluster):
    # talosctl config merge leaves several contexts; the current one is used.
    document = {"context": "prod", "contexts": {
        "staging": {"endpoints": ["192.0.2.1"], "ca": "", "crt": "", "key": ""},
        "prod": talosconfig_context(cluster),
    }}
    return {"talosconfig": yaml.safe_dump(document)}, [n.endpoint for n in cluster.controlplanes]


def several_contexts_and_the_context_field(cluster):
    # The Context field picks another context than the file's current one (written last, as talosctl does).
    document = {"contexts": {
        "prod": talosconfig_context(cluster),
        "staging": {"endpoints": ["192.0.2.1"], "ca": "", "crt": "", "key": ""},
    }, "context": "staging"}
    return ({"talosconfig": yaml.safe_dump(document, sort_keys=False), "context": "prod"},
            [n.endpoint for n in cluster.controlplanes])


def pem_fields_one_endpoint(cluster):
    context = talosconfig_context(cluster)
    inputs = dict((name, pem(context[name])) for name in ("ca", "crt", "key"))
    inputs["endpoints"] = cluster.controlplanes[0].endpoint
    return inputs, [cluster.controlplanes[0].endpoint]


def base64_fields_several_endpoints(cluster):
    context = talosconfig_context(cluster)
    inputs = dict((name, context[name]) for name in ("ca", "crt", "key"))
    inputs["endpoints"] = ",".join(n.endpoint for n in cluster.controlplanes)
    return inputs, [n.endpoint for n in cluster.controlplanes]


def endpoints_with_spaces_and_trailing_comma(cluster):
    inputs, expected = base64_fields_several_endpoints(cluster)
    inputs["endpoints"] = "  %s ,   %s , " % tuple(n.endpoint for n in cluster.controlplanes)
    return inputs, expected


def endpoints_one_a_line_first_unreachable(cluster):
    # A dead endpoint first: the client moves on to the next one.
    inputs, _expected = pem_fields_one_endpoint(cluster)
    endpoints = ["127.0.0.1:1"] + [n.endpoint for n in cluster.controlplanes]
    inputs["endpoints"] = "\n".join(endpoints)
    return inputs, endpoints


def pasted_with_crlf_and_wrapped_base64(cluster):
    # Text pasted from a Windows editor, base64 wrapped at 76 columns as base64(1) writes it.
    context = talosconfig_context(cluster)
    inputs = {"endpoints": cluster.controlplanes[1].endpoint,
              "ca": pem(context["ca"]).replace("\n", "\r\n"),
              "crt": "\r\n".join(base64.encodebytes(pem(context["crt"]).encode()).decode().splitlines()),
              "key": pem(context["key"]).replace("\n", "\r\n") + "\r\n"}
    return inputs, [cluster.controlplanes[1].endpoint]


INPUT_STYLES = [
    whole_talosconfig, talosconfig_of_several_contexts, several_contexts_and_the_context_field, pem_fields_one_endpoint,
    base64_fields_several_endpoints,
    endpoints_with_spaces_and_trailing_comma, endpoints_one_a_line_first_unreachable, pasted_with_crlf_and_wrapped_base64,
]


def inject(credential_type, inputs, tmp_path):
    private_data_dir = tmp_path / "private_data_dir"
    (private_data_dir / "env").mkdir(parents=True)
    # Here the execution environment sees the private data dir where it is.
    return credential_type.inject(inputs, str(private_data_dir), container_root=str(private_data_dir))


def test_awx_accepts_the_credential_type(credential_type):
    # Each file is what one field of AWX's form takes, pasted as it is: nothing around it.
    assert set(credential_type.inputs) == {"fields", "required"}
    credential_type.validate()
    assert credential_type.secret_fields == ["talosconfig", "key"]
    assert set(credential_type.injectors) == {"env", "file"}


@pytest.mark.parametrize("broken, reason", [
    ({"env": {"TALOSCONFIG": "{{ tower.filename.talosconfig }}"}, "file": {"template.talosconfig": "{{ nodes }}"}}, "nodes"),
    ({"env": {"ANSIBLE_CONFIG": "{{ tower.filename.talosconfig }}"}, "file": {"template.talosconfig": "x"}}, "ANSIBLE_"),
    ({"env": {"TALOSCONFIG": "{{ tower.filename.other }}"}, "file": {"template.talosconfig": "x"}}, "other"),
    ({"file": {"talosconfig": "x"}}, "template"),
])
def test_awx_refuses_broken_injectors(credential_type, broken, reason):
    # The checks above can fail: AWX refuses to save these.
    with pytest.raises(Exception, match=reason):
        CredentialType({"inputs": credential_type.inputs, "injectors": broken}).validate()


@pytest.mark.parametrize("style", INPUT_STYLES, ids=lambda style: style.__name__)
def test_rendered_talosconfig_reaches_every_node(cluster, credential_type, tmp_path, style):
    inputs, expected_endpoints = style(cluster)
    env, safe_env = inject(credential_type, inputs, tmp_path)

    path = env["TALOSCONFIG"]
    assert safe_env == env, "the environment holds only the file's path, nothing to hide"
    assert os.path.dirname(path) == str(tmp_path / "private_data_dir" / "env")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    settings = ConnectionSettings.from_params({}, environ={"TALOSCONFIG": path})
    context = talosconfig_context(cluster)
    assert settings.config_path == path
    assert settings.endpoints == expected_endpoints
    assert settings.ca == pem(context["ca"])
    assert settings.crt == pem(context["crt"])
    assert settings.key == relabel_private_key(pem(context["key"]))

    with TalosClient(settings) as client:
        replies = client.call_many(VERSION, nodes=[node.address for node in cluster.nodes])
    for node in cluster.nodes:
        assert replies[node.address][0].version.tag == node.talos_version, replies[node.address]


def test_endpoints_and_certificates_win_only_without_a_talosconfig(cluster, credential_type, tmp_path):
    inputs, expected = whole_talosconfig(cluster)
    inputs.update(endpoints="192.0.2.1", ca="not a certificate")
    env, _safe_env = inject(credential_type, inputs, tmp_path)
    settings = ConnectionSettings.from_params({}, environ={"TALOSCONFIG": env["TALOSCONFIG"]})
    assert settings.endpoints == expected


def test_empty_credential_gives_the_collections_own_error(credential_type, tmp_path):
    env, _safe_env = inject(credential_type, {"talosconfig": "", "endpoints": ""}, tmp_path)
    with pytest.raises(TalosConfigError, match="No Talos endpoint is configured"):
        ConnectionSettings.from_params({}, environ={"TALOSCONFIG": env["TALOSCONFIG"]})
