#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_bootstrap
short_description: Bootstrap etcd on a Talos control-plane node
version_added: 1.0.0
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
  - With O(snapshot), the etcd snapshot at that path on the controller is uploaded with EtcdRecover first, and
    etcd is bootstrapped from it (C(talosctl bootstrap --recover-from)).
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  snapshot:
    description:
      - Path on the controller of an etcd snapshot (for example one saved by
        M(talos_linux.talos.talos_etcd_snapshot)) to recover the cluster's etcd data from.
      - Ignored when the node is already bootstrapped, so that re-running a recovery play changes nothing.
    type: path
  skip_hash_check:
    description:
      - Skip etcd's integrity check of the snapshot. Needed when O(snapshot) is a copy of an etcd data
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
    snapshot: ./backups/etcd.snapshot
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
  description: True when the cluster's etcd was bootstrapped from O(snapshot).
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

from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import bootstrap as etcd_bootstrap
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        snapshot=dict(type="path"),
        skip_hash_check=dict(type="bool", default=False),
    ),
    wait=True,
)


def run(task):
    params = task.params
    snapshot = params["snapshot"]
    if snapshot and not (os.path.isfile(snapshot) and os.access(snapshot, os.R_OK)):
        raise TalosConfigError("The etcd snapshot to recover from, %s, is not a readable file." % snapshot)
    node = task.single_node("bootstraps exactly one control-plane node")
    return etcd_bootstrap.bootstrap(task.client, node, snapshot, params["skip_hash_check"],
                                    wait_timeout=params["wait_timeout"] if params["wait"] else None, check_mode=task.check_mode,
                                    progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
