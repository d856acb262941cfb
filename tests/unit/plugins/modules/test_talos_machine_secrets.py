# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""talos_machine_secrets run(): create once, validate after, check mode, absent, adoption."""

import os
import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.modules import talos_machine_secrets

from module_fakes import run_task


def run(check_mode=False, **params):
    return run_task(talos_machine_secrets, None, check_mode=check_mode, **params)


@pytest.fixture(scope="module")
def bundle_text():
    return SecretsBundle.generate("v1.14").to_yaml()


def test_creates_once_then_validates(tmp_path):
    path = tmp_path / "secrets.yaml"
    ok, result, _task = run(path=str(path))
    assert ok and result["changed"] is True and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(result["certificates"]) == {"etcd", "k8s", "k8saggregator", "os"}
    content = path.read_bytes()
    bundle = SecretsBundle.load(str(path))
    assert not any(secret in repr(result) for secret in bundle.secret_values())

    ok, result, _task = run(path=str(path))
    assert ok and result["changed"] is False and path.read_bytes() == content

    path.chmod(0o644)
    ok, result, _task = run(path=str(path))
    assert result["changed"] is True and stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == content


def test_check_mode_and_absent(tmp_path):
    path = tmp_path / "secrets.yaml"
    ok, result, _task = run(check_mode=True, path=str(path))
    assert ok and result["changed"] is True and not path.exists()
    run(path=str(path))
    ok, result, _task = run(check_mode=True, path=str(path), state="absent")
    assert result["changed"] is True and path.exists()
    ok, result, _task = run(path=str(path), state="absent")
    assert result["changed"] is True and not path.exists()
    ok, result, _task = run(path=str(path), state="absent")
    assert ok and result["changed"] is False


def test_damaged_bundle_fails_and_stays(tmp_path, bundle_text):
    path = tmp_path / "secrets.yaml"
    document = yaml.safe_load(bundle_text)
    del document["trustdinfo"]
    path.write_text(yaml.safe_dump(document))
    content = path.read_bytes()
    with pytest.raises(TalosError, match="trustdinfo.token is missing"):
        run(path=str(path))
    assert path.read_bytes() == content


def test_adopts_a_controlplane_config(tmp_path, bundle_text):
    source = tmp_path / "original.yaml"
    source.write_text(bundle_text)
    config = tmp_path / "controlplane.yaml"
    config.write_text(config_generation.render_machine_config(str(source), "controlplane", "c", "https://10.5.0.2:6443"))
    path = tmp_path / "secrets.yaml"
    ok, result, _task = run(path=str(path), from_controlplane_config=str(config))
    assert ok and result["changed"] is True
    assert path.read_text() == bundle_text


def test_bad_mode_names_the_option(tmp_path):
    with pytest.raises(TalosError, match="mode must be an octal permission string"):
        run(path=str(tmp_path / "s.yaml"), mode="rw")
    assert not os.listdir(str(tmp_path))


def test_mode_option_is_kept_and_a_directory_in_the_way_is_named(tmp_path):
    path = tmp_path / "secrets.yaml"
    ok, result, _task = run(path=str(path), mode="0640")
    assert ok and stat.S_IMODE(path.stat().st_mode) == 0o640
    ok, result, _task = run(path=str(path), mode="0640")
    assert result["changed"] is False
    with pytest.raises(TalosError, match=r"^Cannot write the secrets bundle to .*: it is a directory; set path to a file path\.$"):
        run(path=str(tmp_path))


def test_unreadable_source_config_is_named(tmp_path):
    with pytest.raises(TalosError, match=r"^from_controlplane_config .*missing.yaml cannot be read"):
        run(path=str(tmp_path / "secrets.yaml"), from_controlplane_config=str(tmp_path / "missing.yaml"))
