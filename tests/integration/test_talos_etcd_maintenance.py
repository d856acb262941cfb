# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_etcd_info and talos_etcd_maintenance through ansible-playbook against the emulator (issue 26),
with -vvv output free of secrets."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from etcd_member import EtcdMemberError
from module_plays import module_play
from test_robustness import assert_no_secret, cluster_secrets

MiB = 1 << 20


def nodes_play(cluster, module, nodes, **options):
    play = module_play(cluster, module, dict(options, nodes=[node.address for node in nodes]), None, "etcd")
    del play["module_defaults"]["group/talos_linux.talos.talos"]["node"]
    return play


def test_info_reports_members_status_and_alarms_with_a_member_off(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, cp2, cp3 = cluster.controlplanes
    cluster.raise_etcd_alarm(cp2, "NOSPACE")
    cluster.power_off(cp3)

    run = run_playbook(nodes_play(cluster, "talos_etcd_info", [cp1, cp2, cp3]), check=True, verbosity=3)
    result = run.task("etcd")
    assert result["status"] == "ok", result["result"]
    info = result["result"]
    assert sorted(m["hostname"] for m in info["members"]) == ["controlplane-1", "controlplane-2", "controlplane-3"]
    member_id = "%016x" % cluster.etcd.member_of(cp2).id
    assert info["alarms"] == [{"member_id": member_id, "alarm": "NOSPACE"}]
    first, second, third = info["status"]
    assert first["node"] == cp1.address and first["leader"] == "%016x" % cluster.etcd.member_of(cp1).id
    # A real database may have no free pages yet: in use is at most the size, never more.
    assert first["db_size"] >= first["db_size_in_use"] > 0 and first["raft_index"] >= first["raft_applied_index"] > 0
    # etcd lists the alarm in every member's status, in protobuf text whose spacing varies: shown once, spaced one way.
    assert second["errors"] == ["memberID:%d alarm:NOSPACE" % int(member_id, 16)] and first["errors"] == []
    assert third["member_id"] is None and "unreachable" in third["errors"][0]
    assert any("did not answer EtcdStatus" in warning for warning in info["warnings"])
    assert cluster.audit() == []
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))


def kv(cluster, node, op, **fields):
    return cluster.run(cluster.etcd.kv(node, op, timeout=10, **fields), timeout=30)


def leave_free_pages(cluster, node, count=48, size=32 * 1024):
    """Write keys, delete them and compact the history, as the Kubernetes API server's churn does: every member's
    database keeps the pages they took as free pages until it is defragmented."""
    for index in range(count):
        kv(cluster, node, "put", key="/registry/churn/%03d" % index, value="x" * size)
    kv(cluster, node, "delete", key="/registry/churn/")
    kv(cluster, node, "compact")


def test_defragment_one_at_a_time_leader_last_above_a_ratio_then_disarm(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, cp2, cp3 = cluster.controlplanes
    leave_free_pages(cluster, cp1)
    # cp3 gives its free pages back beforehand: below the ratio, it is left alone. The compaction was physical on cp1
    # only; one more through cp3 waits until cp3 has freed the pages too, so none appear after its defragmentation.
    kv(cluster, cp3, "put", key="/registry/churn/done", value="x")
    kv(cluster, cp3, "compact")
    cluster.run(cluster.etcd.defragment(cp3, None), timeout=60)
    cluster.run(cluster.etcd.make_leader(cp1))
    cluster.raise_etcd_alarm(cp2, "NOSPACE")
    options = dict(defragment=True, defragment_min_free_ratio=0.5, disarm_alarms=True)

    check = run_playbook(nodes_play(cluster, "talos_etcd_maintenance", [cp1, cp2, cp3], **options), check=True).task("etcd")
    assert check["status"] == "changed" and cluster.audit() == []
    assert [(m["node"], m["leader"], m["selected"], m["defragmented"]) for m in check["result"]["members"]] == [
        (cp2.address, False, True, False), (cp3.address, False, False, False), (cp1.address, True, True, False)]
    assert check["result"]["alarms"] == [{"member_id": "%016x" % cluster.etcd.member_of(cp2).id, "alarm": "NOSPACE"}]

    run = run_playbook(nodes_play(cluster, "talos_etcd_maintenance", [cp1, cp2, cp3], **options), verbosity=3)
    result = run.task("etcd")["result"]
    assert result["changed"] is True and result["defragmented"] == [cp2.address, cp1.address]
    assert [(e["method"].rsplit("/", 1)[1], e["node"]) for e in cluster.audit()] == [
        ("EtcdDefragment", cp2.name), ("EtcdDefragment", cp1.name), ("EtcdAlarmDisarm", cp1.name)]
    assert cluster.etcd.most_concurrent_defragments == 1
    assert cluster.run(cluster.etcd.alarm_list(cp3)) == []
    for member in result["members"]:
        if member["defragmented"]:
            # The database shrank to about what is in use: the free pages went back to the file system.
            assert member["db_size_after"] < member["db_size"] // 2, member
            assert member["db_size_after"] - member["db_size_in_use"] < member["db_size"] - member["db_size_in_use"], member
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))

    again = run_playbook(nodes_play(cluster, "talos_etcd_maintenance", [cp1, cp2, cp3], **options)).task("etcd")
    assert again["status"] == "ok" and len(cluster.audit()) == 3


def test_a_real_nospace_alarm_is_cleared_by_compaction_defragmentation_and_disarm(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real", etcd_quota_bytes=2 * MiB)
    cp1, cp2, cp3 = cluster.controlplanes
    with pytest.raises(EtcdMemberError, match="database space exceeded"):
        for index in range(200):
            kv(cluster, cp1, "put", key="/registry/fill/%03d" % index, value="x" * (64 * 1024))
    info = run_playbook(nodes_play(cluster, "talos_etcd_info", [cp1, cp2, cp3]), check=True).task("etcd")["result"]
    assert {alarm["alarm"] for alarm in info["alarms"]} == {"NOSPACE"}

    # Only deletes and compaction get through a NOSPACE alarm: what the Kubernetes API server's compaction frees.
    kv(cluster, cp1, "delete", key="/registry/fill/")
    kv(cluster, cp1, "compact")
    options = dict(defragment=True, disarm_alarms=True)
    result = run_playbook(nodes_play(cluster, "talos_etcd_maintenance", [cp1, cp2, cp3], **options)).task("etcd")["result"]
    assert result["changed"] is True and sorted(result["defragmented"]) == sorted(node.address for node in cluster.controlplanes)
    assert cluster.run(cluster.etcd.alarm_list(cp2)) == []
    assert kv(cluster, cp2, "put", key="/registry/after", value="written")["revision"] > 0


def test_removal_of_a_powered_off_member_shows_no_secret_at_vvv(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, _cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp3)
    play = module_play(cluster, "talos_etcd_member", {"member_id": "%016x" % cluster.etcd.member_of(cp3).id,
                                                      "state": "absent"}, cp1.address, "etcd")
    run = run_playbook(play, verbosity=3, diff=True)
    assert run.task("etcd")["status"] == "changed"
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))
