# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common import errors
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosApiError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum


def test_to_result_has_only_set_fields():
    assert errors.TalosConfigError("bad").to_result() == {}
    assert errors.TalosApiError("x", code="NotFound", node="n").to_result() == {"code": "NotFound", "node": "n"}


def test_action_failed_carries_the_result_so_far_and_its_causes_code_and_node():
    result = {"changed": True, "done": ["10.5.0.2"]}
    cause = TalosApiError("x", code="Unknown", node="10.5.0.3", server_message="boom")
    failure = ActionFailed("The step on node 10.5.0.3 failed.", result, cause)
    # The result as it was when the step failed, whatever the caller does with its dict afterwards.
    result["changed"] = False
    assert failure.to_result() == {"changed": True, "done": ["10.5.0.2"], "code": "Unknown", "node": "10.5.0.3",
                                   "server_message": "boom"}
    assert failure.message == "The step on node 10.5.0.3 failed."
    # Without a cause the failure names what it is given, and only that.
    assert ActionFailed("Refused.", {"changed": False}, node="10.5.0.4").to_result() == {"changed": False, "node": "10.5.0.4"}
    assert ActionFailed("Refused.").to_result() == {}
    # The quorum guard's refusal is the same carrier, with the guard's findings as its result.
    refusal = etcd_quorum.QuorumLossRefused("Refusing.", {"etcd_gate_open": False}, reason="members unhealthy")
    assert isinstance(refusal, ActionFailed) and refusal.to_result() == {"etcd_gate_open": False}


def test_a_step_failing_as_what_it_was_carries_the_result_so_far():
    result = {"changed": True, "wiped": ["10.5.0.2"]}
    cause = TalosApiError("connection refused.", code="Unavailable", node="10.5.0.3")
    with pytest.raises(ActionFailed) as failed:
        with errors.failing_as("The reboot of node 10.5.0.3 was requested but the node is not back", result):
            raise cause
    assert failed.value.message == "The reboot of node 10.5.0.3 was requested but the node is not back: connection refused."
    assert failed.value.to_result() == {"changed": True, "wiped": ["10.5.0.2"], "code": "Unavailable", "node": "10.5.0.3"}
    with pytest.raises(ActionFailed) as failed:
        with errors.failing_as("The restore stopped while wiping", result, "so far etcd is wiped - run it again."):
            raise cause
    assert failed.value.message == "The restore stopped while wiping: connection refused; so far etcd is wiped - run it again."
    # What is not the collection's error is a bug, not a failed step: it goes through as it is.
    with pytest.raises(KeyError):
        with errors.failing_as("A step", result):
            raise KeyError("x")
    with errors.failing_as("A step", result):
        pass


def test_labels():
    assert label("10.5.0.2") == "node 10.5.0.2"
    assert label(None) == "the endpoint node"
    # Only the first letter changes: a hostname keeps its case.
    assert label("cp-A", start=True) == "Node cp-A"
    assert label(None, start=True) == "The endpoint node"
    assert short_label("10.5.0.2") == "10.5.0.2" and short_label(None) == "the endpoint"
