# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiters against a scripted client (the emulator-backed reboot wait is in test_client.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils import waiters
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosApiError,
    TalosConnectionError,
    TalosPermissionError,
    TalosTimeoutError,
    TalosTLSError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


class ScriptedClient(object):
    """Answers get_resource/read_bytes/call from scripts; an exception in a script is raised."""

    def __init__(self, statuses=(), boot_ids=(), versions=()):
        self.statuses = list(statuses)
        self.boot_ids = list(boot_ids)
        self.versions = list(versions)
        self.calls = []

    @staticmethod
    def _next(script):
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get_resource(self, namespace, resource_type, resource_id, node=None, deadline=None):
        self.calls.append(("get_resource", namespace, resource_type, resource_id, node))
        return {"metadata": {}, "spec": self._next(self.statuses)}

    def read_bytes(self, method, request=None, node=None, deadline=None):
        self.calls.append(("read_bytes", method, request.path, node))
        return self._next(self.boot_ids)

    def call(self, method, request=None, node=None, deadline=None):
        self.calls.append(("call", method, node))
        return [self._next(self.versions)]


RUNNING = {"stage": "running", "status": {"ready": True}}


def test_wait_until_returns_the_last_observation():
    answers = [(False, "one"), (False, "two"), (True, "three")]
    assert waiters.wait_until(lambda: answers.pop(0), timeout=5, interval=0, description="x") == "three"
    assert answers == []


def test_wait_until_timeout_names_what_was_awaited_and_the_last_state():
    with pytest.raises(TalosTimeoutError) as err:
        waiters.wait_until(lambda: (False, "stage booting, ready false"), timeout=0, interval=0,
                           description="node 10.5.0.2 to become ready")
    assert err.value.message == ("Timed out after 0 seconds waiting for node 10.5.0.2 to become ready; "
                                 "last observed: stage booting, ready false.")


def test_read_boot_id_reads_the_kernel_file():
    client = ScriptedClient(boot_ids=[b"1b2c\n"])
    assert waiters.read_boot_id(client, "10.5.0.2") == "1b2c"
    assert client.calls == [("read_bytes", "machine.MachineService/Read", "/proc/sys/kernel/random/boot_id", "10.5.0.2")]


def test_read_boot_id_is_none_without_permission():
    client = ScriptedClient(boot_ids=[TalosPermissionError("denied", code="PermissionDenied")])
    assert waiters.read_boot_id(client, "10.5.0.2") is None


def test_wait_for_reboot_tolerates_the_node_going_away_and_needs_a_new_boot_id():
    client = ScriptedClient(
        statuses=[
            RUNNING,  # still the old boot: the boot ID below has not changed
            TalosConnectionError("gone", code="Unavailable"),
            TalosApiError("canceled", code="Canceled"),
            {"stage": "booting", "status": {"ready": False}},
            RUNNING,
        ],
        boot_ids=[b"old\n", b"new\n"])
    assert waiters.wait_for_reboot(client, "10.5.0.2", "old", timeout=10, interval=0) == "new"
    reads = [call for call in client.calls if call[0] == "read_bytes"]
    assert len(reads) == 2
    assert ("get_resource", "runtime", "MachineStatuses.runtime.talos.dev", "machine", "10.5.0.2") in client.calls


def test_wait_for_reboot_times_out_with_the_last_stage():
    client = ScriptedClient(statuses=[{"stage": "rebooting", "status": {"ready": False}}])
    with pytest.raises(TalosTimeoutError) as err:
        waiters.wait_for_reboot(client, "10.5.0.2", "old", timeout=0, interval=0)
    assert "node 10.5.0.2 to reboot and become ready" in err.value.message
    assert "last observed: stage rebooting, ready false." in err.value.message


def test_wait_for_reboot_raises_errors_that_are_not_transient():
    client = ScriptedClient(statuses=[TalosPermissionError("denied", code="PermissionDenied")])
    with pytest.raises(TalosPermissionError):
        waiters.wait_for_reboot(client, "10.5.0.2", "old", timeout=10, interval=0)


def test_wait_for_secure_api_waits_out_handshake_failures():
    version = object()
    client = ScriptedClient(versions=[TalosTLSError("maintenance certificate"), TalosConnectionError("restarting"), version])
    assert waiters.wait_for_secure_api(client, None, timeout=10, interval=0) is version
    assert [call[0] for call in client.calls] == ["call", "call", "call"]


def test_wait_for_secure_api_timeout_reports_the_last_failure():
    client = ScriptedClient(versions=[TalosTLSError("Certificate verification of endpoint 10.5.0.2:50000 failed.")])
    with pytest.raises(TalosTimeoutError) as err:
        waiters.wait_for_secure_api(client, "10.5.0.2", timeout=0, interval=0)
    assert "last observed: Certificate verification of endpoint 10.5.0.2:50000 failed." in err.value.message


class BootTimeClient(ScriptedClient):
    """Read is refused (os:operator); SystemStat answers the boot times in ``boot_times``."""

    def __init__(self, statuses, boot_times):
        super(BootTimeClient, self).__init__(statuses=statuses, boot_ids=[TalosPermissionError("not authorized")])
        self.boot_times = list(boot_times)

    def call(self, method, request=None, node=None, deadline=None, retry_codes=None):
        assert method.endswith("/SystemStat")
        return [machine_pb2.SystemStat(boot_time=self._next(self.boot_times))]


def test_boot_marker_falls_back_to_the_boot_time_without_read():
    client = BootTimeClient([RUNNING], [1700000000])
    assert waiters.read_boot_marker(client, "10.5.0.2") == "boot-time:1700000000"


def test_reboot_wait_compares_boot_times_when_read_is_refused():
    # Still running on the old boot twice, then on a new one.
    client = BootTimeClient([RUNNING], [1700000000, 1700000000, 1700000090])
    assert waiters.wait_for_reboot(client, "10.5.0.2", "boot-time:1700000000", timeout=5, interval=0) == "boot-time:1700000090"


class VersionClient(object):
    def __init__(self, answers):
        self.answers = list(answers)
        self.retry_codes = []

    def call(self, method, request=None, node=None, deadline=None, retry_codes=None):
        self.retry_codes.append(retry_codes)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return [answer]


def test_unreachable_wait_ends_at_the_first_connection_failure_without_retries():
    client = VersionClient(["v", "v", TalosConnectionError("connection refused", code="Unavailable")])
    waiters.wait_until_unreachable(client, "10.5.0.2", timeout=5, interval=0)
    assert client.answers == [] and client.retry_codes == [(), (), ()]


def test_unreachable_wait_passes_permanent_errors_through():
    client = VersionClient([TalosApiError("not authorized", code="PermissionDenied")])
    with pytest.raises(TalosApiError):
        waiters.wait_until_unreachable(client, "10.5.0.2", timeout=5, interval=0)


def test_unreachable_wait_times_out_naming_the_node():
    client = VersionClient(["v"] * 1000)
    with pytest.raises(TalosTimeoutError, match="waiting for node 10.5.0.2 to stop answering; last observed: the node still answers"):
        waiters.wait_until_unreachable(client, "10.5.0.2", timeout=0.05, interval=0.01)
