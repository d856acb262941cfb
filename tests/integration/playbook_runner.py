# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One ansible-playbook run with the collection installed and every task result recorded."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
# A warning runs on over wrapped lines up to a blank line or the next "[WARNING]", "TASK [", "PLAY [" line.
DEPRECATION_WARNING = re.compile(r"^\[DEPRECATION WARNING\]:.*?(?=^\s*$|^\[|^[A-Z ]+\[|\Z)", re.M | re.S)


def deprecation_warnings(output):
    """Every ``[DEPRECATION WARNING]`` in an Ansible command's output, each on one line.

    Every run of the tests uses only the collection's own code with ansible-core's, so each warning is the
    collection's to fix: nothing it uses may be deprecated in the ansible-core it runs on, the newest included.
    """
    return [" ".join(found.split()) for found in DEPRECATION_WARNING.findall(output)]


class PlaybookRun(object):
    """Outcome of one ansible-playbook run: rc, output and every task result."""

    def __init__(self, rc, stdout, stderr, results):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.results = results

    def task(self, name, host=None):
        """The result of the task called `name` (on `host`); fails the test if absent."""
        found = [r for r in self.results if r["task"] == name and (host is None or r["host"] == host)]
        assert found, "task %r (host %r) did not run; tasks run: %s\n%s" % (
            name, host, [r["task"] for r in self.results], self.stdout[-4000:])
        assert len(found) == 1, "task %r ran on several hosts; name one" % name
        return found[0]

    def tasks(self, name):
        return [r for r in self.results if r["task"] == name]

    @property
    def changed_count(self):
        return sum(1 for r in self.results if r["status"] == "changed")


def run_playbook_in(workdir, name, playbook, inventory=None, extra_vars=None, check=False, diff=False, limit=None, env=None,
                    verbosity=0, timeout=600, deprecations=(), on_start=None):
    """Run ``playbook`` (a path, YAML text, or a list of plays) with files under ``workdir`` named after ``name``.

    ``inventory`` is a path (for example the emulator's inventory.yml) or None for localhost. ``deprecations`` are
    the texts of the collection's own deprecation warnings the run must print (a test of a deprecated option); any
    other deprecation warning fails it. ``on_start(process)`` is called with the ``subprocess.Popen`` of
    ansible-playbook once it runs (a test may stop the run with ``kill_run``).
    """
    if isinstance(playbook, (list, dict)):
        playbook = yaml.safe_dump(playbook if isinstance(playbook, list) else [playbook], sort_keys=False)
    if "\n" in playbook or not os.path.exists(playbook):
        path = os.path.join(str(workdir), "playbook-%s.yml" % name)
        with open(path, "w") as handle:
            handle.write(playbook)
        playbook = path
    results_path = os.path.join(str(workdir), "results-%s.json" % name)
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook]
    cmd += ["-i", inventory or "localhost,"]
    # TALOS_TEST_DOOR=module runs every Talos task through the module door (AnsiballZ, on a local connection)
    # instead of the controller door; a test that needs one door sets it in ``env`` ("" for the default).
    if dict(os.environ, **(env or {})).get("TALOS_TEST_DOOR") == "module":
        cmd += ["-e", json.dumps({"talos_door": "module", "ansible_connection": "local"})]
    if inventory is None:
        cmd += ["-c", "local"]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    if limit:
        cmd += ["--limit", limit]
    if verbosity:
        cmd.append("-" + "v" * verbosity)
    run_env = dict(os.environ)
    run_env.update({
        "TALOS_TEST_RESULTS": results_path,
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(HERE, "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "record_results",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "True",
        # ansible-core 2.21 and later add a task's invocation (its module arguments, no_log values masked) to the
        # result only when asked; the tests compare and search it.
        "ANSIBLE_INJECT_INVOCATION": "True",
        "ANSIBLE_LOCAL_TEMP": os.path.join(str(workdir), "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": os.path.join(str(workdir), "ansible-remote"),
    })
    run_env.update(env or {})
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env) as process:
        if on_start is not None:
            on_start(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_run(process)
            raise
    proc = subprocess.CompletedProcess(cmd, process.returncode, stdout, stderr)
    deprecated = deprecation_warnings(proc.stdout + "\n" + proc.stderr)
    for expected in deprecations:
        assert any(expected in warning for warning in deprecated), "no deprecation warning says %r" % expected
    unexpected = [warning for warning in deprecated if not any(expected in warning for expected in deprecations)]
    assert not unexpected, "ansible-playbook printed deprecation warnings:\n" + "\n".join(unexpected)
    results = []
    if os.path.exists(results_path):
        with open(results_path) as handle:
            results = json.load(handle)
    return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, results)


def process_tree(pid):
    """``pid`` and every process it started, read from /proc. Ansible's workers start sessions of their own, so the
    process group alone does not reach them."""
    tree, parents = [pid], {}
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    for parent_pid in tree:
        tree.extend(child for child, parent in parents.items() if parent == parent_pid)
    return tree


def kill_run(process):
    """Kill ansible-playbook ``process`` and every process it started at once, as a power loss would: the tree is
    read first, stopped, then killed."""
    tree = process_tree(process.pid)
    for sent in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            try:
                os.kill(pid, sent)
            except ProcessLookupError:
                pass


def when(predicate, action, timeout=300):
    """Run ``action`` once ``predicate`` holds, polled from a thread while a playbook runs; returns the thread."""
    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                action()
                return
            time.sleep(0.005)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
