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
    the Kubernetes API answers, with every node Ready, an admin kubeconfig that the step keeps valid. C(prove) fetches
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
        CAs and certificates within moments of the change); for the Kubernetes CA, seconds the Kubernetes API has to
        answer with every node Ready after each node's change (the kube-apiserver restarts).
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

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotation as ca_rotation
from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.common import durations
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter

SPEC = TaskSpec(
    argument_spec=dict(
        secrets=dict(type="path", required=True),
        rotate=dict(type="list", elements="str", default=["talos"], choices=["talos", "kubernetes"]),
        issued_after=dict(type="str"),
        renew_before=dict(type="str", default="8760h"),
        new_cas=dict(type="list", elements="dict", default=[], options=dict(
            ca=dict(type="str", required=True, choices=["talos", "kubernetes"]),
            crt=dict(type="str", required=True),
            key=dict(type="str", required=True, no_log=True))),
        ttl=dict(type="str", default=client_config.DEFAULT_TTL),
        abandon=dict(type="bool", default=False),
    ),
    wait="timeout",
    wait_defaults={"wait_timeout": 300},
    host_node=False,
)
_RESULT_KEYS = {"talos": "talos_ca", "kubernetes": "kubernetes_ca"}
_PHASE_KEYS = {"talos": "phase", "kubernetes": "kubernetes_phase"}
_IN_PROGRESS = {"talos": "a rotation in progress is continued",
                "kubernetes": "a Kubernetes CA rotation in progress is continued"}
_ABANDONED = {"talos": "a rotation in progress is rolled back",
              "kubernetes": "a Kubernetes CA rotation in progress is rolled back"}


def _diff(files, rotation, fields, new):
    """The CAs of the controller's files and of each node's rotated fields (``fields``, read before the run), before
    and after, as fingerprints; ``new`` is the new CA (None in check mode before it exists). Never a key."""
    kind = files.kind
    old = talos_pki.fingerprint(files.old.certificate)
    new = talos_pki.fingerprint(new.certificate) if new is not None else "<new CA>"
    before = ["secrets %s: certs.%s %s" % (files.bundle_path, kind.bundle_name, old)]
    after = ["secrets %s: certs.%s %s" % (files.bundle_path, kind.bundle_name, new)]
    if kind is ca_rotation.TALOS:
        before.append("talosconfig %s context %s: ca and client certificate of %s" % (files.talosconfig_path, files.context, old))
        after.append("talosconfig %s context %s: ca and client certificate of %s" % (files.talosconfig_path, files.context, new))
    for node in rotation.ordered():
        (issuing, issuing_fingerprint), (accepted, accepted_fingerprints) = fields[node].items()
        before.append("node %s: %s %s, %s [%s]" % (node, issuing, issuing_fingerprint, accepted, ", ".join(accepted_fingerprints)))
        others = [fingerprint for fingerprint in accepted_fingerprints if fingerprint not in (old, new)]
        after.append("node %s: %s %s, %s [%s]" % (node, issuing, new, accepted, ", ".join(others)))
    return {"before": "\n".join(before) + "\n", "after": "\n".join(after) + "\n"}


def _merge_diff(diffs):
    return {"before": "".join(diff["before"] for diff in diffs), "after": "".join(diff["after"] for diff in diffs)}


def _options(task):
    params = task.params
    now = talos_pki.now_utc()
    issued_after = None
    if params["issued_after"]:
        issued_after = durations.parse_time(params["issued_after"], "issued_after")
        if issued_after > now:
            raise TalosConfigError("issued_after %s is in the future: every run until then would rotate the CA again."
                                   % params["issued_after"])
    return (now, issued_after, durations.parse_duration(params["renew_before"], "renew_before"),
            durations.parse_duration(params["ttl"], "ttl"))


def run(task):
    params = task.params
    settings = task.settings
    nodes = [node for node in task.target_nodes if node]
    if not nodes:
        raise TalosConfigError("talos_rotate_ca changes every node of the cluster: list all of them (control planes and workers) "
                               "in nodes.")
    # Talos first, as talosctl rotate-ca does: the Kubernetes part then reaches the nodes with the new talosconfig.
    kinds = [kind for kind in ("talos", "kubernetes") if kind in params["rotate"]]
    abandon = params["abandon"]
    if abandon and (params["issued_after"] or params["new_cas"]):
        raise TalosConfigError("abandon: true rolls the rotation in progress back to the CA it replaces: leave issued_after and "
                               "new_cas out.")
    if "talos" in kinds and not settings.config_path:
        raise TalosConfigError("talos_rotate_ca updates the talosconfig it connects with: set talosconfig (or TALOSCONFIG) to "
                               "the file instead of giving ca, crt and key.")
    if "kubernetes" in kinds:
        # Only the Kubernetes part reads the Kubernetes API: a Talos API CA rotation runs without the library.
        task.require([kube_api.LIBRARY], "to rotate the Kubernetes CA")
    entries = {}
    for entry in params["new_cas"]:
        if entry["ca"] not in kinds:
            raise TalosConfigError("new_cas has a %s CA but rotate does not hold %s: add %s to rotate, or drop that entry."
                                   % (entry["ca"], entry["ca"], entry["ca"]))
        if entry["ca"] in entries:
            raise TalosConfigError("new_cas has two %s CAs: give one." % entry["ca"])
        entries[entry["ca"]] = entry
    now, issued_after, renew_before, ttl = _options(task)
    bundle_path = os.path.abspath(params["secrets"])

    def files_of(name):
        return ca_rotation.ControllerFiles(bundle_path, settings.config_path, settings.context, ca_rotation.KINDS[name])

    # A rotation in progress keeps the old CA only in <secrets>.previous, which starting a rotation of the other CA
    # rewrites: one of a CA not in rotate is refused, one of a CA in rotate goes first (otherwise the Talos API CA does).
    in_progress = dict((name, files_of(name).in_progress) for name in ca_rotation.KINDS)
    for name, kind in ca_rotation.KINDS.items():
        if name not in kinds and in_progress[name]:
            raise TalosConfigError("A rotation of the %s is in progress (%s.previous holds the old one): finish it first with "
                                   "rotate: [%s], or roll it back with rotate: [%s] and abandon: true." % (
                                       kind.title, bundle_path, name, name))
    kinds.sort(key=lambda name: not in_progress[name])

    # Every given CA is checked before the first node changes.
    givens = dict((name, _given(task, name, entries.get(name), files_of(name), now)) for name in kinds)

    def prepared(name):
        return _prepare(task, name, nodes, bundle_path, now, issued_after, renew_before, ttl, givens[name])

    result = {"rotation": None, "node_phases": dict((node, {}) for node in nodes), "plan": [], "done": [],
              "changed": False}
    diffs = []
    # Every check of every CA's run comes before the first change of either.
    runs = []
    try:
        for name in kinds:
            runs.append((name,) + prepared(name))
        reports = [_report(task, result, name, rotation, files, givens[name], now) for name, rotation, files in runs]
        if task.check_mode or not any(rotation.pending for _name, rotation, _files in runs):
            for (_name, rotation, files), (fields, upcoming) in zip(runs, reports):
                result["changed"] = result["changed"] or rotation.pending
                if rotation.pending and task.diff:
                    diffs.append(_diff(files, rotation, fields, upcoming))
        else:
            rewritten = False
            for index, (name, rotation, files) in enumerate(runs):
                if rewritten:
                    # The run before this one rewrote the bundle (and the talosconfig): read them and the nodes again.
                    rotation.close()
                    rotation, files = prepared(name)
                    runs[index] = (name, rotation, files)
                _execute(task, result, diffs, name, rotation, files, givens[name], reports[index][0], now)
                rewritten = rewritten or rotation.pending
    finally:
        for _name, rotation, _files in runs:
            rotation.close()
    if diffs:
        result["diff"] = _merge_diff(diffs)
    return result


def _prepare(task, name, nodes, bundle_path, now, issued_after, renew_before, ttl, given):
    """The run of CA ``name`` (a rotation to ``given`` or a CA it generates, or a rollback) and its ControllerFiles,
    read from the files as they are now, with every check done before its first change (Rotation.prepare)."""
    params = task.params
    settings = task.settings
    kind = ca_rotation.KINDS[name]
    files = ca_rotation.ControllerFiles(bundle_path, settings.config_path, settings.context, kind, abandon=params["abandon"])
    task.hide(files.bundle.secret_values() | (files.previous.secret_values() if files.previous else set()))
    due = None
    if not files.in_progress and not params["abandon"]:
        due = ca_rotation.rotation_due(files.old.certificate, issued_after, renew_before, now, kind, given)

    def waiter():
        return Waiter(params["wait_timeout"], interval=1.0, progress=task.progress)

    if kind is ca_rotation.TALOS:
        rotation = ca_rotation.TalosCARotation(settings, nodes, files, due, TalosClient, waiter, ttl,
                                               progress=task.progress)
    else:
        # The talosconfig as the task's options resolve it now: the Talos part may just have rewritten it.
        rotation = ca_rotation.KubernetesCARotation(TalosClient(settings.replace() if settings.config_path else settings),
                                                    nodes, files, due, waiter, progress=task.progress)
    try:
        rotation.prepare()
    except BaseException:
        rotation.close()
        raise
    return rotation, files


def _given(task, name, entry, files, now):
    """The CA of ``entry`` (the new_cas entry for CA ``name``; None: the task generates one), checked; refused while a
    rotation to another CA is in progress."""
    if entry is None:
        return None
    task.hide([entry["key"], talos_pki.b64_pem(entry["key"])])
    label = "new_cas[ca=%s]" % name
    given = ca_rotation.given_authority(entry["crt"], entry["key"], files.old, label, now)
    if files.in_progress and talos_pki.fingerprint(files.new.certificate) != talos_pki.fingerprint(given.certificate):
        raise TalosConfigError("A rotation of the %s to another CA than %s is in progress (%s.previous holds the old one): "
                               "finish it first by running the task without that entry." % (
                                   files.kind.title, label, files.bundle_path))
    return given


def _report(task, result, name, rotation, files, given, now):
    """What the run of CA ``name`` will do, added to ``result``; returns ``(fields, upcoming)``: each node's rotated
    fields as they are, and the CA the nodes move to (in check mode a given CA before the bundle holds it)."""
    key = _RESULT_KEYS[name]
    if files.in_progress:
        reason = (_ABANDONED if task.params["abandon"] else _IN_PROGRESS)[name]
    else:
        reason = rotation.due
    if reason:
        result["rotation"] = "; ".join(filter(None, [result["rotation"], reason]))
    upcoming = files.new if files.new is not None or rotation.due is None else given
    result[key] = {"old": ca_rotation.facts_of(files.old, now), "new": ca_rotation.facts_of(upcoming, now)}
    for node, phase in rotation.reported_phases().items():
        result["node_phases"][node].update(
            machine_type="controlplane" if rotation.configs[node].control_plane else "worker", **{_PHASE_KEYS[name]: phase})
    result["plan"].extend(rotation.plan)
    result["files"] = _files(files)
    return dict((node, rotation.configs[node].fields()) for node in rotation.nodes), upcoming


def _execute(task, result, diffs, name, rotation, files, given, fields, now):
    """Run the steps of CA ``name`` that are due, adding to ``result`` and ``diffs``."""
    if not rotation.pending:
        return
    key = _RESULT_KEYS[name]

    def new_authority():
        if given is not None:
            return given
        authority = ca_rotation.new_authority_like(files.old, talos_pki.now_utc())
        task.hide([authority.key_pem, talos_pki.b64_pem(authority.key_pem)])
        return authority

    try:
        if files.kind is ca_rotation.TALOS:
            roles = talos_pki.organizations(talos_pki.load_certificate(task.settings.crt, "the talosconfig's crt"))
            files_changed = rotation.run(new_authority, roles)
        else:
            files_changed = rotation.run(new_authority)
    except ActionFailed as failure:
        result[key]["new"] = ca_rotation.facts_of(files.new, now)
        details = dict(result)
        details.update(done=result["done"] + [dict(entry, ca=name) for entry in failure.result["done"]], changed=True,
                       files=_files(files))
        raise ActionFailed(failure.message, details, cause=failure)
    result[key]["new"] = ca_rotation.facts_of(files.new, now)
    result["done"].extend(dict(entry, ca=name) for entry in rotation.done)
    result["changed"] = result["changed"] or bool(rotation.done) or files_changed
    result["files"] = _files(files)
    if task.diff:
        diffs.append(_diff(files, rotation, fields, files.new))


def _files(files):
    kept = files.kept()
    return {"secrets": files.bundle_path, "talosconfig": files.talosconfig_path,
            "previous_secrets": kept["secrets"], "previous_talosconfig": kept["talosconfig"]}


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
