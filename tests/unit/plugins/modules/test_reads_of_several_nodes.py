# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The read modules on several nodes: each node on a client of its own (several_nodes.run), a failed node not
stopping the others, and the shared result shape."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed
from ansible_collections.talos_linux.talos.plugins.modules import (
    talos_adopt, talos_config_backup, talos_fetch, talos_file_info, talos_logs, talos_resource_info,
)
from fake_talos import FakeTalos, cosi_state, fails_with, resource
from module_fakes import run_task

NODES = ["10.5.0.3", "10.5.0.4", "10.5.0.5"]
MEMBERS = "Members.cluster.talos.dev"
MEMBERS_DEFINITION = resource("meta", "ResourceDefinitions.meta.cosi.dev", "members.cluster.talos.dev",
                              {"type": MEMBERS, "defaultNamespace": "cluster"})


@pytest.mark.parametrize("module, method, options", [
    (talos_file_info, rpc.LIST, dict(path="/var/log")),
    (talos_file_info, rpc.DISK_USAGE, dict(path="/var", get="usage")),
    (talos_fetch, rpc.COPY, dict(src="/var/log", dest="/nonexistent/fetched")),
    (talos_logs, rpc.LOGS, dict(service="kubelet")),
    (talos_logs, rpc.DMESG, dict(kernel=True)),
    (talos_config_backup, rpc.COSI_GET, dict(directory="/nonexistent/backup")),
    (talos_adopt, rpc.COSI_GET, dict(dest="/nonexistent/adopted")),
], ids=["list", "usage", "fetch", "logs", "kernel", "config backup", "adopt"])
def test_every_node_is_read_on_its_own_client_and_every_failure_named(module, method, options):
    client = FakeTalos(nodes=NODES)
    for node in NODES:
        client.answer(method, fails_with("PermissionDenied", "not for %s" % node), node=node)
    with pytest.raises(ActionFailed) as failed:
        run_task(module, client, max_concurrency=2, check_mode=True, **options)
    assert failed.value.message.startswith("3 of 3 nodes failed (10.5.0.3, 10.5.0.4, 10.5.0.5): ")
    nodes = failed.value.to_result()["nodes"]
    assert [nodes[node]["failed"] for node in NODES] == [True] * 3 and "not for 10.5.0.5" in nodes["10.5.0.5"]["msg"]
    assert sorted(call.node for call in client.calls_to(method)) == NODES
    assert len(client.settings_changes) == 3


def test_resource_info_reads_the_other_nodes_when_one_fails():
    client = FakeTalos(nodes=NODES[:2])
    client.answer(rpc.COSI_GET, cosi_state(MEMBERS_DEFINITION, resource("cluster", MEMBERS, "cp-1", {"hostname": "cp-1"})),
                  node=NODES[0])
    client.answer(rpc.COSI_GET, fails_with("Unavailable", "connection refused"), node=NODES[1])
    with pytest.raises(ActionFailed) as failed:
        run_task(talos_resource_info, client, type=MEMBERS, id="cp-1")
    result = failed.value.to_result()
    assert failed.value.message.startswith("1 of 2 nodes failed (10.5.0.4): ")
    assert (result["type"], result["namespace"]) == (MEMBERS, "cluster")
    assert [item["spec"] for item in result["nodes"]["10.5.0.3"]["resources"]] == [{"hostname": "cp-1"}]
    assert result["nodes"]["10.5.0.4"]["failed"] is True and len(client.settings_changes) == 2


@pytest.mark.parametrize("nodes", [NODES[:1], NODES[:2]], ids=["one node", "two nodes"])
def test_resource_info_keys_several_nodes_and_keeps_one_nodes_resources_at_the_top(nodes):
    client = FakeTalos(nodes=nodes, answers={rpc.COSI_GET: cosi_state(MEMBERS_DEFINITION, resource("cluster", MEMBERS, "cp-1", {}))})
    succeeded, result, _task = run_task(talos_resource_info, client, type=MEMBERS, id="cp-1")
    assert succeeded
    if len(nodes) == 1:
        assert "nodes" not in result and [item["node"] for item in result["resources"]] == nodes
    else:
        assert "resources" not in result and sorted(result["nodes"]) == nodes
        assert [item["node"] for node in nodes for item in result["nodes"][node]["resources"]] == nodes
