# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apid's trust follows the node's config: accepted CAs, the issuing CA, new certificates without a reboot
(server-behaviour.md §3.1-3.2; Talos OSRoot = machine.acceptedCAs + machine.ca)."""

import base64
import socket
import ssl

import pytest
import yaml
from cryptography import x509
from grpclib.exceptions import StreamTerminatedError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from emulator_client import client_context, peer_certificate
from talos_emulator import pki

NO_REBOOT = machine_pb2.ApplyConfigurationRequest.NO_REBOOT
REFUSED = (ConnectionError, StreamTerminatedError, OSError)


def _b64(pem):
    return base64.b64encode(pem).decode()


def _apply(admin, node, change):
    """Apply ``node``'s own config with ``change(machine)`` made to its v1alpha1 machine section, without a reboot."""
    documents = list(yaml.safe_load_all(node.config_bytes))
    change(documents[0]["machine"])
    request = machine_pb2.ApplyConfigurationRequest(data=yaml.safe_dump_all(documents).encode(), mode=NO_REBOOT)
    reply = admin.call("machine.MachineService/ApplyConfiguration", request, node=node.address)
    assert reply.messages[0].mode == NO_REBOOT


def _issuer(node, context):
    return x509.load_der_x509_certificate(peer_certificate(node, context)).issuer


def _version(api, cluster, context, node):
    return api(cluster, context=context).call("machine.MachineService/Version", node=node.address, timeout=3)


@pytest.mark.parametrize("talos_version", ["v1.14.0", "v1.12.0"])
def test_an_accepted_ca_admits_its_client_certificates_without_a_reboot(emulator, api, talos_version):
    cluster = emulator(controlplanes=1, talos_version=talos_version)
    cp = cluster.controlplanes[0]
    boot_id = cp.boot_id
    other = pki.CertificateAuthority.generate("talos", "talos")
    context = client_context(cluster.secrets.os_ca.crt_pem, *other.issue_client(["os:admin"]))
    with pytest.raises(REFUSED):
        _version(api, cluster, context, cp)

    admin = api(cluster)
    _apply(admin, cp, lambda machine: machine.update(acceptedCAs=[{"crt": _b64(other.crt_pem)}]))
    assert _version(api, cluster, context, cp).messages[0].version.tag == talos_version
    # The issuing CA stays accepted, and its server certificate is unchanged.
    assert admin.call("machine.MachineService/Version").messages[0].version.tag == talos_version

    _apply(admin, cp, lambda machine: machine.pop("acceptedCAs"))
    with pytest.raises(REFUSED):
        _version(api, cluster, context, cp)
    assert cp.boot_id == boot_id and cp.reboots == 0


def test_a_certificate_from_an_unknown_ca_ends_the_connection_before_any_http2_frame(emulator):
    cluster = emulator(controlplanes=1)
    cp = cluster.controlplanes[0]
    other = pki.CertificateAuthority.generate("talos", "talos")
    refused = client_context(cluster.secrets.os_ca.crt_pem, *other.issue_client(["os:admin"]))
    accepted = client_context(cluster.secrets.os_ca.crt_pem, *cluster.secrets.os_ca.issue_client(["os:admin"]))
    first_bytes = []
    for context in (refused, accepted):
        with socket.create_connection((cp.address, cp.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=cp.address) as tls:
                # TLS 1.3: the client's side of the handshake ends before the server has checked its certificate;
                # an accepted client then gets the server's HTTP/2 SETTINGS frame, a refused one the end of the stream.
                first_bytes.append(tls.recv(9))
    assert first_bytes[0] == b"" and len(first_bytes[1]) == 9 and first_bytes[1][3] == 0x4  # frame type SETTINGS


def test_a_swapped_issuing_ca_issues_new_serving_certificates_and_keeps_the_old_one_accepted(emulator, api):
    cluster = emulator(controlplanes=1, workers=2)
    cp, worker, other_worker = cluster.controlplanes[0], cluster.workers[0], cluster.workers[1]
    old, new = cluster.secrets.os_ca, pki.CertificateAuthority.generate("talos", "talos")
    admin = api(cluster)
    assert admin.call("machine.MachineService/Version", node=worker.address)  # an open connection, kept below
    boot_ids = [node.boot_id for node in cluster.nodes]

    # A worker whose config names a CA that no control plane issues from yet keeps its certificate: trustd cannot sign.
    _apply(admin, other_worker, lambda machine: machine.update(ca={"crt": _b64(new.crt_pem), "key": ""},
                                                               acceptedCAs=[{"crt": _b64(old.crt_pem)}]))
    both = old.crt_pem + new.crt_pem
    assert _issuer(other_worker, client_context(both, *old.issue_client(["os:admin"]))) == old.cert.subject

    _apply(admin, cp, lambda machine: machine.update(ca={"crt": _b64(new.crt_pem), "key": _b64(new.key_pem)},
                                                     acceptedCAs=[{"crt": _b64(old.crt_pem)}]))
    _apply(admin, worker, lambda machine: machine.update(ca={"crt": _b64(new.crt_pem), "key": ""},
                                                         acceptedCAs=[{"crt": _b64(old.crt_pem)}]))

    new_client = client_context(new.crt_pem, *new.issue_client(["os:admin"]))
    old_client = client_context(both, *old.issue_client(["os:admin"]))
    for node in cluster.nodes:
        assert _issuer(node, old_client) == new.cert.subject
        assert pki_signed(peer_certificate(node, old_client), new)
        # Client certificates of both CAs are accepted.
        assert _version(api, cluster, new_client, node).messages[0].version.tag == "v1.14.0"
        assert _version(api, cluster, old_client, node).messages[0].version.tag == "v1.14.0"
    # A client that trusts only the old CA no longer verifies the nodes.
    with pytest.raises(ssl.SSLCertVerificationError):
        peer_certificate(cp, client_context(old.crt_pem, *old.issue_client(["os:admin"])))
    # The connection opened before the swap keeps its session, as on Talos.
    assert admin.call("machine.MachineService/Version", node=worker.address)
    assert [node.boot_id for node in cluster.nodes] == boot_ids

    # Dropping the old CA refuses its client certificates.
    for node in cluster.nodes:
        _apply(api(cluster, context=new_client), node, lambda machine: machine.pop("acceptedCAs"))
    with pytest.raises(REFUSED):
        _version(api, cluster, old_client, cp)
    assert _version(api, cluster, new_client, worker).messages[0].version.tag == "v1.14.0"


def pki_signed(der, authority):
    from ansible_collections.talos_linux.talos.plugins.module_utils.common.x509 import signed_by
    return signed_by(x509.load_der_x509_certificate(der), authority.cert)
