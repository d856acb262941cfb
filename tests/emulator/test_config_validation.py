# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The emulator accepts a machine config only when a Talos node of its version would."""

import pytest
import yaml

from talos_emulator import config_validation, configgen

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents as config_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14")


def generated(bundle, machine_type, contract):
    text = config_generation.generate_machine_config(bundle, machine_type, "c", "https://10.5.0.2:6443", talos_version=contract)
    return list(yaml.safe_load_all(text))


def refusal(documents, talos_version="v1.14.0"):
    with pytest.raises(configgen.ConfigError) as caught:
        configgen.parse_machine_config(go_yaml.dump_documents(documents).encode(), talos_version)
    return caught.value


@pytest.mark.parametrize("contract,node", [("v1.9", "v1.9.0"), ("v1.11", "v1.12.0"), ("v1.12", "v1.12.0"),
                                           ("v1.13", "v1.13.0"), ("v1.13", "v1.14.0"), ("v1.14", "v1.14.0")])
@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
def test_generated_configs_are_accepted(bundle, contract, node, machine_type):
    documents = generated(bundle, machine_type, contract)
    config = configgen.parse_machine_config(go_yaml.dump_documents(documents).encode(), node)
    assert config["machine"]["type"] == machine_type


def test_kinds_newer_than_the_node_are_not_registered(bundle):
    # From v1.12.3 a refusal names the document and the line it starts on; decoding stops at the first failure.
    error = refusal(generated(bundle, "worker", "v1.14"), "v1.13.4")
    assert (error.code, error.kind) == ("InvalidArgument", "parse")
    assert error.message == ('error decoding document v1alpha1/DiscoveryServiceConfig/default (line 16): '
                             '"DiscoveryServiceConfig" "v1alpha1": not registered')
    documents = generated(bundle, "worker", "v1.13")
    # The HostnameConfig first: a v1.11 node refuses the v1alpha1 document's grubUseUKICmdline too.
    assert refusal(documents[1:] + documents[:1], "v1.11.6").message == '"HostnameConfig" "v1alpha1": not registered'
    oom = {"apiVersion": "v1alpha1", "kind": "OOMConfig"}
    assert refusal(documents + [oom], "v1.11.6").message.startswith("unknown keys found during decoding:\nmachine:\n")
    configgen.parse_machine_config(go_yaml.dump_documents(documents + [oom]).encode(), "v1.12.0")


def test_unknown_keys_are_refused(bundle):
    documents = generated(bundle, "worker", "v1.13")
    documents[0]["machine"]["kubeletx"] = {}
    error = refusal(documents)
    assert error.kind == "parse"
    assert error.message == "error decoding document /v1alpha1/ (line 1): unknown keys found during decoding:\nmachine:\n    kubeletx: {}\n"
    assert refusal(documents, "v1.12.2").message == "unknown keys found during decoding:\nmachine:\n    kubeletx: {}\n"
    documents = generated(bundle, "worker", "v1.14")
    documents[-1]["portt"] = 1
    assert refusal(documents).message.endswith("(line 98): unknown keys found during decoding:\nportt: 1\n")


@pytest.mark.parametrize("node,known", [("v1.12.8", False), ("v1.12.9", True), ("v1.13.0", False), ("v1.13.3", False),
                                        ("v1.13.4", True), ("v1.14.0", True)])
def test_fields_newer_than_the_node_are_unknown_keys(bundle, node, known):
    documents = generated(bundle, "worker", "v1.12")
    documents.append({"apiVersion": "v1alpha1", "kind": "OOMConfig", "strictCgroupClassOrdering": True})
    text = go_yaml.dump_documents(documents).encode()
    if known:
        configgen.parse_machine_config(text, node)
    else:
        assert refusal(documents, node).message.endswith("unknown keys found during decoding:\nstrictCgroupClassOrdering: true\n")


def test_list_valued_extra_args_need_v1_13(bundle):
    documents = generated(bundle, "worker", "v1.12")
    documents[0]["machine"]["kubelet"]["extraArgs"] = {"feature-gates": ["A=true", "B=true"]}
    assert "cannot unmarshal !!seq into string" in refusal(documents, "v1.12.11").message
    configgen.parse_machine_config(go_yaml.dump_documents(documents).encode(), "v1.13.0")
    documents[0]["machine"]["kubelet"]["extraArgs"] = {"feature-gates": "A=true,B=true"}
    configgen.parse_machine_config(go_yaml.dump_documents(documents).encode(), "v1.12.0")


def test_ca_keys_by_machine_type(bundle):
    worker = generated(bundle, "worker", "v1.13")
    controlplane = generated(bundle, "controlplane", "v1.13")
    worker[0]["machine"]["ca"]["key"] = controlplane[0]["machine"]["ca"]["key"]
    assert "issuing Talos API CA key is not allowed on non-controlplane nodes" in refusal(worker).message
    controlplane[0]["machine"]["ca"]["key"] = ""
    assert "issuing CA key is required for controlplane nodes" in refusal(controlplane).message


@pytest.mark.parametrize("endpoint", ["https://10.5.0.2:99999", "https://:6443", "https://fd00::1:6443"])
def test_endpoint_form(bundle, endpoint):
    documents = generated(bundle, "worker", "v1.13")
    documents[0]["cluster"]["controlPlane"]["endpoint"] = endpoint
    assert "cluster endpoint is invalid" in refusal(documents).message
    documents = generated(bundle, "worker", "v1.14")
    [cluster] = [document for document in documents if document.get("kind") == "KubeClusterConfig"]
    cluster["endpoint"] = endpoint
    assert "cluster endpoint is invalid" in refusal(documents).message


def test_new_documents_refuse_their_legacy_fields(bundle):
    documents = generated(bundle, "worker", "v1.14")
    documents[0]["cluster"]["clusterName"] = "legacy"
    documents[0]["machine"]["install"] = {"disk": "/dev/sda"}
    message = refusal(documents).message
    assert ".cluster.clusterName is already set" in message
    assert "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)" in message


def test_either_installer_home_but_not_both(bundle):
    for home in ("machine", "unattended"):
        text = config_generation.generate_machine_config(bundle, "worker", "c", "https://10.5.0.2:6443",
                                                         talos_version="v1.14", install_home=home)
        configgen.parse_machine_config(text.encode(), "v1.14.0")
    documents = generated(bundle, "worker", "v1.14")
    # Even an empty section counts, as a non-nil MachineInstall in Talos.
    documents[0]["machine"]["install"] = {}
    assert "incompatible with v1alpha1 config (.machine.install)" in refusal(documents).message
    documents = generated(bundle, "worker", "v1.14")
    [unattended] = [document for document in documents if document.get("kind") == "UnattendedInstallConfig"]
    del unattended["provisioning"]["diskSelector"]
    assert "UnattendedInstallConfig: provisioning.volumeSelector.match is required" in refusal(documents).message
    unattended["provisioning"]["diskSelectorr"] = {"match": "true"}
    error = refusal(documents)
    assert error.kind == "parse" and "v1alpha1/UnattendedInstallConfig/ (line" in error.message
    assert error.message.endswith("unknown keys found during decoding:\nprovisioning:\n    diskSelectorr:\n        match: 'true'\n")


def test_hostname_config_rules(bundle):
    documents = generated(bundle, "worker", "v1.13")
    documents[0]["machine"]["network"] = {"hostname": "legacy"}
    assert "static hostname is already set in v1alpha1 config" in refusal(documents).message
    documents = generated(bundle, "worker", "v1.14")
    [hostname] = [document for document in documents if document.get("kind") == "HostnameConfig"]
    hostname["hostname"] = "w-1"
    assert "'auto' and 'hostname' cannot be set at the same time" in refusal(documents).message
    del hostname["auto"]
    text = go_yaml.dump_documents(documents).encode()
    configgen.parse_machine_config(text, "v1.14.0")
    assert configgen.configured_hostname(text) == "w-1"


def test_discovery_identity_and_service_account(bundle):
    documents = generated(bundle, "controlplane", "v1.14")
    by_kind = dict((document.get("kind"), document) for document in documents)
    by_kind["DiscoveryIdentityConfig"]["clusterSecret"] = "short"
    by_kind["KubeServiceAccountConfig"]["issuer"]["privateKey"] = "not a key"
    message = refusal(documents).message
    assert "clusterSecret must be 32 bytes" in message and "service account key: failed to parse PEM block" in message
    legacy = generated(bundle, "worker", "v1.13")
    del legacy[0]["cluster"]["secret"]
    assert "requires .cluster.id and .cluster.secret" in refusal(legacy).message


RELEASES = ["v1.9.0", "v1.9.6", "v1.10.0", "v1.10.9", "v1.11.0", "v1.11.6", "v1.12.0", "v1.12.3", "v1.12.4", "v1.12.8",
            "v1.12.9", "v1.12.11", "v1.13.0", "v1.13.3", "v1.13.4", "v1.13.9", "v1.14.0", "v1.14.1"]


@pytest.mark.parametrize("release", RELEASES)
def test_the_collection_refuses_before_sending_exactly_what_the_node_cannot_decode(bundle, release):
    """talos_apply_config's check (config/documents.py) and the emulated node agree, kind by kind and on every field
    gate the emulator models."""
    cases = [[{"apiVersion": "v1alpha1", "kind": kind}] for kind in config_documents.KIND_SINCE if kind != "v1alpha1"]
    for kind, fields in config_validation._FIELDS_SINCE.items():
        for path, _firsts in fields:
            document = {"version": "v1alpha1"} if kind is None else {"apiVersion": "v1alpha1", "kind": kind}
            *parents, leaf = path.split(".")
            target = document
            for key in parents:
                target = target.setdefault(key, {})
            target[leaf] = True
            cases.append([document])
    cases.append(generated(bundle, "worker", "v1.12")[:1])
    cases[-1][0]["machine"]["kubelet"]["extraArgs"] = {"feature-gates": ["A=true"]}
    for config in cases:
        node_refuses = config_validation.decode_problem(config, release, go_yaml.dump_documents(config)) is not None
        try:
            config_documents.check_fits(config, release, "the node")
            refused = False
        except TalosError:
            refused = True
        assert refused == node_refuses, (release, config)
