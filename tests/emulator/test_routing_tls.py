# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS, RBAC and apid routing of the emulator against the Talos facts (server-behaviour.md §1, §3)."""

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from emulator_client import client_context, peer_certificate, talosconfig_credentials
from talos_emulator import pki


def _code(excinfo):
    return excinfo.value.status, excinfo.value.message


def test_version_hostname_servicelist_over_ed25519_mtls(emulator, api):
    cluster = emulator(controlplanes=2, workers=1)
    client = api(cluster)
    version = client.call("machine.MachineService/Version")
    assert len(version.messages) == 1
    item = version.messages[0]
    assert item.version.tag == "v1.14.0"
    assert item.features.rbac is True
    assert not item.HasField("metadata")
    assert client.call("machine.MachineService/Hostname").messages[0].hostname == "controlplane-1"
    services = {service.id: service for service in client.call("machine.MachineService/ServiceList").messages[0].services}
    assert {"apid", "etcd", "trustd", "kubelet", "cri", "machined"} <= set(services)
    assert services["apid"].state == "Running" and services["apid"].health.healthy
    # machined checks its own health; the dashboard has no health check.
    assert services["machined"].health.healthy and services["dashboard"].health.unknown
    # Not bootstrapped yet: etcd waits.
    assert services["etcd"].state == "Preparing"


def test_server_certificate_is_ed25519_and_names_the_node(emulator):
    cluster = emulator()
    node = cluster.nodes[0]
    cert = x509.load_der_x509_certificate(peer_certificate(node, client_context(*talosconfig_credentials(cluster.talosconfig()))))
    assert isinstance(cert.public_key(), ed25519.Ed25519PublicKey)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert node.address in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    assert "controlplane-1" in sans.get_values_for_type(x509.DNSName)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_node_metadata_forwards_through_control_plane(emulator, api):
    cluster = emulator(controlplanes=2, workers=1)
    client = api(cluster)
    for node in cluster.nodes:
        reply = client.call("machine.MachineService/Hostname", node=node.address)
        assert reply.messages[0].hostname == node.name
        assert not reply.messages[0].HasField("metadata")
    # An endpoint resolves its own name; other nodes' names do not resolve on Talos.
    assert client.call("machine.MachineService/Hostname", node="controlplane-1").messages[0].hostname == "controlplane-1"
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.MachineService/Hostname", node="worker-1")
    assert _code(excinfo) == (
        Status.UNAVAILABLE, 'connection error: desc = "transport: Error while dialing: dial tcp: lookup worker-1: no such host"')


def test_worker_endpoint_refuses_forwarding_but_answers_for_itself(emulator, api):
    cluster = emulator(controlplanes=1, workers=2)
    client = api(cluster)
    worker, other = cluster.workers
    assert client.call("machine.MachineService/Hostname", endpoint=worker.endpoint, node=worker.address).messages[0].hostname == worker.name
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.MachineService/Hostname", endpoint=worker.endpoint, node=other.address)
    assert _code(excinfo) == (Status.PERMISSION_DENIED, "no request forwarding")


def test_node_metadata_must_be_single_valued(emulator, api):
    cluster = emulator(controlplanes=2)
    client = api(cluster)
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.MachineService/Version", metadata=[("node", "127.0.0.1"), ("node", cluster.nodes[1].address)])
    assert _code(excinfo) == (Status.INVALID_ARGUMENT, "node metadata must be single-valued")


def test_one_to_many_adds_metadata_and_error_items(emulator, api):
    cluster = emulator(controlplanes=2, workers=1)
    client = api(cluster)
    cp2, worker = cluster.nodes[1], cluster.workers[0]
    cluster.faults.make_unreachable(worker)
    reply = client.call("machine.MachineService/Hostname", nodes=["controlplane-1", cp2.address, worker.address])
    assert len(reply.messages) == 3
    # metadata.hostname is the target string as the caller gave it.
    by_host = {item.metadata.hostname: item for item in reply.messages}
    assert by_host["controlplane-1"].hostname == "controlplane-1"
    assert by_host[cp2.address].hostname == cp2.name
    failed = by_host[worker.address]
    assert failed.hostname == ""
    assert failed.metadata.status.code == Status.UNAVAILABLE.value
    assert failed.metadata.error.startswith("rpc error: code = Unavailable desc = connection error")


def test_one_to_many_is_refused_for_cosi_lifecycle_and_image(emulator, api):
    cluster = emulator()
    client = api(cluster)
    for method in ("cosi.resource.State/Get", "machine.LifecycleService/Upgrade", "machine.ImageService/Pull"):
        with pytest.raises(GRPCError) as excinfo:
            client.call(method, nodes=[cluster.nodes[0].address])
        assert _code(excinfo) == (Status.INVALID_ARGUMENT, "one-2-many proxying is not supported for method /%s" % method)


def test_unreachable_target_is_unavailable(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster)
    cluster.faults.make_unreachable(cluster.workers[0])
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.MachineService/Version", node=cluster.workers[0].address)
    assert excinfo.value.status == Status.UNAVAILABLE
    cluster.faults.make_reachable(cluster.workers[0])
    assert client.call("machine.MachineService/Version", node=cluster.workers[0].address).messages[0].version.tag == "v1.14.0"


def test_rbac_roles_from_certificate_organization(emulator, api):
    cluster = emulator()
    reader = api(cluster, role="reader")
    operator = api(cluster, role="operator")
    assert reader.call("machine.MachineService/Version").messages[0].version.tag == "v1.14.0"
    for client, method in ((reader, "machine.MachineService/Reboot"), (operator, "machine.MachineService/Bootstrap"),
                           (reader, "machine.MachineService/Read")):
        with pytest.raises(GRPCError) as excinfo:
            client.call(method)
        assert _code(excinfo) == (Status.PERMISSION_DENIED, "not authorized")
    etcd_backup = api(cluster, talosconfig=cluster.talosconfig(roles=["os:etcd:backup"]))
    with pytest.raises(GRPCError) as excinfo:
        etcd_backup.call("machine.MachineService/Version")
    assert _code(excinfo) == (Status.PERMISSION_DENIED, "not authorized")
    # A reader cannot apply a config outside maintenance (handler re-check).
    assert cluster.audit() == []


def _context_for(cluster, authority, roles=("os:admin",), client_auth=True):
    crt, key = authority.issue_client(list(roles), client_auth=client_auth)
    return client_context(cluster.secrets.os_ca.crt_pem, crt, key)


@pytest.mark.parametrize("shape", ["other-ca", "server-auth-eku", "two-ekus"])
def test_bad_client_certificates_fail_the_handshake(emulator, api, shape):
    cluster = emulator()
    if shape == "other-ca":
        context = _context_for(cluster, pki.CertificateAuthority.generate("talos", "talos"))
    elif shape == "server-auth-eku":
        context = _context_for(cluster, cluster.secrets.os_ca, client_auth=False)
    else:
        ca = cluster.secrets.os_ca
        crt, key = ca._issue(
            x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "os:admin")]),
            x509.KeyUsage(True, False, False, False, False, False, False, False, False),
            [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH], 1,
        )
        context = client_context(ca.crt_pem, crt, key)
    client = api(cluster, context=context)
    with pytest.raises((ConnectionError, StreamTerminatedError, OSError)):
        client.call("machine.MachineService/Version", timeout=3)
    # The same cluster accepts a proper admin certificate.
    assert api(cluster).call("machine.MachineService/Version").messages[0].version.tag == "v1.14.0"


def test_one_to_many_streams_tag_every_frame(emulator, api):
    cluster = emulator(controlplanes=2, workers=1)
    client = api(cluster)
    cp2, worker = cluster.nodes[1], cluster.workers[0]
    cluster.faults.make_unreachable(worker)
    frames = client.call("machine.MachineService/Read", machine_pb2.ReadRequest(path="/proc/sys/kernel/random/boot_id"),
                         nodes=["controlplane-1", cp2.address, worker.address])
    by_host = {}
    for frame in frames:
        by_host.setdefault(frame.metadata.hostname, []).append(frame)
    assert b"".join(frame.bytes for frame in by_host[cp2.address]).decode().strip() == cp2.boot_id
    assert [(frame.bytes, frame.metadata.status.code) for frame in by_host[worker.address]] == [(b"", Status.UNAVAILABLE.value)]


def test_mixed_versions_and_v112_one_to_many_rule(emulator, api):
    cluster = emulator(controlplanes=1, workers=1, talos_version="v1.12.0", node_versions={"worker-1": "v1.14.0"})
    client = api(cluster)
    worker = cluster.workers[0].address
    tags = {item.metadata.hostname: item.version.tag for item in
            client.call("machine.MachineService/Version", nodes=["controlplane-1", worker]).messages}
    assert tags == {"controlplane-1": "v1.12.0", worker: "v1.14.0"}
    with pytest.raises(GRPCError) as excinfo:
        client.call("cosi.resource.State/Get", nodes=[worker])
    assert _code(excinfo) == (Status.INVALID_ARGUMENT, "one-2-many proxying is not supported for COSI methods")
    # The v1.14 worker serves LifecycleService, relayed by the v1.12 endpoint.
    with pytest.raises(GRPCError) as excinfo:
        client.call("machine.LifecycleService/Upgrade", node=worker)
    assert _code(excinfo) == (Status.INVALID_ARGUMENT, "invalid containerd namespace NS_UNKNOWN")
