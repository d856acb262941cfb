# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_client_config run(): written once, certificate kept, other contexts kept, bad files refused."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.modules import talos_client_config
from module_fakes import run_task


def run(check_mode=False, **params):
    options = dict(cluster_name="prod", endpoints=["10.5.0.2"])
    options.update(params)
    return run_task(talos_client_config, None, check_mode=check_mode, **options)


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "secrets.yaml"
    path.write_text(SecretsBundle.generate("v1.14").to_yaml())
    return str(path)


def test_writes_once_then_keeps_the_certificate(bundle_path, tmp_path):
    dest = tmp_path / "talosconfig"
    ok, result, _task = run(check_mode=True, secrets=bundle_path, dest=str(dest))
    assert ok and result["changed"] and result["issued"] and not dest.exists()
    ok, result, _task = run(secrets=bundle_path, dest=str(dest), diff=True)
    assert ok and result["changed"] and stat.S_IMODE(dest.stat().st_mode) == 0o600
    key = yaml.safe_load(dest.read_text())["contexts"]["prod"]["key"]
    assert key not in repr(result) and "<redacted>" in result["diff"]["after"] and result["diff"]["before"] == ""
    assert result["certificate"]["roles"] == ["os:admin"]
    content = dest.read_bytes()
    ok, again, _task = run(secrets=bundle_path, dest=str(dest))
    assert again["changed"] is False and again["issued"] is False and dest.read_bytes() == content


def test_other_contexts_are_kept_and_the_mode_corrected(bundle_path, tmp_path):
    dest = tmp_path / "talosconfig"
    dest.write_text(yaml.safe_dump({"context": "lab", "contexts": {"lab": {"endpoints": ["10.9.0.2"]}}}))
    dest.chmod(0o644)
    ok, result, _task = run(secrets=bundle_path, dest=str(dest))
    document = yaml.safe_load(dest.read_text())
    assert ok and result["changed"] and sorted(document["contexts"]) == ["lab", "prod"] and document["context"] == "prod"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600


def test_a_file_that_is_no_talosconfig_is_left_alone(bundle_path, tmp_path):
    dest = tmp_path / "talosconfig"
    dest.write_text("contexts: [unclosed\n")
    with pytest.raises(TalosError, match=r"^The talosconfig file .* is not valid YAML at line 2\.$"):
        run(secrets=bundle_path, dest=str(dest))
    assert dest.read_text() == "contexts: [unclosed\n"


def test_a_directory_as_dest_is_refused(bundle_path, tmp_path):
    with pytest.raises(TalosError, match=r"^Cannot write the talosconfig to .*: it is a directory; set dest to a file path\.$"):
        run(secrets=bundle_path, dest=str(tmp_path))
