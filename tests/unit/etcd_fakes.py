# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fakes of an etcd cluster for the unit tests of module_utils/etcd: members and statuses as the domain code
returns them, and FakeTalos clusters that answer the etcd RPCs."""

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConnectionError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos


def member(name, member_id, address=None, learner=False):
    address = address or "10.5.0.%d" % int(member_id, 16)
    return {"id": member_id, "hostname": name, "is_learner": learner,
            "peer_urls": ["https://%s:2380" % address], "client_urls": ["https://%s:2379" % address]}


def status(member_id, leader, errors=()):
    return {"member_id": member_id, "leader": leader, "is_learner": False, "errors": list(errors)}


ONE, TWO, THREE, FOUR, FIVE = ("%016x" % i for i in range(1, 6))


# etcd lists every alarm of the cluster in every member's status, spaced as its build of Go's text encoder writes it.
ALARM_OF_TWO = ("memberID:2 alarm:NOSPACE", "memberID: 2  alarm: NOSPACE ")


def etcd_client(members, hostname="cp-1", member_list_error=None, learners=()):
    """A FakeTalos of a cluster of ``members`` ({name: healthy}, member i at 10.5.0.i, cp-1 leading) whose nodes
    all call themselves ``hostname``; ``member_list_error`` answers EtcdMemberList instead."""
    client = FakeTalos(answers={rpc.HOSTNAME: [machine_pb2.Hostname(hostname=hostname)]})
    client.answer(rpc.ETCD_MEMBER_LIST, member_list_error or [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=index, hostname=name, is_learner=name in learners,
                               client_urls=["https://10.5.0.%d:2379" % index])
        for index, name in enumerate(members, 1)])])
    for index, healthy in enumerate(members.values(), 1):
        client.answer(rpc.ETCD_STATUS, [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(member_id=index, leader=1))]
                      if healthy else TalosConnectionError("unreachable", code="Unavailable"), node="10.5.0.%d" % index)
    return client


CP1, CP2, CP3 = "10.5.0.1", "10.5.0.2", "10.5.0.3"


def status_reply(member_id, leader, db_size=1000, in_use=400, errors=()):
    return [machine_pb2.EtcdStatus(member_status=machine_pb2.EtcdMemberStatus(
        member_id=member_id, leader=leader, db_size=db_size, db_size_in_use=in_use, raft_index=7, raft_term=2,
        raft_applied_index=7, protocol_version="3.6.5", errors=list(errors)))]


def etcd_cluster(sizes=None, leader=1, **per_node):
    """A FakeTalos of three control planes (member IDs 1-3 at CP1-CP3); ``sizes`` maps a node to (db_size, in use)."""
    fake = FakeTalos(nodes=[CP1, CP2, CP3])
    for index, node in enumerate((CP1, CP2, CP3), 1):
        db_size, in_use = (sizes or {}).get(node, (1000, 400))
        fake.answer(rpc.ETCD_STATUS, per_node.get(node) or status_reply(index, leader, db_size, in_use), node=node)
    fake.answer(rpc.ETCD_MEMBER_LIST, [machine_pb2.EtcdMembers(members=[
        machine_pb2.EtcdMember(id=index, hostname="cp-%d" % index, client_urls=["https://%s:2379" % node])
        for index, node in enumerate((CP1, CP2, CP3), 1)])])
    fake.answer(rpc.ETCD_ALARM_LIST, [machine_pb2.EtcdAlarm(member_alarms=[
        machine_pb2.EtcdMemberAlarm(member_id=2, alarm=machine_pb2.EtcdMemberAlarm.NOSPACE),
        machine_pb2.EtcdMemberAlarm(member_id=3, alarm=machine_pb2.EtcdMemberAlarm.NONE)])])
    fake.answer(rpc.ETCD_DEFRAGMENT, [machine_pb2.EtcdDefragment()])
    fake.answer(rpc.ETCD_ALARM_DISARM, [machine_pb2.EtcdAlarmDisarm(member_alarms=[
        machine_pb2.EtcdMemberAlarm(member_id=2, alarm=machine_pb2.EtcdMemberAlarm.NOSPACE)])])
    return fake
