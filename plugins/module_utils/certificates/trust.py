# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a talosconfig still reaches a node once the node runs a machine config.

A node's apid serves a certificate its config's Talos CA (``machine.ca``)
issued, which the talosconfig's CA must verify, and accepts the client
certificates that CA or one of ``machine.acceptedCAs`` issued, of which the
talosconfig's must be one. A config that fails either locks the talosconfig
out of every node that runs it; the usual cause is a config rendered before a
CA rotation (talos_rotate_ca) and applied after it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates.expiry import ConfigAuthorities, load_certificates
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosUnimplementedError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node

_AFTER = ("Render the config from the secrets bundle the talosconfig was issued from (after a CA rotation, the rotated "
          "one), or use a talosconfig of the config's CA. Nothing was applied.")


def _public_key(certificate):
    from cryptography.hazmat.primitives import serialization
    return certificate.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def check_talosconfig_reaches(documents, settings, what):
    """Refuse a machine config (its parsed ``documents``; ``what`` names it in the message) that would lock the
    credentials of ``settings`` (ConnectionSettings) out of the nodes that run it. Nothing is checked without a CA
    and a client certificate in the settings, or without a readable Talos CA in the config."""
    if not (settings.ca and settings.crt):
        return
    try:
        authorities = ConfigAuthorities.from_documents(documents, what)
        talos_ca = load_certificates(authorities.talos_ca, "machine.ca.crt of %s" % what)[0] if authorities.talos_ca else None
        accepted = [certificate for index, pem in enumerate(authorities.talos_accepted)
                    for certificate in load_certificates(pem, "machine.acceptedCAs[%d] of %s" % (index, what))]
    except (TalosConfigError, talos_pki.PKIError):
        return  # a CA the node cannot read either: its own validation refuses the config, in its words
    if talos_ca is None:
        return
    try:
        trusted = load_certificates(settings.ca, settings.ca_source)
        client = load_certificates(settings.crt, settings.certificate_source)[0]
    except talos_pki.PKIError as error:
        raise TalosConfigError("%s." % error)
    # OpenSSL finds the issuer of the node's certificate by name and checks its signature with that CA's key.
    if not any(ca.subject == talos_ca.subject and _public_key(ca) == _public_key(talos_ca) for ca in trusted):
        raise TalosConfigError(
            "The Talos CA of %s (machine.ca.crt, sha256 %s) is not a CA the talosconfig trusts (%s): once a node runs "
            "it, its API would serve certificates this talosconfig cannot verify. %s"
            % (what, talos_pki.fingerprint(talos_ca)[:23], settings.ca_source, _AFTER))
    if not any(talos_pki.signed_by(client, ca) for ca in [talos_ca] + accepted):
        raise TalosConfigError(
            "The talosconfig's client certificate (%s) was issued by neither the Talos CA of %s (machine.ca.crt) nor "
            "one of its machine.acceptedCAs: once a node runs it, it would refuse this talosconfig. %s"
            % (settings.certificate_source, what, _AFTER))


def check_apply_keeps_access(client, documents, nodes, what):
    """Refuse applying a machine config (its parsed ``documents``) to ``nodes`` with ``client`` when it would lock the
    client's credentials out of them (check_talosconfig_reaches), before anything is sent. A refusal waits for the
    first node's answer: a node that refuses the client now (a talosconfig of another CA, a configured node reached as
    if in maintenance mode) is the fault, and its answer says so in its own words."""
    try:
        check_talosconfig_reaches(documents, client.settings, what)
    except TalosConfigError as refusal:
        try:
            talos_node.read_version_tag(client, nodes[0])
        except TalosUnimplementedError:
            pass  # a node in maintenance mode that does not tell its version answered
        raise refusal
