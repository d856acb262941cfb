#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_bootstrap
short_description: Bootstrap etcd on a Talos control-plane node
version_added: 0.1.0
description:
  - Bootstraps the etcd cluster of a Talos cluster on one control-plane node with the Bootstrap RPC, the way
    C(talosctl bootstrap) does. Run it once per cluster, on one control plane; the other control planes join by
    themselves.
  - The module first reads the node's etcd service (ServiceList). When etcd is already running there, the cluster
    was bootstrapped and nothing is sent. When it is not, but the endpoint's etcd already has members, the cluster
    was bootstrapped through another control plane and the node joins it by itself; nothing is sent either, because
    bootstrapping it would start a second, separate etcd cluster. Otherwise the module calls Bootstrap; the answer
    C(AlreadyExists) ("etcd data directory is not empty") also means the node was bootstrapped before and is not a
    failure.
  - While the node is not ready for bootstrap yet (C(FailedPrecondition) "bootstrap is not available yet",
    "time is not in sync yet") or not reachable (C(Unavailable), deadline exceeded), Bootstrap is retried with
    exponential backoff until O(timeout) seconds have passed.
  - With O(recover_from), the etcd snapshot at that path on the controller is uploaded with EtcdRecover first, and
    etcd is bootstrapped from it (C(talosctl bootstrap --recover-from)).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  recover_from:
    description:
      - Path on the controller of an etcd snapshot (for example one saved by M(talos_linux.talos.talos_etcd_member)
        with O(talos_linux.talos.talos_etcd_member#module:snapshot)) to recover the cluster's etcd data from.
      - Ignored when the node is already bootstrapped, so that re-running a recovery play changes nothing.
    type: path
  recover_skip_hash_check:
    description:
      - Skip etcd's integrity check of the snapshot. Needed when O(recover_from) is a copy of an etcd data
        directory's C(member/snap/db) file rather than a snapshot.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Decides from the node's etcd service and members without calling Bootstrap.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - Bootstrap and EtcdRecover need the C(os:admin) role.
  - The node must be a control plane whose machine config has an etcd CA. Target the same control plane every time.
  - O(timeout) bounds the Bootstrap call including its retries; O(wait_timeout) bounds the wait for etcd afterwards.
seealso:
  - module: talos_linux.talos.talos_etcd_member
  - module: talos_linux.talos.talos_kubeconfig
"""

EXAMPLES = r"""
- name: Bootstrap etcd on the first control plane
  talos_linux.talos.talos_bootstrap:
    talosconfig: ./talosconfig
    node: "{{ groups['controlplane'][0] }}"
  run_once: true

- name: Recover etcd from a snapshot after losing every control plane
  talos_linux.talos.talos_bootstrap:
    node: 10.5.0.2
    recover_from: ./backups/etcd.snapshot
    timeout: 300
"""

RETURN = r"""
bootstrapped:
  description:
    - True when the cluster's etcd is bootstrapped after the task (already was, or the Bootstrap call succeeded).
    - In check mode, true when it already was.
  returned: always
  type: bool
  sample: true
recovered:
  description: True when the cluster's etcd was bootstrapped from O(recover_from).
  returned: always
  type: bool
  sample: false
node:
  description: The node that was bootstrapped (null when the endpoint answered for itself).
  returned: always
  type: str
  sample: 10.5.0.2
etcd_state:
  description: The node's etcd service state (ServiceList) after the task, null when the node runs no etcd service.
  returned: always
  type: str
  sample: Running
members:
  description:
    - The etcd members as the node reports them after the task. Empty while it cannot list them yet, for example
      after a bootstrap with O(wait=false), while the node is still joining, or in check mode before bootstrap.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The member ID, 16 hexadecimal digits as C(talosctl etcd members) prints it.
      type: str
      sample: 8e9e05c52164694d
    hostname:
      description: The member name (the node's hostname).
      type: str
      sample: cp-1
    peer_urls:
      description: The member's peer URLs.
      type: list
      elements: str
      sample: ["https://10.5.0.2:2380"]
    client_urls:
      description: The member's client URLs.
      type: list
      elements: str
      sample: ["https://10.5.0.2:2379"]
    is_learner:
      description: True while the member is a learner (not voting yet).
      type: bool
      sample: false
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils import etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule
from ansible_collections.talos_linux.talos.plugins.module_utils.waiters import is_transient, wait_until

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

BOOTSTRAP = "machine.MachineService/Bootstrap"
RECOVER = "machine.MachineService/EtcdRecover"
# Answers of a node that is not ready for bootstrap yet, as talosctl's cluster helper retries them.
RETRY_CODES = ("FailedPrecondition", "Unavailable", "DeadlineExceeded", "Canceled")
# EtcdRecover takes the snapshot as a stream of common.Data messages.
UPLOAD_CHUNK_SIZE = 1024 * 1024


def describe(node):
    return "node %s" % node if node else "the endpoint"


def etcd_service(client, node):
    """The node's etcd ``ServiceInfo``, or None when the node runs no etcd service."""
    items = client.call("machine.MachineService/ServiceList", node=node)
    for item in items:
        for info in item.services:
            if info.id == "etcd":
                return info
    return None


def machine_type(client, node):
    """The node's machine type (controlplane, init, worker), or None when it has none yet or cannot say."""
    try:
        resource = client.get_resource("config", "MachineTypes.config.talos.dev", "machine-type", node=node)
    except TalosError as err:
        if err.code in ("NotFound", "Unimplemented"):
            return None
        raise
    return resource["spec"] if isinstance(resource["spec"], str) else None


def current_members(client, node):
    """The members ``node`` reports (None: the endpoint), or [] while it cannot answer (etcd not running, no leader)."""
    try:
        return etcd.list_members(client, node)
    except TalosError as err:
        if err.code == "PermissionDenied":
            raise
        return []


def snapshot_chunks(path):
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(UPLOAD_CHUNK_SIZE), b"")


def bootstrap(module, client, node):
    """Upload the recovery snapshot if any, then call Bootstrap; False when the node answers AlreadyExists."""
    params = module.params
    request = machine_pb2.BootstrapRequest()
    if params["recover_from"]:
        client.upload(RECOVER, snapshot_chunks(params["recover_from"]), node=node)
        request = machine_pb2.BootstrapRequest(recover_etcd=True,
                                               recover_skip_hash_check=params["recover_skip_hash_check"])
    try:
        client.call(BOOTSTRAP, request, node=node, retry_codes=RETRY_CODES)
    except TalosError as err:
        if err.code == "AlreadyExists":
            return False
        # Talos v1.12 and older answer a worker with FailedPrecondition, which is retried until the timeout.
        if err.code == "Unimplemented" or "only be performed on a control plane" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: %s; Bootstrap works only on a configured control-plane node, so target "
                             "one of the cluster's control planes." % (describe(node), err.server_message or "not a control plane"),
                             code=err.code, node=node, server_message=err.server_message)
        if err.code == "InvalidArgument" and "etcd is not configured" in (err.server_message or ""):
            raise TalosError("Cannot bootstrap %s: its machine config has no etcd CA (cluster.etcd.ca), so it runs no "
                             "etcd; apply a control-plane config generated with the cluster's secrets." % describe(node),
                             code=err.code, node=node, server_message=err.server_message)
        raise
    return True


def wait_for_etcd(module, client, node):
    """Wait up to wait_timeout until etcd on the node runs, is healthy and the node is a voting member."""
    def ready():
        try:
            info = etcd_service(client, node)
            if info is None:
                return False, "no etcd service"
            if info.state != "Running" or not info.health.healthy:
                last = info.events.events[-1].msg if info.events.events else "no events"
                return False, "etcd service %s (%s)" % (info.state, last)
            status = etcd.member_status(client, node)
            member = etcd.find_member(etcd.list_members(client, node), status["member_id"])
        except TalosError as err:
            if not is_transient(err) and err.code not in ("FailedPrecondition", "Unknown"):
                raise
            return False, err.message
        if member is None or member["is_learner"]:
            return False, "etcd running, the node is not a voting member yet"
        return True, "etcd running and healthy, the node is a member"

    wait_until(ready, timeout=module.params["wait_timeout"], description="etcd on %s to run as a healthy member" % describe(node))


def run(module):
    params = module.params
    recover_from = params["recover_from"]
    if recover_from and not (os.path.isfile(recover_from) and os.access(recover_from, os.R_OK)):
        module.fail_json(msg="The etcd snapshot to recover from, %s, is not a readable file." % recover_from)

    client = module.client
    node = module.single_node("bootstraps exactly one control-plane node")

    if machine_type(client, node) == "worker":
        # Checked first: the cluster being bootstrapped already says nothing about a worker.
        module.fail_json(msg="Cannot bootstrap %s: it is a worker node, and only a control-plane node can bootstrap etcd; "
                             "target one of the cluster's control planes." % describe(node), node=node)
    service = etcd_service(client, node)
    bootstrapped = service is not None and service.state == "Running"
    if not bootstrapped and node is not None:
        # A control plane still joining an existing etcd cluster must not be bootstrapped: that would start a
        # second, separate etcd cluster. The endpoint (a control plane) knows whether etcd already has members.
        bootstrapped = bool(current_members(client, None))
    if service is None and not bootstrapped and module.check_mode:
        # Without calling Bootstrap only the missing etcd service tells why it would fail.
        module.fail_json(msg="Cannot bootstrap %s: it runs no etcd service, so it is not a control-plane node with etcd "
                             "configured; target one of the cluster's control planes." % describe(node), node=node)
    result = {"changed": not bootstrapped, "node": node, "bootstrapped": bootstrapped, "recovered": False}

    if result["changed"] and not module.check_mode:
        result["changed"] = bootstrap(module, client, node)
        result["bootstrapped"] = True
        result["recovered"] = result["changed"] and bool(params["recover_from"])
        if params["wait"]:
            wait_for_etcd(module, client, node)
        service = etcd_service(client, node)

    result["etcd_state"] = service.state if service else None
    result["members"] = current_members(client, node) if result["bootstrapped"] else []
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            recover_from=dict(type="path"),
            recover_skip_hash_check=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
