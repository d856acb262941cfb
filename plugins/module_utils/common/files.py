# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files on the controller, and the one writer of private ones.

Kubeconfigs, talosconfigs, machine configs, secrets bundles, etcd snapshots and
the client key handed to ssl all hold secrets. Every one of them is written
here: checked destination, a temporary file in the same directory that is
private from its creation and replaces the destination atomically once
complete, and the mode set (``PRIVATE_MODE`` unless the caller asks for
another). Failures are one sentence naming what was written and where.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import contextlib
import os
import stat
import tempfile

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError

PRIVATE_MODE = 0o600


def _write_error(what, path, error):
    return TalosError("Cannot write %s to %s: %s." % (what, path, error.strerror or error))


def _unwritable(directory):
    """Why no file can be made in ``directory`` (the system's words), or None. The probe is a temporary file that the
    file system never links into the directory where it can (O_TMPFILE), else one removed at once."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except (IOError, OSError) as error:
        return error.strerror or str(error)
    return None


def destination_problem(path, what, parameter):
    """Why ``what`` (the machine config, ...) cannot be written at ``path`` given by ``parameter``, or None."""
    if os.path.isdir(path):
        return "Cannot write %s to %s: it is a directory; set %s to a file path." % (what, path, parameter)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return "Cannot write %s to %s: directory %s does not exist." % (what, path, directory)
    unwritable = _unwritable(directory)
    if unwritable:
        return "Cannot write %s to %s: %s." % (what, path, unwritable)
    return None


def directory_problem(directory, what, parameter):
    """Why ``what`` (etcd backups, ...) cannot be written into ``directory`` given by ``parameter``, or None."""
    if not os.path.exists(directory):
        return "Cannot write %s to %s: it does not exist; create it or set %s to an existing directory." % (
            what, directory, parameter)
    if not os.path.isdir(directory):
        return "Cannot write %s to %s: it is not a directory; set %s to a directory." % (what, directory, parameter)
    unwritable = _unwritable(directory)
    if unwritable:
        return "Cannot write %s to %s: %s." % (what, directory, unwritable)
    return None


def check_destination(path, what, parameter):
    """Raise TalosConfigError when ``what`` cannot be written at ``path`` (see destination_problem)."""
    problem = destination_problem(path, what, parameter)
    if problem:
        raise TalosConfigError(problem)


class PrivateFile:
    """The next content of ``path``, written to a private temporary file next to it.

    ``write`` adds bytes; ``commit`` sets ``mode`` and moves the file into place
    in one rename, so ``path`` never exists half written or with wider
    permissions. Leaving the ``with`` block without ``commit`` (a failure, check
    mode, nothing changed) removes the temporary file. ``where`` names the
    destination in messages when ``path`` is not its name yet (a backup named
    on ``commit``, once its content is known): its directory.
    """

    def __init__(self, path, what, mode=PRIVATE_MODE, where=None):
        self.path = path
        self.what = what
        self.mode = mode
        self.where = where or path
        try:
            # mkstemp creates the file with mode 0600.
            fd, self._temp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".part",
                                                   dir=os.path.dirname(path) or ".")
            self._handle = os.fdopen(fd, "wb")
        except (IOError, OSError) as error:
            raise _write_error(what, self.where, error)

    def write(self, data):
        try:
            self._handle.write(data)
        except (IOError, OSError) as error:
            raise _write_error(self.what, self.where, error)

    @property
    def temp_path(self):
        """Where the content is staged, to be read back (after ``flush``) before it is committed."""
        return self._temp_path

    def flush(self):
        try:
            self._handle.flush()
        except (IOError, OSError) as error:
            raise _write_error(self.what, self.where, error)

    def commit(self, path=None):
        """Move the content into place: ``path`` when given (a name chosen once the content is known, in the same
        directory), else the path the file was made for."""
        self.path = path or self.path
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.chmod(self._temp_path, self.mode)
            os.rename(self._temp_path, self.path)
        except (IOError, OSError) as error:
            raise _write_error(self.what, self.path, error)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._handle.close()
        if os.path.exists(self._temp_path):
            os.unlink(self._temp_path)
        return False


def write_private(path, data, what, mode=PRIVATE_MODE):
    """Write ``data`` (text or bytes) to ``path`` with ``mode``, atomically (see PrivateFile)."""
    with PrivateFile(path, what, mode) as staged:
        staged.write(data.encode("utf-8") if isinstance(data, str) else data)
        staged.commit()


def ensure_mode(path, what, check_mode=False, mode=PRIVATE_MODE):
    """Give the existing file ``path`` the mode ``mode``; whether it had another (check mode: it stays)."""
    if file_mode(path) == mode:
        return False
    if not check_mode:
        try:
            os.chmod(path, mode)
        except (IOError, OSError) as error:
            raise _write_error(what, path, error)
    return True


def update_private(path, text, what, check_mode=False, keep=None, mode=PRIVATE_MODE):
    """Make ``path`` hold ``text`` with ``mode``; whether it changed (or would, in check mode).

    The file is rewritten when its content differs from ``text``; ``keep``
    overrides that comparison (True: the current content may stay, as when
    only regenerated credentials differ). A file whose content stays but whose
    mode differs only gets its mode set.
    """
    if keep is None:
        keep = read_text(path) == text
    if keep and os.path.isfile(path):
        return ensure_mode(path, what, check_mode, mode)
    if not check_mode:
        write_private(path, text, what, mode)
    return True


@contextlib.contextmanager
def private_temp_file(data):
    """The path of a private temporary file holding ``data`` (text), removed when the block ends.

    For libraries that read secrets only from a file (ssl's client key pair).
    """
    fd, path = tempfile.mkstemp(prefix="talos-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8"))
        yield path
    finally:
        os.unlink(path)


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
