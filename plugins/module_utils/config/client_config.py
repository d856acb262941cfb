# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talosconfig files made from a secrets bundle, as ``talosctl gen config`` writes them.

A context holds the endpoints, the nodes, the OS CA and a client certificate
issued by that CA whose Subject Organization values are the Talos roles. An
existing context's certificate is kept while it still fits (same CA, same
roles, not expiring soon), so that writing the file again changes nothing.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

try:
    import yaml
except ImportError:  # reported by the module through missing_required_lib
    yaml = None

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common import redaction
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.durations import parse_duration
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError

ROLES = ("os:admin", "os:operator", "os:reader", "os:etcd:backup")
DEFAULT_ROLES = ("os:admin",)
DEFAULT_TTL = "8760h"
DEFAULT_RENEW_BEFORE = "720h"


def validate_roles(roles):
    roles = list(roles or DEFAULT_ROLES)
    unknown = [role for role in roles if role not in ROLES]
    if unknown:
        raise TalosConfigError("roles %s are not Talos client roles: choose from %s." % (", ".join(unknown), ", ".join(ROLES)))
    return sorted(set(roles), key=roles.index)


def reusable_certificate(context, ca, roles, now, renew_before):
    """The context's ``(crt, key)`` base64 values when they may be kept, else None.

    Kept when the certificate is valid now, signed by ``ca``, carries exactly
    ``roles`` and does not expire within ``renew_before``, and the key is its key.
    """
    if not isinstance(context, dict) or context.get("ca") != talos_pki.b64_pem(ca.crt_pem):
        return None
    try:
        certificate = talos_pki.load_certificate(talos_pki.pem_from_b64(context.get("crt"), "crt"), "crt")
        key = talos_pki.load_private_key(talos_pki.pem_from_b64(context.get("key"), "key"), "key")
    except talos_pki.PKIError:
        return None
    fits = (
        talos_pki.signed_by(certificate, ca.certificate)
        and talos_pki.public_key_matches(certificate, key)
        and sorted(talos_pki.organizations(certificate)) == sorted(roles)
        and certificate.not_valid_before_utc <= now
        and certificate.not_valid_after_utc - renew_before > now
    )
    return (context["crt"], context["key"]) if fits else None


def build_context(ca, endpoints, nodes, crt_b64, key_b64):
    """A context in the key order talosctl writes; ``nodes`` left out when empty."""
    context = {"endpoints": list(endpoints or [])}
    if nodes:
        context["nodes"] = list(nodes)
    context.update(ca=talos_pki.b64_pem(ca.crt_pem), crt=crt_b64, key=key_b64)
    return context


def issue_client_credentials(ca, roles, ttl, now=None):
    """``(crt_b64, key_b64, certificate)``: a new client certificate for ``roles`` valid for ``ttl``."""
    certificate, key = talos_pki.issue_client_certificate(ca.certificate, ca.key, roles, now or talos_pki.now_utc(), ttl)
    return (talos_pki.b64_pem(talos_pki.certificate_pem(certificate)), talos_pki.b64_pem(talos_pki.private_key_pem(key)),
            certificate)


def render_talosconfig(bundle, context_name, endpoints=(), nodes=(), roles=DEFAULT_ROLES, ttl=DEFAULT_TTL,
                       renew_before=DEFAULT_RENEW_BEFORE, existing=None, now=None):
    """The talosconfig text with the context ``context_name`` for ``bundle``, and whether a certificate was issued.

    ``existing`` is a parsed talosconfig (talosconfig.read_talosconfig) whose other
    contexts are kept and whose context of that name keeps its certificate
    when reusable_certificate allows. Returns ``(text, issued, certificate_b64)``.
    """
    if not context_name or not str(context_name).strip():
        raise TalosConfigError("cluster_name (the talosconfig context) must not be empty.")
    roles = validate_roles(roles)
    ttl_delta = parse_duration(ttl, "ttl")
    renew_delta = parse_duration(renew_before, "renew_before")
    if ttl_delta <= renew_delta:
        raise TalosConfigError("ttl (%s) must be longer than renew_before (%s), or every run would issue a new certificate."
                               % (ttl, renew_before))
    now = now or talos_pki.now_utc()
    document = dict(existing or {})
    contexts = dict(document.get("contexts") or {})
    kept = reusable_certificate(contexts.get(context_name), bundle.os_ca, roles, now, renew_delta)
    if kept:
        crt_b64, key_b64 = kept
    else:
        crt_b64, key_b64, _certificate = issue_client_credentials(bundle.os_ca, roles, ttl_delta, now)
    contexts[context_name] = build_context(bundle.os_ca, endpoints, nodes, crt_b64, key_b64)
    document = {"context": context_name, "contexts": contexts}
    return go_yaml.dump(document), not kept, crt_b64


def certificate_facts(crt_b64):
    """Roles, validity and fingerprint of a talosconfig's client certificate (no key material)."""
    certificate = talos_pki.load_certificate(talos_pki.pem_from_b64(crt_b64, "crt"), "crt")
    facts = talos_pki.certificate_facts(certificate)
    facts["roles"] = talos_pki.organizations(certificate)
    return facts


def file_diff(existing, text, path):
    """--diff of the talosconfig at ``path`` from the parsed ``existing`` (None: no file) to ``text``, keys redacted."""
    def redacted(document):
        return go_yaml.dump(redaction.redact(document)) if document else ""
    return {"before": redacted(existing), "after": redacted(yaml.safe_load(text)), "before_header": path, "after_header": path}
