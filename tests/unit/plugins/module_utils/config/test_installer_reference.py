# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""config/installer_reference.py: the installer homes in a config, the reference after an upgrade, and a config applied
again after one."""

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.installer_reference import (
    InstallerReference,
    installer_home,
    keep_newer_installer,
    set_installer,
    update_installer_reference,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import load_config
from ansible_collections.talos_linux.talos.plugins.module_utils.images.factory import EMPTY_SCHEMATIC_ID as EMPTY


V1ALPHA1 = {"version": "v1alpha1", "machine": {"type": "worker", "install": {"disk": "/dev/sda", "image": "old:v1"}}}
UNATTENDED = {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig", "installer": {"image": "old:v2"}}


def test_installer_homes():
    documents = [dict(V1ALPHA1, machine=dict(V1ALPHA1["machine"], install=dict(V1ALPHA1["machine"]["install"])))]
    assert set_installer(documents, "new:v3") == ".machine.install.image"
    assert documents[0]["machine"]["install"] == {"disk": "/dev/sda", "image": "new:v3"}
    documents = [{"version": "v1alpha1", "machine": {"type": "worker"}}, dict(UNATTENDED, installer={"image": "old:v2"})]
    assert set_installer(documents, "new:v3") == "UnattendedInstallConfig installer.image"
    assert documents[1]["installer"]["image"] == "new:v3"
    assert set_installer([{"version": "v1alpha1", "machine": {}}], "new:v3") is None
    with pytest.raises(TalosConfigError, match=r"both .machine.install.image \(old:v1\) and the UnattendedInstallConfig"):
        installer_home([V1ALPHA1, UNATTENDED])


# -- the installer reference after an upgrade -------------------------------------------

OLD = "ghcr.io/siderolabs/installer:v1.13.5"
NEW = "factory.talos.dev/metal-installer/%s:v1.14.0" % EMPTY


def _follow(monkeypatch, text="version: v1alpha1\nmachine:\n    install:\n        image: %s\n" % OLD, **fields):
    """update_installer_reference on an upgrade result with ``fields``: (outcome, result, warnings, configs applied)."""
    applied, warnings = [], []
    monkeypatch.setattr("ansible_collections.talos_linux.talos.plugins.module_utils.config.installer_reference.point_installer_at",
                        lambda client, node, reference, image: applied.append((node, reference.config_naming(image))))
    result = dict(to_version="v1.14.0", current_version="v1.14.0", changed=True)
    result.update(fields.pop("result", {}))
    outcome = update_installer_reference(None, "10.5.0.9", InstallerReference(text), NEW, result, warn=warnings.append,
                                         **fields)
    return outcome, result, warnings, applied


def test_the_installer_reference_follows_the_upgrade(monkeypatch):
    outcome, result, warnings, applied = _follow(monkeypatch, diff=True)
    assert outcome == {"home": ".machine.install.image", "before": OLD, "after": NEW, "changed": True}
    assert result["diff"] == {"before": {"installer": OLD}, "after": {"installer": NEW}} and not warnings
    assert applied == [("10.5.0.9", "version: v1alpha1\nmachine:\n    install:\n        image: %s\n" % NEW)]
    # Check mode predicts it for a node that would be upgraded, and applies nothing.
    outcome, result, _warnings, applied = _follow(monkeypatch, check_mode=True, result=dict(current_version="v1.13.5"))
    assert outcome["changed"] is True and result["changed"] is True and applied == []


def test_the_installer_reference_waits_for_the_target(monkeypatch):
    # Without wait the node may still run the old version: the reference stays, with a warning saying why.
    outcome, result, warnings, applied = _follow(monkeypatch, result=dict(current_version="v1.13.5"))
    assert outcome == {"home": ".machine.install.image", "before": OLD, "after": OLD, "changed": False}
    assert applied == [] and len(warnings) == 1
    assert warnings[0].startswith("Node 10.5.0.9 still names installer %s in .machine.install.image" % OLD)
    # A reference on the target version, or none at all, is left as it is.
    named = "version: v1alpha1\nmachine:\n    install:\n        image: registry.local/installer:v1.14.0\n"
    assert _follow(monkeypatch, text=named)[0]["changed"] is False
    outcome, _result, warnings, applied = _follow(monkeypatch, text="version: v1alpha1\nmachine: {}\n")
    assert outcome == {"home": None, "before": None, "after": None, "changed": False} and applied == [] and not warnings


# -- a config applied again after an upgrade ----------------------------------------------

RENDERED = """version: v1alpha1
machine:
  type: worker
  install:
    disk: /dev/sda
    image: %s # the installer
"""
UNATTENDED_RENDERED = """version: v1alpha1
machine:
  type: worker
---
apiVersion: v1alpha1
kind: UnattendedInstallConfig
installer:
  image: %s
"""


def _node(image):
    return InstallerReference("version: v1alpha1\nmachine:\n  install:\n    image: %s\n" % image)


@pytest.mark.parametrize("rendered", [RENDERED, UNATTENDED_RENDERED])
def test_an_older_installer_takes_the_nodes_release_in_its_own_repository(rendered):
    config = load_config(config=rendered % ("registry.local/installer:v1.14.0"))
    kept, what = keep_newer_installer(config, _node("factory.talos.dev/metal-installer/%s:v1.14.1" % EMPTY))
    assert what == {"given": "registry.local/installer:v1.14.0", "applied": "registry.local/installer:v1.14.1"}
    # Only the image line changes: comments and everything else stay as given.
    assert kept.data.decode() == rendered % "registry.local/installer:v1.14.1"
    assert installer_home(kept.documents)[1] == "registry.local/installer:v1.14.1"


@pytest.mark.parametrize("given, node", [
    ("registry.local/installer:v1.14.1", "registry.local/installer:v1.14.1"),  # the same release
    ("registry.local/installer:v1.14.2", "registry.local/installer:v1.14.1"),  # forward is the config's to say
    ("registry.local/installer:v1.14.0@sha256:" + "a" * 64, "registry.local/installer:v1.14.1"),  # pinned by digest
    ("registry.local/installer:main", "registry.local/installer:v1.14.1"),  # no release
    ("registry.local/installer:v1.14.0", "registry.local/installer:custom"),  # the node's is no release
])
def test_an_installer_that_is_not_older_is_applied_as_given(given, node):
    config = load_config(config=RENDERED % given)
    kept, what = keep_newer_installer(config, _node(node))
    assert what is None and kept is config


def test_a_config_or_node_without_an_installer_is_applied_as_given():
    config = load_config(config="version: v1alpha1\nmachine:\n  type: worker\n")
    assert keep_newer_installer(config, _node("registry.local/installer:v1.14.1")) == (config, None)
    config = load_config(config=RENDERED % "registry.local/installer:v1.14.0")
    assert keep_newer_installer(config, InstallerReference("version: v1alpha1\nmachine: {}\n")) == (config, None)


def test_a_line_that_cannot_be_rewritten_is_written_out_anew():
    # The installer in flow style has no image line of its own to rewrite: the documents are written anew.
    config = load_config(config="version: v1alpha1\nmachine: {type: worker, install: {disk: /dev/sda, "
                                "image: 'registry.local/installer:v1.14.0'}}\n")
    kept, what = keep_newer_installer(config, _node("registry.local/installer:v1.14.1"))
    assert what["applied"] == "registry.local/installer:v1.14.1"
    assert installer_home(kept.documents) == (".machine.install.image", "registry.local/installer:v1.14.1")
    assert kept.documents[0]["machine"]["install"]["disk"] == "/dev/sda" and "v1.14.0" not in kept.data.decode()
    assert installer_home(config.documents)[1] == "registry.local/installer:v1.14.0"  # the given config is left as it is
