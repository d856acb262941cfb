# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for several nodes in one task: concurrency, clients, the shared result shape and its failures."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosApiError, TalosUnreachableError
from fake_talos import ActionRecorder, FakeTalos

WORKERS = ["10.5.0.5", "10.5.0.6", "10.5.0.7"]


def test_several_nodes_act_concurrently_each_with_its_own_client():
    client = FakeTalos(nodes=WORKERS)
    act = ActionRecorder(changed=["10.5.0.6"])
    result = several_nodes.run(client, client.nodes, act, max_concurrency=3)
    assert result == {"changed": True, "nodes": {
        "10.5.0.5": {"changed": False, "node_was": "10.5.0.5"}, "10.5.0.6": {"changed": True, "node_was": "10.5.0.6"},
        "10.5.0.7": {"changed": False, "node_was": "10.5.0.7"}}}
    assert max(len(acting) for acting in act.overlaps) > 1
    assert client not in act.clients and len(set(id(c) for c in act.clients)) == 3 and all(c.closed for c in act.clients)


def test_max_concurrency_bounds_the_nodes_at_work():
    client = FakeTalos(nodes=WORKERS)
    act = ActionRecorder()
    assert several_nodes.run(client, client.nodes, act, max_concurrency=1)["changed"] is False
    assert max(len(acting) for acting in act.overlaps) == 1 and len(act.clients) == 3


def test_one_node_runs_on_the_tasks_client_its_result_is_the_tasks_and_its_failure_is_its_own():
    client = FakeTalos(nodes=["10.5.0.5"])
    act = ActionRecorder(changed=["10.5.0.5"])
    assert several_nodes.run(client, ["10.5.0.5"], act, max_concurrency=32) == {"changed": True, "node_was": "10.5.0.5"}
    assert act.clients == [client] and client.calls == []
    with pytest.raises(ActionFailed, match="^The reboot of node 10.5.0.5 failed.$"):
        several_nodes.run(client, ["10.5.0.5"], ActionRecorder(fail=["10.5.0.5"]), max_concurrency=32)


def test_a_list_of_one_node_gives_nodes_and_nothing_of_the_node_at_the_top():
    # The shape follows the option, not the count: a play's nodes list of one is keyed like one of five.
    client = FakeTalos(nodes=["10.5.0.5"], nodes_listed=True)
    result = several_nodes.run(client, ["10.5.0.5"], ActionRecorder(changed=["10.5.0.5"]), max_concurrency=32)
    assert result == {"changed": True, "nodes": {"10.5.0.5": {"changed": True, "node_was": "10.5.0.5"}}}
    with pytest.raises(ActionFailed) as failed:
        several_nodes.run(client, ["10.5.0.5"], ActionRecorder(fail=["10.5.0.5"]), max_concurrency=32)
    assert failed.value.message == "The reboot of node 10.5.0.5 failed."
    assert failed.value.to_result()["nodes"]["10.5.0.5"]["failed"] is True


def test_the_endpoint_answering_for_itself_is_one_node_at_the_top_and_keyed_by_its_host():
    client = FakeTalos()
    assert several_nodes.run(client, [None], ActionRecorder(), max_concurrency=32) == {"changed": False, "node_was": None}
    assert several_nodes.node_key(None, client.settings) == "10.5.0.2"
    assert several_nodes.node_key("10.5.0.3", client.settings) == "10.5.0.3"


@pytest.mark.parametrize("nodes, listed", [(["10.5.0.5"], False), (["10.5.0.5"], True), (["10.5.0.5", "10.5.0.6"], True),
                                           ([None], False)], ids=["one node", "a list of one", "two nodes", "the endpoint"])
def test_each_nodes_entry_is_found_again_whatever_the_shape(nodes, listed):
    client = FakeTalos(nodes=nodes, nodes_listed=listed)
    result = several_nodes.run(client, nodes, ActionRecorder(changed=nodes[:1]), max_concurrency=32)
    entries = several_nodes.node_results(result, nodes, client.settings)
    assert sorted(entries, key=str) == sorted(nodes, key=str)
    assert [entries[node]["node_was"] for node in nodes] == nodes
    entries[nodes[0]]["seen"] = True  # the entries are the result's own: what a module adds to them is returned
    assert (result["nodes"][nodes[0]] if listed else result)["seen"] is True


def test_a_failed_node_fails_the_task_after_the_others_with_every_result():
    client = FakeTalos(nodes=WORKERS)
    act = ActionRecorder(fail=["10.5.0.6", "10.5.0.7"])
    with pytest.raises(ActionFailed) as failed:
        several_nodes.run(client, client.nodes, act, max_concurrency=2)
    assert failed.value.message == "2 of 3 nodes failed (10.5.0.6, 10.5.0.7): The reboot of node 10.5.0.6 failed."
    assert sorted(set(node for acting in act.overlaps for node in acting)) == WORKERS
    result = failed.value.to_result()
    assert result["changed"] is True and result["nodes"]["10.5.0.5"] == {"changed": False, "node_was": "10.5.0.5"}
    assert result["nodes"]["10.5.0.7"] == {"changed": True, "code": "Unknown", "failed": True,
                                           "msg": "The reboot of node 10.5.0.7 failed."}


def test_in_turn_runs_each_node_through_it():
    client = FakeTalos(nodes=WORKERS)
    turns = []

    def in_turn(node_client, node, act):
        turns.append(node)
        return dict(act(node_client, node), in_turn=True)

    result = several_nodes.run(client, client.nodes, ActionRecorder(), max_concurrency=3, in_turn=in_turn)
    assert sorted(turns) == WORKERS and all(outcome["in_turn"] for outcome in result["nodes"].values())


def test_the_result_of_outcomes_read_elsewhere_follows_the_option():
    one, listed = FakeTalos().settings, FakeTalos(nodes=["10.5.0.2", "10.5.0.3"]).settings
    assert several_nodes.result({None: {"images": []}}, [None], one) == {"images": []}
    assert several_nodes.result({"10.5.0.2": {"images": []}, "10.5.0.3": {"images": ["a"]}}, ["10.5.0.2", "10.5.0.3"],
                                listed) == {
        "changed": False, "nodes": {"10.5.0.2": {"images": []}, "10.5.0.3": {"images": ["a"]}}}
    refused = TalosApiError("Node 10.5.0.3 refused.", code="PermissionDenied", node="10.5.0.3")
    with pytest.raises(TalosApiError) as raised:
        several_nodes.result({"10.5.0.3": refused}, ["10.5.0.3"], FakeTalos(nodes=["10.5.0.3"]).settings)
    assert raised.value is refused
    with pytest.raises(ActionFailed) as failed:
        several_nodes.result({"10.5.0.2": {"images": []}, "10.5.0.3": refused}, ["10.5.0.2", "10.5.0.3"], listed)
    assert failed.value.message == "1 of 2 nodes failed (10.5.0.3): Node 10.5.0.3 refused."
    assert failed.value.to_result()["nodes"]["10.5.0.3"] == {"code": "PermissionDenied", "node": "10.5.0.3",
                                                             "failed": True, "msg": "Node 10.5.0.3 refused."}


def test_the_tasks_own_keys_are_beside_the_nodes_on_success_and_on_failure():
    one, listed = FakeTalos(nodes=["10.5.0.3"]).settings, FakeTalos(nodes=["10.5.0.2", "10.5.0.3"]).settings
    written = {"dest": "/tmp/bundle.zip", "changed": True}
    assert several_nodes.result({"10.5.0.3": {"reached": True}}, ["10.5.0.3"], one, written) == dict(written, reached=True)
    refused = TalosApiError("Node 10.5.0.3 refused.", code="PermissionDenied", node="10.5.0.3")
    with pytest.raises(ActionFailed) as failed:
        several_nodes.result({"10.5.0.3": refused}, ["10.5.0.3"], one, written)
    assert failed.value.to_result() == dict(written, code="PermissionDenied", node="10.5.0.3")
    assert failed.value.message == "Node 10.5.0.3 refused."
    with pytest.raises(ActionFailed) as failed:
        several_nodes.result({"10.5.0.2": {"reached": True}, "10.5.0.3": refused}, ["10.5.0.2", "10.5.0.3"], listed,
                             written)
    assert failed.value.to_result()["dest"] == "/tmp/bundle.zip" and failed.value.to_result()["changed"] is True


def test_the_tasks_own_keys_may_be_made_from_what_the_nodes_that_answered_found():
    seen = []

    def task_keys(answered):
        seen.append(answered)
        return {"found": sorted(answered)}

    client = FakeTalos(nodes=WORKERS)
    with pytest.raises(ActionFailed) as failed:
        several_nodes.run(client, client.nodes, ActionRecorder(fail=["10.5.0.6"]), max_concurrency=3, task_keys=task_keys)
    assert failed.value.to_result()["found"] == ["10.5.0.5", "10.5.0.7"]
    assert seen == [{"10.5.0.5": {"changed": False, "node_was": "10.5.0.5"}, "10.5.0.7": {"changed": False, "node_was": "10.5.0.7"}}]
    # One node: made once it answered, or from nothing when it failed; its failure keeps its own keys beside them.
    one = FakeTalos(nodes=["10.5.0.5"])
    assert several_nodes.run(one, ["10.5.0.5"], ActionRecorder(), max_concurrency=1, task_keys=task_keys) == {
        "changed": False, "node_was": "10.5.0.5", "found": ["10.5.0.5"]}
    with pytest.raises(ActionFailed) as failed:
        several_nodes.run(one, ["10.5.0.5"], ActionRecorder(fail=["10.5.0.5"]), max_concurrency=1, task_keys=task_keys)
    assert failed.value.message == "The reboot of node 10.5.0.5 failed."
    assert failed.value.to_result() == {"changed": True, "code": "Unknown", "found": []}
    unreachable = TalosUnreachableError("Node 10.5.0.5 is unreachable.", code="Unavailable", node="10.5.0.5")
    with pytest.raises(ActionFailed) as failed:
        several_nodes.result({"10.5.0.5": unreachable}, ["10.5.0.5"], one.settings, {"dest": "/tmp/bundle.zip"})
    assert failed.value.to_result() == {"dest": "/tmp/bundle.zip", "code": "Unavailable", "node": "10.5.0.5",
                                        "api_unreachable": True}


def test_several_nodes_text_diffs_stay_a_list_and_data_diffs_are_keyed_by_node():
    client = FakeTalos(nodes=WORKERS[:2])

    def text(node_client, node):
        return {"changed": True, "diff": {"before": "a\n", "after": "b\n", "before_header": node, "after_header": node}}

    result = several_nodes.run(client, client.nodes, text, max_concurrency=2)
    assert sorted(entry["before_header"] for entry in result["diff"]) == WORKERS[:2]
    # Once, at the top: a node's entry does not repeat its diff.
    assert all("diff" not in outcome for outcome in result["nodes"].values())

    def data(node_client, node):
        return {"changed": True, "diff": {"before": {"state": "up"}, "after": {"state": "down"}}}

    assert several_nodes.run(client, client.nodes, data, max_concurrency=2)["diff"] == {
        "before": {"10.5.0.5": {"state": "up"}, "10.5.0.6": {"state": "up"}},
        "after": {"10.5.0.5": {"state": "down"}, "10.5.0.6": {"state": "down"}}}
