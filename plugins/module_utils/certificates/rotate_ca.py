# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_rotate_ca's run, as ``talosctl rotate-ca`` runs the rotations of rotation.py: the CAs a task names, in order.

``rotate`` checks the options, reads every node and checks everything for
each CA of ``rotate`` before the first change of either, then runs them: the
Talos API CA first (its new talosconfig then reaches the nodes for the
Kubernetes CA), but a rotation in progress first, since starting the other
rewrites ``<secrets>.previous``, where it keeps its old CA. It makes its own
clients from the task's (``client.with_settings``), builds the whole result
(why the rotations run, the CAs, each node's phases, the plan, the steps done,
the controller's files, the diff of fingerprints) and, when a step fails,
raises it in ``ActionFailed`` with the result so far. Secrets it meets go to
``hide`` as it meets them.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotation as ca_rotation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import durations
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.config.client_config import DEFAULT_TTL

DEFAULT_RENEW_BEFORE = "8760h"
DEFAULT_WAIT_TIMEOUT = 300
_RESULT_KEYS = {"talos": "talos_ca", "kubernetes": "kubernetes_ca"}
_PHASE_KEYS = {"talos": "phase", "kubernetes": "kubernetes_phase"}
_IN_PROGRESS = {"talos": "a rotation in progress is continued",
                "kubernetes": "a Kubernetes CA rotation in progress is continued"}
_ABANDONED = {"talos": "a rotation in progress is rolled back",
              "kubernetes": "a Kubernetes CA rotation in progress is rolled back"}


def rotate(client, nodes, secrets, rotate=("talos",), new_cas=(), issued_after=None, renew_before=DEFAULT_RENEW_BEFORE,
           ttl=DEFAULT_TTL, abandon=False, wait_timeout=DEFAULT_WAIT_TIMEOUT, check_mode=False, diff=False, hide=None,
           progress=None):
    """Rotate the CAs of ``rotate`` (``talos``, ``kubernetes``) on ``nodes``, every node of the cluster, or with
    ``abandon`` roll back the rotations in progress; returns talos_rotate_ca's result.

    ``client`` is the task's client (its talosconfig is the one a Talos API CA
    rotation rewrites); ``secrets`` the path of the secrets bundle;
    ``new_cas`` the CAs to rotate to (``{"ca", "crt", "key"}`` each);
    ``issued_after`` a time, ``renew_before`` and ``ttl`` durations, as the
    options give them. With ``check_mode`` nothing is sent to a node and no
    file is written; with ``diff`` the result has the fingerprints before and
    after. ``hide(values)`` is given every secret met (the bundles' keys, a
    given or new CA's key), ``progress(line)`` a line per step done. Bad
    options and failed checks raise TalosConfigError (or the read's
    TalosError) before any change; a failed step raises ActionFailed with the
    result so far.
    """
    settings = client.settings
    nodes = [node for node in nodes if node]
    if not nodes:
        raise TalosConfigError("talos_rotate_ca changes every node of the cluster: list all of them (control planes and workers) "
                               "in nodes.")
    # Talos first, as talosctl rotate-ca does: the Kubernetes part then reaches the nodes with the new talosconfig.
    kinds = [kind for kind in ("talos", "kubernetes") if kind in rotate]
    if abandon and (issued_after or new_cas):
        raise TalosConfigError("abandon: true rolls the rotation in progress back to the CA it replaces: leave issued_after and "
                               "new_cas out.")
    if "talos" in kinds and not settings.config_path:
        raise TalosConfigError("talos_rotate_ca updates the talosconfig it connects with: set talosconfig (or TALOSCONFIG) to "
                               "the file instead of giving ca, crt and key.")
    entries = {}
    for entry in new_cas:
        if entry["ca"] not in kinds:
            raise TalosConfigError("new_cas has a %s CA but rotate does not hold %s: add %s to rotate, or drop that entry."
                                   % (entry["ca"], entry["ca"], entry["ca"]))
        if entry["ca"] in entries:
            raise TalosConfigError("new_cas has two %s CAs: give one." % entry["ca"])
        entries[entry["ca"]] = entry
    now = talos_pki.now_utc()
    if issued_after:
        text, issued_after = issued_after, durations.parse_time(issued_after, "issued_after")
        if issued_after > now:
            raise TalosConfigError("issued_after %s is in the future: every run until then would rotate the CA again." % text)
    run = _Run(client, nodes, os.path.abspath(secrets), abandon, now, issued_after or None,
               durations.parse_duration(renew_before, "renew_before"), durations.parse_duration(ttl, "ttl"), wait_timeout,
               hide or (lambda values: None), progress or (lambda line: None))
    return run.rotate(kinds, entries, check_mode, diff)


class _Run(object):
    """One task's rotations: the options as checked, and the result they build."""

    def __init__(self, client, nodes, bundle_path, abandon, now, issued_after, renew_before, ttl, wait_timeout, hide, progress):
        self.client = client
        self.nodes = nodes
        self.bundle_path = bundle_path
        self.abandon = abandon
        self.now = now
        self.issued_after = issued_after
        self.renew_before = renew_before
        self.ttl = ttl
        self.wait_timeout = wait_timeout
        self.hide = hide
        self.progress = progress
        self.result = {"rotation": None, "node_phases": dict((node, {}) for node in nodes), "plan": [], "done": [],
                       "changed": False}
        self.diffs = []

    def files_of(self, name, abandon=False):
        settings = self.client.settings
        return ca_rotation.ControllerFiles(self.bundle_path, settings.config_path, settings.context, ca_rotation.KINDS[name],
                                           abandon=abandon)

    def rotate(self, kinds, entries, check_mode, diff):
        # A rotation in progress keeps the old CA only in <secrets>.previous, which starting a rotation of the other CA
        # rewrites: one of a CA not in rotate is refused, one of a CA in rotate goes first (otherwise the Talos API CA does).
        in_progress = dict((name, self.files_of(name).in_progress) for name in ca_rotation.KINDS)
        for name, kind in ca_rotation.KINDS.items():
            if name not in kinds and in_progress[name]:
                raise TalosConfigError("A rotation of the %s is in progress (%s.previous holds the old one): finish it first with "
                                       "rotate: [%s], or roll it back with rotate: [%s] and abandon: true." % (
                                           kind.title, self.bundle_path, name, name))
        kinds = sorted(kinds, key=lambda name: not in_progress[name])

        # Every given CA is checked before the first node changes.
        givens = dict((name, self.given(name, entries.get(name), self.files_of(name))) for name in kinds)
        result = self.result
        # Every check of every CA's run comes before the first change of either.
        runs = []
        try:
            for name in kinds:
                runs.append((name,) + self.prepared(name, givens[name]))
            reports = [self.report(name, rotation, files, givens[name]) for name, rotation, files in runs]
            if check_mode or not any(rotation.pending for _name, rotation, _files in runs):
                for (_name, rotation, files), (fields, upcoming) in zip(runs, reports):
                    result["changed"] = result["changed"] or rotation.pending
                    if rotation.pending and diff:
                        self.diffs.append(_diff(files, rotation, fields, upcoming))
            else:
                rewritten = False
                for index, (name, rotation, files) in enumerate(runs):
                    if rewritten:
                        # The run before this one rewrote the bundle (and the talosconfig): read them and the nodes again.
                        rotation.close()
                        rotation, files = self.prepared(name, givens[name])
                        runs[index] = (name, rotation, files)
                    self.execute(name, rotation, files, givens[name], reports[index][0], diff)
                    rewritten = rewritten or rotation.pending
        finally:
            for _name, rotation, _files in runs:
                rotation.close()
        if self.diffs:
            result["diff"] = _merge_diff(self.diffs)
        return result

    def given(self, name, entry, files):
        """The CA of ``entry`` (the new_cas entry for CA ``name``; None: the run generates one), checked; refused while a
        rotation to another CA is in progress."""
        if entry is None:
            return None
        self.hide([entry["key"], talos_pki.b64_pem(entry["key"])])
        label = "new_cas[ca=%s]" % name
        given = ca_rotation.given_authority(entry["crt"], entry["key"], files.old, label, self.now)
        if files.in_progress and talos_pki.fingerprint(files.new.certificate) != talos_pki.fingerprint(given.certificate):
            raise TalosConfigError("A rotation of the %s to another CA than %s is in progress (%s.previous holds the old one): "
                                   "finish it first by running the task without that entry." % (
                                       files.kind.title, label, files.bundle_path))
        return given

    def prepared(self, name, given):
        """The run of CA ``name`` (a rotation to ``given`` or a CA it generates, or a rollback) and its ControllerFiles,
        read from the files as they are now, with every check done before its first change (Rotation.prepare)."""
        kind = ca_rotation.KINDS[name]
        files = self.files_of(name, abandon=self.abandon)
        self.hide(files.bundle.secret_values() | (files.previous.secret_values() if files.previous else set()))
        due = None
        if not files.in_progress and not self.abandon:
            due = ca_rotation.rotation_due(files.old.certificate, self.issued_after, self.renew_before, self.now, kind, given)

        def waiter():
            return Waiter(self.wait_timeout, interval=1.0, progress=self.progress)

        if kind is ca_rotation.TALOS:
            rotation = ca_rotation.TalosCARotation(self.client, self.nodes, files, due, waiter, self.ttl, progress=self.progress)
        else:
            # The talosconfig as the task's options resolve it now: the Talos part may just have rewritten it.
            rotation = ca_rotation.KubernetesCARotation(self.client.with_settings(), self.nodes, files, due, waiter,
                                                        progress=self.progress)
        try:
            rotation.prepare()
        except BaseException:
            rotation.close()
            raise
        return rotation, files

    def report(self, name, rotation, files, given):
        """What the run of CA ``name`` will do, added to the result; returns ``(fields, upcoming)``: each node's rotated
        fields as they are, and the CA the nodes move to (in check mode a given CA before the bundle holds it)."""
        result = self.result
        if files.in_progress:
            reason = (_ABANDONED if self.abandon else _IN_PROGRESS)[name]
        else:
            reason = rotation.due
        if reason:
            result["rotation"] = "; ".join(filter(None, [result["rotation"], reason]))
        upcoming = files.new if files.new is not None or rotation.due is None else given
        result[_RESULT_KEYS[name]] = {"old": ca_rotation.facts_of(files.old, self.now), "new": ca_rotation.facts_of(upcoming, self.now)}
        for node, phase in rotation.reported_phases().items():
            result["node_phases"][node].update(
                machine_type="controlplane" if rotation.configs[node].control_plane else "worker", **{_PHASE_KEYS[name]: phase})
        result["plan"].extend(rotation.plan)
        result["files"] = _files(files)
        return dict((node, rotation.configs[node].fields()) for node in rotation.nodes), upcoming

    def execute(self, name, rotation, files, given, fields, diff):
        """Run the steps of CA ``name`` that are due, adding to the result and the diffs; a failed step raises
        ActionFailed with the whole result so far."""
        if not rotation.pending:
            return
        result = self.result
        key = _RESULT_KEYS[name]

        def new_authority():
            if given is not None:
                return given
            authority = ca_rotation.new_authority_like(files.old, talos_pki.now_utc())
            self.hide([authority.key_pem, talos_pki.b64_pem(authority.key_pem)])
            return authority

        try:
            if files.kind is ca_rotation.TALOS:
                roles = talos_pki.organizations(talos_pki.load_certificate(self.client.settings.crt, "the talosconfig's crt"))
                files_changed = rotation.run(new_authority, roles)
            else:
                files_changed = rotation.run(new_authority)
        except ActionFailed as failure:
            # The step's failure, with what this run did: the steps of the CAs before, this one's, the files as they are.
            result[key]["new"] = ca_rotation.facts_of(files.new, self.now)
            partial = dict(result, done=result["done"] + [dict(entry, ca=name) for entry in rotation.done], changed=True,
                           files=_files(files))
            raise ActionFailed(failure.message, partial, cause=failure)
        result[key]["new"] = ca_rotation.facts_of(files.new, self.now)
        result["done"].extend(dict(entry, ca=name) for entry in rotation.done)
        result["changed"] = result["changed"] or bool(rotation.done) or files_changed
        result["files"] = _files(files)
        if diff:
            self.diffs.append(_diff(files, rotation, fields, files.new))


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


def _files(files):
    kept = files.kept()
    return {"secrets": files.bundle_path, "talosconfig": files.talosconfig_path,
            "previous_secrets": kept["secrets"], "previous_talosconfig": kept["talosconfig"]}
