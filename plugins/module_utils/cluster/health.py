# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cluster health as ``talosctl health`` sees it.

``TalosChecks`` runs the Talos-level checks client-side, through the Talos API
of every node, in talosctl's order (pkg/cluster/check/default.go); the
Kubernetes checks are left to the server-side ``cluster.ClusterService/HealthCheck``,
whose progress stream ``server_health_check`` follows. ``nodes_to_check`` finds
the node lists (options, else COSI cluster Members). Both wait through
common/waiter.Waiter, which shows the checks' progress; between two rounds of the
Talos checks it follows the events of the node the failing check names.
``survey`` runs every Talos check once without waiting and names every
unhealthy node: the gate before a rolling upgrade or restart. Nodes known to be
down can be ignored by both.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
import time

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import discovery as members_source
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConfigError,
    TalosError,
    TalosUnreachableError,
    format_seconds,
    label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.waits import EventFollower
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter, WaitTimedOut

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    cluster_pb2 = state_pb2 = machine_pb2 = None

DIAGNOSTICS_TYPE = "Diagnostics.runtime.talos.dev"

# (name, what talosctl prints after "waiting for"), in talosctl's order.
TALOS_CHECKS = (
    ("etcd_healthy", "etcd to be healthy"),
    ("etcd_members_consistent", "etcd members to be consistent across nodes"),
    ("etcd_members_are_control_planes", "etcd members to be control plane nodes"),
    ("apid_ready", "apid to be ready"),
    ("memory_sizes", "all nodes memory sizes"),
    ("disk_sizes", "all nodes disk sizes"),
    ("no_diagnostics", "no diagnostics"),
    ("kubelet_healthy", "kubelet to be healthy"),
    ("boot_sequence_done", "all nodes to finish boot sequence"),
)
_NAMES = dict((description, name) for name, description in TALOS_CHECKS)

# One call of a check may take this long, so that one silent node does not eat the whole wait.
CALL_TIMEOUT = 10.0

_PROGRESS = re.compile(r"^waiting for (.+?): (.*)$", re.S)

# What the progress lines of a health wait are about.
SUBJECT = "cluster"


class ClusterNodes:
    """The control-plane and worker nodes to check, and where the lists came from."""

    def __init__(self, control_planes, workers, source):
        self.control_planes = list(control_planes)
        self.workers = list(workers)
        self.source = source

    @property
    def all(self):
        return self.control_planes + [node for node in self.workers if node not in self.control_planes]


def nodes_to_check(client, control_planes, workers, node):
    """The node lists: the options when set, else the COSI cluster Members that ``node`` discovered."""
    if control_planes:
        return ClusterNodes(control_planes, workers or [], "options")
    if workers:
        raise TalosConfigError("worker_nodes needs controlplane_nodes: set both, or neither to discover the nodes.")
    members = [members_source.member_node(resource)
               for resource in client.list_resources(members_source.MEMBERS_NAMESPACE, members_source.MEMBERS_TYPE, node=node)]
    discovered = {True: [], False: []}
    for member in members:
        address = members_source.preferred_address(member["addresses"])
        if address:
            discovered[talos_node.is_control_plane_type(member["machine_type"])].append(address)
    if not discovered[True]:
        raise TalosConfigError("%s discovered no control-plane members (COSI %s is empty: cluster discovery may be "
                               "disabled); set controlplane_nodes and worker_nodes."
                               % (label(node, start=True), members_source.MEMBERS_TYPE))
    return ClusterNodes(sorted(discovered[True]), sorted(discovered[False]), "discovery")


def _problems_of(answers, check):
    """``[(node, message)]`` for the nodes whose answer is an error or fails ``check(items)`` (a message or None)."""
    problems = []
    for node, answer in answers.items():
        if isinstance(answer, TalosError):
            problems.append((node, answer.message))
            continue
        message = check(answer)
        if message:
            problems.append((node, message))
    return problems


def _service_check(service_id):
    def check(items):
        info = talos_node.services_by_id(items).get(service_id)
        if info is None:
            return 'service "%s" is not running on this node' % service_id
        if talos_node.is_healthy(info):
            return None
        detail = info.health.last_message or talos_node.last_event_message(info)
        return 'service "%s" is %s%s%s' % (service_id, info.state, ", not healthy" if info.state == talos_node.RUNNING else "",
                                           ": %s" % detail if detail else "")
    return check


class TalosChecks:
    """The Talos-level checks of ``talosctl health``, each returning ``[(node, problem)]`` (empty = passed).

    ``ignored`` nodes (known to be down or unhealthy) are not asked, and no
    problem is held against them; they still count as the cluster's nodes (the
    etcd member of an ignored control plane is one of the control planes').
    """

    def __init__(self, client, nodes, ignored=()):
        self.client = client
        self.nodes = nodes
        self.ignored = set(ignored)
        # Nodes a survey found not answering: asked once, not again by the later checks.
        self.unreachable = set()
        self._surveying = False
        self._members = {}

    def _asked(self, nodes):
        return [node for node in nodes if node not in self.ignored and node not in self.unreachable]

    def _call_many(self, method, request=None, nodes=None, deadline=CALL_TIMEOUT):
        nodes = self._asked(nodes)
        answers = self.client.call_many(method, request, nodes=nodes, deadline=deadline) if nodes else {}
        self._note_unreachable(answers)
        return answers

    def _note_unreachable(self, answers):
        if self._surveying:
            self.unreachable.update(node for node, answer in answers.items() if isinstance(answer, TalosUnreachableError))

    def run(self, name):
        return [(node, message) for node, message in getattr(self, name)() if node not in self.ignored]

    def etcd_healthy(self):
        answers = self._call_many(rpc.SERVICE_LIST, nodes=self.nodes.control_planes)
        return _problems_of(answers, _service_check("etcd"))

    def etcd_members_consistent(self):
        request = machine_pb2.EtcdMemberListRequest(query_local=False)
        answers = self._call_many(rpc.ETCD_MEMBER_LIST, request, nodes=self.nodes.control_planes)
        problems = []
        self._members = {}
        for node, answer in answers.items():
            if isinstance(answer, TalosError):
                problems.append((node, answer.message))
            else:
                self._members[node] = [etcd.member_to_dict(member) for item in answer for member in item.members]
        views = dict((node, sorted(member["id"] for member in members)) for node, members in self._members.items())
        reference = self.nodes.control_planes[0] if self.nodes.control_planes[0] in views else next(iter(sorted(views)), None)
        for node, ids in sorted(views.items()):
            if ids != views[reference]:
                problems.append((node, "its etcd member list (%s) differs from node %s's (%s)"
                                 % (", ".join(ids) or "empty", reference, ", ".join(views[reference]) or "empty")))
        return problems

    def etcd_members_are_control_planes(self):
        if not self._members:
            self.etcd_members_consistent()
        if not self._members:
            return [(None, "no control plane answered EtcdMemberList")]
        members = self._members.get(self.nodes.control_planes[0]) or next(iter(self._members.values()))
        problems = []
        matched = set()
        for node in self.nodes.control_planes:
            member = next((m for m in members if node in (etcd.member_address(m), m["hostname"])), None)
            if member is None:
                problems.append((node, "the control plane is not an etcd member"))
            else:
                matched.add(member["id"])
        for member in members:
            if member["id"] not in matched:
                problems.append((etcd.member_address(member), "etcd member %s (%s) is not one of the control-plane nodes"
                                 % (member["hostname"] or "(not started)", member["id"])))
        return problems

    def apid_ready(self):
        return _problems_of(self._call_many(rpc.VERSION, nodes=self.nodes.all), lambda items: None)

    def memory_sizes(self):
        def check(items):
            return None if items and items[0].meminfo.memtotal > 0 else "the node reports no memory"
        return _problems_of(self._call_many(rpc.MEMORY, nodes=self.nodes.all), check)

    def disk_sizes(self):
        def check(items):
            return None if any(item.disks for item in items) else "the node reports no disks"
        return _problems_of(self._call_many(rpc.STORAGE_DISKS, nodes=self.nodes.all), check)

    def no_diagnostics(self):
        problems = []
        for node in self._asked(self.nodes.all):
            try:
                found = self.client.list_resources("runtime", DIAGNOSTICS_TYPE, node=node, deadline=CALL_TIMEOUT)
            except TalosError as error:
                if error.code == "PermissionDenied" and "not supported" in (error.server_message or ""):
                    continue  # a Talos release without diagnostics
                self._note_unreachable({node: error})
                problems.append((node, error.message))
                continue
            for diagnostic in found:
                spec = diagnostic["spec"] or {}
                details = "; ".join(spec.get("details") or [])
                text = "diagnostic %s: %s" % (diagnostic["metadata"]["id"], spec.get("message", ""))
                problems.append((node, text + (" (%s)" % details if details else "")))
        return problems

    def kubelet_healthy(self):
        answers = self._call_many(rpc.SERVICE_LIST, nodes=self.nodes.control_planes)
        return _problems_of(answers, _service_check("kubelet"))

    def boot_sequence_done(self):
        namespace, resource_type, resource_id = talos_node.MACHINE_STATUS
        request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id)

        def check(items):
            status = talos_node.MachineStatus(resource_to_dict(items[0].resource)["spec"])
            return None if status.running_and_ready else "the node is in %s" % status
        return _problems_of(self._call_many(rpc.COSI_GET, request, nodes=self.nodes.all), check)

    def survey(self):
        """Every check once, in order, each run whatever the ones before found: a Survey.

        A node that does not answer is asked once: the later checks leave it out.
        """
        self._surveying = True
        results, found = [], []
        for name, description in TALOS_CHECKS:
            problems = self.run(name)
            results.append(_check_result(name, description, "failed" if problems else "passed", problems))
            found.extend((name, node, message) for node, message in problems)
        return Survey(results, found, self.unreachable - self.ignored)

    def round(self):
        """Every check in order, the first failing one leaving the later ones pending: ``(results, failed)``."""
        results = []
        failed = None
        for name, description in TALOS_CHECKS:
            if failed is not None:
                results.append(_check_result(name, description, "pending"))
                continue
            problems = self.run(name)
            if problems:
                failed = _check_result(name, description, "failed", problems)
                results.append(failed)
            else:
                results.append(_check_result(name, description, "passed"))
        return results, failed


def _check_result(name, description, state, problems=None):
    problems = problems or []
    return {
        "name": name,
        "description": description,
        "state": state,
        "nodes": sorted(set(node for node, _message in problems if node)),
        "message": "; ".join("%s: %s" % (node, message) if node else message for node, message in problems) or None,
    }


class Survey:
    """Every Talos check run once.

    ``checks`` (each passed or failed), ``unhealthy`` (``{node: [problem]}``:
    each distinct problem of a node once, after the first check that found it,
    ``apid_ready: <why>``), ``unreachable`` (the nodes that did not answer at
    all, sorted) and ``healthy``.
    """

    def __init__(self, checks, problems, unreachable, elapsed=None):
        self.checks = checks
        self.elapsed = elapsed
        self.failed = [check for check in checks if check["state"] == "failed"]
        self.healthy = not self.failed
        self.unreachable = sorted(unreachable)
        found = {}
        for name, node, message in problems:
            if node and message not in [seen for _name, seen in found.get(node, [])]:
                found.setdefault(node, []).append((name, message))
        self.unhealthy = dict((node, ["%s: %s" % pair for pair in pairs]) for node, pairs in found.items())

    def message(self):
        """One sentence naming every failed check, its nodes and why."""
        return "The cluster is not healthy: %s." % "; ".join(
            "%s (%s) failed%s" % (check["name"], check["description"],
                                  " - %s" % check["message"].rstrip(".") if check["message"] else "")
            for check in self.failed)


def survey(client, nodes, ignored=()):
    """Every Talos check once, without waiting (TalosChecks.survey); the Survey's ``elapsed`` says how long it took."""
    started = time.monotonic()
    found = TalosChecks(client, nodes, ignored).survey()
    found.elapsed = round(time.monotonic() - started, 1)
    return found


def _health_failure(failed, checks, elapsed, timeout):
    """The failure of a health wait that ran out: every check's state, and which check failed on which nodes."""
    where = " on node %s" % ", ".join(failed["nodes"]) if failed["nodes"] else ""
    message = ("Cluster health check %s (%s) still failed%s after %s seconds (wait_timeout %s): %s"
               % (failed["name"], failed["description"], where, format_seconds(elapsed), timeout,
                  (failed["message"] or "no detail").rstrip(".")) + ".")
    return ActionFailed(message, dict(checks=checks, elapsed=elapsed, failed_check=failed["name"],
                                      failed_nodes=failed["nodes"]), code="DeadlineExceeded")


def _failing_state(check):
    """A failing check as a progress line shows it: ``waiting for etcd_healthy on 10.5.0.3``."""
    return "waiting for %s%s" % (check["name"], " on %s" % ", ".join(check["nodes"]) if check["nodes"] else "")


def run_talos_checks(client, nodes, timeout, interval=2.0, progress=None, ignored=()):
    """Run the Talos checks in rounds until all pass or ``timeout`` seconds pass.

    Every round runs the checks from the first; a failing check leaves the
    later ones pending. ``ignored`` nodes are neither asked nor held against
    the cluster. Returns ``(checks, elapsed)``; raises ActionFailed with every check's state.
    """
    checks = TalosChecks(client, nodes, ignored)
    waiter = Waiter(timeout, interval, progress)
    # Between two rounds, the events of the node the failing check names (else the first control plane's).
    followers = {}
    failing = {"node": None}

    def poll():
        results, failed = checks.round()
        if failed is None:
            return Seen("all checks passed", done=True, value=results)
        failing["node"] = (failed["nodes"] or nodes.control_planes or [None])[0]
        return Seen(_failing_state(failed), value=(results, failed))

    def follow(seconds):
        node = failing["node"]
        if node not in followers:
            followers[node] = EventFollower(client, node)
        followers[node](seconds)

    try:
        results = waiter.until(poll, "the cluster to be healthy", SUBJECT, tolerate=lambda error: False, follow=follow)
    except WaitTimedOut as timed_out:
        results, failed = timed_out.seen.value
        raise _health_failure(failed, results, waiter.elapsed, timeout)
    return results, waiter.elapsed


def check_name(description):
    """The name of a check from what the server prints (Kubernetes checks get a name made of their words)."""
    return _NAMES.get(description) or re.sub(r"[^a-z0-9]+", "_", description.lower()).strip("_")


def server_health_check(client, nodes, node, timeout, progress=None):
    """``cluster.ClusterService/HealthCheck`` on ``node`` (a control plane): Talos and Kubernetes checks.

    Returns ``(checks, elapsed)`` from the progress stream; raises ActionFailed
    naming the check that had not passed when the server gave up.
    """
    waiter = Waiter(timeout, progress=progress)
    request = cluster_pb2.HealthCheckRequest(cluster_info=cluster_pb2.ClusterInfo(
        control_plane_nodes=nodes.control_planes, worker_nodes=nodes.workers))
    request.wait_timeout.FromSeconds(int(timeout))
    checks = []
    by_description = {}

    def on_progress(reply):
        match = _PROGRESS.match(reply.message.strip())
        if not match:
            return False
        description, state = match.group(1), match.group(2).strip()
        check = by_description.get(description)
        if check is None:
            check = by_description[description] = _check_result(check_name(description), description, "running")
            checks.append(check)
        if state == "OK":
            check.update(state="passed", message=None)
        else:
            if state != "...":
                check.update(state="running", message=" ".join(state.replace("\t*", "").split()))
            waiter.see(SUBJECT, "waiting for %s" % check["name"])
        return False

    try:
        # The server stops at wait_timeout; the call may take a little longer to say so. It is a wait, so an
        # endpoint that is still coming up is retried rather than failed at once.
        client.stream(rpc.CLUSTER_HEALTH_CHECK, request, node=node, on_message=on_progress, deadline=timeout + 30,
                      retry_unreachable=True)
    except TalosError as error:
        elapsed = waiter.elapsed
        pending = [check for check in checks if check["state"] != "passed"]
        if not pending:
            raise
        failed = pending[-1]
        failed["state"] = "failed"
        failed["message"] = failed["message"] or error.message
        raise _health_failure(failed, checks, elapsed, timeout)
    elapsed = waiter.elapsed
    unfinished = [check for check in checks if check["state"] != "passed"]
    if unfinished or not checks:
        failed = unfinished[-1] if unfinished else _check_result("health_check", "the server-side health check", "failed")
        failed["state"] = "failed"
        failed["message"] = failed["message"] or "the server ended the health check without reporting success"
        raise _health_failure(failed, checks, elapsed, timeout)
    waiter.see(SUBJECT, "all checks passed")
    return checks, elapsed
