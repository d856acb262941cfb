# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd bootstrap (talos_bootstrap): once per cluster, on one control plane, optionally recovering from a snapshot
(EtcdRecover), then the wait for a healthy member."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, label, short_label
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.members import (
    find_member,
    list_members,
    still_starting,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd.status import member_status

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

# Answers of a node that is not ready for bootstrap yet, as talosctl's cluster helper retries them.
BOOTSTRAP_RETRY_CODES = ("FailedPrecondition", "Unavailable", "DeadlineExceeded", "Canceled")

# EtcdRecover takes the snapshot as a stream of common.Data messages.
UPLOAD_CHUNK_SIZE = 1024 * 1024


def etcd_service(client, node):
    """The node's etcd ``ServiceInfo``, or None when the node runs no etcd service."""
    return talos_node.list_services(client, node).get("etcd")


def current_members(client, node):
    """The members ``node`` reports (None: the endpoint), or [] while it cannot answer (etcd not running, no leader)."""
    try:
        return list_members(client, node)
    except TalosError as err:
        if err.code == "PermissionDenied":
            raise
        return []


def bootstrap(client, node, recover_from=None, skip_hash_check=False, wait_timeout=None, check_mode=False,
              progress=None):
    """Bootstrap the cluster's etcd on control plane ``node`` unless it already was; returns the task's result.

    Already bootstrapped: etcd runs on the node, or (for a node still joining)
    the endpoint's etcd has members - bootstrapping then would start a second,
    separate etcd cluster. ``recover_from`` (a snapshot file) is uploaded first
    and etcd starts from it. With ``wait_timeout`` the node's etcd must then run
    as a healthy voting member.
    """
    if talos_node.read_machine_type(client, node) == "worker":
        # Checked first: the cluster being bootstrapped already says nothing about a worker.
        raise TalosError("Cannot bootstrap %s: it is a worker node, and only a control-plane node can bootstrap etcd; "
                         "target one of the cluster's control planes." % label(node), node=node)
    service = etcd_service(client, node)
    bootstrapped = service is not None and service.state == "Running"
    if not bootstrapped and node is not None:
        # The endpoint (a control plane) knows whether etcd already has members.
        bootstrapped = bool(current_members(client, None))
    if service is None and not bootstrapped and check_mode:
        # Without calling Bootstrap only the missing etcd service tells why it would fail.
        raise TalosError("Cannot bootstrap %s: it runs no etcd service, so it is not a control-plane node with etcd "
                         "configured; target one of the cluster's control planes." % label(node), node=node)
    result = {"changed": not bootstrapped, "node": node, "bootstrapped": bootstrapped, "recovered": False}
    if result["changed"] and not check_mode:
        result["changed"] = _call_bootstrap(client, node, recover_from, skip_hash_check)
        result.update(bootstrapped=True, recovered=result["changed"] and bool(recover_from))
        if wait_timeout is not None:
            _wait_for_healthy_member(client, node, Waiter(wait_timeout, progress=progress))
        service = etcd_service(client, node)
    result["etcd_state"] = service.state if service else None
    result["members"] = current_members(client, node) if result["bootstrapped"] else []
    return result


def _snapshot_chunks(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(UPLOAD_CHUNK_SIZE), b"")


def _call_bootstrap(client, node, recover_from, skip_hash_check):
    """Upload the recovery snapshot if any, then call Bootstrap; False when the node answers AlreadyExists."""
    request = machine_pb2.BootstrapRequest()
    if recover_from:
        client.upload(rpc.ETCD_RECOVER, _snapshot_chunks(recover_from), node=node)
        request = machine_pb2.BootstrapRequest(recover_etcd=True, recover_skip_hash_check=skip_hash_check)
    try:
        client.call(rpc.BOOTSTRAP, request, node=node, retry_codes=BOOTSTRAP_RETRY_CODES)
    except TalosError as err:
        if err.code == "AlreadyExists":
            return False
        # Talos v1.12 and older answer a worker with FailedPrecondition, which is retried until the timeout.
        if err.code == "Unimplemented" or "only be performed on a control plane" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: %s; Bootstrap works only on a configured control-plane node, so "
                             "target one of the cluster's control planes."
                             % (label(node), err.server_message or "not a control plane"),
                             code=err.code, node=node, server_message=err.server_message)
        if err.code == "InvalidArgument" and "etcd is not configured" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: its machine config has no etcd CA (cluster.etcd.ca), so it runs no "
                             "etcd; apply a control-plane config generated with the cluster's secrets." % label(node),
                             code=err.code, node=node, server_message=err.server_message)
        raise
    return True


def _wait_for_healthy_member(client, node, waiter):
    """Wait until etcd on ``node`` runs, is healthy and the node is a voting member."""
    def poll():
        info = etcd_service(client, node)
        if info is None:
            return Seen("no etcd service")
        if not talos_node.is_healthy(info):
            return Seen("etcd %s" % talos_node.service_state(info), detail="etcd service %s (%s)"
                        % (info.state, talos_node.last_event_message(info) or "no events"))
        status = member_status(client, node)
        member = find_member(list_members(client, node), status["member_id"])
        if member is None or member["is_learner"]:
            return Seen("joining", detail="etcd running, the node is not a voting member yet")
        return Seen("etcd member", done=True, detail="etcd running and healthy, the node is a member")

    waiter.until(poll, "etcd on %s to run as a healthy member" % label(node), short_label(node),
                 tolerate=still_starting, follow=waits.EventFollower(client, node))
