#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_rotate_ca
short_description: Rotate the Talos API CA of a cluster, as talosctl rotate-ca does, and revoke every old talosconfig
version_added: 0.1.0
description:
  - Replaces the Talos API CA (C(machine.ca)) of every node by a new one with the key type, subject and lifetime of
    the old, in four steps applied without a reboot, each on every node, control planes first - C(accept) (the new CA
    joins C(machine.acceptedCAs)), C(swap) (the new CA issues, the old one stays accepted; every node serves a new
    apid certificate), C(prove) (a talosconfig that trusts only the new CA, with a certificate of the new CA, reaches
    every node), C(drop) (the old CA leaves C(machine.acceptedCAs)). From then on every talosconfig of the old CA is
    refused.
  - The secrets bundle O(secrets) gets the new CA before any node changes; the bundle as it was is kept beside it as
    C(<secrets>.previous), and the talosconfig the task connects with as C(<talosconfig>.previous), both mode C(0600),
    until the run ends well. The talosconfig trusts both CAs while the rotation runs and gets a client certificate of
    the new CA (same roles, valid O(ttl)) once that has been proven on every node, before the old CA is dropped.
  - A rotation starts when the bundle's CA was issued before O(issued_after) or expires within O(renew_before);
    otherwise the task changes nothing. A rotation in progress (a C(.previous) bundle) is always continued, from the
    step each node's config shows it has reached - a failed or interrupted run is finished by running the task again.
  - The nodes are reached through the talosconfig's endpoints with admin certificates the task issues in memory from
    the bundle's CAs, each accepted by every node at that point; no step takes away the credential it uses.
  - Works on both config forms, which keep the Talos API CAs in the v1alpha1 document. Needs Talos v1.7 or newer
    on every node (the first with C(machine.acceptedCAs)).
  - The Kubernetes CA is not rotated by this module.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  secrets:
    description:
      - Path of the cluster's secrets bundle (see M(talos_linux.talos.talos_machine_secrets)); it must hold the CA the
        nodes issue from. It is rewritten with the new CA.
    type: path
    required: true
  rotate:
    description: The CAs to rotate. Only the Talos API CA (V(talos)) is supported; the Kubernetes CA is not rotated yet.
    type: list
    elements: str
    choices: [talos]
    default: [talos]
  issued_after:
    description:
      - Rotate when the bundle's CA was issued before this time - set it to now to revoke a talosconfig that has leaked
        or to make an imported cluster's credentials your own. A date (V(2026-11-27)) or a time
        (V(2026-11-27T08:00:00Z)); not in the future.
      - Once the rotation ran the new CA is younger, so the same task changes nothing on the next run.
    type: str
  renew_before:
    description: Rotate when the bundle's CA expires within this Go duration (V(8760h) is one year).
    type: str
    default: 8760h
  ttl:
    description: Validity of the talosconfig's new client certificate, a Go duration.
    type: str
    default: 8760h
  wait_timeout:
    description:
      - Seconds each node has, after each step, to answer with the credentials of that step (its apid takes the new
        CAs and certificates within moments of the change).
    type: int
    default: 300
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Reads every node and returns the plan (RV(plan)); nothing is sent to a node and no file is written.
  diff_mode:
    support: full
    details: The fingerprints of the CAs in each node's C(machine.ca) and C(machine.acceptedCAs) and in the controller's files, before and after; never a key.
  idempotent:
    support: full
    details: A finished rotation leaves a CA younger than O(issued_after), so running the task again changes nothing.
notes:
  - O(nodes) must list every node of the cluster (control planes and workers); the task refuses to start when the
    cluster's discovery lists a member that is not among them, which would refuse the new CA's certificates after the
    rotation.
  - Needs a talosconfig file (O(talosconfig) or C(TALOSCONFIG)), which it updates. Give the new talosconfig to everyone
    who needs one afterwards, and issue other talosconfigs anew with M(talos_linux.talos.talos_client_config) from the
    rotated bundle - the old ones are refused.
  - Every machine config kept elsewhere (generated files, a CMDB) still names the old CA; generate them again from the
    rotated bundle before the next apply, or the apply would bring the old CA back.
seealso:
  - module: talos_linux.talos.talos_certificate_info
  - module: talos_linux.talos.talos_client_config
  - name: Certificates and CA rotation
    description: When to rotate, what to redistribute afterwards, and how to watch expiry.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/security.md
"""

EXAMPLES = r"""
- name: Rotate the Talos API CA now (a talosconfig has leaked)
  talos_linux.talos.talos_rotate_ca:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ inventory_dir }}/secrets.yaml"
    issued_after: "2026-11-27T08:00:00Z"
  run_once: true

- name: Rotate it when it has less than a year left (on a schedule)
  talos_linux.talos.talos_rotate_ca:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ inventory_dir }}/secrets.yaml"
    renew_before: 8760h
  run_once: true
"""

RETURN = r"""
rotation:
  description: Why a rotation ran (or would run in check mode), or null when none was due and none was in progress.
  returned: always
  type: str
  sample: the Talos CA was issued on 2025-01-10T09:00:00Z, before issued_after
talos_ca:
  description:
    - C(old), the CA the cluster issued from when the task started, and C(new), the CA of the rotation (null when none
      ran, and in check mode before it exists) - each with C(subject), C(issuer), C(not_before), C(not_after),
      C(days_left), C(key_algorithm) and C(fingerprint_sha256).
  returned: always
  type: dict
nodes:
  description: Each node's C(machine_type) and C(phase) (V(original), V(accepted), V(swapped), V(done)) when the task started.
  returned: always
  type: dict
  sample: {10.5.0.2: {machine_type: controlplane, phase: original}}
plan:
  description: The steps the nodes still need, in order, each with C(step), C(node), C(document) and C(fields) to change.
  returned: always
  type: list
  elements: dict
  sample: [{step: accept, node: 10.5.0.2, document: v1alpha1, fields: [machine.acceptedCAs]}]
done:
  description: The steps made by this run, each with C(step) and C(node); on failure, those made before it.
  returned: always
  type: list
  elements: dict
files:
  description:
    - C(secrets) and C(talosconfig), the paths of the files the task updates, and C(previous_secrets) and
      C(previous_talosconfig), where the previous ones are kept (null once removed).
  returned: always
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils import ca_rotation, client_config, talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task import TaskFailed, TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.waits import Waiter

SPEC = TaskSpec(
    argument_spec=dict(
        secrets=dict(type="path", required=True),
        rotate=dict(type="list", elements="str", default=["talos"], choices=["talos"]),
        issued_after=dict(type="str"),
        renew_before=dict(type="str", default="8760h"),
        ttl=dict(type="str", default=client_config.DEFAULT_TTL),
    ),
    wait="timeout",
    wait_defaults={"wait_timeout": 300},
    host_node=False,
)


def _diff(files, nodes, fields, new):
    """The CAs of the controller's files and of each node's ``fields`` (read before the run), before and after, as
    fingerprints; ``new`` is the new CA (None in check mode before it exists). Never a key."""
    old = talos_pki.fingerprint(files.old.certificate)
    new = talos_pki.fingerprint(new.certificate) if new is not None else "<new CA>"
    before = ["secrets %s: certs.os %s" % (files.bundle_path, old),
              "talosconfig %s context %s: ca and client certificate of %s" % (files.talosconfig_path, files.context, old)]
    after = ["secrets %s: certs.os %s" % (files.bundle_path, new),
             "talosconfig %s context %s: ca and client certificate of %s" % (files.talosconfig_path, files.context, new)]
    for node in nodes:
        accepted = fields[node]["machine.acceptedCAs"]
        before.append("node %s: machine.ca %s, machine.acceptedCAs [%s]" % (node, fields[node]["machine.ca"], ", ".join(accepted)))
        others = [fingerprint for fingerprint in accepted if fingerprint not in (old, new)]
        after.append("node %s: machine.ca %s, machine.acceptedCAs [%s]" % (node, new, ", ".join(others)))
    return {"before": "\n".join(before) + "\n", "after": "\n".join(after) + "\n"}


def run(task):
    params = task.params
    settings = task.settings
    nodes = [node for node in task.target_nodes if node]
    if not nodes:
        raise TaskFailed("talos_rotate_ca changes every node of the cluster: list all of them (control planes and workers) "
                         "in nodes.")
    if not settings.config_path:
        raise TaskFailed("talos_rotate_ca updates the talosconfig it connects with: set talosconfig (or TALOSCONFIG) to "
                         "the file instead of giving ca, crt and key.")
    now = talos_pki.now_utc()
    renew_before = client_config.parse_duration(params["renew_before"], "renew_before")
    ttl = client_config.parse_duration(params["ttl"], "ttl")
    issued_after = None
    if params["issued_after"]:
        issued_after = ca_rotation.parse_time(params["issued_after"], "issued_after")
        if issued_after > now:
            raise TaskFailed("issued_after %s is in the future: every run until then would rotate the CA again."
                             % params["issued_after"])

    files = ca_rotation.ControllerFiles(os.path.abspath(params["secrets"]), settings.config_path, settings.context)
    task.hide(files.bundle.secret_values() | (files.previous.secret_values() if files.previous else set()))
    due = None if files.in_progress else ca_rotation.rotation_due(files.old.certificate, issued_after, renew_before, now)
    rotation = ca_rotation.TalosCARotation(
        settings, nodes, files, due, TalosClient, lambda: Waiter(params["wait_timeout"], interval=1.0, progress=task.progress),
        ttl, progress=task.progress)
    try:
        rotation.read_nodes()
        if due is not None:
            rotation.check_members()
        plan = rotation.make_plan()
        phases = rotation.phases()
        result = {
            "rotation": "a rotation in progress is continued" if files.in_progress else due,
            "talos_ca": {"old": ca_rotation.facts_of(files.old, now), "new": ca_rotation.facts_of(files.new, now)},
            "nodes": dict((node, {"machine_type": "controlplane" if rotation.configs[node].control_plane else "worker",
                                  "phase": phases[node]}) for node in nodes),
            "plan": plan,
            "done": [],
        }
        pending = files.in_progress or due is not None
        fields = dict((node, rotation.configs[node].fields()) for node in nodes)
        if not pending or task.check_mode:
            if pending and task.diff:
                result["diff"] = _diff(files, rotation.ordered(), fields, files.new)
            return dict(result, changed=pending, files=_files(files))
        roles = talos_pki.organizations(talos_pki.load_certificate(settings.crt, "the talosconfig's crt"))

        def new_authority():
            authority = ca_rotation.new_authority_like(files.old, talos_pki.now_utc())
            task.hide([authority.key_pem, talos_pki.b64_pem(authority.key_pem)])
            return authority

        try:
            files_changed = rotation.run(new_authority, roles)
        except ca_rotation.RotationFailed as failure:
            result["talos_ca"]["new"] = ca_rotation.facts_of(files.new, now)
            details = dict(result)
            details.update(done=failure.done, changed=True, files=_files(files))
            raise TaskFailed(failure.message, **details)
        result["talos_ca"]["new"] = ca_rotation.facts_of(files.new, now)
        if task.diff:
            result["diff"] = _diff(files, rotation.ordered(), fields, files.new)
        return dict(result, done=rotation.done, changed=bool(rotation.done) or files_changed, files=_files(files))
    finally:
        rotation.close()


def _files(files):
    kept = files.kept()
    return {"secrets": files.bundle_path, "talosconfig": files.talosconfig_path,
            "previous_secrets": kept["secrets"], "previous_talosconfig": kept["talosconfig"]}


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
