# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_etcd_info and talos_etcd_maintenance through ansible-playbook against the emulator (issue 26),
with -vvv output free of secrets."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

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


def test_defragment_one_at_a_time_leader_last_above_a_ratio_then_disarm(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True)
    cp1, cp2, cp3 = cluster.controlplanes
    for node in cluster.controlplanes:
        cluster.fragment_etcd(node, 4 * MiB)
    cluster.fragment_etcd(cp3, 100)
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
    assert cluster.etcd.most_concurrent_defragments == 1 and cluster.etcd.alarms == []
    assert all(m["db_size_after"] == m["db_size_in_use"] for m in result["members"] if m["defragmented"])
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))

    again = run_playbook(nodes_play(cluster, "talos_etcd_maintenance", [cp1, cp2, cp3], **options)).task("etcd")
    assert again["status"] == "ok" and len(cluster.audit()) == 3


def test_removal_of_a_powered_off_member_shows_no_secret_at_vvv(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    cp1, _cp2, cp3 = cluster.controlplanes
    cluster.power_off(cp3)
    play = module_play(cluster, "talos_etcd_member", {"member_id": "%016x" % cluster.etcd.member_of(cp3).id,
                                                      "state": "absent"}, cp1.address, "etcd")
    run = run_playbook(play, verbosity=3, diff=True)
    assert run.task("etcd")["status"] == "changed"
    assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))
