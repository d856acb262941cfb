# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for module_utils/nodes/resources.py: selectors, label matching, conditions, type resolution, redaction, waits."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import resources
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosTimeoutError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_pb2
from fake_talos import FakeTalos, cosi_state, fails_with, in_turn
from fake_talos import resource as cosi_resource

OP = resource_pb2.LabelTerm.Operation


def terms(selectors):
    return [(term.key, OP.Name(term.op), list(term.value), term.invert) for term in resources.label_query(selectors).terms]


class TestLabelQuery:
    def test_every_selector_form(self):
        assert terms(["a", "!b", "c=1", "d==2", "e!=3", "f in (x, y)", "g notin (z)"]) == [
            ("a", "EXISTS", [], False), ("b", "EXISTS", [], True), ("c", "EQUAL", ["1"], False), ("d", "EQUAL", ["2"], False),
            ("e", "EQUAL", ["3"], True), ("f", "IN", ["x", "y"], False), ("g", "IN", ["z"], True)]

    def test_commas_split_terms_outside_parentheses(self):
        assert terms(["a=1,b in (x, y),!c"]) == [("a", "EQUAL", ["1"], False), ("b", "IN", ["x", "y"], False), ("c", "EXISTS", [], True)]

    @pytest.mark.parametrize("selector", ["a = = b", "in (x)", "a in x", "=b"])
    def test_bad_selectors_name_the_entry(self, selector):
        with pytest.raises(TalosConfigError, match=re.escape("label_selectors entry %r" % selector)):
            resources.label_query([selector])

    @pytest.mark.parametrize("selectors, labels, expected", [
        (["a"], {"a": ""}, True),
        (["a"], {}, False),
        (["!a"], {}, True),
        (["a=1"], {"a": "1"}, True),
        (["a=1"], {"a": "2"}, False),
        (["a!=1"], {}, True),
        (["a in (1, 2)", "b"], {"a": "2", "b": "x"}, True),
        (["a notin (1, 2)"], {"a": "2"}, False),
    ])
    def test_labels_match(self, selectors, labels, expected):
        assert resources.labels_match(labels, resources.label_query(selectors)) is expected


def resource(resource_id, spec):
    return {"metadata": {"id": resource_id, "namespace": "runtime", "labels": {}}, "spec": spec}


class TestConditions:
    def test_present_with_field(self):
        condition = {"state": "present", "field": "status.ready", "value": "true"}
        assert resources.condition_met([resource("machine", {"status": {"ready": True}})], condition)[0] is True
        met, observed = resources.condition_met([resource("machine", {"status": {"ready": False}})], condition)
        assert met is False and observed == "machine: status.ready=false"
        assert resources.condition_met([resource("machine", {"stage": "running"})], condition) == (False, "machine: status.ready=absent")
        assert resources.condition_met([], condition) == (False, "no resource")

    def test_every_resource_must_match(self):
        condition = {"state": "present", "field": "running", "value": True}
        both = [resource("a", {"running": True}), resource("b", {"running": False})]
        assert resources.condition_met(both, condition)[0] is False

    def test_absent(self):
        condition = {"state": "absent"}
        assert resources.condition_met([], condition)[0] is True
        assert resources.condition_met([resource("x", {})], condition) == (False, "1 resource(s) present: x")

    def test_list_index_in_field(self):
        assert resources.field_value({"addresses": ["10.0.0.1/8"]}, "addresses.0") == "10.0.0.1/8"


DEFINITIONS = "ResourceDefinitions.meta.cosi.dev"


def definitions():
    """A node knowing the resource types Members (read by its ID) and MachineStatuses (with aliases)."""
    state = cosi_state(
        cosi_resource("meta", DEFINITIONS, "members.cluster.talos.dev", {"type": "Members.cluster.talos.dev", "defaultNamespace": "cluster"}),
        cosi_resource("meta", DEFINITIONS, "machinestatuses.runtime.talos.dev", {
            "type": "MachineStatuses.runtime.talos.dev", "defaultNamespace": "runtime",
            "aliases": ["machinestatus"], "allAliases": ["MachineStatus", "machinestatus", "machinestatuses"]}))
    return FakeTalos(answers={rpc.COSI_GET: state, rpc.COSI_LIST: state})


class TestResolveKind:
    def test_full_type_is_read_directly(self):
        client = definitions()
        kind = resources.resolve_kind(client, "Members.cluster.talos.dev")
        assert (kind.type, kind.default_namespace) == ("Members.cluster.talos.dev", "cluster")
        assert [(call.method, call.request.id) for call in client.calls] == [(rpc.COSI_GET, "members.cluster.talos.dev")]

    @pytest.mark.parametrize("alias", ["MachineStatus", "machinestatus", "MACHINESTATUSES"])
    def test_aliases_any_case(self, alias):
        kind = resources.resolve_kind(definitions(), alias)
        assert (kind.type, kind.default_namespace) == ("MachineStatuses.runtime.talos.dev", "runtime")

    def test_unknown_type(self):
        with pytest.raises(TalosConfigError, match="'nope' is not a resource type"):
            resources.resolve_kind(definitions(), "nope")

    def test_namespace_default_and_missing(self):
        assert resources.namespace_for(resources.ResourceKind("X", "runtime"), None) == "runtime"
        assert resources.namespace_for(resources.ResourceKind("X", None), "config") == "config"
        with pytest.raises(TalosConfigError, match="set namespace"):
            resources.namespace_for(resources.ResourceKind("X", None), None)


def test_redaction_of_machine_config_and_secrets():
    config = resource("v1alpha1", {"machine": {"token": "abcdef.0123456789abcdef", "type": "controlplane"},
                                   "cluster": {"secret": "c2VjcmV0LXZhbHVl"}})
    redacted = resources.redact_resource(config)
    assert redacted["spec"]["machine"] == {"token": REDACTED, "type": "controlplane"}
    assert redacted["spec"]["cluster"]["secret"] == REDACTED
    assert config["spec"]["machine"]["token"] == "abcdef.0123456789abcdef"


@pytest.mark.parametrize("resource_type, namespace", [
    ("OSRootSecrets.secrets.talos.dev", "secrets"),
    ("KubeletSpecs.kubernetes.talos.dev", "k8s"),
    ("SomethingNew.secrets.talos.dev", "secrets"),
])
def test_every_value_of_a_sensitive_type_is_redacted_whatever_its_keys(resource_type, namespace):
    spec = {"issuingCA": {"crt": "LS0tLS1CRUdJTiBDRVJU", "pem": "raw"}, "certSANIPs": ["10.5.0.2"], "port": 50000,
            "enabled": True, "nothing": None}
    found = {"metadata": {"id": "os", "namespace": namespace, "type": resource_type, "labels": {}}, "spec": spec}
    assert resources.redact_resource(found)["spec"] == {
        "issuingCA": {"crt": REDACTED, "pem": REDACTED}, "certSANIPs": [REDACTED], "port": REDACTED, "enabled": REDACTED,
        "nothing": None}
    config = {"metadata": {"id": "v1alpha1", "namespace": "config", "type": "MachineConfigs.config.talos.dev"},
              "spec": "version: v1alpha1\nmachine:\n  type: worker\n"}
    assert resources.redact_resource(config)["spec"] == REDACTED


def test_a_type_the_node_marks_sensitive_is_redacted_whole():
    definition = {"type": "Futures.example.talos.dev", "defaultNamespace": "runtime", "sensitivity": "sensitive"}
    state = cosi_state(cosi_resource("meta", DEFINITIONS, "futures.example.talos.dev", definition),
                       cosi_resource("runtime", "Futures.example.talos.dev", "one", {"plain": "value"}))
    client = FakeTalos(answers={rpc.COSI_GET: state, rpc.COSI_LIST: state})
    kind = resources.resolve_kind(client, "Futures.example.talos.dev")
    assert kind.sensitive is True
    assert [found["spec"] for found in resources.read_resources(client, kind, "runtime", "one")] == [{"plain": REDACTED}]
    plain = resources.ResourceKind("Futures.example.talos.dev", "runtime")
    assert [found["spec"] for found in resources.read_resources(client, plain, "runtime", "one")] == [{"plain": "value"}]


def polled_node(stages):
    """A node that cannot watch (Watch is Unimplemented) and answers Get with the stages in ``stages``, in turn."""
    return FakeTalos(answers={
        rpc.COSI_WATCH: fails_with("Unimplemented", "unknown method"),
        rpc.COSI_GET: in_turn(*[[state_pb2.GetResponse(resource=cosi_resource("runtime", STATUS.type, "machine", {"stage": stage}))]
                                for stage in stages]),
    })


STATUS = resources.ResourceKind("MachineStatuses.runtime.talos.dev", "runtime")
RUNNING = {"state": "present", "field": "stage", "value": "running"}


def test_a_node_that_cannot_watch_is_polled_with_progress(monkeypatch):
    now = {"t": 0.0}
    monkeypatch.setattr(waits.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(waits.time, "sleep", lambda seconds: now.update(t=now["t"] + seconds))
    lines = []
    waiter = Waiter(60, interval=1, progress=lines.append)
    found = resources.wait_for_condition(polled_node(["booting"] * 6 + ["running"]), STATUS, "runtime", "machine", [],
                                         RUNNING, "10.5.0.3", waiter)
    assert found[0]["spec"] == {"stage": "running"}
    assert lines == ["10.5.0.3: machine: stage=booting (5 s)", "10.5.0.3: machine: stage=booting → machine: stage=running (6 s)"]


def test_a_condition_that_never_holds_times_out_naming_it():
    with pytest.raises(TalosTimeoutError) as raised:
        resources.wait_for_condition(polled_node(["booting"]), STATUS, "runtime", "machine", [], RUNNING, "10.5.0.3",
                                     Waiter(0))
    assert raised.value.message == ("Timed out after 0 seconds waiting for MachineStatuses.runtime.talos.dev machine on "
                                    "node 10.5.0.3 to be present with stage=running; last observed: machine: stage=booting.")
