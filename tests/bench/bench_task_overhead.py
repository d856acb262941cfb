# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Talos task costs compared with ansible.builtin.ping, through ansible-playbook.

Runs the same number of ping, talos_facts (gather_subset=min) and
talos_apply_config (an identical config: one dry run) tasks against an emulated
node and prints seconds per task. Prints numbers only. Run with `make bench`.
"""

from __future__ import absolute_import, division, print_function

import os
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "emulator"))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from talos_emulator import EmulatedCluster  # noqa: E402

TASKS = 10


def timed_run(playbook_dir, name, task):
    """Seconds per task for TASKS copies of ``task`` (minus a run with one copy: start-up cost)."""
    def run(count):
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [dict(task) for dummy in range(count)]}]
        path = os.path.join(playbook_dir, "%s-%d.yml" % (name, count))
        with open(path, "w") as f:
            yaml.safe_dump(play, f)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"))
        start = time.monotonic()
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                        "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, path],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        return time.monotonic() - start

    return (run(TASKS + 1) - run(1)) / TASKS


def main():
    with tempfile.TemporaryDirectory() as state_dir:
        cluster = EmulatedCluster.start(state_dir, controlplanes=1, workers=0, reboot_seconds=0.1)
        try:
            node = cluster.controlplanes[0].address
            connection = dict(talosconfig=cluster.talosconfig_path("admin"), node=node)
            config = cluster.node(node).config_bytes.decode()
            figures = [
                ("ansible.builtin.ping", {"ansible.builtin.ping": {}}),
                ("talos_facts gather_subset=min", {"talos_linux.talos.talos_facts": dict(connection, gather_subset=["min"])}),
                ("talos_apply_config (no change)", {"talos_linux.talos.talos_apply_config": dict(connection, config=config)}),
            ]
            baseline = None
            for label, task in figures:
                seconds = timed_run(state_dir, label.split()[0], task)
                baseline = baseline or seconds
                print("%-32s %.3f s per task (%.1fx ping)" % (label, seconds, seconds / baseline))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
