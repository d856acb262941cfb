# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_file_info through ansible-playbook against the emulator: list, stat, content and usage, refusals."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from module_plays import module_play


def info_task(name, **options):
    return {"name": name, "talos_linux.talos.talos_file_info": options, "ignore_errors": True}


def test_list_stat_read_and_usage(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True, reboot_seconds=0.1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.call(cp.place_file, "/var/data/a/one.log", content=b"one\n" * 250)
    cluster.call(cp.place_file, "/var/data/a/two.txt", size=3000)
    cluster.call(cp.place_file, "/var/data/b.log", content=b"b\n", mode=0o600)
    cluster.call(cp.place_file, "/var/data/link", link="a/one.log")
    key_text = ("token: x\nkey: |\n  -----BEGIN PRIVATE KEY-----\n"
                "  MC4CAQAwBQYDK2VwBCIEIOvBmFcuHhs7pJ1bSxVIYhaB6g2EoAcwmuJUbn+3SVJj\n  -----END PRIVATE KEY-----\n")
    cluster.call(cp.place_file, "/var/data/secret.yaml", content=key_text.encode())
    cluster.call(cp.place_file, "/var/data/blob.bin", content=b"\xff\xfe\x00binary")
    play = module_play(cluster, "talos_file_info", {"path": "/var/data"}, cp.address, "entries")
    play["tasks"] += [
        info_task("everything", path="/var/data/", depth=0),
        info_task("logs", path="/var/data", depth=0, types=["file"], patterns=["*.log"]),
        info_task("stat link", path="/var/data/link", get="stat"),
        info_task("hosts", path="/etc/hosts", get="content"),
        info_task("through the link", path="/var/data/link", get="content"),
        info_task("secret", path="/var/data/secret.yaml", get="content"),
        info_task("binary", path="/var/data/blob.bin", get="content"),
        info_task("too big", path="/var/data/a/two.txt", get="content", max_size=100),
        info_task("usage", path="/var/data", get="usage"),
        info_task("usage of files", path="/var/data", get="usage", depth=0, include_files=True, threshold=1000),
        info_task("both nodes", path="/etc/hostname", get="stat", nodes=[cp.address, worker.address], node="{{ omit }}"),
        info_task("only on one", path="/var/data/b.log", get="stat", nodes=[worker.address, cp.address], node="{{ omit }}"),
        info_task("missing", path="/nope"),
        info_task("relative", path="etc"),
        info_task("directory content", path="/var/data", get="content"),
    ]
    run = run_playbook(play, check=True, verbosity=3)
    # The key read from the node shows nowhere, not even at -vvv.
    assert "MC4CAQAw" not in run.stdout + run.stderr
    entries = run.task("entries")["result"]["files"]
    assert [entry["name"] for entry in entries] == [".", "a", "b.log", "blob.bin", "link", "secret.yaml"]
    assert entries[0]["type"] == "directory" and entries[0]["mode"] == "0755"
    by_name = dict((entry["name"], entry) for entry in entries)
    assert by_name["b.log"]["mode"] == "0600" and by_name["b.log"]["size"] == 2
    assert by_name["link"]["type"] == "symlink" and by_name["link"]["link"] == "a/one.log"
    every = [entry["name"] for entry in run.task("everything")["result"]["files"]]
    assert "a/one.log" in every and "a/two.txt" in every
    assert [entry["name"] for entry in run.task("logs")["result"]["files"]] == [".", "a/one.log", "b.log"]
    assert run.task("stat link")["result"]["stat"]["type"] == "symlink"
    assert run.task("hosts")["result"]["content"].endswith("%s %s\n" % (cp.address, cp.hostname))
    assert run.task("through the link")["result"]["content"] == "one\n" * 250
    secret = run.task("secret")["result"]["content"]
    assert "MC4CAQAw" not in secret and "token: x" not in secret and "<redacted>" in secret
    assert "not UTF-8" in run.task("binary")["result"]["msg"]
    assert run.task("too big")["status"] == "failed"
    too_big = run.task("too big")["result"]
    assert "/var/data/a/two.txt" in too_big["msg"] and "max_size" in too_big["msg"]
    usage = run.task("usage")["result"]
    assert usage["size"] == 4096 * 2 + 1000 + 3000 + 2 + len("a/one.log") + len(key_text) + 9
    assert [entry["name"] for entry in usage["usage"]] == ["a", "."]
    assert [entry["name"] for entry in run.task("usage of files")["result"]["usage"]] == ["a/one.log", "a/two.txt", "a", "."]
    both = run.task("both nodes")["result"]["nodes"]
    assert both[cp.address]["stat"]["size"] == len(cp.hostname) + 1 and both[worker.address]["stat"]["size"] == len(worker.hostname) + 1
    assert "nodes" not in run.task("stat link")["result"]
    only_on_one = run.task("only on one")
    assert only_on_one["status"] == "failed" and only_on_one["result"]["msg"].startswith("1 of 2 nodes failed (%s): " % worker.address)
    assert only_on_one["result"]["nodes"][cp.address]["stat"]["mode"] == "0600"
    assert only_on_one["result"]["nodes"][worker.address]["failed"] is True
    assert run.task("missing")["status"] == "failed"
    missing = run.task("missing")["result"]
    assert missing["msg"].startswith("Cannot list /nope on node %s" % cp.address)
    assert "absolute path" in run.task("relative")["result"]["msg"]
    assert "path must be a regular file" in run.task("directory content")["result"]["msg"]


def test_a_reader_lists_but_may_not_read(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True, reboot_seconds=0.1)
    cp = cluster.controlplanes[0]
    play = module_play(cluster, "talos_file_info", {"path": "/etc"}, cp.address, "list", role="reader")
    play["tasks"].append(info_task("read", path="/etc/hosts", get="content"))
    run = run_playbook(play)
    assert "hosts" in [entry["name"] for entry in run.task("list")["result"]["files"]]
    assert run.task("read")["status"] == "failed"
    refused = run.task("read")["result"]
    assert refused["code"] == "PermissionDenied"
    assert refused["msg"].startswith("Cannot read /etc/hosts on node %s: Permission denied" % cp.address)
    assert "os:admin" in refused["msg"] and "os:reader" in refused["msg"]
