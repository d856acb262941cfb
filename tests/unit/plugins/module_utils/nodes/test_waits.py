# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The waits on a node after an action, against a scripted client (the emulator-backed reboot wait is in
test_client.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosPermissionError,
    TalosTimeoutError,
    TalosTLSError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from fake_talos import FakeTalos, fails_with, in_turn, resource

# A node without an event stream: a wait pauses its whole interval between two polls.
NO_EVENTS = fails_with("Unimplemented", "unknown method Events")


def statuses(*specs):
    """An answer to Get: the node's MachineStatus with each spec in turn (an error in their place is the answer)."""
    return in_turn(*[[state_pb2.GetResponse(resource=resource("runtime", "MachineStatuses.runtime.talos.dev", "machine", spec))]
                     if isinstance(spec, dict) else spec for spec in specs])


def version(tag="v1.14.0"):
    return [machine_pb2.Version(version=machine_pb2.VersionInfo(tag=tag))]


RUNNING = {"stage": "running", "status": {"ready": True}}


def test_read_boot_id_reads_the_kernel_file():
    client = FakeTalos(answers={rpc.READ: b"1b2c\n"})
    assert waits.read_boot_id(client, "10.5.0.2") == "1b2c"
    assert [(call.via, call.method, call.request.path, call.node) for call in client.calls] == [
        ("read_bytes", rpc.READ, "/proc/sys/kernel/random/boot_id", "10.5.0.2")]


def test_read_boot_id_is_none_without_permission():
    client = FakeTalos(answers={rpc.READ: fails_with("PermissionDenied", "denied")})
    assert waits.read_boot_id(client, "10.5.0.2") is None


def test_wait_for_reboot_tolerates_the_node_going_away_and_needs_a_new_boot_id():
    client = FakeTalos(answers={
        rpc.COSI_GET: statuses(
            RUNNING,  # still the old boot: the boot ID below has not changed
            fails_with("Unavailable", "gone"),
            fails_with("Canceled", "canceled"),
            {"stage": "booting", "status": {"ready": False}},
            RUNNING,
        ),
        rpc.READ: in_turn(b"old\n", b"new\n"),
    })
    assert waits.wait_for_reboot(client, "10.5.0.2", "old", Waiter(10, interval=0)) == "new"
    assert len(client.calls_to(rpc.READ)) == 2
    assert ("get_resource", "runtime", "MachineStatuses.runtime.talos.dev", "machine", "10.5.0.2") in [
        (call.via, call.request.namespace, call.request.type, call.request.id, call.node) for call in client.calls_to(rpc.COSI_GET)]


def test_wait_for_reboot_times_out_with_the_last_stage():
    client = FakeTalos(answers={rpc.COSI_GET: statuses({"stage": "rebooting", "status": {"ready": False}})})
    with pytest.raises(TalosTimeoutError) as err:
        waits.wait_for_reboot(client, "10.5.0.2", "old", Waiter(0, interval=0))
    assert "node 10.5.0.2 to reboot and become ready" in err.value.message
    assert "last observed: stage rebooting, ready false." in err.value.message


def test_wait_for_reboot_raises_errors_that_are_not_transient():
    client = FakeTalos(answers={rpc.COSI_GET: fails_with("PermissionDenied", "denied")})
    with pytest.raises(TalosPermissionError):
        waits.wait_for_reboot(client, "10.5.0.2", "old", Waiter(10, interval=0))


def test_wait_for_secure_api_waits_out_handshake_failures():
    answered = version()
    client = FakeTalos(answers={rpc.VERSION: in_turn(TalosTLSError("maintenance certificate"), fails_with("Unavailable", "restarting"),
                                                     answered)})
    assert waits.wait_for_secure_api(client, None, Waiter(10, interval=0)) is answered[0]
    assert [call.via for call in client.calls] == ["call", "call", "call"]


def test_wait_for_secure_api_timeout_reports_the_last_failure():
    client = FakeTalos(answers={rpc.VERSION: TalosTLSError("Certificate verification of endpoint 10.5.0.2:50000 failed.")})
    with pytest.raises(TalosTimeoutError) as err:
        waits.wait_for_secure_api(client, "10.5.0.2", Waiter(0, interval=0))
    assert "last observed: Certificate verification of endpoint 10.5.0.2:50000 failed." in err.value.message


def boot_times(*seconds):
    """A node that refuses Read (os:operator), running, whose SystemStat answers each boot time in turn."""
    return FakeTalos(answers={
        rpc.READ: fails_with("PermissionDenied", "not authorized"),
        rpc.COSI_GET: statuses(RUNNING),
        rpc.SYSTEM_STAT: in_turn(*[[machine_pb2.SystemStat(boot_time=boot_time)] for boot_time in seconds]),
    })


def test_boot_marker_falls_back_to_the_boot_time_without_read():
    client = boot_times(1700000000)
    assert waits.read_boot_marker(client, "10.5.0.2") == "boot-time:1700000000"


def test_reboot_wait_compares_boot_times_when_read_is_refused():
    # Still running on the old boot twice, then on a new one.
    client = boot_times(1700000000, 1700000000, 1700000090)
    assert waits.wait_for_reboot(client, "10.5.0.2", "boot-time:1700000000", Waiter(5, interval=0)) == "boot-time:1700000090"


def test_unreachable_wait_ends_at_the_first_connection_failure_without_retries():
    client = FakeTalos(answers={rpc.VERSION: in_turn(version(), version(), fails_with("Unavailable", "connection refused"))})
    waits.wait_until_unreachable(client, "10.5.0.2", Waiter(5, interval=0))
    assert [call.kwargs["retry_codes"] for call in client.calls] == [(), (), ()]


def test_unreachable_wait_passes_permanent_errors_through():
    client = FakeTalos(answers={rpc.VERSION: fails_with("PermissionDenied", "not authorized")})
    with pytest.raises(TalosPermissionError):
        waits.wait_until_unreachable(client, "10.5.0.2", Waiter(5, interval=0))


def test_unreachable_wait_times_out_naming_the_node():
    client = FakeTalos(answers={rpc.VERSION: version(), rpc.EVENTS: NO_EVENTS})
    with pytest.raises(TalosTimeoutError, match="waiting for node 10.5.0.2 to stop answering; last observed: the node still answers"):
        waits.wait_until_unreachable(client, "10.5.0.2", Waiter(0.05, interval=0.01))


def service_lists(*script):
    """A node whose ServiceList answers each entry of ``script`` in turn: ``{id: (state, healthy or None)}`` or an error."""
    def service_list(services):
        return [machine_pb2.ServiceList(services=[
            machine_pb2.ServiceInfo(id=name, state=state, health=machine_pb2.ServiceHealth(unknown=healthy is None, healthy=bool(healthy)))
            for name, (state, healthy) in services.items()])]
    return FakeTalos(answers={rpc.SERVICE_LIST: in_turn(*[service_list(entry) if isinstance(entry, dict) else entry for entry in script]),
                              rpc.EVENTS: NO_EVENTS})


def test_services_wait_needs_every_service_up_and_healthy_when_checked():
    client = service_lists(
        {"etcd": ("Preparing", None)},
        fails_with("Unavailable", "gone"),
        {"etcd": ("Running", False), "ext-foo": ("Running", None)},
        {"etcd": ("Running", True), "ext-foo": ("Running", None)},
    )
    assert waits.wait_for_services(client, "10.5.0.2", ["etcd", "ext-foo"], Waiter(10, interval=0)) == {
        "etcd": "Running, healthy", "ext-foo": "Running, unknown"}


def test_services_wait_times_out_naming_the_waiting_services():
    client = service_lists({"etcd": ("Running", True)})
    with pytest.raises(TalosTimeoutError) as err:
        waits.wait_for_services(client, None, ["etcd", "ext-foo"], Waiter(0, interval=0))
    assert err.value.message == ("Timed out after 0 seconds waiting for services etcd, ext-foo on the endpoint node to be "
                                 "running and healthy; last observed: waiting for ext-foo (not defined).")


def test_services_wait_on_a_worker_leaves_out_the_services_only_control_planes_run():
    client = service_lists({"kubelet": ("Running", True)})
    assert waits.wait_for_services(client, "10.5.0.5", ["etcd", "kubelet"], Waiter(0, interval=0),
                                   machine_type="worker") == {"etcd": "not run on worker nodes", "kubelet": "Running, healthy"}


def test_services_wait_on_a_control_plane_waits_for_etcd():
    client = service_lists({"kubelet": ("Running", True)})
    with pytest.raises(TalosTimeoutError, match=r"waiting for etcd \(not defined\)"):
        waits.wait_for_services(client, "10.5.0.2", ["etcd", "kubelet"], Waiter(0, interval=0),
                                machine_type="controlplane")


def test_a_service_no_talos_node_runs_is_named_at_once():
    assert talos_node.unknown_services_problem("wait_for_services", ["etcd", "kublet", "ext-iscsid"]) == (
        "wait_for_services names kublet, which no Talos node runs: Talos's services are apid, auditd, containerd, cri, "
        "dashboard, etcd, kubelet, machined, syslogd, trustd, udevd, and a system extension's are ext-<name>.")
    assert talos_node.unknown_services_problem("wait_for_services", ["etcd", "ext-iscsid"]) is None


def test_service_wait_reports_progress_under_the_node_and_service(clock):
    client = service_lists(*[{"kubelet": ("Finished", None)}] * 4 + [{"kubelet": ("Running", True)}])
    lines = []
    info = waits.wait_for_service(client, "10.5.0.3", "kubelet", "started", Waiter(60, progress=lines.append))
    assert info.state == "Running"
    assert lines == ["10.5.0.3 kubelet: Finished, unknown (6 s)", "10.5.0.3 kubelet: Finished, unknown → Running, healthy (8 s)"]


# Following the node's events between polls

HELLO = machine_pb2.Event()


def event(event_id):
    return machine_pb2.Event(id=event_id)


def test_an_event_ends_the_pause_and_the_next_stream_resumes_after_it(clock):
    client = FakeTalos(answers={rpc.EVENTS: [HELLO, event("b1"), event("b2")]})
    follower = waits.EventFollower(client, "10.5.0.2")
    follower(2.0)
    assert clock["t"] == 1000.0
    follower(2.0)
    assert [request.tail_id for request in client.requests(rpc.EVENTS)] == ["", "b1"]
    assert all(call.kwargs["retry_codes"] == () and call.kwargs["deadline"] == 2.0 for call in client.calls_to(rpc.EVENTS))


def test_a_node_that_does_not_answer_is_looked_at_again_soon(clock):
    follower = waits.EventFollower(FakeTalos(answers={rpc.EVENTS: fails_with("Unavailable", "connection refused")}), "10.5.0.2")
    follower(2.0)
    assert clock["t"] == 1000.0 + waits.UNREACHABLE_RECHECK_SECONDS


def test_a_node_without_events_is_polled_at_the_interval(clock):
    client = FakeTalos(answers={rpc.EVENTS: NO_EVENTS})
    follower = waits.EventFollower(client, "10.5.0.2")
    follower(2.0)
    follower(2.0)
    assert clock["t"] == 1004.0 and len(client.calls_to(rpc.EVENTS)) == 1


def test_a_reboot_wait_looks_again_as_soon_as_the_node_reports_running(clock):
    # The first poll sees the node booting; its event stream then reports the change and the next poll is done.
    client = FakeTalos(answers={
        rpc.COSI_GET: statuses({"stage": "booting", "status": {"ready": False}}, RUNNING),
        rpc.READ: b"new\n",
        rpc.EVENTS: [HELLO, event("0001")],
    })
    assert waits.wait_for_reboot(client, "10.5.0.2", "old", Waiter(60, interval=2)) == "new"
    assert clock["t"] == 1000.0 and len(client.calls_to(rpc.EVENTS)) == 1
