# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The committed talos_api package must be exactly what tools/generate_protos.py makes from protos/."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(ROOT, "plugins", "module_utils", "talos_api")
GENERATOR = os.path.join(ROOT, "tools", "generate_protos.py")


def _package_files(top):
    found = {}
    for dirpath, dirnames, names in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in names:
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, top)] = handle.read()
    return found


def test_committed_code_matches_a_fresh_generation(tmp_path):
    out = tmp_path / "talos_api"
    result = subprocess.run([sys.executable, GENERATOR, "--out", str(out)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, "generation failed:\n%s%s" % (result.stdout, result.stderr)

    fresh = _package_files(str(out))
    committed = _package_files(COMMITTED)
    assert fresh, "the generator produced no files"
    assert sorted(committed) == sorted(fresh), (
        "file lists differ; run `make generate` (only committed: %s; only generated: %s)"
        % (sorted(set(committed) - set(fresh)), sorted(set(fresh) - set(committed))))
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, "stale generated files, run `make generate`: %s" % ", ".join(stale)
