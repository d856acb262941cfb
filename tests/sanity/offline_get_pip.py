# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for pip's get-pip.py that ansible-test runs in the venvs it creates.

ansible-test downloads get-pip.py from a host that a package-index-only machine
cannot reach. This script does the same job offline: the standard library's
ensurepip installs its bundled pip, which then installs what ansible-test asked
for from the configured package index. tests/run-sanity puts it in
ansible-test's cache.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import subprocess
import sys

GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")

if __name__ == "__main__":
    # In a child process: ensurepip points PIP_CONFIG_FILE at /dev/null in the process
    # that calls it, which would hide the machine's package-index settings below.
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
    args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY_OPTIONS]
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet"] + args)
