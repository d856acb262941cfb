# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upstream talosctl for tests: ``binary()`` builds it once per process with ``./build`` (Go modules; a missing Go
toolchain is an error, never a skip). It is what a user points at a cluster, run as a judge of the emulator and of the
collection (test_talosctl.py)."""

import os

from harness_files import HarnessBuild


class TalosctlError(RuntimeError):
    pass


_build = HarnessBuild(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build"), "the test talosctl", TalosctlError)


def binary():
    return _build.binary()
