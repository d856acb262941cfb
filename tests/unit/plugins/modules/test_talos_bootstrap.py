# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for talos_bootstrap: the decision from etcd state, the answers of Bootstrap and recovery."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.modules import talos_bootstrap
from fake_talos import FakeTalos, cosi_state, fails_with, resource
from module_fakes import run_task


def control_plane(etcd_state="Preparing", bootstrap_answer=None, server_message="", endpoint_has_members=False,
                  machine_type="controlplane", nodes=("10.5.0.2",)):
    """One node: its etcd service state, and Bootstrap's answer (a gRPC code or None for success)."""
    etcd = {"state": etcd_state}

    def service_list(_request, _node):
        services = [machine_pb2.ServiceInfo(id="apid", state="Running")]
        if etcd["state"]:
            services.append(machine_pb2.ServiceInfo(id="etcd", state=etcd["state"],
                                                    health=machine_pb2.ServiceHealth(healthy=etcd["state"] == "Running")))
        return [machine_pb2.ServiceList(services=services)]

    def member_list(_request, node):
        if etcd["state"] != "Running" and not (node is None and endpoint_has_members):
            return fails_with("Unknown", "etcd is not running on this node")
        members = [machine_pb2.EtcdMember(id=7, hostname="cp-1", client_urls=["https://10.5.0.2:2379"])]
        return [machine_pb2.EtcdMembers(members=members)]

    def bootstrap(_request, _node):
        if bootstrap_answer:
            return fails_with(bootstrap_answer, server_message)
        etcd["state"] = "Running"
        return [machine_pb2.Bootstrap()]

    machine_types = [resource("config", "MachineTypes.config.talos.dev", "machine-type", machine_type)] if machine_type else []
    return FakeTalos(nodes=list(nodes), answers={rpc.SERVICE_LIST: service_list, rpc.ETCD_MEMBER_LIST: member_list, rpc.BOOTSTRAP: bootstrap,
                                                 rpc.COSI_GET: cosi_state(*machine_types), rpc.ETCD_RECOVER: [machine_pb2.EtcdRecover()]})


def called(client):
    """The RPCs made besides reading the machine type."""
    return [name for name in client.names() if name != "Get"]


def run(client, **params):
    options = dict(wait=False, wait_timeout=5)
    options.update(params)
    return run_task(talos_bootstrap, client, **options)[:2]


def test_bootstraps_with_retries_on_not_ready_answers():
    client = control_plane()
    ok, result = run(client)
    assert ok and result["changed"] is True and result["bootstrapped"] is True and result["recovered"] is False
    bootstrap = client.calls_to(rpc.BOOTSTRAP)[0]
    assert bootstrap.request.recover_etcd is False
    assert set(bootstrap.kwargs["retry_codes"]) >= {"FailedPrecondition", "Unavailable", "DeadlineExceeded"}
    assert result["etcd_state"] == "Running" and result["members"][0]["hostname"] == "cp-1"


def test_running_etcd_means_bootstrapped_without_calling_bootstrap():
    client = control_plane(etcd_state="Running")
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True
    assert "Bootstrap" not in called(client)
    assert result["members"] == [{"id": "0000000000000007", "hostname": "cp-1", "peer_urls": [],
                                  "client_urls": ["https://10.5.0.2:2379"], "is_learner": False}]


def test_a_node_joining_a_bootstrapped_cluster_is_not_bootstrapped_again():
    client = control_plane(etcd_state="Preparing", endpoint_has_members=True)
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True
    assert "Bootstrap" not in called(client)
    assert called(client) == ["ServiceList", "EtcdMemberList", "EtcdMemberList"]
    assert result["etcd_state"] == "Preparing"


def test_already_exists_is_not_a_failure():
    client = control_plane(etcd_state="Failed", bootstrap_answer="AlreadyExists", server_message="etcd data directory is not empty")
    ok, result = run(client)
    assert ok and result["changed"] is False and result["bootstrapped"] is True


def test_check_mode_decides_from_the_etcd_service():
    client = control_plane()
    ok, result = run(client, check_mode=True)
    assert ok and result["changed"] is True and result["bootstrapped"] is False and result["members"] == []
    assert called(client) == ["ServiceList", "EtcdMemberList"]


def test_worker_answer_names_control_planes():
    client = control_plane(bootstrap_answer="Unimplemented", server_message="bootstrap is only available on control plane nodes")
    with pytest.raises(TalosError) as raised:
        run(client)
    assert raised.value.message == ("Cannot bootstrap node 10.5.0.2: bootstrap is only available on control plane nodes; "
                                    "Bootstrap works only on a configured control-plane node, so target one of the cluster's "
                                    "control planes.")


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("endpoint_has_members", [False, True])
def test_a_worker_fails_whether_or_not_the_cluster_is_bootstrapped(check_mode, endpoint_has_members):
    client = control_plane(etcd_state=None, machine_type="worker", endpoint_has_members=endpoint_has_members)
    with pytest.raises(TalosError) as raised:
        run(client, check_mode=check_mode)
    assert raised.value.message == ("Cannot bootstrap node 10.5.0.2: it is a worker node, and only a control-plane node "
                                    "can bootstrap etcd; target one of the cluster's control planes.")
    assert raised.value.to_result() == {"node": "10.5.0.2"}
    assert called(client) == []


def test_check_mode_on_a_node_without_etcd_service_fails_without_calling_bootstrap():
    client = control_plane(etcd_state=None, machine_type=None)
    with pytest.raises(TalosError, match="runs no etcd service"):
        run(client, check_mode=True)
    assert called(client) == ["ServiceList", "EtcdMemberList"]


def test_without_etcd_service_the_node_itself_answers_bootstrap():
    client = control_plane(etcd_state=None, bootstrap_answer="Unimplemented",
                           server_message="bootstrap is only available on control plane nodes", machine_type=None)
    with pytest.raises(TalosError, match="Bootstrap works only on a configured control-plane node"):
        run(client)
    assert called(client) == ["ServiceList", "EtcdMemberList", "Bootstrap"]


def test_node_without_etcd_ca_gets_its_own_message():
    client = control_plane(bootstrap_answer="InvalidArgument", server_message="etcd is not configured, bootstrap is not possible")
    with pytest.raises(TalosError, match=r"has no etcd CA \(cluster.etcd.ca\)"):
        run(client)


def test_permission_denied_passes_through_with_the_role():
    client = control_plane(bootstrap_answer="PermissionDenied", server_message="not authorized")
    with pytest.raises(TalosError, match="it needs role os:admin"):
        run(client)


def test_recover_uploads_the_snapshot_then_bootstraps_from_it(tmp_path):
    snapshot = tmp_path / "etcd.snapshot"
    snapshot.write_bytes(b"s" * (3 * 1024 * 1024 + 5))
    client = control_plane()
    ok, result = run(client, snapshot=str(snapshot), skip_hash_check=True)
    assert ok and result["changed"] is True and result["recovered"] is True
    assert client.requests(rpc.ETCD_RECOVER) == [snapshot.read_bytes()]
    assert called(client).index("EtcdRecover") < called(client).index("Bootstrap")
    request = client.requests(rpc.BOOTSTRAP)[0]
    assert request.recover_etcd is True and request.recover_skip_hash_check is True


def test_recover_is_skipped_when_already_bootstrapped(tmp_path):
    snapshot = tmp_path / "etcd.snapshot"
    snapshot.write_bytes(b"snapshot")
    client = control_plane(etcd_state="Running")
    ok, result = run(client, snapshot=str(snapshot))
    assert ok and result["changed"] is False and "EtcdRecover" not in called(client)


def test_missing_snapshot_file_fails_before_any_call(tmp_path):
    client = control_plane()
    with pytest.raises(TalosConfigError) as refused:
        run(client, snapshot=str(tmp_path / "none"))
    assert refused.value.message == "The etcd snapshot to recover from, %s, is not a readable file." % (tmp_path / "none")
    assert client.calls == []


def test_several_nodes_are_refused():
    client = control_plane(nodes=["10.5.0.2", "10.5.0.3"])
    with pytest.raises(TalosConfigError, match="bootstraps exactly one control-plane node but 2 nodes are targeted"):
        run(client)
    assert client.calls == []
