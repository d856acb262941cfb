# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for etcd/members.py: member IDs, lookup by name, ID or address, the member list."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from etcd_fakes import ONE, THREE, TWO, member
from fake_talos import FakeTalos


def test_member_ids_round_trip_as_talosctl_prints_them():
    assert etcd.format_member_id(0x8e9e05c52164694d) == "8e9e05c52164694d"
    assert etcd.format_member_id(1) == "0000000000000001"
    assert etcd.parse_member_id("8E9E05C52164694D") == 0x8e9e05c52164694d
    assert etcd.parse_member_id("0x1") == 1
    assert etcd.parse_member_id("cp-1") is None
    assert etcd.parse_member_id("1" * 17) is None


def test_find_member_by_hostname_first_then_by_id():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    assert etcd.find_member(members, "cp-2")["id"] == TWO
    assert etcd.find_member(members, "1")["hostname"] == "cp-1"
    assert etcd.find_member(members, ONE)["hostname"] == "cp-1"
    assert etcd.find_member(members, "cp-9") is None
    assert etcd.find_member(members, "ff") is None
    # A hostname that also reads as hex still names the member with that hostname.
    named_like_an_id = [member("cp-1", ONE), member("2", THREE)]
    assert etcd.find_member(named_like_an_id, "2")["id"] == THREE


def test_member_address_comes_from_client_then_peer_urls():
    assert etcd.member_address(member("cp-1", ONE, address="10.5.0.7")) == "10.5.0.7"
    peer_only = dict(member("cp-1", ONE, address="10.5.0.8"), client_urls=[])
    assert etcd.member_address(peer_only) == "10.5.0.8"
    assert etcd.member_address(dict(peer_only, peer_urls=[])) is None


def test_list_members_converts_the_reply():
    client = FakeTalos(answers={rpc.ETCD_MEMBER_LIST: [machine_pb2.EtcdMembers(members=[machine_pb2.EtcdMember(
        id=0x8e9e05c52164694d, hostname="cp-1", peer_urls=["https://10.5.0.2:2380"],
        client_urls=["https://10.5.0.2:2379"], is_learner=True)])]})
    assert etcd.list_members(client, "10.5.0.2") == [{
        "id": "8e9e05c52164694d", "hostname": "cp-1", "peer_urls": ["https://10.5.0.2:2380"],
        "client_urls": ["https://10.5.0.2:2379"], "is_learner": True}]
    (asked,) = client.calls
    assert (asked.via, asked.method, asked.node, asked.request.query_local) == ("call", rpc.ETCD_MEMBER_LIST, "10.5.0.2", False)


def test_member_id_option_reads_hex_strings_and_decimal_integers():
    assert etcd.member_id_option("8e9e05c52164694d") == 0x8e9e05c52164694d
    assert etcd.member_id_option("0X1F") == 31
    assert etcd.member_id_option(31) == 31
    assert etcd.describe_ref(31) == "000000000000001f" and etcd.describe_ref("cp-1") == "cp-1"


def test_find_member_by_the_address_of_its_node():
    members = [member("cp-1", ONE), member("cp-2", TWO)]
    assert etcd.find_member(members, "10.5.0.2")["hostname"] == "cp-2"
    assert etcd.find_member(members, 2)["hostname"] == "cp-2"
    assert etcd.find_member(members, 9) is None
