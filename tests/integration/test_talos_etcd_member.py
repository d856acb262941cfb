# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_etcd_member through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading

from module_plays import module_play


def member_play(emulated, node, role="admin", timeout=20, **options):
    return module_play(emulated, "talos_etcd_member", options, node, "etcd", role=role, timeout=timeout)


def names(members):
    return sorted(m["hostname"] for m in members)


def test_remove_member_by_leaving_then_idempotent(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, _second, third = cluster.controlplanes

    run = run_playbook(member_play(cluster, first.address, member=third.hostname, state="absent"), diff=True)
    result = run.task("etcd")["result"]
    assert result["changed"] is True and result["method"] == "leave"
    assert result["quorum"] == {"safe": True, "voters_after": 2, "quorum_after": 2, "healthy_after": 2, "unhealthy": []}
    assert names(result["members_before"]) == names([{"hostname": n.hostname} for n in cluster.controlplanes])
    assert third.hostname not in names(result["members_after"]) and len(result["members_after"]) == 2
    assert result["leader"]["hostname"] == first.hostname
    assert [(e["method"], e["node"], e["code"]) for e in cluster.audit()] == [
        ("machine.MachineService/EtcdLeaveCluster", third.name, "OK")]
    assert cluster.etcd.member_of(third) is None and len(cluster.etcd.members) == 2

    run = run_playbook(member_play(cluster, first.address, member=third.hostname, state="absent"))
    assert run.task("etcd")["status"] == "ok" and run.task("etcd")["result"]["member"] is None
    assert len(cluster.audit()) == 1


def test_check_mode_removes_nothing(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, second, _third = cluster.controlplanes
    run = run_playbook(member_play(cluster, first.address, member=second.hostname, state="absent"), check=True)
    result = run.task("etcd")["result"]
    assert result["changed"] is True and names(result["members_after"]) == sorted([first.hostname, _third.hostname])
    assert cluster.audit() == [] and len(cluster.etcd.members) == 3


def test_quorum_guard_then_removal_of_the_dead_member_by_id(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, second, third = cluster.controlplanes
    cluster.power_off(third)

    run = run_playbook(member_play(cluster, first.address, timeout=3, member=second.hostname, state="absent"), expect_rc=2)
    message = run.task("etcd")["result"]["msg"]
    assert message.startswith(
        "Refusing to remove etcd member %s: etcd would keep 2 voting members and need 2 of them healthy for quorum, "
        "but only 1 member other than %s is healthy (not healthy: %s - " % (second.hostname, second.hostname, third.hostname))
    assert message.endswith("); fix the unhealthy members first, or set force_quorum_loss: true to go ahead anyway.")
    assert run.task("etcd")["result"]["etcd_gate_open"] is False
    assert cluster.audit() == [] and len(cluster.run(cluster.etcd.member_list(first, False))) == 3

    member_id = "%016x" % cluster.etcd.member_of(third).id
    run = run_playbook(member_play(cluster, first.address, timeout=3, member=member_id, state="absent"))
    result = run.task("etcd")["result"]
    assert result["changed"] is True and result["method"] == "remove"
    assert result["member"]["hostname"] == third.hostname
    assert [(e["method"], e["code"], e["member_id"]) for e in cluster.audit()] == [
        ("machine.MachineService/EtcdRemoveMemberByID", "OK", int(member_id, 16))]
    assert cluster.audit()[0]["node"] in (first.name, second.name)
    assert names(result["members_after"]) == sorted([first.hostname, second.hostname])
    assert sorted(member.hostname for member in cluster.run(cluster.etcd.member_list(first, False))) == sorted(
        [first.hostname, second.hostname])


def test_force_quorum_loss_removes_a_member_the_guard_refuses(emulator, run_playbook):
    # About the option only: the model lets the forced removal through (real etcd refuses to lose its quorum itself).
    cluster = emulator(controlplanes=3, bootstrapped=True)
    first, second, third = cluster.controlplanes
    cluster.faults.make_unreachable(third)

    run = run_playbook(member_play(cluster, first.address, timeout=3, member=second.hostname, state="absent",
                                   force_quorum_loss=True))
    result = run.task("etcd")["result"]
    assert result["changed"] is True and result["quorum"]["safe"] is False
    assert cluster.etcd.member_of(second) is None


def test_leave_of_an_unreachable_member_points_to_remove(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, _second, third = cluster.controlplanes
    cluster.faults.make_unreachable(third)
    run = run_playbook(member_play(cluster, first.address, timeout=3, member=third.hostname, state="absent", method="leave"),
                       expect_rc=2)
    message = run.task("etcd")["result"]["msg"]
    assert message.startswith("Cannot make etcd member %s leave: its node %s does not answer" % (third.hostname, third.address))
    assert message.endswith("use method=remove to remove it through another control plane.")
    assert cluster.audit() == []


def test_forfeit_leadership_moves_it_once(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first = cluster.controlplanes[0]
    assert cluster.etcd_leader() is first

    run = run_playbook(member_play(cluster, first.address, forfeit_leadership=True))
    result = run.task("etcd")["result"]
    assert result["changed"] is True
    new_leader = cluster.etcd_leader()
    assert new_leader is not first
    assert result["new_leader"] == new_leader.hostname and result["leader"]["hostname"] == new_leader.hostname
    assert [e["method"] for e in cluster.audit()] == ["machine.MachineService/EtcdForfeitLeadership"]

    run = run_playbook(member_play(cluster, first.address, forfeit_leadership=True))
    assert run.task("etcd")["status"] == "ok" and len(cluster.audit()) == 1


def test_present_waits_for_a_member_to_join(emulator, run_playbook):
    cluster = emulator(controlplanes=2, bootstrapped=True, etcd="real")
    first, second = cluster.controlplanes
    cluster.run(cluster.etcd.leave(second))
    # The member joins once the task has read the members before (its member list and their statuses), however
    # long ansible-playbook takes to start on a loaded machine.
    start = cluster.calls_served

    def join_once_read():
        cluster.wait_until(lambda: cluster.calls_served > start + 2, timeout=120)
        cluster.call(second.join_etcd)

    joiner = threading.Thread(target=join_once_read)
    joiner.start()
    run = run_playbook(member_play(cluster, first.address, member=second.hostname, wait_timeout=30))
    joiner.join()
    result = run.task("etcd")["result"]
    assert result["changed"] is False
    assert names(result["members_before"]) == [first.hostname]
    assert names(result["members_after"]) == sorted([first.hostname, second.hostname])
    assert cluster.audit() == []


def test_present_without_wait_fails_for_a_non_member(emulator, run_playbook):
    cluster = emulator(controlplanes=2, bootstrapped=True, etcd="real")
    first, second = cluster.controlplanes
    cluster.run(cluster.etcd.leave(second))
    run = run_playbook(member_play(cluster, first.address, member=second.hostname, wait=False), expect_rc=2)
    assert run.task("etcd")["result"]["msg"] == "etcd member check failed: %s is not a member (members: %s)." % (
        second.hostname, first.hostname)

    run = run_playbook(member_play(cluster, second.address, wait=False, forfeit_leadership=False, member=first.hostname))
    assert run.task("etcd")["status"] == "ok"


def test_present_in_check_mode_before_bootstrap_only_warns(emulator, run_playbook):
    cluster = emulator(controlplanes=1, etcd="real")
    node = cluster.controlplanes[0]
    run = run_playbook(member_play(cluster, node.address, state="present"), check=True)
    result = run.task("etcd")
    assert result["status"] == "ok" and result["result"]["member"] is None
    assert result["result"]["warnings"][0].startswith("etcd member %s is not a voting member yet" % node.hostname)
    assert cluster.audit() == []


def test_reader_and_operator_get_the_role_they_need(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, second, _third = cluster.controlplanes
    for role in ("reader", "operator"):
        run = run_playbook(member_play(cluster, first.address, role=role, member=second.hostname, state="absent"), expect_rc=2)
        message = run.task("etcd")["result"]["msg"]
        assert "EtcdLeaveCluster" in message
        assert "it needs role os:admin and the client certificate carries role os:%s" % role in message
    assert cluster.audit() == [] and len(cluster.etcd.members) == 3


def test_member_id_removes_a_powered_off_member_through_the_tasks_node(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, second, third = cluster.controlplanes
    cluster.power_off(third)
    member_id = cluster.etcd.member_of(third).id

    check = run_playbook(member_play(cluster, second.address, member_id="0x%016X" % member_id, state="absent"),
                         check=True).task("etcd")
    assert check["status"] == "changed" and check["result"]["method"] == "remove"
    assert check["result"]["member"]["hostname"] == third.hostname
    assert cluster.audit() == [] and len(cluster.etcd.members) == 3

    result = run_playbook(member_play(cluster, second.address, member_id="%016x" % member_id, state="absent")).task("etcd")
    assert result["status"] == "changed" and result["result"]["quorum"]["safe"] is True
    assert [(e["method"], e["node"], e["member_id"]) for e in cluster.audit()] == [
        ("machine.MachineService/EtcdRemoveMemberByID", second.name, member_id)]
    assert names(result["result"]["members_after"]) == sorted([first.hostname, second.hostname])

    # An integer is the decimal ID; the member is gone now, so nothing changes.
    again = run_playbook(member_play(cluster, second.address, member_id=member_id, state="absent")).task("etcd")
    assert again["status"] == "ok" and again["result"]["member"] is None and len(cluster.audit()) == 1


def test_a_powered_off_member_is_found_by_hostname_for_method_remove(emulator, run_playbook):
    cluster = emulator(controlplanes=3, bootstrapped=True, etcd="real")
    first, _second, third = cluster.controlplanes
    cluster.power_off(third)
    result = run_playbook(member_play(cluster, first.address, member=third.hostname, state="absent",
                                      method="remove")).task("etcd")
    assert result["status"] == "changed"
    assert [(e["method"], e["node"]) for e in cluster.audit()] == [("machine.MachineService/EtcdRemoveMemberByID", first.name)]
    again = run_playbook(member_play(cluster, first.address, member=third.hostname, state="absent", method="remove"))
    assert again.task("etcd")["status"] == "ok" and len(cluster.audit()) == 1


def test_a_member_id_that_is_no_id_is_refused_before_any_call(emulator, run_playbook):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real")
    node = cluster.controlplanes[0]
    run = run_playbook(member_play(cluster, node.address, member_id="cp-3", state="absent"), expect_rc=2)
    assert run.task("etcd")["result"]["msg"] == (
        "member_id 'cp-3' is not an etcd member ID: give it in hexadecimal as talosctl etcd members prints it "
        "(8e9e05c52164694d, 0x allowed) or as a decimal integer.")
    both = run_playbook(member_play(cluster, node.address, member_id="1", member="cp-1"), expect_rc=2)
    assert "mutually exclusive" in both.task("etcd")["result"]["msg"]
    assert cluster.audit() == []
