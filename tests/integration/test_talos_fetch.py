# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_fetch through ansible-playbook against the emulator: directories and files, idempotence, check mode and
diff, several nodes, refusals, and a 200 MB file fetched in bounded memory."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from module_plays import module_play

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = 200 * 1024 * 1024


def fetch_task(name, **options):
    return {"name": name, "talos_linux.talos.talos_fetch": options, "ignore_errors": True}


def test_fetch_a_directory_again_and_in_check_mode(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    dest = tmp_path / "fetched"
    play = module_play(cluster, "talos_fetch", {"src": "/etc", "dest": str(dest), "flat": True}, cp.address, "etc")
    play["tasks"] += [
        fetch_task("one file", src="/etc/hosts", dest=str(tmp_path / "one")),
        fetch_task("devices", src="/dev", dest=str(tmp_path / "dev"), flat=True),
        fetch_task("pod logs of both", src="/var/log", dest=str(tmp_path / "logs"), nodes=[cp.address, worker.address],
                   node="{{ omit }}"),
    ]
    first = run_playbook(play)
    etc = first.task("etc")["result"]
    assert first.task("etc")["status"] == "changed" and etc["dest"] == str(dest)
    assert (dest / "hostname").read_text() == cp.hostname + "\n"
    assert os.readlink(str(dest / "mtab")) == "/proc/mounts"
    assert (dest / "hosts").read_text().endswith("%s %s\n" % (cp.address, cp.hostname))
    by_path = dict((entry["path"], entry) for entry in etc["files"])
    assert by_path[str(dest / "hostname")]["sha256"] == hashlib.sha256((cp.hostname + "\n").encode()).hexdigest()
    assert (tmp_path / "one" / cp.address / "hosts").is_file()
    devices = first.task("devices")["result"]
    assert devices["files"] == [] and sorted(os.path.basename(entry["path"]) for entry in devices["not_fetched"]) == ["null", "sda"]
    assert not os.listdir(str(tmp_path / "dev"))
    both = first.task("pod logs of both")["result"]["nodes"]
    assert set(both) == {cp.address, worker.address}
    # A pod's log is <container>/0.log (the containers/ links are named after the container ID, which may end in 0).
    pod_logs = [entry["path"] for entry in both[cp.address]["files"] if entry["path"].endswith("/0.log")]
    assert pod_logs and all(path.startswith(str(tmp_path / "logs" / cp.address / "pods")) for path in pod_logs)
    assert not [entry for entry in both[worker.address]["files"] if entry["path"].endswith("/0.log")]

    again = run_playbook(play)
    assert [again.task(name)["status"] for name in ("etc", "one file", "devices", "pod logs of both")] == ["ok"] * 4

    (dest / "hostname").write_text("edited\n")
    checked = run_playbook(play[:1] if isinstance(play, list) else dict(play, tasks=play["tasks"][:1]), check=True, diff=True)
    assert checked.task("etc")["status"] == "changed"
    assert checked.task("etc")["result"]["diff"]["after"] == "file %s\n" % (dest / "hostname")
    assert (dest / "hostname").read_text() == "edited\n"

    # Several nodes: one list of paths per node, under its own header.
    removed = {}
    for node in (cp, worker):
        entry = next(entry for entry in both[node.address]["files"] if entry["type"] in ("file", "directory"))
        removed[node] = "%s %s\n" % (entry["type"], entry["path"])
        (shutil.rmtree if entry["type"] == "directory" else os.remove)(entry["path"])
    both_play = dict(play, tasks=[task for task in play["tasks"] if task["name"] == "pod logs of both"])
    checked = run_playbook(both_play, check=True, diff=True).task("pod logs of both")
    assert checked["status"] == "changed" and "nodes" in checked["result"]
    diffs = dict((entry["before_header"], entry["after"]) for entry in checked["result"]["diff"])
    assert sorted(diffs) == sorted(str(tmp_path / "logs" / node.address) for node in (cp, worker))
    assert all(diffs[str(tmp_path / "logs" / node.address)].startswith(removed[node]) for node in (cp, worker))
    assert not any(os.path.exists(line.split(" ", 1)[1].strip()) for line in removed.values())


def test_refusals_name_the_path_and_the_role(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, reboot_seconds=0.1)
    cp = cluster.controlplanes[0]
    play = module_play(cluster, "talos_fetch", {"src": "/etc", "dest": str(tmp_path / "r")}, cp.address, "reader",
                       role="reader", ignore_errors=True)
    run = run_playbook(play)
    assert run.task("reader")["status"] == "failed"
    message = run.task("reader")["result"]["msg"]
    assert message.startswith("Cannot copy /etc on node %s: Permission denied" % cp.address)
    assert "os:admin" in message and "os:reader" in message
    play = module_play(cluster, "talos_fetch", {"src": "/nope", "dest": str(tmp_path / "n")}, cp.address, "missing",
                       ignore_errors=True)
    play["tasks"] += [
        fetch_task("relative", src="etc", dest=str(tmp_path / "n")),
        fetch_task("flat with two", src="/etc", dest=str(tmp_path / "n"), flat=True, nodes=[cp.address, cp.address],
                   node="{{ omit }}"),
        fetch_task("dest is a file", src="/etc", dest=__file__),
    ]
    run = run_playbook(play)
    assert "Cannot copy /nope on node %s" % cp.address in run.task("missing")["result"]["msg"]
    assert "lstat /nope: no such file or directory" in run.task("missing")["result"]["msg"]
    assert "src must be an absolute path" in run.task("relative")["result"]["msg"]
    assert "flat=true" in run.task("flat with two")["result"]["msg"]
    assert "is not a directory" in run.task("dest is a file")["result"]["msg"]
    assert not (tmp_path / "n").exists()


def _peak_kib(cluster, tmp_path, name, src):
    """The peak resident memory (KiB) of ansible-playbook and its children fetching ``src`` in a process of its own,
    so that no earlier run counts."""
    play = module_play(cluster, "talos_fetch", {"src": src, "dest": str(tmp_path / name), "flat": True},
                       cluster.nodes[0].address, "fetch", timeout=300)
    script = (
        "import json, resource, sys\n"
        "sys.path.insert(0, %r)\n"
        "from playbook_runner import run_playbook_in\n"
        "run = run_playbook_in(%r, %r, json.loads(sys.argv[1]))\n"
        "assert run.rc == 0, run.stdout[-3000:]\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    ) % (HERE, str(tmp_path), name)
    done = subprocess.run([sys.executable, "-c", script, json.dumps(play)], capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return int(done.stdout.split()[-1])


@pytest.mark.once
def test_a_200_mb_file_streams_to_disk(emulator, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, reboot_seconds=0.1)
    node = cluster.nodes[0]
    cluster.call(node.place_file, "/var/big/image.raw", size=BIG)
    cluster.call(node.place_file, "/var/small/note.txt", content=b"small\n")
    small = _peak_kib(cluster, tmp_path, "small", "/var/small/note.txt")
    big = _peak_kib(cluster, tmp_path, "big", "/var/big/image.raw")
    fetched = tmp_path / "big" / "image.raw"
    assert fetched.stat().st_size == BIG
    # The emulator's generated content: one random MiB, repeated (services/files.py).
    block = random.Random("/var/big/image.raw").randbytes(1 << 20)
    with open(str(fetched), "rb") as handle:
        assert handle.read(1 << 20) == block
        handle.seek(BIG - (1 << 20))
        assert handle.read() == block
    assert big - small < 64 * 1024, "fetching 200 MB took %d KiB more memory than a small file" % (big - small)
