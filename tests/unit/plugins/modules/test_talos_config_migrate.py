# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""talos_config_migrate run() on the controller: plan only, written once, check mode, refusals carrying the plan."""

import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.modules import talos_config_migrate

from module_fakes import run_task


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    bundle = SecretsBundle.generate("v1.13")
    path = tmp_path_factory.mktemp("configs") / "controlplane.yaml"
    path.write_text(generation.generate_machine_config(bundle, "controlplane", "c", "https://10.5.0.2:6443", talos_version="v1.13",
                                                       config_patches=[{"machine": {"kubelet": {"extraMounts": [
                                                           {"destination": "/var/a", "source": "/var/a"}]}}}]))
    return path, bundle.secretbox_secret


def test_plans_writes_once_and_changes_nothing_after(legacy, tmp_path):
    path, secretbox = legacy
    dest = tmp_path / "controlplane-1.14.yaml"
    options = dict(config_file=str(path), accept_dropped=["machine.kubelet.extraMounts"])
    ok, planned, _task = run_task(talos_config_migrate, None, diff=True, **options)
    assert ok and planned["changed"] is False and "dest" not in planned
    assert ".machine.kubelet.extraMounts: KubeletConfig mounts nothing for the kubelet; dropped as accept_dropped allows" in (
        planned["plan"]["dropped"])
    assert secretbox not in repr(planned) and "<redacted>" in planned["diff"]["after"]
    ok, checked, _task = run_task(talos_config_migrate, None, check_mode=True, dest=str(dest), **options)
    assert ok and checked["changed"] is True and not dest.exists()
    ok, written, _task = run_task(talos_config_migrate, None, dest=str(dest), **options)
    assert ok and written["changed"] is True and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert written["valid_for"] == {"min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}
    kinds = [document.get("kind") for document in yaml.safe_load_all(dest.read_text())]
    assert "KubeletConfig" in kinds and "extraMounts" not in dest.read_text()
    ok, again, _task = run_task(talos_config_migrate, None, dest=str(dest), **options)
    assert ok and again["changed"] is False
    # The migrated config itself has nothing left to move: written as it is.
    ok, migrated, _task = run_task(talos_config_migrate, None, config=dest.read_text(), dest=str(dest))
    assert ok and migrated["changed"] is False and migrated["plan"]["steps"] == []


def test_a_field_without_a_home_fails_with_the_plan_and_writes_nothing(legacy, tmp_path):
    path, _secretbox = legacy
    dest = tmp_path / "controlplane-1.14.yaml"
    with pytest.raises(ActionFailed) as failure:
        run_task(talos_config_migrate, None, config_file=str(path), dest=str(dest))
    assert not dest.exists()
    result = dict(failure.value.result, msg=failure.value.message)
    assert result["msg"].startswith(".machine.kubelet.extraMounts has no home in the Talos v1.14 documents")
    assert result["plan"]["homeless"] == [result["msg"]] and result["plan"]["steps"]
