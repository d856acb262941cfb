# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_bootstrap: the decision from etcd state, the answers of Bootstrap and recovery."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError, from_status
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_bootstrap
from module_fakes import run_module


class FakeNode:
    """One control plane: its etcd service state, and Bootstrap's answer (a gRPC code or None for success)."""

    nodes = ["10.5.0.2"]

    def __init__(self, etcd_state="Preparing", bootstrap_answer=None, server_message="", endpoint_has_members=False,
                 machine_type="controlplane"):
        self.etcd_state = etcd_state
        self.machine_type = machine_type
        self.endpoint_has_members = endpoint_has_members
        self.bootstrap_answer = bootstrap_answer
        self.server_message = server_message
        self.calls = []
        self.uploaded = b""

    def call(self, method, request=None, node=None, retry_codes=None, deadline=None):
        name = method.rsplit("/", 1)[-1]
        self.calls.append((name, request, retry_codes))
        if name == "ServiceList":
            services = [machine_pb2.ServiceInfo(id="apid", state="Running")]
            if self.etcd_state:
                services.append(machine_pb2.ServiceInfo(id="etcd", state=self.etcd_state,
                                                        health=machine_pb2.ServiceHealth(healthy=self.etcd_state == "Running")))
            return [machine_pb2.ServiceList(services=services)]
        if name == "EtcdMemberList":
            if self.etcd_state != "Running" and not (node is None and self.endpoint_has_members):
                raise from_status("Unknown", "etcd is not running on this node", method, node)
            members = [machine_pb2.EtcdMember(id=7, hostname="cp-1", client_urls=["https://10.5.0.2:2379"])]
            return [machine_pb2.EtcdMembers(members=members)]
        if name == "Bootstrap":
            if self.bootstrap_answer:
                raise from_status(self.bootstrap_answer, self.server_message, method, node)
            self.etcd_state = "Running"
            return [machine_pb2.Bootstrap()]
        raise AssertionError("unexpected call %s" % method)

    def get_resource(self, namespace, resource_type, resource_id, node=None):
        self.calls.append(("Get %s" % resource_type, None, None))
        if self.machine_type is None:
            raise from_status("NotFound", "resource not found", "cosi.resource.State/Get", node)
        return {"metadata": {"id": resource_id}, "spec": self.machine_type}

    def upload(self, method, chunks, node=None):
        self.calls.append((method.rsplit("/", 1)[-1], None, None))
        self.uploaded = b"".join(chunks)
        return [machine_pb2.EtcdRecover()]

    def called(self):
        return [name for name, _request, _codes in self.calls if not name.startswith("Get ")]


DEFAULTS = dict(recover_from=None, recover_skip_hash_check=False, wait=False, wait_timeout=5)


def run(client, **params):
    return run_module(talos_bootstrap.run, client, DEFAULTS, **params)[:2]


def test_bootstraps_with_retries_on_not_ready_answers():
    client = FakeNode()
    ok, result = run(client)
    assert ok and result["changed"] is True and result["bootstrapped"] is True and result["recovered"] is False
    name, request, retry_codes = [call for call in client.calls if call[0] == "Bootstrap"][0]
    assert request.recover_etcd is False
    assert set(retry_codes) >= {"FailedPrecondition", "Unavailable", "DeadlineExceeded"}
    assert result["etcd_state"] == "Running" and result["members"][0]["hostname"] == "cp-1"


def test_running_etcd_means_bootstrapped_without_calling_bootstrap():
    client = FakeNode(etcd_state="Running")
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True
    assert "Bootstrap" not in client.called()
    assert result["members"] == [{"id": "0000000000000007", "hostname": "cp-1", "peer_urls": [],
                                  "client_urls": ["https://10.5.0.2:2379"], "is_learner": False}]


def test_a_node_joining_a_bootstrapped_cluster_is_not_bootstrapped_again():
    client = FakeNode(etcd_state="Preparing", endpoint_has_members=True)
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True
    assert "Bootstrap" not in client.called()
    assert client.called() == ["ServiceList", "EtcdMemberList", "EtcdMemberList"]
    assert result["etcd_state"] == "Preparing"


def test_already_exists_is_not_a_failure():
    client = FakeNode(etcd_state="Failed", bootstrap_answer="AlreadyExists", server_message="etcd data directory is not empty")
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True


def test_check_mode_decides_from_the_etcd_service():
    client = FakeNode()
    ok, result = run(client, check_mode=True)
    assert ok and result["changed"] is True and result["bootstrapped"] is False and result["members"] == []
    assert client.called() == ["ServiceList", "EtcdMemberList"]


def test_worker_answer_names_control_planes():
    client = FakeNode(bootstrap_answer="Unimplemented", server_message="bootstrap is only available on control plane nodes")
    with pytest.raises(TalosError) as raised:
        run(client)
    assert raised.value.message == ("Cannot bootstrap node 10.5.0.2: bootstrap is only available on control plane nodes; "
                                    "Bootstrap works only on a configured control-plane node, so target one of the cluster's "
                                    "control planes.")


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("endpoint_has_members", [False, True])
def test_a_worker_fails_whether_or_not_the_cluster_is_bootstrapped(check_mode, endpoint_has_members):
    client = FakeNode(etcd_state=None, machine_type="worker", endpoint_has_members=endpoint_has_members)
    with pytest.raises(TalosError) as raised:
        run(client, check_mode=check_mode)
    assert raised.value.message == ("Cannot bootstrap node 10.5.0.2: it is a worker node, and only a control-plane node "
                                    "can bootstrap etcd; target one of the cluster's control planes.")
    assert raised.value.to_result() == {"node": "10.5.0.2"}
    assert client.called() == []


def test_check_mode_on_a_node_without_etcd_service_fails_without_calling_bootstrap():
    client = FakeNode(etcd_state=None, machine_type=None)
    with pytest.raises(TalosError, match="runs no etcd service"):
        run(client, check_mode=True)
    assert client.called() == ["ServiceList", "EtcdMemberList"]


def test_without_etcd_service_the_node_itself_answers_bootstrap():
    client = FakeNode(etcd_state=None, bootstrap_answer="Unimplemented", server_message="bootstrap is only available on control plane nodes",
                      machine_type=None)
    with pytest.raises(TalosError, match="Bootstrap works only on a configured control-plane node"):
        run(client)
    assert client.called() == ["ServiceList", "EtcdMemberList", "Bootstrap"]


def test_node_without_etcd_ca_gets_its_own_message():
    client = FakeNode(bootstrap_answer="InvalidArgument", server_message="etcd is not configured, bootstrap is not possible")
    with pytest.raises(TalosError, match=r"has no etcd CA \(cluster.etcd.ca\)"):
        run(client)


def test_permission_denied_passes_through_with_the_role():
    client = FakeNode(bootstrap_answer="PermissionDenied", server_message="not authorized")
    with pytest.raises(TalosError, match="it needs role os:admin"):
        run(client)


def test_recover_uploads_the_snapshot_then_bootstraps_from_it(tmp_path):
    snapshot = tmp_path / "etcd.snapshot"
    snapshot.write_bytes(b"s" * (3 * 1024 * 1024 + 5))
    client = FakeNode()
    ok, result = run(client, recover_from=str(snapshot), recover_skip_hash_check=True)
    assert ok and result["changed"] is True and result["recovered"] is True
    assert client.uploaded == snapshot.read_bytes()
    assert client.called().index("EtcdRecover") < client.called().index("Bootstrap")
    request = [call[1] for call in client.calls if call[0] == "Bootstrap"][0]
    assert request.recover_etcd is True and request.recover_skip_hash_check is True


def test_recover_is_skipped_when_already_bootstrapped(tmp_path):
    snapshot = tmp_path / "etcd.snapshot"
    snapshot.write_bytes(b"snapshot")
    client = FakeNode(etcd_state="Running")
    ok, result = run(client, recover_from=str(snapshot))
    assert ok and result["changed"] is False and "EtcdRecover" not in client.called()


def test_missing_snapshot_file_fails_before_any_call(tmp_path):
    client = FakeNode()
    ok, result = run(client, recover_from=str(tmp_path / "none"))
    assert not ok and result["msg"] == "The etcd snapshot to recover from, %s, is not a readable file." % (tmp_path / "none")
    assert client.calls == []


def test_several_nodes_are_refused():
    client = FakeNode()
    client.nodes = ["10.5.0.2", "10.5.0.3"]
    ok, result = run(client)
    assert not ok and "bootstraps exactly one control-plane node but 2 nodes are targeted" in result["msg"]
    assert client.calls == []
