# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Playbook runs through ansible-playbook (AnsiballZ), the way users run the modules."""

import pytest

from playbook_runner import run_playbook_in


@pytest.fixture
def run_playbook(tmp_path):
    """Run a playbook (a path, YAML text, or a list of plays) with the collection installed.

    `inventory` is a path (for example the emulator's inventory.yml) or None for localhost.
    Returns a PlaybookRun; asserts the exit code when `expect_rc` is given (default 0).
    """
    counter = {"n": 0}

    def _run(playbook, inventory=None, extra_vars=None, check=False, diff=False, expect_rc=0,
             limit=None, env=None, verbosity=0, deprecations=()):
        counter["n"] += 1
        run = run_playbook_in(tmp_path, str(counter["n"]), playbook, inventory=inventory, extra_vars=extra_vars,
                              check=check, diff=diff, limit=limit, env=env, verbosity=verbosity, deprecations=deprecations)
        if expect_rc is not None:
            assert run.rc == expect_rc, "ansible-playbook exited %d, expected %d\n%s\n%s" % (
                run.rc, expect_rc, run.stdout[-6000:], run.stderr[-3000:])
        return run

    return _run
