# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rotation of the Talos API CA and of the Kubernetes CA, the way ``talosctl rotate-ca`` does it (upstream
``pkg/rotate/pki/talos`` and ``pkg/rotate/pki/kubernetes``).

Four steps, each on every node (control planes first, then workers), each
applied without a reboot:

1. accept: the new CA joins ``machine.acceptedCAs``, so certificates it
   issues are accepted everywhere;
2. swap: the new CA becomes ``machine.ca`` (with its key on control planes,
   the certificate alone on workers) and the old one moves to
   ``machine.acceptedCAs``; the nodes serve apid certificates of the new CA;
3. prove: a client trusting only the new CA, with a certificate of the new CA,
   reaches every node;
4. drop: the old CA leaves ``machine.acceptedCAs``: from then on the old
   talosconfigs are refused.

Both config forms keep the Talos API CAs in the v1alpha1 document
(``machine.ca``, ``machine.acceptedCAs``, since Talos v1.7). Where each node
stands (its phase) is read from its active config; the CAs come from the
secrets bundle on the controller. While a rotation runs the bundle holds the
new CA and ``<bundle>.previous`` the old one, both written before any node
changes, so that the new key is never lost and a rerun continues where a
failed run stopped. The nodes are reached with admin certificates issued in
memory from a CA every node accepts at that point, trusting both CAs: no step
takes away the credential it is using, and the talosconfig on the controller
gets the new CA's certificate only once that has been proven on every node.

The Kubernetes CA goes through the same steps and phases
(``KubernetesCARotation``), in ``cluster.ca``/``cluster.acceptedCAs`` (v1alpha1
form) or the ``KubeAPIServerCAConfig`` document (v1.14 form: ``issuingCA`` on
control planes, ``acceptedCAs`` alone on workers, the issuing CA first, as
Talos's own patcher orders it). Each control plane's kube-apiserver restarts
with the new CAs and certificates and each kubelet picks them up as Talos
re-issues them: after each node's change the rotation waits until the node's
kubelet runs healthy again, on a control plane until its kube-apiserver runs
the new CAs (its mirror pod carries the version of the static pods' secrets
Talos rendered for the change, and is Ready: before, the process from before
the change may still answer, then stop to restart), and until the API
answers, with every node Ready, an admin kubeconfig that step keeps valid
(upstream waits for the kubelet and the API). The
prove step fetches the admin kubeconfig from each control plane (the
Kubeconfig RPC, which issues from the node's CA) and reads the API with it
while trusting the new CA only. The Talos API is reached with the task's
talosconfig, which this rotation leaves alone.

Every check a run needs comes before its first change (``prepare``): every
node answers and issues from the bundle's CA, the talosconfig a Talos API CA
rotation rewrites is this cluster's, and the Kubernetes API answers before a
Kubernetes CA rotation. A rotation in progress can be rolled back
(``ControllerFiles`` with ``abandon``): the same steps with the two CAs' roles
swapped, every intermediate state being a phase of the rotation too, so that a
run may continue either way from wherever the previous one stopped.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import datetime
import os

from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.certificates.expiry import ConfigAuthorities, load_certificates, report
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConfigError,
    TalosError,
    TalosTLSError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import read_text, write_private
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubeAPI, KubernetesAPIError
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import components
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.kubeconfig import fetch_kubeconfig, user_certificates
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
    ConfigApplier, is_v1alpha1, load_config, parse_yaml_stream, read_active_config)
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import CertificateAuthority, SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import read_talosconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.waits import wait_for_services
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, is_transient

PREVIOUS_SUFFIX = ".previous"
FIRST_RELEASE = (1, 7)  # machine.acceptedCAs and cluster.acceptedCAs
ACCEPT, SWAP, PROVE, DROP = "accept", "swap", "prove", "drop"
STEPS = (ACCEPT, SWAP, PROVE, DROP)
# A node's phase: which steps its config has been through.
ORIGINAL, ACCEPTED, SWAPPED, DONE = "original", "accepted", "swapped", "done"
_PHASE_STEPS = {ORIGINAL: 0, ACCEPTED: 1, SWAPPED: 2, DONE: 4}
# What a failed run's message tells to do, by whether it was a rollback.
_RERUN = {False: "Rerun the task to continue (or with abandon: true to roll the rotation back)",
          True: "Rerun the task with abandon: true to finish the rollback (or without it to continue the rotation)"}
# A node's phase in a rollback, which runs the steps with the CAs' roles swapped, as the rotation knows it.
_REVERSED_PHASES = {ORIGINAL: DONE, ACCEPTED: SWAPPED, SWAPPED: ACCEPTED, DONE: ORIGINAL}
KUBE_CA_KIND = "KubeAPIServerCAConfig"


class Kind(object):
    """What tells one rotated CA from the other: its name in ``rotate``, its bundle entry and its config fields."""

    def __init__(self, name, bundle_name, title, section):
        self.name = name
        self.bundle_name = bundle_name
        self.title = title
        self.section = section  # the v1alpha1 section holding ``ca`` and ``acceptedCAs``

    def fields(self, step, form):
        """The fields ``step`` changes in a config of ``form`` (``v1alpha1`` or ``documents``)."""
        if self is KUBERNETES and form == "documents":
            issuing, accepted = KUBE_CA_KIND + ".issuingCA", KUBE_CA_KIND + ".acceptedCAs"
        else:
            issuing, accepted = self.section + ".ca", self.section + ".acceptedCAs"
        return {ACCEPT: [accepted], SWAP: [issuing, accepted], DROP: [accepted]}.get(step, [])

    def document(self, form):
        return KUBE_CA_KIND if self is KUBERNETES and form == "documents" else "v1alpha1"


TALOS = Kind("talos", "os", "Talos API CA", "machine")
KUBERNETES = Kind("kubernetes", "k8s", "Kubernetes CA", "cluster")
KINDS = {"talos": TALOS, "kubernetes": KUBERNETES}

# The admin certificates the rotation talks to the nodes with live only as long as a run.
SESSION_VALIDITY = datetime.timedelta(hours=2)


def previous_path(path):
    return path + PREVIOUS_SUFFIX


def _same(pem, other):
    """Whether two PEM texts hold the same certificate (their line wrapping may differ)."""
    if pem is None or other is None:
        return False
    return pem.strip() == other.strip() or (
        talos_pki.fingerprint(talos_pki.load_certificate(pem, "a CA")) == talos_pki.fingerprint(talos_pki.load_certificate(other, "a CA")))


def _named(certificate):
    """A CA as a message names it: its subject and fingerprint, never a key."""
    return "%s (%s)" % (certificate.subject.rfc4514_string() or "an empty subject", talos_pki.fingerprint(certificate))


def new_authority_like(old, now):
    """A new CA with the key type, subject and lifetime of ``old`` (a bundle CertificateAuthority): the whole subject,
    which is talosctl's ``O=talos`` (``O=kubernetes``) for a CA its generator or this collection made."""
    validity = old.certificate.not_valid_after_utc - old.certificate.not_valid_before_utc
    certificate, key = talos_pki.generate_ca(talos_pki.key_algorithm(old.key), None, now, validity,
                                             subject=old.certificate.subject)
    return CertificateAuthority(talos_pki.certificate_pem(certificate), talos_pki.private_key_pem(key), certificate, key)


def given_authority(crt_pem, key_pem, old, parameter, now):
    """The CA a user gives to rotate to (``parameter``: the option holding it), checked against ``old``, the bundle's
    CA it replaces: a CA whose key is its own, of the old one's key type, valid now and for more than a day."""
    try:
        authority = CertificateAuthority.from_pem(crt_pem, key_pem, parameter)
    except talos_pki.PKIError as error:
        raise TalosConfigError("%s." % error)
    certificate = authority.certificate
    if not talos_pki.is_ca(certificate):
        raise TalosConfigError("%s.crt is not a CA certificate (its BasicConstraints do not say CA:TRUE), so the nodes "
                               "could not verify the certificates it issues." % parameter)
    algorithm, expected = talos_pki.key_algorithm(authority.key), talos_pki.key_algorithm(old.key)
    if algorithm != expected:
        raise TalosConfigError("%s holds an %s key, but the CA it replaces has an %s key: give an %s CA, as the nodes' "
                               "certificates keep their key type." % (parameter, algorithm, expected, expected))
    if certificate.not_valid_before_utc > now + datetime.timedelta(minutes=5):
        raise TalosConfigError("%s.crt is valid only from %s: give a CA valid now." % (
            parameter, certificate.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ")))
    if certificate.not_valid_after_utc <= now + datetime.timedelta(days=1):
        raise TalosConfigError("%s.crt expires on %s: give a CA valid for longer than a day." % (
            parameter, certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")))
    return authority


def rotation_due(authority, issued_after, renew_before, now, kind=None, given=None):
    """Why ``authority`` (a certificate of ``kind``, TALOS by default) must be replaced, as a phrase, or None when it
    may stay. With ``given``, the CA to rotate to, only a bundle CA other than the given one is replaced."""
    name = "Kubernetes" if kind is KUBERNETES else "Talos"
    if given is not None:
        if talos_pki.fingerprint(authority) == talos_pki.fingerprint(given.certificate):
            return None
        return "a new %s CA was given" % name
    if issued_after is not None and authority.not_valid_before_utc < issued_after:
        return "the %s CA was issued on %s, before issued_after" % (
            name, authority.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if authority.not_valid_after_utc - renew_before <= now:
        return "the %s CA expires on %s, within renew_before" % (name, authority.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return None


class NodeConfig:
    """A node's active config as the rotation of ``kind`` sees it: the CAs of that kind, its phase and its patched forms."""

    def __init__(self, node, text, version, kind=None):
        self.node = node
        self.text = text
        self.version = version
        self.kind = kind or TALOS
        source = label(node)
        self.authorities = ConfigAuthorities.from_config(text, source)
        self.documents = parse_yaml_stream(text, "the active machine config of %s" % source)
        machine = (self._v1alpha1(self.documents).get("machine") or {})
        self.control_plane = talos_node.is_control_plane_type(machine.get("type"))
        self.form = self.authorities.form if self.kind is KUBERNETES else "v1alpha1"
        if self.kind is TALOS:
            self.issuing, self.accepted = self.authorities.talos_ca, self.authorities.talos_accepted
        elif self.form == "documents" and self.authorities.kubernetes_ca is None:
            # A v1.14 worker's KubeAPIServerCAConfig holds acceptedCAs only; Talos puts the issuing CA first.
            accepted = self.authorities.kubernetes_accepted
            self.issuing, self.accepted = (accepted[0] if accepted else None), accepted[1:]
        else:
            self.issuing, self.accepted = self.authorities.kubernetes_ca, self.authorities.kubernetes_accepted

    @staticmethod
    def _v1alpha1(documents):
        return next(document for document in documents if is_v1alpha1(document))

    def phase(self, old_pem, new_pem):
        """ORIGINAL, ACCEPTED, SWAPPED or DONE; None when the node's CAs fit neither CA."""
        has_new = new_pem is not None and any(_same(pem, new_pem) for pem in self.accepted)
        has_old = any(_same(pem, old_pem) for pem in self.accepted)
        if _same(self.issuing, old_pem):
            return ACCEPTED if has_new else ORIGINAL
        if _same(self.issuing, new_pem):
            return SWAPPED if has_old else DONE
        return None

    def patched(self, step, old, new):
        """The config text after ``step`` (ACCEPT, SWAP or DROP) with CAs ``old`` and ``new``; other fields untouched."""
        documents = copy.deepcopy(self.documents)
        if self.form == "documents":
            self._patch_document(next(d for d in documents if isinstance(d, dict) and d.get("kind") == KUBE_CA_KIND),
                                 step, old, new)
        else:
            self._patch_v1alpha1(self._v1alpha1(documents).setdefault(self.kind.section, {}), step, old, new)
        return go_yaml.dump_documents(documents)

    def _patch_v1alpha1(self, section, step, old, new):
        """``ca`` and ``acceptedCAs`` (base64 of PEM) of ``section`` (``machine`` or ``cluster``)."""
        field = "%s.acceptedCAs.crt" % self.kind.section
        entries = list(section.get("acceptedCAs") or [])

        def without(*authorities):
            """The accepted entries but those of ``authorities``; the user's own accepted CAs stay."""
            return [entry for entry in entries
                    if not any(_same(talos_pki.pem_from_b64((entry or {}).get("crt"), field), authority.crt_pem)
                               for authority in authorities)]

        if step == ACCEPT:
            entries = without(new) + [{"crt": talos_pki.b64_pem(new.crt_pem)}]
        elif step == SWAP:
            entries = without(new, old) + [{"crt": talos_pki.b64_pem(old.crt_pem)}]
            section["ca"] = {"crt": talos_pki.b64_pem(new.crt_pem),
                             "key": talos_pki.b64_pem(new.key_pem) if self.control_plane else ""}
        elif step == DROP:
            entries = without(old)
        if entries:
            section["acceptedCAs"] = entries
        else:
            section.pop("acceptedCAs", None)

    def _patch_document(self, document, step, old, new):
        """KubeAPIServerCAConfig (raw PEM): ``issuingCA`` on control planes; on workers the issuing CA is the first
        of ``acceptedCAs``."""
        entries = list(document.get("acceptedCAs") or [])

        def without(*authorities):
            return [pem for pem in entries if not any(_same(pem, authority.crt_pem) for authority in authorities)]

        if step == ACCEPT:
            entries = without(new) + [new.crt_pem]
        elif step == SWAP and self.control_plane:
            entries = without(new, old) + [old.crt_pem]
            document["issuingCA"] = {"cert": new.crt_pem, "key": new.key_pem}
        elif step == SWAP:
            entries = [new.crt_pem] + without(new, old) + [old.crt_pem]
        elif step == DROP:
            entries = without(old)
        if entries:
            document["acceptedCAs"] = entries
        else:
            document.pop("acceptedCAs", None)

    def fields(self):
        """The rotation's fields of this config, as fingerprints (never a key), for --diff."""
        def fingerprint(pem):
            return talos_pki.fingerprint(talos_pki.load_certificate(pem, "a CA of %s" % label(self.node)))
        issuing, accepted = self.kind.fields(SWAP, self.form)
        if self.form == "documents" and not self.control_plane:
            issuing, accepted = accepted + "[0]", accepted + "[1:]"
        return {issuing: fingerprint(self.issuing) if self.issuing else None,
                accepted: [fingerprint(pem) for pem in self.accepted]}


class ControllerFiles:
    """The secrets bundle and the talosconfig on the controller, and the previous ones kept beside them during a
    rotation of ``kind`` (the talosconfig changes with the Talos API CA only).

    With ``abandon`` a rotation in progress is rolled back: the same steps run with the two CAs' roles swapped
    (``old`` is the rotation's new CA, ``new`` the one the bundle held before it), and once every node is back the
    bundle and the talosconfig are what they were.
    """

    def __init__(self, bundle_path, talosconfig_path, context, kind=None, abandon=False):
        self.bundle_path = bundle_path
        self.talosconfig_path = talosconfig_path
        self.context = context
        self.kind = kind or TALOS
        self.abandon = abandon
        self.bundle = SecretsBundle.load(bundle_path)
        self.previous = None
        if os.path.isfile(previous_path(bundle_path)):
            previous = SecretsBundle.load(previous_path(bundle_path))
            # A copy written just before the new bundle (a run stopped in between), or one of a rotation of the other
            # CA, is no rotation of this one.
            name = self.kind.bundle_name
            if not _same(previous.cas[name].crt_pem, self.bundle.cas[name].crt_pem):
                self.previous = previous

    @property
    def in_progress(self):
        return self.previous is not None

    @property
    def old(self):
        """The CA the nodes move away from."""
        if self.abandon and self.previous is not None:
            return self.bundle.cas[self.kind.bundle_name]
        return (self.previous or self.bundle).cas[self.kind.bundle_name]

    @property
    def new(self):
        """The CA the nodes move to (None while no rotation is in progress)."""
        if self.previous is None:
            return None
        return (self.previous if self.abandon else self.bundle).cas[self.kind.bundle_name]

    def _paths(self):
        """``(name, path, what)`` of the files this rotation keeps a previous copy of."""
        paths = [("secrets", self.bundle_path, "the previous secrets bundle")]
        if self.kind is TALOS:
            paths.append(("talosconfig", self.talosconfig_path, "the previous talosconfig"))
        return paths

    def kept(self):
        """The previous files that exist now: ``{"secrets": path or None, "talosconfig": path or None}``."""
        kept = {"secrets": None, "talosconfig": None}
        kept.update((name, previous_path(path)) for name, path, _what in self._paths() if os.path.isfile(previous_path(path)))
        return kept

    def start(self, new):
        """Keep the files beside them, then write the bundle holding ``new`` (before any node changes)."""
        for _name, path, what in self._paths():
            write_private(previous_path(path), read_text(path), what)
        self.previous, self.bundle = self.bundle, copy.copy(self.bundle)
        self.bundle.cas = dict(self.previous.cas, **{self.kind.bundle_name: new})
        write_private(self.bundle_path, self.bundle.to_yaml(), "the secrets bundle")

    # The talosconfig.

    def authorities(self):
        """The CAs of the rotation: the old one, and the new one while a rotation is in progress."""
        return [self.old] + ([self.new] if self.new is not None else [])

    def _context_error(self, context, path):
        """Why ``context`` (a context of the talosconfig at ``path``) is not this cluster's, or None when it is: its
        ``ca`` must hold a CA of the rotation and its ``crt`` be issued by one."""
        authorities = self.authorities()
        where = "The talosconfig %s (context %s)" % (path, self.context)
        cure = ("give the talosconfig of this cluster, whose Talos API CA the secrets bundle %s holds (%s); the rotation "
                "rewrites that file." % (self.bundle_path, " and ".join(_named(authority.certificate) for authority in authorities)))
        try:
            trusted = load_certificates(talos_pki.pem_from_b64(context.get("ca"), "ca"), "ca")
            crt = talos_pki.load_certificate(talos_pki.pem_from_b64(context.get("crt"), "crt"), "crt")
        except talos_pki.PKIError as error:
            return "%s has no usable Talos API CA and client certificate (%s): %s" % (where, error, cure)
        fingerprints = set(talos_pki.fingerprint(authority.certificate) for authority in authorities)
        if not fingerprints & set(talos_pki.fingerprint(certificate) for certificate in trusted):
            return "%s trusts the Talos API CA %s, not this cluster's: %s" % (
                where, " and ".join(_named(certificate) for certificate in trusted), cure)
        if not any(talos_pki.signed_by(crt, authority.certificate) for authority in authorities):
            return "%s holds a client certificate issued by %s, not by this cluster's Talos API CA: %s" % (
                where, crt.issuer.rfc4514_string(), cure)
        return None

    def check_talosconfig(self):
        """Refuse a talosconfig whose context is not this cluster's (before anything is written)."""
        self._talosconfig()

    def _talosconfig(self, path=None):
        """The talosconfig document, its contexts and the task's context, which must be this cluster's."""
        path = path or self.talosconfig_path
        document = read_talosconfig(path) or {}
        contexts = dict(document.get("contexts") or {})
        context = dict(contexts.get(self.context) or {})
        problem = self._context_error(context, path)
        if problem:
            raise TalosConfigError(problem)
        return document, contexts, context

    def _write_talosconfig(self, document, contexts, context):
        contexts[self.context] = context
        document = dict(document, contexts=contexts)
        write_private(self.talosconfig_path, go_yaml.dump(document), "the talosconfig")

    def trust_both(self, current_ca_pem):
        """Let the talosconfig trust the new CA beside the old one (its certificate still works until the drop step)."""
        new = talos_pki.fingerprint(self.new.certificate)
        if any(talos_pki.fingerprint(certificate) == new
               for certificate in load_certificates(current_ca_pem, "the talosconfig's ca")):
            return False
        document, contexts, context = self._talosconfig()
        context["ca"] = talos_pki.b64_pem(self.old.crt_pem + self.new.crt_pem)
        self._write_talosconfig(document, contexts, context)
        return True

    def is_final(self, ca_pem, crt_pem):
        """Whether talosconfig values ``ca_pem``/``crt_pem`` already are the new CA and a certificate it issued."""
        certificate = talos_pki.load_certificate(crt_pem, "the talosconfig's crt")
        trusted = [talos_pki.fingerprint(authority) for authority in load_certificates(ca_pem, "the talosconfig's ca")]
        return (trusted == [talos_pki.fingerprint(self.new.certificate)]
                and talos_pki.signed_by(certificate, self.new.certificate))

    def finish_talosconfig(self, roles, ttl):
        """The talosconfig trusts only the new CA and holds a client certificate of it: one for ``roles`` valid
        ``ttl``, or when abandoning the credentials it held before the rotation (kept in ``<talosconfig>.previous``)."""
        document, contexts, context = self._talosconfig()
        if self.abandon:
            _previous, _contexts, before = self._talosconfig(previous_path(self.talosconfig_path))
            context.update((name, before[name]) for name in ("ca", "crt", "key"))
        else:
            crt_b64, key_b64, _certificate = client_config.issue_client_credentials(self.new, roles, ttl)
            context.update(ca=talos_pki.b64_pem(self.new.crt_pem), crt=crt_b64, key=key_b64)
        self._write_talosconfig(document, contexts, context)

    def end(self):
        """The run ended well: when abandoning, the bundle gets the CA it held before back; the previous files go.
        Whether a file changed."""
        if self.abandon and self.previous is not None:
            self.bundle.cas = dict(self.bundle.cas, **{self.kind.bundle_name: self.new})
            write_private(self.bundle_path, self.bundle.to_yaml(), "the secrets bundle")
        removed = False
        for path in self.kept().values():
            if path:
                os.unlink(path)
                removed = True
        return removed


class _Rotation(object):
    """What both rotations share: each node's phase, the plan of the steps they still need, the steps' bookkeeping."""

    kind = None

    @property
    def pending(self):
        """Whether steps may be due: a rotation is due, or one is in progress."""
        return self.files.in_progress or self.due is not None

    @property
    def title(self):
        """What this run is, capitalized: the rotation, or its rollback."""
        if self.files.abandon:
            return "The rollback of the %s rotation" % self.kind.title
        return "The %s rotation" % self.kind.title

    def ordered(self):
        """Control planes first (workers get their certificates from a control plane), then workers."""
        return [n for n in self.nodes if self.configs[n].control_plane] + [n for n in self.nodes if not self.configs[n].control_plane]

    def phases(self):
        new_pem = self.files.new.crt_pem if self.files.new is not None else None
        return dict((node, self.configs[node].phase(self.files.old.crt_pem, new_pem)) for node in self.nodes)

    def reported_phases(self):
        """Each node's phase in the terms of the rotation in progress (a rollback runs it with the CAs' roles swapped:
        its original phase is the rotation's done)."""
        phases = self.phases()
        if self.files.abandon and self.files.in_progress:
            return dict((node, _REVERSED_PHASES[phase]) for node, phase in phases.items())
        return phases

    def _proves(self, node):
        return True

    def prepare(self):
        """Everything the run needs, checked before its first change: every node answers, runs a Talos release with
        the fields, and issues from a CA of the bundle; when a rotation starts, every member of the cluster is among
        the nodes. Returns the plan."""
        for node in self.nodes:
            try:
                config = self.configs[node] = self._read(node)
            except TalosConfigError:
                raise
            except TalosError as error:
                raise TalosError("%s %s reads every node before it changes one, so it changed nothing." % (
                    error.message, self.title), code=error.code, node=error.node, server_message=error.server_message)
            self._check_release(config)
        self._check_phases()
        if self.due is not None:
            self.check_members()
        return self.make_plan()

    def make_plan(self):
        phases = self.phases()
        if not self.files.in_progress and self.due is None:
            return []
        for step in STEPS:
            index = STEPS.index(step)
            for node in self.ordered():
                config = self.configs[node]
                if _PHASE_STEPS[phases[node]] > index or (step == PROVE and not self._proves(node)):
                    continue
                entry = {"ca": self.kind.name, "step": step, "node": node, "document": None, "fields": []}
                if step != PROVE:
                    entry.update(document=self.kind.document(config.form), fields=self.kind.fields(step, config.form))
                self.plan.append(entry)
        return self.plan

    def _check_release(self, config):
        if not talos_node.runs_at_least(config.version, FIRST_RELEASE):
            raise TalosConfigError("%s runs Talos %s: the %s can be rotated from Talos v1.7 on (%s); upgrade it first."
                                   % (label(config.node, start=True), config.version, self.kind.title,
                                      self.kind.section + ".acceptedCAs"))

    def _check_phases(self):
        new_pem = self.files.new.crt_pem if self.files.new is not None else None
        for node, config in self.configs.items():
            if config.phase(self.files.old.crt_pem, new_pem) is None:
                raise TalosConfigError(
                    "%s issues from a %s that is neither the secrets bundle's (%s)%s: the bundle does not belong "
                    "to this cluster." % (label(node, start=True), self.kind.title,
                                          talos_pki.fingerprint(self.files.old.certificate),
                                          " nor the new one of the rotation in progress" if new_pem else ""))

    def _check_members(self, client):
        """Refuse to start when the cluster's discovery lists a member that is not among the nodes: it would refuse the
        new CA's certificates once the rotation is done."""
        from ansible_collections.talos_linux.talos.plugins.module_utils.cluster.discovery import list_members
        given = set(self.nodes)
        missing = [member["hostname"] for member in list_members(client)
                   if not given & set([member["hostname"]] + list(member["addresses"]))]
        if missing:
            raise TalosConfigError("Cluster members %s are not in nodes: they would refuse the new CA's certificates after "
                                   "the rotation; list every node of the cluster." % ", ".join(missing))

    def _nodes_of(self, step):
        return [entry["node"] for entry in self.plan if entry["step"] == step]


class TalosCARotation(_Rotation):
    """One run of the rotation: reads every node, plans the steps its phase still needs, runs them.

    ``client`` is the task's client: its connection settings (endpoints,
    timeout, the talosconfig) make every client of the run, whose credentials
    are admin certificates of the CAs (``client.with_settings``); it is never
    called itself. ``nodes`` every node of the cluster; ``waiter_factory()``
    gives the Waiter of one connectivity check; ``due`` why a rotation must
    start (None: only one in progress is continued).
    """

    kind = TALOS

    def __init__(self, client, nodes, files, due, waiter_factory, ttl, progress=None):
        self.client = client
        self.nodes = list(nodes)
        self.files = files
        self.due = due
        self.waiter_factory = waiter_factory
        self.ttl = ttl
        self.progress = progress or (lambda line: None)
        self.configs = {}
        self.plan = []
        self.done = []
        self._clients = {}

    # Credentials.

    def _client(self, trusted, issuer):
        """A client trusting ``trusted`` (CAs) with an admin certificate of ``issuer``, made in memory once per run."""
        key = (tuple(authority.crt_pem for authority in trusted), issuer.crt_pem)
        if key not in self._clients:
            now = talos_pki.now_utc()
            certificate, private_key = talos_pki.issue_client_certificate(
                issuer.certificate, issuer.key, ["os:admin"], now - datetime.timedelta(minutes=5), SESSION_VALIDITY)
            self._clients[key] = self.client.with_settings(
                ca="".join(key[0]), crt=talos_pki.certificate_pem(certificate), key=talos_pki.private_key_pem(private_key))
        return self._clients[key]

    def close(self):
        for client in self._clients.values():
            client.close()
        self._clients = {}

    # Reading.

    def _read(self, node):
        """The node's config and version, through whichever CA's certificate the node accepts now."""
        refused = None
        for issuer in self.files.authorities():
            client = self._client(self.files.authorities(), issuer)
            try:
                version = talos_node.read_version_tag(client, node)
                return NodeConfig(node, read_active_config(client, node), version)
            except TalosTLSError as error:
                refused = error
        raise TalosConfigError(
            "%s does not take the certificates the task issues from the Talos API CA of the secrets bundle %s (%s): the "
            "bundle is probably not this cluster's, give the cluster's own (%s)." % (
                label(node, start=True), self.files.bundle_path,
                " and ".join(_named(authority.certificate) for authority in self.files.authorities()),
                refused.message.rstrip(".")))

    def check_members(self):
        self._check_members(self._client([self.files.old], self.files.old))

    def prepare(self):
        """As _Rotation.prepare, after refusing a talosconfig that is not this cluster's: the run rewrites it."""
        self.files.check_talosconfig()
        return super(TalosCARotation, self).prepare()

    # Running.

    def _apply(self, client, node, step):
        config = self.configs[node]
        text = config.patched(step, self.files.old, self.files.new)
        ConfigApplier(client, load_config(config=text), mode="no_reboot").apply(node)
        self.configs[node] = NodeConfig(node, text, config.version)

    def _check(self, client, node, what):
        """Wait until ``node`` answers ``client`` (its apid issues its new certificate within moments)."""

        def poll():
            # A client of its own each time: a new TLS handshake sees the certificate the node serves now.
            fresh = client.with_settings()
            try:
                return Seen("answering", done=True, value=talos_node.read_version_tag(fresh, node))
            finally:
                fresh.close()

        return self.waiter_factory().until(
            poll, "%s to answer %s" % (label(node), what), short_label(node),
            tolerate=lambda error: is_transient(error) or isinstance(error, TalosTLSError))

    def _step(self, step, nodes, apply_client, check_client, what):
        """``step`` on each of ``nodes`` in turn: patched through ``apply_client``, then answering ``check_client``."""
        for node in nodes:
            try:
                if apply_client is not None:
                    self._apply(apply_client, node, step)
                self._check(check_client, node, what)
            except TalosError as error:
                raise self._failure(step, node, error)
            self.done.append({"step": step, "node": node})
            self.progress("%s: %s done" % (label(node), step))

    def _failure(self, step, node, error):
        kept = self.files.kept()
        if self.files.abandon:
            state = "the talosconfig %s works on every node" % self.files.talosconfig_path
        elif step == DROP:
            state = "the new talosconfig works on every node"
        elif step == ACCEPT:
            state = ("the old talosconfig still works on every node, and certificates of the new CA on every node the "
                     "accept step has reached")
        else:
            # A swapped node's apid serves a certificate of the new CA: a client must trust it to verify the node.
            state = ("the talosconfig %s trusts both CAs and works on every node; the nodes the swap step has reached "
                     "serve certificates of the new CA, which a talosconfig trusting the old CA alone cannot verify"
                     % self.files.talosconfig_path)
        message = ("%s stopped at the %s step on %s (%s); %s. %s; the previous secrets bundle and talosconfig are kept "
                   "at %s and %s." % (self.title, step, label(node),
                                      error.message.rstrip("."), state, _RERUN[self.files.abandon], kept["secrets"],
                                      kept["talosconfig"]))
        return ActionFailed(message, {"done": list(self.done)}, error)

    def _talosconfig_is_final(self):
        current = self.client.settings.replace()  # the talosconfig read again, as the task's options resolve it
        return self.files.is_final(current.ca, current.crt)

    def run(self, new_authority, roles):
        """Run the plan; ``new_authority()`` makes the new CA when no rotation is in progress.

        Returns whether a controller file changed beyond what the steps did
        (the talosconfig, the previous files removed).
        """
        files = self.files
        if not files.in_progress:
            files.start(new_authority())
        files_changed = files.trust_both(self.client.settings.ca)
        nodes = dict((step, self._nodes_of(step)) for step in STEPS)
        both = self.files.authorities()
        intermediate = self._client(both, files.new)
        final = self._client([files.new], files.new)
        self._step(ACCEPT, nodes[ACCEPT], self._client(both, files.old), intermediate, "a certificate of the new CA")
        self._step(SWAP, nodes[SWAP], intermediate, intermediate, "a certificate of the new CA")
        self._step(PROVE, nodes[PROVE], None, final, "a talosconfig of the new CA only")
        # The new credential has been proven on every node: the talosconfig gets it before the old one is refused.
        if not self._talosconfig_is_final():
            files.finish_talosconfig(roles, self.ttl)
            files_changed = True
        self._step(DROP, nodes[DROP], final, final, "a talosconfig of the new CA only")
        return files.end() or files_changed


class KubernetesCARotation(_Rotation):
    """One run of the Kubernetes CA rotation: reads every node, plans the steps its phase still needs, runs them.

    ``client`` is a Talos client every node accepts (the task's talosconfig);
    ``nodes`` every node of the cluster; ``waiter_factory()`` gives the Waiter
    of one check of the Kubernetes API; ``due`` why a rotation must start
    (None: only one in progress is continued).
    """

    kind = KUBERNETES

    def __init__(self, client, nodes, files, due, waiter_factory, progress=None):
        self.client = client
        self.nodes = list(nodes)
        self.files = files
        self.due = due
        self.waiter_factory = waiter_factory
        self.progress = progress or (lambda line: None)
        self.configs = {}
        self.plan = []
        self.done = []
        self._proven = None

    def close(self):
        self.client.close()

    def _read(self, node):
        version = talos_node.read_version_tag(self.client, node)
        return NodeConfig(node, read_active_config(self.client, node), version, KUBERNETES)

    def check_members(self):
        self._check_members(self.client)

    def prepare(self):
        """As for the Talos API CA, and when a node has steps to go the Kubernetes API answers: the first control plane
        issues an admin kubeconfig (trusting the CAs of the rotation) and the API answers it with every node Ready, as
        upstream verifies with the existing PKI before its first change and as every step waits for. An API that does
        not answer fails at once; nodes not Ready yet are waited for."""
        plan = super(KubernetesCARotation, self).prepare()
        if not any(config.control_plane for config in self.configs.values()):
            raise TalosConfigError("nodes lists no control plane: the Kubernetes CA rotation reads the Kubernetes API with "
                                   "the admin kubeconfig a control plane issues; list every node of the cluster.")
        if plan:
            first = self.ordered()[0]
            try:
                config = self._fetch(first, self.files.authorities())
                api = KubeAPI(config)
                try:
                    api.nodes(retry=False)
                finally:
                    api.close()
                self._ready(config, "an admin kubeconfig of %s" % label(first), first)
            except TalosError as error:
                raise TalosError("%s %s waits for the Kubernetes API after each node's change, so it changed nothing." % (
                    error.message, self.title), code=error.code, node=error.node, server_message=error.server_message)
        return plan

    def _proves(self, node):
        # The admin kubeconfig comes from a control plane's Kubeconfig RPC: each of them proves it issues from the new CA.
        return self.configs[node].control_plane

    # Credentials: admin kubeconfigs the control planes issue, kept in memory, trusting the CAs given.

    def _fetch(self, node, trusted):
        _text, config = fetch_kubeconfig(self.client, node)
        bundle = talos_pki.b64_pem("".join(authority.crt_pem for authority in trusted))
        for entry in config.get("clusters") or []:
            entry.setdefault("cluster", {})["certificate-authority-data"] = bundle
        return config

    def _ready(self, config, what, node, fetch=None):
        """Wait until the Kubernetes API answers the admin kubeconfig ``config`` (or the one ``fetch()`` returns,
        polled) with every Node Ready, as upstream verifies after each step; returns the kubeconfig that answered."""
        def poll():
            current = fetch() if fetch is not None else config
            if current is None:
                return Seen("issuing admin kubeconfigs from the old CA")
            api = KubeAPI(current)
            try:
                waiting = sorted(item["name"] for item in api.nodes(retry=False) if not item["ready"])
            finally:
                api.close()
            if waiting:
                return Seen("nodes not ready: %s" % ", ".join(waiting))
            return Seen("answering", done=True, value=current)

        return self.waiter_factory().until(
            poll, "the Kubernetes API to answer %s with every node Ready" % what, short_label(node),
            # The API server restarts with the new CAs: until it is back it refuses or does not answer.
            tolerate=lambda error: isinstance(error, KubernetesAPIError) or is_transient(error))

    def _new_kubeconfig(self, node):
        """The admin kubeconfig ``node`` issues, trusting the new CA only, once its certificate is of the new CA."""
        config = self._fetch(node, [self.files.new])
        certificates = [certificate for _name, certificate in user_certificates(config) if certificate is not None]
        if certificates and all(talos_pki.signed_by(certificate, self.files.new.certificate) for certificate in certificates):
            return config
        return None

    def _final(self):
        if self._proven is None:
            first = self.ordered()[0]
            self._proven = self._ready(None, "an admin kubeconfig of the new CA only", first,
                                       fetch=lambda: self._new_kubeconfig(first))
        return self._proven

    # Running.

    def _apply(self, node, step):
        config = self.configs[node]
        text = config.patched(step, self.files.old, self.files.new)
        ConfigApplier(self.client, load_config(config=text), mode="no_reboot").apply(node)
        self.configs[node] = NodeConfig(node, text, config.version, KUBERNETES)

    def _step(self, step, nodes, credential, what):
        """``step`` on each of ``nodes`` in turn, each followed by the API answering ``credential()``."""
        for node in nodes:
            try:
                if step == PROVE:
                    self._proven = self._ready(None, what, node, fetch=lambda: self._new_kubeconfig(node))
                else:
                    control_plane = self.configs[node].control_plane
                    rendered = components.read_static_pod_secrets_version(self.client, node) if control_plane else None
                    self._apply(node, step)
                    # Talos restarts the kubelet with the new CAs: it must come back, as upstream waits for it.
                    wait_for_services(self.client, node, ["kubelet"], self.waiter_factory())
                    if control_plane:
                        self._wait_apiserver(node, rendered, credential)
                    self._ready(credential(), what, node)
            except TalosError as error:
                raise self._failure(step, node, error)
            self.done.append({"step": step, "node": node})
            self.progress("%s: kubernetes %s done" % (label(node), step))

    def _wait_apiserver(self, node, rendered, credential):
        """Wait until control plane ``node`` runs a kube-apiserver with the CAs of the step just applied: Talos renders
        the static pods' secrets anew (their version moves on from ``rendered``), and the node's kube-apiserver mirror
        pod runs that version and is Ready. Until then the process from before the step may still answer, with the
        CAs it started with, and then stop to restart. The pods are read with the admin kubeconfig ``credential()``."""
        kube_name = components.read_nodename(self.client, node)

        def poll():
            version = components.read_static_pod_secrets_version(self.client, node)
            if version == rendered:
                return Seen("rendering the new CAs", detail="the static pods' secrets are still at version %s" % rendered)
            api = KubeAPI(credential())
            try:
                return components.mirror_pod_seen(api, "kube-apiserver", kube_name, components.SECRETS_VERSION_ANNOTATION,
                                                  version)
            finally:
                api.close()

        return self.waiter_factory().until(
            poll, "the kube-apiserver of %s to run the new CAs and be Ready" % label(node),
            "%s kube-apiserver" % short_label(node),
            tolerate=lambda error: isinstance(error, KubernetesAPIError) or is_transient(error))

    def _failure(self, step, node, error):
        if self.files.abandon:
            state = "admin kubeconfigs of a CA every node accepts work"
        elif step == DROP:
            state = "admin kubeconfigs of the new CA work"
        else:
            state = ("admin kubeconfigs of the old CA are still accepted, and those of the new CA by every node the "
                     "accept step has reached")
        message = ("%s stopped at the %s step on %s (%s); %s. %s; the previous secrets bundle is kept at %s." % (
            self.title, step, label(node), error.message.rstrip("."), state, _RERUN[self.files.abandon],
            self.files.kept()["secrets"]))
        return ActionFailed(message, {"done": list(self.done)}, error)

    def run(self, new_authority):
        """Run the plan; ``new_authority()`` makes the new CA when no rotation is in progress. Returns whether the
        previous bundle was removed at the end."""
        files = self.files
        if not files.in_progress:
            files.start(new_authority())
        nodes = dict((step, self._nodes_of(step)) for step in STEPS)
        session = []

        def both():
            # The first control plane's admin kubeconfig, trusting both CAs: accepted until the drop step.
            if not session:
                first = self.ordered()[0]
                try:
                    session.append(self._fetch(first, [files.old, files.new]))
                except TalosError as error:
                    raise self._failure(ACCEPT, first, error)
            return session[0]

        self._step(ACCEPT, nodes[ACCEPT], both, "an admin kubeconfig trusting both CAs")
        self._step(SWAP, nodes[SWAP], both, "an admin kubeconfig trusting both CAs")
        self._step(PROVE, nodes[PROVE], None, "an admin kubeconfig of the new CA only")
        if nodes[DROP]:
            try:
                final = self._final()
            except TalosError as error:
                raise self._failure(DROP, nodes[DROP][0], error)
            self._step(DROP, nodes[DROP], lambda: final, "an admin kubeconfig of the new CA only")
        return files.end()


def facts_of(authority, now):
    return report(authority.certificate, now) if authority is not None else None
