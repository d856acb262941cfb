# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for module_utils/nodes/node.py: versions, machine type and status, service state rules."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


def test_versions_sort_prereleases_before_their_release():
    tags = ["v1.13.0", "v1.13.0-rc.1", "v1.12.4", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "1.14.0"]
    assert sorted(tags, key=talos_node.parse_version) == [
        "v1.12.4", "v1.13.0-alpha.2", "v1.13.0-alpha.10", "v1.13.0-rc.1", "v1.13.0", "1.14.0"]
    assert talos_node.parse_version("not-a-version") is None
    assert talos_node.parse_version("v1.13.0-alpha.2.3+g1234")[:3] == (1, 13, 0)
    assert talos_node.normalize_version("1.14.0") == "v1.14.0" and talos_node.normalize_version(None) is None


@pytest.mark.parametrize("tag, expected", [
    ("v1.13.0", True), ("v1.13.0-alpha.1", True), ("v1.14.2", True), ("v1.12.9", False), ("v2.0.0", True), ("main", None),
])
def test_runs_at_least_a_minor_release(tag, expected):
    assert talos_node.runs_at_least(tag, (1, 13)) is expected


@pytest.mark.parametrize("operating_system, expected", [
    ("Talos (v1.14.0)", "v1.14.0"),
    ("Talos (v1.9.0-alpha.1)", "v1.9.0-alpha.1"),
    ("Flatcar", "Flatcar"),
    ("", None),
    (None, None),
])
def test_os_version_from_members(operating_system, expected):
    assert talos_node.os_version(operating_system) == expected


def test_machine_types():
    assert talos_node.machine_type_of("controlplane") == "controlplane" and talos_node.machine_type_of({}) is None
    assert [talos_node.is_control_plane_type(t) for t in ("controlplane", "init", "worker", None)] == [True, True, False, False]
    assert [talos_node.is_configured_type(t) for t in ("worker", "unknown", "", None)] == [True, False, False, False]


def test_machine_status():
    status = talos_node.MachineStatus({"stage": "running", "status": {
        "ready": False, "unmetConditions": [{"name": "time", "reason": "not synced"}]}})
    assert not status.running_and_ready and status.state == "running, not ready"
    assert str(status) == "stage running, ready false (time: not synced)"
    assert status.unmet_conditions == [{"name": "time", "reason": "not synced"}]
    assert talos_node.MachineStatus({"stage": "running", "status": {"ready": True}}).running_and_ready
    assert talos_node.MachineStatus({"stage": "maintenance"}).in_maintenance
    missing = talos_node.MachineStatus(None)
    assert missing.stage is None and missing.state == "unknown" and str(missing) == "stage unknown, ready false"


def _info(state, healthy=None):
    return machine_pb2.ServiceInfo(id="etcd", state=state,
                                   health=machine_pb2.ServiceHealth(unknown=healthy is None, healthy=bool(healthy)))


def test_up_accepts_an_unchecked_service_but_healthy_does_not():
    assert talos_node.is_up(_info("Running")) and not talos_node.is_healthy(_info("Running"))
    assert talos_node.is_up(_info("Running", True)) and talos_node.is_healthy(_info("Running", True))
    assert not talos_node.is_up(_info("Running", False)) and not talos_node.is_healthy(_info("Running", False))
    assert not talos_node.is_up(_info("Starting", True))
    assert talos_node.service_state(_info("Running", False)) == "Running, unhealthy"


@pytest.mark.parametrize("state, goal, expected", [
    ("Finished", "started", True), ("Waiting", "started", False), ("Running", "stopped", True),
    ("Failed", "stopped", False), ("Running", "restarted", True),
])
def test_needs_control(state, goal, expected):
    assert talos_node.needs_control(state, goal) is expected


def test_services_by_id():
    items = [machine_pb2.ServiceList(services=[_info("Running"), machine_pb2.ServiceInfo(id="apid", state="Running")])]
    assert sorted(talos_node.services_by_id(items)) == ["apid", "etcd"]


@pytest.mark.parametrize("name, goal", [
    ("kubelet", "started"), ("kubelet", "restarted"),
    ("ext-tailscale", "started"), ("ext-tailscale", "stopped"), ("ext-tailscale", "restarted"),
])
def test_the_api_may_control_kubelet_and_extension_services(name, goal):
    assert talos_node.control_refusal(name, goal) is None


def _with_events(state, healthy=None, event_seconds=()):
    info = _info(state, healthy)
    info.events.events.extend(machine_pb2.ServiceEvent(state="Running", ts={"seconds": seconds}) for seconds in event_seconds)
    return info


def test_a_started_service_has_settled_when_up():
    assert talos_node.has_settled(_with_events("Running"), "started", 0)
    assert not talos_node.has_settled(_with_events("Running", healthy=False), "started", 0)
    assert talos_node.has_settled(_with_events("Running", healthy=True), "started", 0)
    assert not talos_node.has_settled(_with_events("Starting"), "started", 0)


def test_a_restarted_service_has_settled_with_a_newer_event():
    assert not talos_node.has_settled(_with_events("Running", event_seconds=[100]), "restarted", 100)
    assert talos_node.has_settled(_with_events("Running", event_seconds=[100, 130]), "restarted", 100)


def test_a_stopped_service_has_settled_once_no_longer_stopping():
    assert not talos_node.has_settled(_with_events("Stopping"), "stopped", 0)
    assert talos_node.has_settled(_with_events("Finished"), "stopped", 0)
