# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_etcd_restore through ansible-playbook against the emulator's real etcd members: refusals, faults, reruns."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import pytest

from module_plays import module_play

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot


def restore_play(cluster, nodes=None, **options):
    nodes = nodes or cluster.controlplanes
    play = module_play(cluster, "talos_etcd_restore", dict(options, nodes=[node.address for node in nodes]), None,
                       "restore", timeout=30)
    del play["module_defaults"]["group/talos_linux.talos.talos"]["node"]
    return play


def take_snapshot(cluster, path):
    node = cluster.controlplanes[0]
    with open(path, "wb") as output:
        output.write(cluster.run(cluster.etcd.snapshot_bytes(node)))
    return etcd_snapshot.check(path)


def members(cluster):
    """The voting members as the real etcd lists them."""
    listed = cluster.run(cluster.etcd.member_list(cluster.controlplanes[0], False))
    return sorted(member.hostname for member in listed if not member.is_learner)


def put(cluster, key, value="x"):
    return cluster.run(cluster.etcd.kv(cluster.controlplanes[0], "put", key=key, value=value))


def get(cluster, node, key):
    return cluster.run(cluster.etcd.kv(node, "get", key=key))["value"]


@pytest.mark.once
def test_a_healthy_cluster_is_refused_unless_allowed_and_then_rolled_back(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real", reboot_seconds=0.1)
    cp1, cp2, cp3 = cluster.controlplanes
    put(cluster, "/registry/test/before")
    path = str(tmp_path / "etcd.snapshot")
    facts = take_snapshot(cluster, path)
    put(cluster, "/registry/test/after")

    # Verifying the backup on the healthy cluster: check mode checks it and plans, asking for no dangerous flag.
    verified = run_playbook(restore_play(cluster, snapshot=path), check=True).task("restore")
    assert verified["status"] == "ok" and verified["result"]["snapshot"]["revision"] == facts["revision"]
    assert re.match(r"^refuse, since etcd still has quorum \(.*\), and a restore rolls the whole cluster back to revision "
                    r"%d of the snapshot; with allow_quorum=true a run goes on with the steps below$" % facts["revision"],
                    verified["result"]["plan"][0]), verified["result"]["plan"]
    assert verified["result"]["plan"][1].startswith("wipe etcd on %s, %s, %s" % (cp1.address, cp2.address, cp3.address))
    refused = run_playbook(restore_play(cluster, snapshot=path), expect_rc=2).task("restore")
    message = refused["result"]["msg"]
    assert re.match(r"^Refusing to restore etcd: it still has quorum \(.*\), and a restore rolls the whole cluster back to "
                    r"revision %d of the snapshot; set allow_quorum=true" % facts["revision"], message), message
    assert cluster.audit() == [] and not os.path.exists(path + ".restored.json")

    plan = run_playbook(restore_play(cluster, snapshot=path, allow_quorum=True), check=True).task("restore")["result"]
    assert plan["changed"] is True and plan["wiped"] == [cp1.address, cp2.address, cp3.address]
    assert plan["plan"][0].startswith("wipe etcd on %s, %s, %s" % (cp1.address, cp2.address, cp3.address))
    assert cluster.audit() == [] and not os.path.exists(path + ".restored.json")

    run = run_playbook(restore_play(cluster, snapshot=path, allow_quorum=True, wait_timeout=180))
    result = run.task("restore")["result"]
    assert result["changed"] is True and result["bootstrap_node"] == cp1.address
    assert result["joined"] == [cp2.address, cp3.address]
    assert sorted(member["hostname"] for member in result["members"]) == members(cluster) == [
        "controlplane-1", "controlplane-2", "controlplane-3"]
    assert not any(member["is_learner"] for member in result["members"])
    assert get(cluster, cp3, "/registry/test/before") == "x" and get(cluster, cp2, "/registry/test/after") is None
    assert [(entry["method"].rsplit("/", 1)[1], entry["node"]) for entry in cluster.audit()] == [
        ("Reset", cp1.name), ("Reset", cp2.name), ("Reset", cp3.name), ("EtcdRecover", cp1.name), ("Bootstrap", cp1.name)]

    again = run_playbook(restore_play(cluster, snapshot=path)).task("restore")
    assert again["status"] == "ok" and again["result"]["plan"] == [
        "wait until %s, %s joined the restored etcd as voting members" % (cp2.address, cp3.address)]
    assert len(cluster.audit()) == 5


@pytest.mark.once
def test_a_bad_snapshot_is_refused_before_any_node_is_touched(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    path = str(tmp_path / "etcd.snapshot")
    take_snapshot(cluster, path)
    with open(path, "rb") as source:
        data = source.read()
    cases = [
        ("flipped", data[:6000] + bytes([data[6000] ^ 1]) + data[6001:], {}, "is corrupt: the sha256 etcd appended does not match"),
        ("truncated", data[:len(data) // 3], {}, "has no sha256 appended by etcd, so it is truncated or a copy"),
        ("database-copy", data[:-32], {}, "set skip_hash_check=true to restore a database copy"),
        ("missing", None, {}, "cannot be read: No such file or directory"),
    ]
    for name, content, options, problem in cases:
        damaged = str(tmp_path / name)
        if content is not None:
            with open(damaged, "wb") as output:
                output.write(content)
        result = run_playbook(restore_play(cluster, snapshot=damaged, allow_quorum=True, **options), expect_rc=2).task("restore")
        assert problem in result["result"]["msg"], (name, result["result"]["msg"])
        assert result["result"]["msg"].count(". ") == 0
    assert cluster.audit() == []


def test_a_data_directory_copy_restores_with_skip_hash_check_and_a_node_that_died_is_joined_by_a_rerun(
        emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real", reboot_seconds=0.1)
    cp1, cp2, cp3 = cluster.controlplanes
    put(cluster, "/registry/test/kept", "kept")
    copy = str(tmp_path / "db")
    take_snapshot(cluster, copy)
    with open(copy, "r+b") as handle:
        handle.truncate(os.path.getsize(copy) - 32)
    for node in cluster.controlplanes:
        cluster.wipe_etcd(node)
    cluster.power_off(cp3)

    run = run_playbook(restore_play(cluster, snapshot=copy, skip_hash_check=True, wait_timeout=60), verbosity=3)
    result = run.task("restore")["result"]
    assert result["wiped"] == [] and result["left_out"] == [cp3.address] and result["joined"] == [cp2.address]
    assert any("does not answer and is left out of the restore" in warning for warning in result["warnings"])
    assert members(cluster) == ["controlplane-1", "controlplane-2"] and get(cluster, cp2, "/registry/test/kept") == "kept"
    assert "/registry/test/kept" not in run.stdout

    cluster.power_on(cp3)
    cluster.wipe_etcd(cp3)
    again = run_playbook(restore_play(cluster, snapshot=copy, skip_hash_check=True, wait_timeout=120)).task("restore")
    assert again["status"] == "ok" and again["result"]["joined"] == [cp2.address, cp3.address]
    assert members(cluster) == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert get(cluster, cp3, "/registry/test/kept") == "kept"
