# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A machine config that would lock the task's talosconfig out of the nodes that run it is refused."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import trust
from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConfigError, TalosTLSError, TalosUnimplementedError)

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.timezone.utc)


def authority():
    return talos_pki.generate_ca("ed25519", "talos", NOW)


def pem(certificate):
    return talos_pki.certificate_pem(certificate)


def talosconfig(trusted, issuer):
    """Settings that trust the CAs ``trusted`` with a client certificate ``issuer`` (certificate, key) issued."""
    crt, key = talos_pki.issue_client_certificate(issuer[0], issuer[1], ["os:admin"], NOW)
    return ConnectionSettings(["10.5.0.2"], ca="".join(pem(ca[0]) for ca in trusted), crt=pem(crt),
                              key=talos_pki.private_key_pem(key), ca_source="talosconfig context 'prod' (/t)",
                              certificate_source="talosconfig context 'prod' (/t)")


def config(ca, accepted=()):
    machine = {"type": "worker", "ca": {"crt": talos_pki.b64_pem(pem(ca[0])), "key": ""}}
    if accepted:
        machine["acceptedCAs"] = [{"crt": talos_pki.b64_pem(pem(other[0]))} for other in accepted]
    return [{"version": "v1alpha1", "machine": machine}, {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "w"}]


def test_a_config_of_the_talosconfigs_ca_passes():
    old = authority()
    trust.check_talosconfig_reaches(config(old), talosconfig([old], old), "config_file")


def test_each_step_of_a_rotation_keeps_the_talosconfig_of_that_step():
    old, new = authority(), authority()
    # accept: the old CA issues, the new one is accepted; swap: the reverse, with a talosconfig trusting both.
    trust.check_talosconfig_reaches(config(old, [new]), talosconfig([old], old), "config")
    trust.check_talosconfig_reaches(config(new, [old]), talosconfig([old, new], old), "config")
    # drop: the new CA alone, with the new talosconfig.
    trust.check_talosconfig_reaches(config(new), talosconfig([new], new), "config")


def test_a_config_rendered_before_a_rotation_is_refused_with_the_new_talosconfig():
    old, new = authority(), authority()
    with pytest.raises(TalosConfigError) as refused:
        trust.check_talosconfig_reaches(config(old), talosconfig([new], new), "config_file")
    assert str(refused.value) == (
        "The Talos CA of config_file (machine.ca.crt, sha256 %s) is not a CA the talosconfig trusts (talosconfig context "
        "'prod' (/t)): once a node runs it, its API would serve certificates this talosconfig cannot verify. Render the "
        "config from the secrets bundle the talosconfig was issued from (after a CA rotation, the rotated one), or use a "
        "talosconfig of the config's CA. Nothing was applied." % talos_pki.fingerprint(old[0])[:23])


def test_a_swap_before_the_accept_step_is_refused():
    old, new = authority(), authority()
    # The talosconfig trusts both CAs but its certificate is the old CA's, which the config no longer accepts.
    with pytest.raises(TalosConfigError) as refused:
        trust.check_talosconfig_reaches(config(new), talosconfig([old, new], old), "config")
    assert str(refused.value).startswith(
        "The talosconfig's client certificate (talosconfig context 'prod' (/t)) was issued by neither the Talos CA of "
        "config (machine.ca.crt) nor one of its machine.acceptedCAs: once a node runs it, it would refuse this "
        "talosconfig.")


def test_a_ca_with_the_same_name_and_another_key_is_not_trusted():
    old, impostor = authority(), authority()
    assert old[0].subject == impostor[0].subject
    with pytest.raises(TalosConfigError):
        trust.check_talosconfig_reaches(config(impostor, [old]), talosconfig([old], old), "config")


def test_nothing_is_checked_without_credentials_or_a_talos_ca():
    old, new = authority(), authority()
    trust.check_talosconfig_reaches(config(old), ConnectionSettings(["10.5.0.2"], insecure=True), "config")
    without_ca = config(old)
    del without_ca[0]["machine"]["ca"]
    trust.check_talosconfig_reaches(without_ca, talosconfig([new], new), "config")


def test_an_unreadable_ca_is_left_to_the_nodes_validation():
    new = authority()
    unreadable = config(new)
    unreadable[0]["machine"]["ca"]["crt"] = "not base64"
    trust.check_talosconfig_reaches(unreadable, talosconfig([new], new), "config")


class ClientOf(object):
    """A client of ``settings`` whose Version calls answer ``answer`` (a tag, or an error to raise)."""

    def __init__(self, settings, answer):
        self.settings = settings
        self.answer = answer
        self.calls = []

    def call(self, method, request=None, node=None, **_options):
        self.calls.append((method, node))
        if isinstance(self.answer, Exception):
            raise self.answer

        class Reply(object):
            class version(object):
                tag = self.answer
        return [Reply]


def test_a_node_that_refuses_the_talosconfig_now_is_the_fault_in_its_own_words():
    old, new = authority(), authority()
    unverified = TalosTLSError("Certificate verification of endpoint 10.5.0.2:50000 failed.")
    client = ClientOf(talosconfig([new], new), unverified)
    with pytest.raises(TalosTLSError) as refused:
        trust.check_apply_keeps_access(client, config(old), ["10.5.0.3"], "config_file")
    assert refused.value is unverified and client.calls == [(rpc.VERSION, "10.5.0.3")]
    # A node that answers, or a node in maintenance mode that does not tell its version: the config is the fault.
    for answer in ("v1.14.0", TalosUnimplementedError("Version is not implemented")):
        client = ClientOf(talosconfig([new], new), answer)
        with pytest.raises(TalosConfigError) as refused:
            trust.check_apply_keeps_access(client, config(old), ["10.5.0.3"], "config_file")
        assert str(refused.value).startswith("The Talos CA of config_file (machine.ca.crt")
        assert client.calls == [(rpc.VERSION, "10.5.0.3")]
    # A config that keeps the access costs no call.
    client = ClientOf(talosconfig([new], new), unverified)
    trust.check_apply_keeps_access(client, config(new), ["10.5.0.3"], "config")
    assert client.calls == []
