# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Private files on the controller: kubeconfigs, talosconfigs, machine configs, secrets bundles."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import tempfile

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosConfigError

PRIVATE_MODE = 0o600


def write_private(path, text, mode=PRIVATE_MODE):
    """Write ``text`` to ``path`` with ``mode`` through a temporary file in the same directory.

    The file never exists with wider permissions or half written.
    """
    fd, temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(temp_path, mode)
        os.rename(temp_path, path)
    finally:
        if os.path.exists(temp_path):
            os.unlink(temp_path)


def read_text(path):
    """The UTF-8 text of ``path``, or None when there is no such file (or it is not text)."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError):
        return None


def read_text_file(path, label):
    """The UTF-8 text of ``path``; TalosConfigError naming ``label`` (what the file is) and the path when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError) as error:
        raise TalosConfigError("%s %s cannot be read: %s." % (label, path, error.strerror or error))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TalosConfigError("%s %s is not UTF-8 text." % (label, path))


def file_mode(path):
    """The permission bits of ``path``."""
    return stat.S_IMODE(os.stat(path).st_mode)


def destination_problem(path, parameter):
    """Why a file cannot be written at ``path`` (one sentence naming ``parameter``), or None."""
    if os.path.isdir(path):
        return "%s %s is a directory; give a file path." % (parameter, path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return "%s %s cannot be written: directory %s does not exist." % (parameter, path, directory)
    return None
