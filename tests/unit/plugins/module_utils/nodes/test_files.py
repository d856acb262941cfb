# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""node_files: Go file modes, and unpacking a Copy archive safely and idempotently."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import io
import os
import stat
import tarfile

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import files as node_files


def _archive(*members):
    """A gzip'd tar spool of ``(name, kind, payload)``: kind file (payload bytes), dir, symlink (payload target),
    char, fifo or hardlink (payload target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, kind, payload, *mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode[0] if mode else 0o644
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "char": tarfile.CHRTYPE,
                         "fifo": tarfile.FIFOTYPE, "hardlink": tarfile.LNKTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = payload
            if kind == "file":
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
            else:
                archive.addfile(info)
    buffer.seek(0)
    return buffer


def _tree(root):
    found = {}
    for directory, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, str(root))] = os.readlink(path) if os.path.islink(path) else (
                None if os.path.isdir(path) else open(path, "rb").read())
    return found


def test_go_file_modes():
    assert node_files.file_type((1 << 31) | 0o755) == "directory"
    assert node_files.file_type((1 << 26) | (1 << 21) | 0o666) == "char_device"
    assert node_files.file_type((1 << 26) | 0o660) == "block_device"
    assert node_files.file_type(0o644) == "file"
    assert node_files.permissions((1 << 23) | 0o755) == "4755"
    assert node_files.permissions((1 << 31) | (1 << 20) | 0o777) == "1777"


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside", "a/../../outside", "..", "./"])
def test_a_member_outside_the_destination_is_refused_before_anything_is_written(tmp_path, name):
    spool = _archive(("first", "file", b"x"), (name, "file", b"evil"))
    with pytest.raises(node_files.FetchRefused, match="outside the destination"):
        node_files.unpack(spool, str(tmp_path / "dest"), "/var/log", "10.5.0.2")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "outside").exists()


def test_writing_through_a_link_is_refused(tmp_path):
    # The archive's own link: refused before anything is written.
    spool = _archive(("first", "file", b"x"), ("l", "symlink", str(tmp_path)), ("l/escaped", "file", b"evil"))
    with pytest.raises(node_files.FetchRefused, match="below the link 'l'"):
        node_files.unpack(spool, str(tmp_path / "dest"), "/var/log", "10.5.0.2")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "dest").exists()
    # A link already in the destination: refused at that member.
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(str(tmp_path), str(dest / "planted"))
    with pytest.raises(node_files.FetchRefused, match="not a directory in the destination"):
        node_files.unpack(_archive(("planted/escaped", "file", b"evil")), str(dest), "/var/log", None)
    assert not (tmp_path / "escaped").exists()


def test_unpacks_files_links_and_directories_and_skips_devices(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    members = (("pods", "dir", None, 0o750), ("pods/a.log", "file", b"hello\n", 0o4640), ("current", "symlink", "pods/a.log"),
               ("absolute", "symlink", "/proc/mounts"), ("null", "char", None), ("pipe", "fifo", None),
               ("same", "hardlink", "pods/a.log"))
    files, skipped = node_files.unpack(_archive(*members), str(dest), "/var/log", "10.5.0.2")
    assert _tree(dest) == {"pods": None, "pods/a.log": b"hello\n", "current": "pods/a.log", "absolute": "/proc/mounts"}
    assert stat.S_IMODE(os.stat(str(dest / "pods")).st_mode) == 0o750
    # Permission bits are kept, setuid is not.
    assert stat.S_IMODE(os.stat(str(dest / "pods" / "a.log")).st_mode) == 0o640
    assert [entry["type"] for entry in files] == ["directory", "file", "symlink", "symlink"]
    assert all(entry["changed"] for entry in files)
    assert files[1]["sha256"] == "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    assert [(os.path.basename(entry["path"]), entry["reason"]) for entry in skipped] == [
        ("null", "a device file is not fetched"), ("pipe", "a device file is not fetched"), ("same", "a hard link is not fetched")]


def test_unpacking_again_changes_only_what_differs(tmp_path):
    dest = str(tmp_path / "dest")
    members = (("a", "file", b"one"), ("b", "file", b"two"), ("l", "symlink", "a"))
    node_files.unpack(_archive(*members), dest, "/x", None)
    before = os.stat(os.path.join(dest, "a")).st_ino
    files, _skipped = node_files.unpack(_archive(*members), dest, "/x", None)
    assert [entry["changed"] for entry in files] == [False, False, False]
    assert os.stat(os.path.join(dest, "a")).st_ino == before
    with open(os.path.join(dest, "b"), "wb") as handle:
        handle.write(b"local edit")
    os.chmod(os.path.join(dest, "a"), 0o600)
    os.unlink(os.path.join(dest, "l"))
    os.symlink("b", os.path.join(dest, "l"))
    # Check mode says what would change and writes nothing.
    files, _skipped = node_files.unpack(_archive(*members), dest, "/x", None, check_mode=True)
    assert [entry["changed"] for entry in files] == [True, True, True]
    assert _tree(dest) == {"a": b"one", "b": b"local edit", "l": "b"}
    files, _skipped = node_files.unpack(_archive(*members), dest, "/x", None)
    assert [entry["changed"] for entry in files] == [True, True, True]
    assert _tree(dest) == {"a": b"one", "b": b"two", "l": "a"}
    assert stat.S_IMODE(os.stat(os.path.join(dest, "a")).st_mode) == 0o644
    assert not [name for name in os.listdir(dest) if name.startswith(".")]


def test_check_mode_writes_nothing_into_a_missing_destination(tmp_path):
    dest = str(tmp_path / "dest")
    files, _skipped = node_files.unpack(_archive(("d", "dir", None), ("d/f", "file", b"x")), dest, "/x", None, check_mode=True)
    assert [entry["changed"] for entry in files] == [True, True] and not os.path.exists(dest)


def test_a_broken_archive_is_one_sentence(tmp_path):
    with pytest.raises(node_files.TalosError, match="the archive the node sent cannot be read"):
        node_files.unpack(io.BytesIO(b"not gzip"), str(tmp_path), "/var/log", "10.5.0.2")
