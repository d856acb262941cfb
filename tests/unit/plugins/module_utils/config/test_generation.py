# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Machine config generation per version contract (config-generation.md sections 3 and 4)."""

import base64

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import validate_cluster_endpoint
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

ENDPOINT = "https://cp.example:6443"
V114_CONTROLPLANE_KINDS = [
    "DiscoveryServiceConfig", "DiscoveryIdentityConfig", "UnattendedInstallConfig", "ResolverConfig", "VolumeConfig",
    "FilesystemTrimConfig", "SecurityProfileConfig", "HostnameConfig", "KubeClusterConfig", "KubeNodeConfig",
    "KubeletConfig", "KubeNetworkConfig", "KubeAPIServerCAConfig", "KubePrismConfig", "KubeAggregatorCAConfig",
    "KubeAdmissionControlConfig", "KubeAuditPolicyConfig", "KubeAuthenticationConfig", "KubeAuthorizerConfig",
    "KubeAuthorizerConfig", "KubeEtcdEncryptionConfig", "KubeServiceAccountConfig", "KubeAPIServerConfig",
    "KubeControllerManagerConfig", "KubeSchedulerConfig", "KubeProxyConfig", "KubeFlannelCNIConfig", "KubeCoreDNSConfig",
]
V114_WORKER_KINDS = V114_CONTROLPLANE_KINDS[:V114_CONTROLPLANE_KINDS.index("KubeAggregatorCAConfig")]


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14")


def render(bundle, machine_type, version, **options):
    text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version, **options)
    return text, list(yaml.safe_load_all(text))


def kinds(documents):
    return [document.get("kind") for document in documents[1:]]


@pytest.mark.parametrize("version,expected", [
    ("v1.9", []), ("v1.11", []), ("v1.12", ["HostnameConfig"]), ("v1.13", ["HostnameConfig"]),
])
@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
def test_legacy_layouts(bundle, version, expected, machine_type):
    text, documents = render(bundle, machine_type, version)
    assert documents[0]["version"] == "v1alpha1" and "kind" not in documents[0]
    assert kinds(documents) == expected
    machine, cluster = documents[0]["machine"], documents[0]["cluster"]
    assert machine["type"] == machine_type
    assert machine["token"] == bundle.trustd_token and cluster["token"] == bundle.bootstrap_token
    assert cluster["controlPlane"]["endpoint"] == ENDPOINT and cluster["clusterName"] == "prod"
    assert cluster["id"] == bundle.cluster_id and cluster["secret"] == bundle.cluster_secret
    features = machine["features"]
    assert ("stableHostname" in features) == (version in ("v1.9", "v1.11"))
    assert ("network" in machine) == (version != "v1.13")
    assert machine["install"]["disk"] == "/dev/sda" and machine["install"]["wipe"] is False
    assert machine["install"].get("grubUseUKICmdline") is (True if version in ("v1.12", "v1.13") else None)
    assert "ghcr.io/siderolabs/installer:%s.0" % version == machine["install"]["image"]
    assert documents[0]["persist"] is True and documents[0]["debug"] is False
    if machine_type == "worker":
        assert machine["ca"]["key"] == "" and cluster["ca"]["key"] == ""
        assert '        key: ""\n' in text
        for absent in ("aggregatorCA", "serviceAccount", "apiServer", "etcd", "secretboxEncryptionSecret"):
            assert absent not in cluster
        assert "nodeLabels" not in machine
    else:
        assert base64.b64decode(machine["ca"]["key"]).decode() == bundle.os_ca.key_pem
        assert base64.b64decode(cluster["etcd"]["ca"]["key"]).decode() == bundle.cas["etcd"].key_pem
        assert base64.b64decode(cluster["serviceAccount"]["key"]).decode() == bundle.service_account_key_pem
        assert cluster["secretboxEncryptionSecret"] == bundle.secretbox_secret
        assert cluster["apiServer"]["image"] == "registry.k8s.io/kube-apiserver:v%s" % {
            "v1.9": "1.32.4", "v1.11": "1.34.1", "v1.12": "1.35.4", "v1.13": "1.36.3"}[version]
        assert machine["nodeLabels"] == {"node.kubernetes.io/exclude-from-external-load-balancers": ""}


@pytest.mark.parametrize("machine_type,expected", [("controlplane", V114_CONTROLPLANE_KINDS), ("worker", V114_WORKER_KINDS)])
def test_v114_multi_document_layout(bundle, machine_type, expected):
    text, documents = render(bundle, machine_type, "v1.14")
    assert kinds(documents) == expected
    assert all(document["apiVersion"] == "v1alpha1" for document in documents[1:])
    v1alpha1 = documents[0]
    assert set(v1alpha1["machine"]) == {"type", "token", "ca", "certSANs", "features"}
    by_kind = dict((document["kind"], document) for document in documents[1:])
    assert by_kind["DiscoveryIdentityConfig"] == {"apiVersion": "v1alpha1", "kind": "DiscoveryIdentityConfig",
                                                  "clusterID": bundle.cluster_id, "clusterSecret": bundle.cluster_secret}
    assert by_kind["UnattendedInstallConfig"]["provisioning"]["diskSelector"]["match"] == 'disk.dev_path == "/dev/sda"'
    assert by_kind["UnattendedInstallConfig"]["installer"]["image"].startswith("factory.talos.dev/metal-installer/")
    assert by_kind["KubeletConfig"]["image"] == "ghcr.io/siderolabs/kubelet:v1.37.0"
    if machine_type == "worker":
        assert v1alpha1["cluster"] == {"token": bundle.bootstrap_token}
        assert v1alpha1["machine"]["ca"]["key"] == ""
        assert by_kind["KubeAPIServerCAConfig"]["acceptedCAs"] == [bundle.cas["k8s"].crt_pem]
        for secret in (bundle.os_ca.key_pem, bundle.cas["k8s"].key_pem, bundle.service_account_key_pem, bundle.secretbox_secret):
            assert secret not in text and base64.b64encode(secret.encode()).decode() not in text
    else:
        assert by_kind["KubeAPIServerCAConfig"]["issuingCA"] == {"cert": bundle.cas["k8s"].crt_pem, "key": bundle.cas["k8s"].key_pem}
        assert by_kind["KubeServiceAccountConfig"]["issuer"] == {"privateKey": bundle.service_account_key_pem, "issuerURL": ENDPOINT}
        providers = by_kind["KubeEtcdEncryptionConfig"]["config"]["resources"][0]["providers"]
        assert providers == [{"secretbox": {"keys": [{"name": "key2", "secret": bundle.secretbox_secret}]}}]
        assert by_kind["KubeNodeConfig"]["taints"] == {"node-role.kubernetes.io/control-plane": "NoSchedule"}
        # PEM in the new documents is a literal block, not base64.
        assert "    cert: |\n        -----BEGIN CERTIFICATE-----\n" in text


def test_output_is_deterministic_and_go_shaped(bundle):
    first, _docs = render(bundle, "controlplane", "v1.14", additional_sans=["10.0.0.1", "lb.example"])
    second, _docs = render(bundle, "controlplane", "v1.14", additional_sans=["10.0.0.1", "lb.example"])
    assert first == second
    assert not first.startswith("---") and "\n---\napiVersion: v1alpha1\n" in first
    assert "    podSubnets:\n" not in first and "podSubnets:\n    - 10.244.0.0/16\n" in first
    assert "certExtraSANs:\n    - 10.0.0.1\n    - lb.example\n" in first
    assert "\nnodeIP: {}\n" in first and "\nconfig: {}\n" in first and "\n        - providers:\n            - secretbox:\n" in first


def test_additional_sans_and_apiserver_sans_by_contract(bundle):
    _text, old = render(bundle, "controlplane", "v1.11", additional_sans=["lb.example"])
    assert old[0]["cluster"]["apiServer"]["certSANs"] == ["cp.example", "lb.example"]
    assert old[0]["machine"]["certSANs"] == ["lb.example"]
    # As talosctl: the endpoint host first, then every additional SAN, a repeated name included.
    _text, repeated = render(bundle, "controlplane", "v1.11", additional_sans=["cp.example"])
    assert repeated[0]["cluster"]["apiServer"]["certSANs"] == ["cp.example", "cp.example"]
    _text, new = render(bundle, "controlplane", "v1.12")
    assert "certSANs" not in new[0]["cluster"]["apiServer"]


def test_options(bundle):
    _text, documents = render(bundle, "worker", "v1.13", kubernetes_version="v1.35.0", install_disk="/dev/nvme0n1",
                              install_image="registry.example/installer:v1.13.2")
    machine = documents[0]["machine"]
    assert machine["kubelet"]["image"] == "ghcr.io/siderolabs/kubelet:v1.35.0"
    assert machine["install"]["disk"] == "/dev/nvme0n1" and machine["install"]["image"] == "registry.example/installer:v1.13.2"
    _text, documents = render(bundle, "worker", "v1.14", install_disk=None)
    assert "UnattendedInstallConfig" not in kinds(documents)


def test_v114_installer_in_either_home(bundle):
    default, documents = render(bundle, "worker", "v1.14", install_image="registry.example/installer:v1.14.1")
    unattended, _docs = render(bundle, "worker", "v1.14", install_image="registry.example/installer:v1.14.1",
                               install_home="unattended")
    assert unattended == default and "install" not in documents[0]["machine"]
    [document] = [document for document in documents if document.get("kind") == "UnattendedInstallConfig"]
    assert document == {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
                        "installer": {"image": "registry.example/installer:v1.14.1"},
                        "provisioning": {"diskSelector": {"match": 'disk.dev_path == "/dev/sda"'}, "wipe": False}}

    text, documents = render(bundle, "worker", "v1.14", install_image="registry.example/installer:v1.14.1",
                             install_disk="/dev/nvme0n1", install_home="machine")
    assert "UnattendedInstallConfig" not in kinds(documents)
    assert documents[0]["machine"]["install"] == {"disk": "/dev/nvme0n1", "image": "registry.example/installer:v1.14.1",
                                                  "wipe": False, "grubUseUKICmdline": True}
    # Go's field order: install between certSANs and features.
    assert "    certSANs: []\n    install:\n        disk: /dev/nvme0n1\n" in text and "\n    features:\n" in text
    # Every other document is the same as with the default home.
    assert documents[1:] == [
        document for document in list(yaml.safe_load_all(default))[1:] if document["kind"] != "UnattendedInstallConfig"]


def test_unattended_home_without_a_disk_writes_no_document(bundle):
    _text, documents = render(bundle, "controlplane", "v1.14", install_disk="", install_home="unattended")
    assert "UnattendedInstallConfig" not in kinds(documents) and "install" not in documents[0]["machine"]


@pytest.mark.parametrize("version", ["v1.9", "v1.13"])
def test_contracts_before_v114_keep_the_machine_home(bundle, version):
    default, documents = render(bundle, "worker", version)
    machine, _docs = render(bundle, "worker", version, install_home="machine")
    assert default == machine and documents[0]["machine"]["install"]["disk"] == "/dev/sda"
    with pytest.raises(TalosConfigError) as caught:
        render(bundle, "worker", version, install_home="unattended")
    assert caught.value.message == (
        "install_home unattended needs talos_version v1.14 or later: Talos %s has no UnattendedInstallConfig document, so "
        "its installer and install disk go in .machine.install (install_home machine)." % version)


def test_unknown_install_home(bundle):
    with pytest.raises(TalosConfigError) as caught:
        render(bundle, "worker", "v1.14", install_home="meta")
    assert caught.value.message == "install_home must be one of machine, unattended, got 'meta'."


@pytest.mark.parametrize("home,patch", [
    (None, {"machine": {"install": {"extraKernelArgs": ["console=ttyS0"]}}}),
    ("machine", {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig", "installer": {"image": "x/installer:v1"}}),
])
def test_patches_may_not_add_the_other_home(bundle, home, patch):
    with pytest.raises(TalosConfigError) as caught:
        render(bundle, "worker", "v1.14", install_home=home, config_patches=[patch])
    assert caught.value.message.startswith(
        "config_patches give the machine config both a .machine.install section and an UnattendedInstallConfig document, "
        "which Talos refuses together: patch only the home install_home chooses (%s here)" % (home or "unattended"))


def test_patches_select_the_disk_in_the_home_in_use(bundle):
    _text, documents = render(bundle, "worker", "v1.14", install_home="machine", install_disk="", config_patches=[
        {"machine": {"install": {"diskSelector": {"size": ">= 100GB"}}}}])
    assert documents[0]["machine"]["install"]["diskSelector"] == {"size": ">= 100GB"}
    _text, documents = render(bundle, "worker", "v1.14", config_patches=[
        {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
         "provisioning": {"diskSelector": {"match": 'disk.transport == "nvme"'}}}])
    [document] = [document for document in documents if document.get("kind") == "UnattendedInstallConfig"]
    assert document["provisioning"] == {"diskSelector": {"match": 'disk.transport == "nvme"'}, "wipe": False}


def test_patches_reuse_apply_patches(bundle):
    _text, documents = render(bundle, "controlplane", "v1.14", config_patches=[
        {"machine": {"certSANs": ["a.example"]}},
        {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None, "hostname": "cp-1"},
    ])
    assert documents[0]["machine"]["certSANs"] == ["a.example"]
    hostname = [document for document in documents if document.get("kind") == "HostnameConfig"][0]
    assert hostname == {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "cp-1"}
    with pytest.raises(TalosConfigError) as caught:
        render(bundle, "controlplane", "v1.14", config_patches=[[{"op": "remove", "path": "/nope"}]])
    assert "config_patches[0]" in caught.value.message


@pytest.mark.parametrize("endpoint,fragment", [
    ("cp.example:6443", "has no scheme"),
    ("http://cp.example:6443", "must use https"),
    ("https://:6443", "names no host"),
    ("https://fd00::1:6443", "without brackets"),
    ("https://cp.example:port", "invalid port"),
    ("https://cp.example:70000", "invalid port"),
])
def test_endpoint_validation(endpoint, fragment):
    with pytest.raises(TalosConfigError) as caught:
        validate_cluster_endpoint(endpoint)
    assert fragment in caught.value.message and "cluster_endpoint" in caught.value.message


@pytest.mark.parametrize("endpoint,host", [
    ("https://cp.example:6443", "cp.example"), ("https://lb.example", "lb.example"), ("https://[fd00::1]:6443", "fd00::1"),
])
def test_valid_endpoints(endpoint, host):
    assert validate_cluster_endpoint(endpoint) == (endpoint, host)


@pytest.mark.parametrize("version", ["v1.8", "v1.15", "1.x", "latest"])
def test_unsupported_contracts(bundle, version):
    with pytest.raises(TalosConfigError) as caught:
        render(bundle, "worker", version)
    assert "talos_version" in caught.value.message


def test_controlplane_config_gives_back_the_bundle(bundle):
    for version in ("v1.13", "v1.14"):
        text, _docs = render(bundle, "controlplane", version)
        adopted = SecretsBundle.from_controlplane_config(text, "controlplane.yaml")
        assert adopted.to_yaml() == bundle.to_yaml()
    worker, _docs = render(bundle, "worker", "v1.14")
    with pytest.raises(TalosConfigError) as caught:
        SecretsBundle.from_controlplane_config(worker, "worker.yaml")
    assert "worker config" in caught.value.message


@pytest.mark.parametrize("value,expected", [
    ("", '""'), ("true", '"true"'), ("123", '"123"'), ("plain text", "plain text"), ("a: b", "'a: b'"),
    ("- x", "'- x'"), ('disk.dev_path == "/dev/sda"', 'disk.dev_path == "/dev/sda"'),
])
def test_go_yaml_scalars(value, expected):
    assert go_yaml.dump({"k": value}) == "k: %s\n" % expected
    assert yaml.safe_load(go_yaml.dump({"k": value})) == {"k": value}


def test_go_yaml_reads_back_what_patches_may_add():
    document = {"a": [[1, 2], [{"x": 1, "y": [3]}], "s"], "b": [{}], "c": {"k": "multi\nline\n", "n": None, "f": 1.5},
                "d": ["x\ny"], "e": {"1": "on", "t": "2026-01-01"}}
    assert yaml.safe_load(go_yaml.dump(document)) == document
