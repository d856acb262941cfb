# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The age command for tests: ``binary()`` builds filippo.io/age's ``age`` once per process with ``./build`` (a missing
Go toolchain is an error, never a skip). It decrypts what the collection encrypts, as a user would with age."""

import os

from harness_files import HarnessBuild


class AgeCLIError(RuntimeError):
    pass


_build = HarnessBuild(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build"), "the test age command", AgeCLIError)


def binary():
    return _build.binary()
