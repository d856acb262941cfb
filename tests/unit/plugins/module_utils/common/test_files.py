# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one writer of private files: destinations, atomic writes, modes, check mode."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common import files
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_destination_problems_name_what_where_and_the_option(tmp_path):
    assert files.destination_problem(str(tmp_path / "f"), "the kubeconfig", "dest") is None
    assert files.destination_problem(str(tmp_path), "the kubeconfig", "dest") == (
        "Cannot write the kubeconfig to %s: it is a directory; set dest to a file path." % tmp_path)
    with pytest.raises(TalosConfigError) as raised:
        files.check_destination(str(tmp_path / "missing" / "f"), "the talosconfig", "dest")
    assert raised.value.message == "Cannot write the talosconfig to %s: directory %s does not exist." % (
        tmp_path / "missing" / "f", tmp_path / "missing")


def test_write_private_replaces_the_file_with_mode_0600_and_leaves_nothing_else(tmp_path):
    path = tmp_path / "config"
    path.write_text("old")
    path.chmod(0o644)
    files.write_private(str(path), u"new \u00e9", "the config")
    assert path.read_text(encoding="utf-8") == u"new \u00e9" and mode(path) == 0o600
    files.write_private(str(path), b"\x00bytes", "the config", mode=0o640)
    assert path.read_bytes() == b"\x00bytes" and mode(path) == 0o640
    assert os.listdir(str(tmp_path)) == ["config"]


def test_uncommitted_or_failed_writes_leave_the_old_file(tmp_path):
    path = tmp_path / "snapshot"
    path.write_bytes(b"previous")
    with files.PrivateFile(str(path), "the snapshot") as staged:
        staged.write(b"half")
    assert path.read_bytes() == b"previous" and os.listdir(str(tmp_path)) == ["snapshot"]
    with pytest.raises(RuntimeError):
        with files.PrivateFile(str(path), "the snapshot") as staged:
            staged.write(b"half")
            raise RuntimeError("stream cut")
    assert path.read_bytes() == b"previous" and os.listdir(str(tmp_path)) == ["snapshot"]


def test_write_failures_name_what_and_where(tmp_path):
    with pytest.raises(TalosError, match=r"^Cannot write the talosconfig to .*talosconfig: No such file or directory\.$"):
        files.write_private(str(tmp_path / "gone" / "talosconfig"), "x", "the talosconfig")


def test_update_private_writes_on_content_and_chmods_on_mode(tmp_path):
    path = tmp_path / "config"
    assert files.update_private(str(path), "a\n", "the config", check_mode=True) is True and not path.exists()
    assert files.update_private(str(path), "a\n", "the config") is True and mode(path) == 0o600
    assert files.update_private(str(path), "a\n", "the config") is False
    inode = os.stat(str(path)).st_ino
    path.chmod(0o644)
    assert files.update_private(str(path), "a\n", "the config", check_mode=True) is True and mode(path) == 0o644
    assert files.update_private(str(path), "a\n", "the config") is True and mode(path) == 0o600
    assert os.stat(str(path)).st_ino == inode
    assert files.update_private(str(path), "b\n", "the config") is True and path.read_text() == "b\n"


def test_update_private_keep_overrides_the_comparison(tmp_path):
    path = tmp_path / "kubeconfig"
    files.write_private(str(path), "old credentials\n", "the kubeconfig")
    assert files.update_private(str(path), "new credentials\n", "the kubeconfig", keep=True) is False
    assert path.read_text() == "old credentials\n"
    assert files.update_private(str(path), "old credentials\n", "the kubeconfig", keep=False) is True
    # keep cannot keep a file that is not there.
    assert files.update_private(str(tmp_path / "absent"), "x", "the kubeconfig", keep=True) is True
    assert (tmp_path / "absent").read_text() == "x"


def test_private_temp_file_is_0600_and_removed(tmp_path):
    with files.private_temp_file("secret key") as path:
        assert mode(path) == 0o600 and open(path).read() == "secret key"
    assert not os.path.exists(path)
