# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_etcd_snapshot through ansible-playbook against the emulator's real etcd members."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import stat

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot
from module_plays import module_play
from test_robustness import assert_no_secret, cluster_secrets

# A value written into etcd: a snapshot holds it, the output never does.
KEPT_IN_ETCD = "value-only-the-snapshot-holds-7f3a"


def snapshot_play(cluster, node, role="admin", **options):
    return module_play(cluster, "talos_etcd_snapshot", options, node.address, "snapshot", role=role)


def test_a_snapshot_from_a_follower_is_checked_private_and_kept_on_a_rerun(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1 = cluster.controlplanes[0]
    revision = cluster.run(cluster.etcd.kv(cp1, "put", key="/registry/secrets/default/kept", value=KEPT_IN_ETCD))["revision"]
    out = tmp_path / "out"
    out.mkdir()
    path = out / "etcd.snapshot"

    planned = run_playbook(snapshot_play(cluster, cp1, dest=str(path)), check=True).task("snapshot")
    assert planned["status"] == "changed" and not path.exists()
    assert planned["result"]["member"]["leader"] is False and planned["result"]["member"]["node"] != cp1.address

    run = run_playbook(snapshot_play(cluster, cp1, dest=str(path)), verbosity=3)
    result = run.task("snapshot")["result"]
    facts = etcd_snapshot.check(str(path))
    assert result["changed"] is True and result["revision"] == facts["revision"] >= revision
    assert (result["sha256"], result["size"], result["raft_index"]) == (facts["sha256"], facts["size"], facts["raft_index"])
    assert result["member"]["leader"] is False and result["member"]["node"] != cp1.address
    assert result["etcd_version"].startswith("3.7.") and result["talos_version"] == cp1.talos_version
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and sorted(os.listdir(str(out))) == ["etcd.snapshot"]
    assert KEPT_IN_ETCD.encode() in path.read_bytes()
    assert KEPT_IN_ETCD not in run.stdout + run.stderr
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))

    again = run_playbook(snapshot_play(cluster, cp1, dest=str(path))).task("snapshot")
    assert again["status"] == "ok" and again["result"]["member"] is None and etcd_snapshot.check(str(path))["sha256"] == facts["sha256"]
    assert cluster.audit() == []


def test_backups_in_a_directory_carry_time_and_revision_and_keep_the_newest(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    cp1 = cluster.controlplanes[0]
    backups = tmp_path / "backups"
    backups.mkdir()
    old = backups / "prod-20200101T000000Z-r1.snapshot"
    old.write_bytes(b"an old backup")
    unrelated = backups / "staging-20200101T000000Z-r1.snapshot"
    unrelated.write_bytes(b"another cluster's")

    taken = []
    for round_number in range(3):
        cluster.run(cluster.etcd.kv(cp1, "put", key="/registry/test/counter", value=str(round_number)))
        result = run_playbook(snapshot_play(cluster, cp1, directory=str(backups), prefix="prod", keep=2, max_age="30d")
                              ).task("snapshot")["result"]
        assert result["changed"] is True and os.path.dirname(result["dest"]) == str(backups)
        taken.append(result)
    assert taken[0]["removed"] == [str(old)]
    assert taken[2]["removed"] == [taken[0]["dest"]]
    names = sorted(os.listdir(str(backups)))
    assert names == sorted([os.path.basename(taken[1]["dest"]), os.path.basename(taken[2]["dest"]), unrelated.name])
    for result in taken[1:]:
        assert os.path.basename(result["dest"]).endswith("-r%d.snapshot" % result["revision"])
        assert etcd_snapshot.check(result["dest"])["revision"] == result["revision"]
    assert taken[2]["revision"] > taken[1]["revision"]


def test_an_etcd_backup_client_takes_its_snapshot_from_the_node_it_names(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp3 = cluster.controlplanes[2]
    backup_config = tmp_path / "backup-talosconfig"
    backup_config.write_text(cluster.talosconfig(roles=["os:etcd:backup"]))
    play = snapshot_play(cluster, cp3, dest=str(tmp_path / "etcd.snapshot"), source="node")
    play["module_defaults"]["group/talos_linux.talos.talos"]["talosconfig"] = str(backup_config)
    result = run_playbook(play).task("snapshot")["result"]
    assert result["member"]["node"] == cp3.address and result["talos_version"] is None
    assert etcd_snapshot.check(str(tmp_path / "etcd.snapshot"))["revision"] == result["revision"]


@pytest.mark.once
def test_bad_destinations_and_options_fail_in_one_sentence_before_the_cluster_is_asked(emulator, run_playbook, tmp_path):
    # etcd is down (its only control plane is off): every destination problem is found first all the same.
    cluster = emulator(controlplanes=1, bootstrapped=True)
    cp1 = cluster.controlplanes[0]
    cluster.power_off(cp1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a-file").write_text("")
    cases = [
        # sysfs refuses new files, also to root.
        (dict(dest="/sys/etcd.snapshot"), r"^Cannot write the etcd snapshot to /sys/etcd.snapshot: Permission denied\.$"),
        (dict(directory="/sys"), r"^Cannot write etcd backups to /sys: Permission denied\.$"),
        (dict(dest=str(out / "missing" / "etcd.snapshot")), r"directory .*missing does not exist"),
        (dict(directory=str(out / "missing")),
         r"^Cannot write etcd backups to .*/missing: it does not exist; create it or set directory to an existing directory\.$"),
        (dict(directory=str(out / "a-file")),
         r"^Cannot write etcd backups to .*/a-file: it is not a directory; set directory to a directory\.$"),
        (dict(directory=str(out), prefix="../escape"), r"^prefix must start with a letter or digit"),
        (dict(directory=str(out), max_age="a month"), r"^max_age must be a duration such as 720h, 1h30m or 30d, got .a month.\.$"),
        (dict(dest=str(out / "x.snapshot"), keep=2), r"missing parameter\(s\) required by 'keep': directory"),
    ]
    # One task a case, in one run a mode.
    play = snapshot_play(cluster, cp1)
    play["tasks"] = [{"name": "case %d" % number, "talos_linux.talos.talos_etcd_snapshot": options, "ignore_errors": True}
                     for number, (options, unused_message) in enumerate(cases)]
    for check in (True, False):
        run = run_playbook(play, check=check)
        for number, (options, message) in enumerate(cases):
            result = run.task("case %d" % number)
            assert result["status"] == "failed", options
            assert re.search(message, result["result"]["msg"]), (options, result["result"]["msg"])
    assert os.listdir(str(out)) == ["a-file"]


@pytest.fixture(scope="module")
def etcd_model(module_emulator):
    """A cluster on the emulator's etcd model (its default), shared: nothing here changes it."""
    return module_emulator(controlplanes=3, bootstrapped=True, name="etcd-model")


@pytest.mark.parametrize("check", [True, False], ids=["check-mode", "run"])
def test_the_etcd_model_makes_no_backup_and_says_at_once_how_to_get_real_members(etcd_model, run_playbook, tmp_path, check):
    backups = tmp_path / "backups"
    backups.mkdir()
    run = run_playbook(snapshot_play(etcd_model, etcd_model.controlplanes[0], directory=str(backups), prefix="prod"),
                       check=check, expect_rc=2)
    message = run.task("snapshot")["result"]["msg"]
    assert re.search(r"^machine.MachineService/EtcdSnapshot failed on node 127\.[0-9.]+ with Unknown: failed reading etcd "
                     r"snapshot: the emulator's etcd model cannot make a snapshot; start real etcd members to take one: make "
                     r"demo with Go installed, or tests/talos-emulator up --etcd real\.$", message), message
    assert os.listdir(str(backups)) == [] and etcd_model.audit() == []


def test_check_mode_fails_for_a_talosconfig_whose_role_may_not_take_a_snapshot(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    cp1 = cluster.controlplanes[0]
    path = tmp_path / "etcd.snapshot"
    result = run_playbook(snapshot_play(cluster, cp1, role="reader", dest=str(path)), check=True,
                          expect_rc=2).task("snapshot")["result"]
    assert result["msg"].startswith("Permission denied for machine.MachineService/EtcdSnapshot on node %s" % cp1.address)
    assert "it needs role os:admin, os:operator or os:etcd:backup" in result["msg"], result["msg"]
    assert not path.exists()
