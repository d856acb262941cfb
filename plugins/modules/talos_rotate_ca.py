#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_rotate_ca
short_description: Rotate the Talos API CA and the Kubernetes CA of a cluster, as talosctl rotate-ca does
version_added: 1.0.0
description:
  - Replaces the Talos API CA (C(machine.ca)) of every node by a new one with the key type, whole subject (C(O=talos)
    for a CA talosctl or this collection generated) and lifetime of the old, in four steps applied without a reboot,
    each on every node, control planes first - C(accept) (the new CA joins C(machine.acceptedCAs)), C(swap) (the new
    CA issues, the old one stays accepted; every node serves a new apid certificate), C(prove) (a talosconfig that
    trusts only the new CA, with a certificate of the new CA, reaches every node), C(drop) (the old CA leaves
    C(machine.acceptedCAs)). From then on every talosconfig of the old CA is refused.
  - The secrets bundle O(secrets) gets the new CA before any node changes; the bundle as it was is kept beside it as
    C(<secrets>.previous), and the talosconfig the task connects with as C(<talosconfig>.previous), both mode C(0600),
    until the run ends well. The talosconfig trusts both CAs while the rotation runs and gets a client certificate of
    the new CA (same roles, valid O(ttl)) once that has been proven on every node, before the old CA is dropped.
  - A rotation starts when the bundle's CA was issued before O(issued_after) or expires within O(renew_before);
    otherwise the task changes nothing. A rotation in progress (a C(.previous) bundle) is always continued, from the
    step each node's config shows it has reached - a failed or interrupted run is finished by running the task again -
    or rolled back with O(abandon).
  - Everything a run needs is checked before its first change, for every CA of O(rotate) - the talosconfig is this
    cluster's (its CA and client certificate are the bundle's), every node answers, runs Talos v1.7 or newer and issues
    from the bundle's CA (or the new one of the rotation in progress), every member of the cluster is in O(nodes), a
    given CA fits, and for the Kubernetes CA the Kubernetes API answers the admin kubeconfig of the first control plane
    with every node Ready; a failed check says what to fix and nothing changes.
  - The nodes are reached through the talosconfig's endpoints with admin certificates the task issues in memory from
    the bundle's CAs, each accepted by every node at that point; no step takes away the credential it uses. The
    talosconfig it rewrites must be this cluster's - trust the bundle's Talos API CA (or the new one of the rotation in
    progress) and hold a client certificate it issued; another cluster's talosconfig, or a context of one, is refused
    and never written. Only the task's context of the file changes.
  - Works on both config forms, which keep the Talos API CAs in the v1alpha1 document. Needs Talos v1.7 or newer
    on every node (the first with C(machine.acceptedCAs) and C(cluster.acceptedCAs)).
  - With V(kubernetes) in O(rotate) the Kubernetes CA goes through the same four steps, in C(cluster.ca) and
    C(cluster.acceptedCAs) (v1alpha1 form) or the C(KubeAPIServerCAConfig) document (v1.14 form; on workers its
    C(acceptedCAs) alone, the issuing CA first). Each control plane's kube-apiserver restarts with the new CAs and
    certificates and each kubelet takes them up as Talos re-issues them; after each node's change the task waits until
    its kubelet is back, on a control plane until its kube-apiserver runs the new CAs (its mirror pod carries the
    C(talos.dev/secrets-version) Talos rendered for the change and is Ready), and until the Kubernetes API answers,
    with every node Ready, an admin kubeconfig that the step keeps valid. So the task returns with the API server
    running the final CAs, not while it restarts. C(prove) fetches
    the admin kubeconfig from each control plane (which issues it from the new CA) and reads the API with it while
    trusting the new CA only. After C(drop) every kubeconfig of the old CA is refused, and the API server's
    certificate is one the old kubeconfigs do not trust.
  - With both CAs the Talos API CA is rotated first, as talosctl does (but a rotation of the Kubernetes CA in progress
    is finished first); the Kubernetes part then reaches the nodes with the new talosconfig. The Kubernetes part leaves
    the talosconfig alone and keeps only C(<secrets>.previous).
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
requirements:
  - kubernetes >= 30.1 (the official Kubernetes Python client), on the controller - or, with the module door, where the
    task runs - to rotate the Kubernetes CA only (O(rotate) holding V(kubernetes)).
options:
  secrets:
    description:
      - Path of the cluster's secrets bundle (see M(talos_linux.talos.talos_machine_secrets)); it must hold the CA the
        nodes issue from. It is rewritten with the new CA.
    type: path
    required: true
  rotate:
    description:
      - The CAs to rotate - V(talos), the Talos API CA, and V(kubernetes), the Kubernetes CA - in that order whatever
        the order given, except that a rotation in progress is finished first. A rotation of a CA not listed still in
        progress (C(<secrets>.previous)) is refused; finish it, or roll it back with O(abandon), first.
    type: list
    elements: str
    choices: [talos, kubernetes]
    default: [talos]
  issued_after:
    description:
      - Rotate each CA of O(rotate) that the bundle holds issued before this time - set it to now to revoke a talosconfig that has leaked
        or to make an imported cluster's credentials your own. A date (V(2026-11-27)) or a time
        (V(2026-11-27T08:00:00Z)); not in the future.
      - Once the rotation ran the new CA is younger, so the same task changes nothing on the next run.
    type: str
  renew_before:
    description: Rotate each CA of O(rotate) that expires within this duration (V(8760h) or V(365d) is one year).
    type: str
    default: 8760h
  new_cas:
    description:
      - CAs to rotate to instead of ones the task generates - for example ones your PKI issued - at most one per CA
        of O(rotate).
      - Each must be a CA certificate (C(CA:TRUE)) with its private key, of the key type of the CA it replaces (Talos
        generates an Ed25519 Talos API CA and an ECDSA Kubernetes CA), valid now and for more than a day.
      - The rotation of a CA given here starts when the bundle's is not the one given (O(issued_after) and
        O(renew_before) are not consulted for it); once it has run, the bundle holds it and the task changes nothing.
        A rotation in progress to another CA is refused.
    type: list
    elements: dict
    default: []
    suboptions:
      ca:
        description: The CA it replaces, V(talos) or V(kubernetes); it must be in O(rotate).
        type: str
        required: true
        choices: [talos, kubernetes]
      crt:
        description: The CA certificate, PEM.
        type: str
        required: true
      key:
        description: Its private key, PEM. Never shown in a result, message or diff.
        type: str
        required: true
  abandon:
    description:
      - Roll back the rotation in progress of each CA of O(rotate) instead of continuing it - after a run that failed
        (a node that stays down, a Kubernetes API that does not come back) or that must not go on. The same four steps
        run with the two CAs' roles swapped, each on every node from where its config stands - C(accept) (the old CA
        is accepted again), C(swap) (the old CA issues again), C(prove), C(drop) (the rotation's new CA leaves every
        node) - and then the bundle holds the old CA again, the talosconfig the credentials it held before the
        rotation, and the C(.previous) files go. Another rotation may start afterwards.
      - Nothing is done when no rotation is in progress. Cannot be combined with O(issued_after) or O(new_cas).
      - A rollback that fails is finished by running the task again with O(abandon) (or continued as a rotation
        without it).
    type: bool
    default: false
  ttl:
    description: Validity of the talosconfig's new client certificate, a duration (V(8760h), V(365d)).
    type: str
    default: 8760h
  wait_timeout:
    description:
      - Seconds each node has, after each step, to answer with the credentials of that step (its apid takes the new
        CAs and certificates within moments of the change); for the Kubernetes CA, seconds each wait after each node's
        change has (the kubelet back, a control plane's kube-apiserver restarted with the new CAs, the Kubernetes API
        answering with every node Ready).
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
    details:
      - The fingerprints of the CAs in each node's rotated fields (C(machine.ca) and C(machine.acceptedCAs);
        C(cluster.ca) and C(cluster.acceptedCAs) or C(KubeAPIServerCAConfig)) and in the controller's files, before
        and after; never a key.
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
  - After a Kubernetes CA rotation fetch the admin kubeconfig again (M(talos_linux.talos.talos_kubeconfig) replaces a
    file whose CAs changed) and give it to everyone who needs one; kubeconfigs of the old CA are refused. Service
    account tokens are signed by another key and stay valid.
  - Every machine config kept elsewhere (generated files, a CMDB) still names the old CA; generate them again from the
    rotated bundle before the next apply, or the apply would bring the old CA back.
seealso:
  - module: talos_linux.talos.talos_certificate_info
  - module: talos_linux.talos.talos_client_config
  - module: talos_linux.talos.talos_kubeconfig
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

- name: Rotate both CAs now, the Talos API CA first (a kubeconfig and a talosconfig have leaked)
  talos_linux.talos.talos_rotate_ca:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ inventory_dir }}/secrets.yaml"
    rotate: [talos, kubernetes]
    issued_after: "2026-11-27T08:00:00Z"
  run_once: true

- name: Fetch the admin kubeconfig of the new Kubernetes CA
  talos_linux.talos.talos_kubeconfig:
    node: "{{ hostvars[groups['controlplane'][0]]['ansible_host'] }}"
    dest: "{{ inventory_dir }}/kubeconfig"
  run_once: true

- name: Rotate the Talos API CA to one your PKI issued (an Ed25519 CA)
  talos_linux.talos.talos_rotate_ca:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ inventory_dir }}/secrets.yaml"
    new_cas:
      - ca: talos
        crt: "{{ lookup('ansible.builtin.file', 'pki/talos-ca.crt') }}"
        key: "{{ lookup('ansible.builtin.file', 'pki/talos-ca.key') }}"
  run_once: true

- name: Roll back a rotation of the Kubernetes CA that failed half way (the Kubernetes API did not come back)
  talos_linux.talos.talos_rotate_ca:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ inventory_dir }}/secrets.yaml"
    rotate: [kubernetes]
    abandon: true
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
  description:
    - Why rotations ran (or would run in check mode), one phrase per CA joined by C(; ), or null when none was due and
      none was in progress - with O(abandon), C(a rotation in progress is rolled back).
  returned: always
  type: str
  sample: the Talos CA was issued on 2025-01-10T09:00:00Z, before issued_after
talos_ca:
  description:
    - C(old), the CA the cluster issued from when the task started, and C(new), the CA of the rotation (null when none
      ran, and in check mode before it exists) - each with C(subject), C(issuer), C(not_before), C(not_after),
      C(days_left), C(key_algorithm) and C(fingerprint_sha256). With O(abandon) C(old) is the CA given up and C(new)
      the one the cluster goes back to.
  returned: when O(rotate) holds V(talos)
  type: dict
kubernetes_ca:
  description: The same as RV(talos_ca), for the Kubernetes CA.
  returned: when O(rotate) holds V(kubernetes)
  type: dict
node_phases:
  description:
    - Each node's C(machine_type), and where its config stood when the task started (V(original), V(accepted),
      V(swapped), V(done)) in the rotation in progress (also with O(abandon), whose steps take it back to V(original))
      - C(phase) for the Talos API CA, C(kubernetes_phase) for the Kubernetes CA, each when rotated.
    - Keyed by node as targeted. A node that cannot be read fails the task before any node changes.
    - Not named C(nodes), whose entries are each node's whole result in the modules that take several nodes; a
      rotation's result is the cluster's, with O(node) too.
  returned: always
  type: dict
  sample: {10.5.0.2: {machine_type: controlplane, phase: original, kubernetes_phase: original}}
plan:
  description:
    - The steps the nodes still need, in order (the Talos API CA's first), each with C(ca) (V(talos) or
      V(kubernetes)), C(step), C(node), C(document) and C(fields) to change. The Kubernetes C(prove) step runs on
      control planes only. With O(abandon), the steps of the rollback (the CAs' roles swapped).
  returned: always
  type: list
  elements: dict
  sample: [{ca: talos, step: accept, node: 10.5.0.2, document: v1alpha1, fields: [machine.acceptedCAs]}]
done:
  description: The steps made by this run, each with C(ca), C(step) and C(node); on failure, those made before it.
  returned: always
  type: list
  elements: dict
files:
  description:
    - C(secrets) and C(talosconfig), the paths of the files the task updates, and C(previous_secrets) and
      C(previous_talosconfig), where the previous ones are kept (null once removed, and C(previous_talosconfig)
      always null for the Kubernetes CA, which leaves the talosconfig alone).
  returned: always
  type: dict
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotate_ca
from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        secrets=dict(type="path", required=True),
        rotate=dict(type="list", elements="str", default=["talos"], choices=["talos", "kubernetes"]),
        issued_after=dict(type="str"),
        renew_before=dict(type="str", default=rotate_ca.DEFAULT_RENEW_BEFORE),
        new_cas=dict(type="list", elements="dict", default=[], options=dict(
            ca=dict(type="str", required=True, choices=["talos", "kubernetes"]),
            crt=dict(type="str", required=True),
            key=dict(type="str", required=True, no_log=True))),
        ttl=dict(type="str", default=client_config.DEFAULT_TTL),
        abandon=dict(type="bool", default=False),
    ),
    wait="timeout",
    wait_defaults={"wait_timeout": rotate_ca.DEFAULT_WAIT_TIMEOUT},
    host_node=False,
)


def run(task):
    params = task.params
    if "kubernetes" in params["rotate"]:
        # Only the Kubernetes part reads the Kubernetes API: a Talos API CA rotation runs without the library.
        task.require([kube_api.LIBRARY], "to rotate the Kubernetes CA")
    return rotate_ca.rotate(task.client, task.target_nodes, params["secrets"], rotate=params["rotate"], new_cas=params["new_cas"],
                            issued_after=params["issued_after"], renew_before=params["renew_before"], ttl=params["ttl"],
                            abandon=params["abandon"], wait_timeout=params["wait_timeout"], check_mode=task.check_mode,
                            diff=task.diff, hide=task.hide, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
