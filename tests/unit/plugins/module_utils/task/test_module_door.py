# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module door: a TaskSpec and a run() as an ordinary Ansible module (task.execute under AnsibleModule)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import contextlib
import json
import sys

import pytest
from ansible.module_utils import basic

from ansible_collections.talos_linux.talos.plugins.module_utils.client import client as client_module
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosApiError, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module as run_as_module
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import CONNECTION_ARGUMENT_SPEC
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import WAIT_ARGUMENT_SPEC, Task, TaskSpec, execute
from fake_talos import FakeTalos

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core before 2.19
    from unittest import mock

    @contextlib.contextmanager
    def patch_module_args(args):
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", payload):
            yield


def run_module(capsys, args, body, **spec_kwargs):
    """Run ``body`` for a TaskSpec of ``spec_kwargs`` through the module door with ``args``; the JSON result."""
    spec_kwargs.setdefault("argument_spec", dict(name=dict(type="str")))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            run_as_module(TaskSpec(**spec_kwargs), body)
    return json.loads(capsys.readouterr().out)


INSECURE = {"endpoints": ["127.0.0.1"], "insecure": True}


def test_connection_spec_is_merged_and_secrets_are_no_log(capsys):
    seen = {}

    def body(task):
        seen["params"] = dict(task.params)
        seen["no_log"] = set(task.no_log_values)
        return dict(changed=False)

    result = run_module(capsys, dict(INSECURE, name="x", key="very-secret-key-text"), body)
    assert result["changed"] is False
    assert seen["params"]["name"] == "x"
    assert seen["params"]["timeout"] == 60
    assert seen["params"]["insecure"] is True
    assert "wait" not in seen["params"]
    assert "very-secret-key-text" in seen["no_log"]
    for name in ("ca", "crt", "key"):
        assert CONNECTION_ARGUMENT_SPEC[name]["no_log"] is True


def test_wait_options_are_added_on_request(capsys):
    seen = {}

    def body(task):
        seen.update(task.params)
        return dict(changed=False)

    run_module(capsys, dict(INSECURE), body, argument_spec={}, wait=True)
    assert seen["wait"] is WAIT_ARGUMENT_SPEC["wait"]["default"]
    assert seen["wait_timeout"] == 600


@pytest.mark.parametrize("name", ["context", "timeout", "wait_timeout"])
def test_a_module_option_may_not_shadow_a_shared_one(name):
    with patch_module_args(dict(INSECURE)):
        with pytest.raises(ValueError, match="module options %s shadow" % name):
            TaskSpec(argument_spec={name: dict(type="str")}, wait=True)


def test_node_and_nodes_are_mutually_exclusive(capsys):
    result = run_module(capsys, dict(INSECURE, node="a", nodes=["b"]), lambda task: dict(changed=False))
    assert result["failed"] is True
    assert "mutually exclusive" in result["msg"] and "node" in result["msg"]


def test_talos_error_becomes_fail_json_with_code_and_node(capsys):
    def body(task):
        raise TalosApiError("Bootstrap failed on node 10.5.0.2 with FailedPrecondition: not yet.",
                            code="FailedPrecondition", node="10.5.0.2", server_message="not yet")

    result = run_module(capsys, dict(INSECURE), body)
    assert result["failed"] is True
    assert result["msg"] == "Bootstrap failed on node 10.5.0.2 with FailedPrecondition: not yet."
    assert (result["code"], result["node"], result["server_message"]) == ("FailedPrecondition", "10.5.0.2", "not yet")
    assert "exception" not in result


def test_config_errors_are_reported_as_a_failure_not_a_traceback(capsys, tmp_path):
    result = run_module(capsys, {"talosconfig": str(tmp_path / "missing")}, lambda task: task.client.nodes)
    assert result["failed"] is True
    assert result["msg"] == "The talosconfig file %s does not exist." % (tmp_path / "missing")


def test_talosconfig_falls_back_to_the_environment(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TALOSCONFIG", str(tmp_path / "from-env"))
    seen = {}

    def body(task):
        seen["talosconfig"] = task.params["talosconfig"]
        return dict(changed=False)

    run_module(capsys, {}, body)
    assert seen["talosconfig"] == str(tmp_path / "from-env")


def test_target_nodes(capsys):
    seen = {}

    def body(task):
        seen["nodes"] = task.target_nodes
        return dict(changed=False)

    run_module(capsys, dict(INSECURE, nodes=["10.5.0.2", "10.5.0.3"]), body)
    assert seen["nodes"] == ["10.5.0.2", "10.5.0.3"]
    run_module(capsys, dict(INSECURE, node="10.5.0.4"), body)
    assert seen["nodes"] == ["10.5.0.4"]
    run_module(capsys, dict(INSECURE), body)
    assert seen["nodes"] == [None]


def test_client_is_built_lazily_and_always_closed(capsys, monkeypatch):
    built = []
    seen = {}
    monkeypatch.setattr(client_module, "TalosClient", lambda settings: built.append(FakeTalos(settings=settings)) or built[-1])

    def body(task):
        seen["before"] = task._client
        seen["client"] = task.client
        raise TalosApiError("failed.", code="Internal")

    result = run_module(capsys, dict(INSECURE), body)
    assert result["failed"] is True
    assert seen["before"] is None
    assert built == [seen["client"]] and seen["client"].closed
    assert seen["client"].settings.endpoints == ["127.0.0.1:50000"]


@pytest.mark.parametrize("library, pypi_name", [
    ("grpclib", "grpclib"),
    ("google.protobuf", "protobuf"),
    ("google.rpc.status_pb2", "googleapis-common-protos"),
    ("yaml", "PyYAML"),
    ("cryptography.x509", "cryptography"),
])
def test_missing_library_ends_in_missing_required_lib(capsys, monkeypatch, library, pypi_name):
    monkeypatch.setitem(sys.modules, library, None)  # makes `import library` raise ImportError
    ran = []
    result = run_module(capsys, dict(INSECURE), ran.append)
    assert ran == []
    assert result["failed"] is True
    assert "Failed to import the required Python library (%s)" % pypi_name in result["msg"]
    assert "Traceback" not in result["msg"]


def test_mask_only_keeps_the_secrets_of_a_structured_option_masked_and_the_rest_readable(capsys):
    spec = dict(patches=dict(type="list", elements="raw", no_log=True))
    patches = [[{"op": "remove", "path": "/machine/network"}], {"machine": {"token": "abc.secret-token"}}]

    def body(task):
        task.mask_only("patches", {"abc.secret-token"})
        raise TalosConfigError("patches[0] operation 1 (remove /machine/network) failed; 60 s; abc.secret-token")

    result = run_module(capsys, dict(INSECURE, patches=patches, key="remove"), body, argument_spec=spec)
    # "remove" is also the value of the no_log key option, so it stays masked.
    assert result["msg"] == "patches[0] operation 1 (******** /machine/network) failed; 60 s; ********"
    operation = result["invocation"]["module_args"]["patches"][0][0]
    assert operation["path"] == "/machine/network" and operation["op"] != "remove"
    assert "abc.secret-token" not in json.dumps(result)


@pytest.mark.parametrize("args, message", [
    (dict(timeout=0), "timeout must be at least 1, got 0."),
    (dict(wait_timeout=-5), "wait_timeout must be at least 1, got -5."),
    (dict(count=11), "count must be between 1 and 10, got 11."),
    (dict(name=" "), "name is empty: set it to a value or leave it out (an unset variable?)."),
    (dict(node=""), "node is empty: set it to a value or leave it out (an unset variable?)."),
    (dict(endpoints=["127.0.0.1", ""]), "endpoints[1] is empty: every item must be a non-empty string."),
    (dict(items=[{"kind": "a"}, {"kind": ""}]), "items[1].kind is empty: set it to a value or leave it out (an unset variable?)."),
])
def test_options_out_of_range_or_empty_fail_before_the_module_runs(capsys, args, message):
    spec = dict(name=dict(type="str"), count=dict(type="int"), items=dict(type="list", elements="dict", options=dict(kind=dict(type="str"))))
    ran = []
    result = run_module(capsys, dict(INSECURE, **args), ran.append, argument_spec=spec, wait=True, ranges=dict(count=(1, 10)))
    assert result["failed"] is True and result["msg"] == message and ran == []


def test_a_numeric_option_without_a_range_is_a_programming_error():
    with patch_module_args(dict(INSECURE)):
        with pytest.raises(ValueError, match="numeric options count have no range"):
            TaskSpec(argument_spec=dict(count=dict(type="int")))


def test_partial_results_of_a_failure_reach_the_result(capsys):
    def body(task):
        raise ActionFailed("Could not read 1 of 2 nodes (10.5.0.3): refused.", {"nodes": {"10.5.0.2": {"ok": True}}},
                           cause=TalosApiError("refused.", code="Unavailable", node="10.5.0.3"))

    result = run_module(capsys, dict(INSECURE), body)
    assert result["failed"] is True and result["msg"] == "Could not read 1 of 2 nodes (10.5.0.3): refused."
    assert result["nodes"] == {"10.5.0.2": {"ok": True}}
    assert (result["code"], result["node"]) == ("Unavailable", "10.5.0.3")
    assert result["changed"] is False


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "fails"])
def test_task_wide_keys_reach_the_result_whether_run_returns_or_fails(capsys, fails):
    def body(task):
        task.result.update(type="Members.cluster.talos.dev", namespace="cluster", changed=False)
        if fails:
            raise ActionFailed("1 of 2 nodes failed (10.5.0.3): refused.",
                               {"nodes": {"10.5.0.2": {"ok": True}}, "namespace": "its own"})
        return dict(changed=True, namespace="its own")

    result = run_module(capsys, dict(INSECURE), body)
    assert result["type"] == "Members.cluster.talos.dev"
    # What run returns, or what the failure carries, wins over the task-wide keys.
    assert result["namespace"] == "its own"
    assert result.get("failed", False) is fails and result["changed"] is not fails


def test_bad_input_fails_with_its_sentence_and_the_task_wide_keys(capsys):
    def body(task):
        task.result["name"] = "etcd"
        raise TalosConfigError("etcd cannot be stopped: stop the node instead.")

    result = run_module(capsys, dict(INSECURE), body)
    assert result == dict(result, failed=True, msg="etcd cannot be stopped: stop the node instead.", name="etcd")


def test_require_fails_as_a_missing_library_of_the_spec_does(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyrage", None)
    ran = []

    def body(task):
        task.require([("pyrage", "pyrage")], "for encryption_recipients")
        ran.append(True)

    result = run_module(capsys, dict(INSECURE), body)
    assert ran == [] and result["failed"] is True
    assert "Failed to import the required Python library (pyrage)" in result["msg"]
    assert "for encryption_recipients" in result["msg"]


def test_execute_returns_the_warnings_of_the_task_and_closes_it():
    closed = []

    class RecordingTask(Task):
        def close(self):
            closed.append(True)

    def body(task):
        task.warn("node 10.5.0.3 answered late")
        return dict(changed=True)

    task = RecordingTask("talos_x", {"name": None, "timeout": 60})
    result = execute(TaskSpec(argument_spec=dict(name=dict(type="str")), connection=False, libraries=()), task, body)
    assert result == {"changed": True, "warnings": ["node 10.5.0.3 answered late"]}
    assert closed == [True]


def test_shared_wait_options_are_defined_once_with_their_module_defaults():
    timeout_only = TaskSpec(argument_spec={}, wait="timeout")
    assert "wait" not in timeout_only.argument_spec and timeout_only.argument_spec["wait_timeout"]["default"] == 600
    read = TaskSpec(argument_spec={}, wait=True, wait_defaults=dict(wait=False, wait_timeout=120))
    assert (read.argument_spec["wait"]["default"], read.argument_spec["wait_timeout"]["default"]) == (False, 120)
    assert WAIT_ARGUMENT_SPEC["wait_timeout"]["default"] == 600  # the shared definition is left as it is
    guarded = TaskSpec(argument_spec={}, quorum_wait=True)
    assert guarded.argument_spec["quorum_wait_timeout"] == {"type": "int", "default": 0}
    assert guarded.ranges["quorum_wait_timeout"] == (0, None)
    with pytest.raises(ValueError, match="module options quorum_wait_timeout shadow"):
        TaskSpec(argument_spec={"quorum_wait_timeout": dict(type="int")}, quorum_wait=True)


def test_the_image_factory_options_are_shared_options_with_their_bounds():
    from ansible_collections.talos_linux.talos.plugins.module_utils.images import factory as image_factory
    spec = TaskSpec(argument_spec={}, connection=False, shared_options=[image_factory.FACTORY_OPTIONS])
    assert spec.argument_spec["image_factory_url"] == image_factory.FACTORY_ARGUMENT_SPEC["image_factory_url"]
    assert spec.ranges["timeout"] == (1, None) and "timeout" in spec.problem({"timeout": 0})
    with pytest.raises(ValueError, match="module options image_factory_url shadow"):
        TaskSpec(argument_spec={"image_factory_url": dict(type="str")}, connection=False,
                 shared_options=[image_factory.FACTORY_OPTIONS])
