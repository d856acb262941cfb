# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""talos_machine_config run(): write once, unchanged after, return without dest, aescbc-era bundles."""

import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle, random_secret
from ansible_collections.talos_linux.talos.plugins.modules import talos_machine_config

from module_fakes import run_task


def run(check_mode=False, **params):
    options = dict(machine_type="controlplane", cluster_name="c", cluster_endpoint="https://10.5.0.2:6443")
    options.update(params)
    return run_task(talos_machine_config, None, check_mode=check_mode, **options)


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "secrets.yaml"
    path.write_text(SecretsBundle.generate("v1.14").to_yaml())
    return str(path)


def test_writes_once_and_returns_without_dest(bundle_path, tmp_path):
    dest = tmp_path / "cp.yaml"
    ok, result, _task = run(check_mode=True, secrets=bundle_path, dest=str(dest))
    assert ok and result["changed"] and not dest.exists()
    ok, result, _task = run(secrets=bundle_path, dest=str(dest))
    assert ok and result["changed"] and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert result["documents"][:2] == ["v1alpha1", "DiscoveryServiceConfig/default"] and "config" not in result
    assert "<redacted>" in result["diff"]["after"]
    ok, again, _task = run(secrets=bundle_path, dest=str(dest))
    assert again["changed"] is False and again["sha256"] == result["sha256"]
    ok, returned, _task = run(secrets=bundle_path)
    assert returned["config"] == dest.read_text() and returned["changed"] is False


def test_patch_secrets_are_masked(bundle_path):
    ok, result, task = run(secrets=bundle_path, config_patches=[{"machine": {"token": "abcdef.0123456789abcdef"}}])
    assert ok and "abcdef.0123456789abcdef" in task.no_log_values
    assert yaml.safe_load(result["config"].split("---")[0])["machine"]["token"] == "abcdef.0123456789abcdef"


def test_aescbc_bundles_warn_on_the_v114_contract(tmp_path):
    bundle = SecretsBundle.generate("v1.14")
    bundle.secretbox_secret, bundle.aescbc_secret = None, random_secret()
    path = tmp_path / "secrets.yaml"
    path.write_text(bundle.to_yaml())
    ok, result, task = run(secrets=str(path))
    assert ok and any("aescbc" in warning for warning in task.warnings)
    assert bundle.aescbc_secret not in " ".join(task.warnings)
    ok, result, task = run(secrets=str(path), talos_version="v1.13")
    assert not task.warnings
    assert yaml.safe_load(result["config"].split("---")[0])["cluster"]["aescbcEncryptionSecret"] == bundle.aescbc_secret


def test_with_docs_and_examples_rewrite_once_and_keep_the_data(bundle_path, tmp_path):
    dest = tmp_path / "worker.yaml"
    ok, plain, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest))
    plain_text = dest.read_text()
    ok, result, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest), with_docs=True, with_examples=True)
    assert ok and result["changed"] and result["sha256"] != plain["sha256"]
    text = dest.read_text()
    assert "\n# Example, " in text and "\n# How the node gets its hostname.\n" in text
    assert list(yaml.safe_load_all(text)) == list(yaml.safe_load_all(plain_text))
    assert result["documents"] == plain["documents"]
    ok, again, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest), with_docs=True, with_examples=True)
    assert again["changed"] is False


def test_mode_is_corrected_without_rewriting(bundle_path, tmp_path):
    dest = tmp_path / "worker.yaml"
    run(secrets=bundle_path, machine_type="worker", dest=str(dest))
    dest.chmod(0o644)
    content = dest.read_bytes()
    ok, result, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest))
    assert ok and result["changed"] is True and stat.S_IMODE(dest.stat().st_mode) == 0o600 and dest.read_bytes() == content


def test_missing_directory_fails_before_rendering(bundle_path, tmp_path):
    with pytest.raises(TalosError, match=r"^Cannot write the machine config to .*: directory .*missing does not exist\.$"):
        run(secrets=bundle_path, dest=str(tmp_path / "missing" / "cp.yaml"))


@pytest.mark.parametrize("talos_version, documents", [
    ("v1.14.1", "v1alpha1, DiscoveryServiceConfig/default"),
    ("v1.12", "v1alpha1, HostnameConfig"),
])
def test_json_patch_is_refused_on_multi_document_contracts(bundle_path, tmp_path, talos_version, documents):
    dest = tmp_path / "cp.yaml"
    patch = [{"op": "add", "path": "/machine/certSANs/-", "value": "api.example.com"}]
    with pytest.raises(TalosError) as raised:
        run(secrets=bundle_path, talos_version=talos_version, dest=str(dest), config_patches=[patch])
    assert raised.value.message.startswith("config_patches[0] is a JSON patch (RFC 6902), which cannot be applied to a "
                                           "multi-document machine config (%s" % documents)
    assert not dest.exists()


def test_json_patch_applies_on_single_document_contracts(bundle_path):
    patch = [{"op": "add", "path": "/machine/certSANs/-", "value": "api.example.com"}]
    ok, result, _task = run(secrets=bundle_path, talos_version="v1.11", config_patches=[patch])
    assert ok and result["documents"] == ["v1alpha1"]
    assert "api.example.com" in yaml.safe_load(result["config"])["machine"]["certSANs"]


def test_install_home_moves_the_installer(bundle_path, tmp_path):
    dest = tmp_path / "worker.yaml"
    ok, unattended, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest))
    assert ok and "UnattendedInstallConfig" in unattended["documents"]
    ok, machine, _task = run(secrets=bundle_path, machine_type="worker", dest=str(dest), install_home="machine",
                             install_image="registry.example/installer:v1.14.1")
    assert ok and machine["changed"] and "UnattendedInstallConfig" not in machine["documents"]
    assert yaml.safe_load(dest.read_text().split("---")[0])["machine"]["install"]["image"] == "registry.example/installer:v1.14.1"


def test_unattended_home_is_refused_before_v114(bundle_path, tmp_path):
    dest = tmp_path / "worker.yaml"
    with pytest.raises(TalosError) as raised:
        run(secrets=bundle_path, machine_type="worker", talos_version="v1.13.4", install_home="unattended", dest=str(dest))
    assert raised.value.message.startswith("install_home unattended needs talos_version v1.14 or later: Talos v1.13 has no "
                                           "UnattendedInstallConfig document")
    assert not dest.exists()


def test_a_patch_the_contract_s_release_does_not_know_is_refused_before_writing(bundle_path, tmp_path):
    dest = tmp_path / "worker.yaml"
    kubelet = {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "image": "ghcr.io/siderolabs/kubelet:v1.36.3"}
    with pytest.raises(TalosError) as raised:
        run(secrets=bundle_path, machine_type="worker", talos_version="v1.13", dest=str(dest), config_patches=[kubelet])
    assert raised.value.message == ("The config's KubeletConfig document needs Talos v1.14.0 or newer; talos_version v1.13 "
                                    "(v1.13.0) is the oldest Talos the config is for.")
    assert not dest.exists()
    oom = {"apiVersion": "v1alpha1", "kind": "OOMConfig", "strictCgroupClassOrdering": True}
    with pytest.raises(TalosError, match=r"OOMConfig document sets strictCgroupClassOrdering, which needs Talos v1\.12\.9 or a "
                                         r"later v1\.12 release, or v1\.13\.4 or newer; talos_version v1\.13\.3 is the oldest"):
        run(secrets=bundle_path, machine_type="worker", talos_version="v1.13.3", dest=str(dest), config_patches=[oom])
    ok, result, _task = run(secrets=bundle_path, machine_type="worker", talos_version="v1.13.4", dest=str(dest),
                            config_patches=[oom])
    assert ok and result["valid_for"] == {"min": "v1.12.9", "releases": {"v1.12": "v1.12.9", "v1.13": "v1.13.4",
                                                                         "v1.14": "v1.14.0"}}


@pytest.mark.parametrize("talos_version,valid_for", [
    ("v1.11", {"min": "v1.9.0", "releases": {"v1.9": "v1.9.0", "v1.10": "v1.10.0", "v1.11": "v1.11.0", "v1.12": "v1.12.0",
                                             "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}),
    ("v1.13", {"min": "v1.12.0", "releases": {"v1.12": "v1.12.0", "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}),
    ("v1.14.1", {"min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}),
])
def test_the_result_says_which_releases_the_config_is_valid_for(bundle_path, talos_version, valid_for):
    ok, result, _task = run(secrets=bundle_path, talos_version=talos_version)
    assert ok and result["valid_for"] == valid_for
