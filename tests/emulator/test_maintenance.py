# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Maintenance mode (server-behaviour.md §4): insecure TLS, reader rights, install and reboot on apply."""

import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from emulator_client import client_context, peer_certificate
from talos_emulator import configgen, pki

Mode = machine_pb2.ApplyConfigurationRequest.Mode


def _error(client, method, request=None, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(method, request, **options)
    return excinfo.value.status, excinfo.value.message


def test_maintenance_serves_server_only_tls_with_fresh_ed25519_certificate(emulator, api):
    cluster = emulator(maintenance=True)
    node = cluster.nodes[0]
    client = api(cluster, insecure=True)
    version = client.call("machine.MachineService/Version").messages[0]
    assert version.version.tag == "v1.14.0"
    assert not version.HasField("features")
    certificate = x509.load_der_x509_certificate(peer_certificate(node, client_context(insecure=True)))
    assert isinstance(certificate.public_key(), ed25519.Ed25519PublicKey)
    assert certificate.subject.rfc4514_string() == "CN=%s" % pki.MAINTENANCE_COMMON_NAME
    # Signed by a per-boot CA, not the cluster's OS CA.
    assert node.server.ca_pem != cluster.secrets.os_ca.crt_pem
    assert node.server.maintenance_fingerprint == pki.spki_fingerprint(certificate.public_bytes(serialization.Encoding.PEM))


def test_maintenance_v113_rules(emulator, api):
    cluster = emulator(maintenance=True)
    client = api(cluster, insecure=True)
    assert client.call("machine.MachineService/Hostname").messages[0].hostname == "controlplane-1"
    assert client.call("storage.StorageService/Disks").messages[0].disks[0].device_name == "/dev/sda"
    assert client.call("machine.MachineService/ServiceList").messages[0].services
    for method in ("machine.MachineService/Reboot", "machine.MachineService/Reset", "machine.MachineService/Upgrade",
                   "machine.LifecycleService/Upgrade", "machine.MachineService/Kubeconfig", "machine.MachineService/Read"):
        assert _error(client, method) == (Status.PERMISSION_DENIED, "not authorized")
    assert _error(client, "machine.MachineService/EtcdMemberList") == (
        Status.UNIMPLEMENTED, "machine type is not set, cannot use member list API")
    assert _error(client, "machine.MachineService/EtcdStatus") == (
        Status.UNIMPLEMENTED, "machine type is not set, cannot use etcd status API")
    # Sensitive COSI types need admin; no routing in maintenance: `node` is ignored.
    assert _error(client, "cosi.resource.State/Get", state_pb2.GetRequest(
        namespace="config", type="MachineConfigs.config.talos.dev", id="v1alpha1")) == (Status.PERMISSION_DENIED, "not authorized")
    assert client.call("machine.MachineService/Hostname", node="10.9.9.9").messages[0].hostname == "controlplane-1"


def test_apply_in_maintenance_installs_and_reboots_into_mtls(emulator, api):
    cluster = emulator(maintenance=True, workers=1, reboot_seconds=0.2)
    cp, worker = cluster.nodes
    insecure = api(cluster, insecure=True)
    boot_id = cp.boot_id
    request = machine_pb2.ApplyConfigurationRequest(data=cluster.machine_config("controlplane").encode(), mode=Mode.AUTO)
    reply = insecure.call("machine.MachineService/ApplyConfiguration", request).messages[0]
    assert reply.mode == Mode.NO_REBOOT
    assert reply.mode_details == "Applied configuration without a reboot"
    request = machine_pb2.ApplyConfigurationRequest(data=cluster.machine_config("worker").encode(), mode=Mode.REBOOT)
    reply = insecure.call("machine.MachineService/ApplyConfiguration", request, endpoint=worker.endpoint).messages[0]
    assert reply.mode == Mode.NO_REBOOT
    cluster.wait_until(lambda: cp.reboots == 1 and worker.reboots == 1)
    cluster.wait_ready(cp)
    cluster.wait_ready(worker)
    assert cp.boot_id != boot_id
    assert cp.machine_type == "controlplane" and worker.machine_type == "worker"
    assert not cp.etcd_data
    secure = api(cluster)
    version = secure.call("machine.MachineService/Version").messages[0]
    assert version.features.rbac
    assert secure.call("machine.MachineService/Hostname", node=worker.address).messages[0].hostname == "worker-1"
    # An insecure client no longer gets in.
    with pytest.raises((ConnectionError, StreamTerminatedError, ssl.SSLError)):
        api(cluster, insecure=True).call("machine.MachineService/Version", timeout=3)
    audit = cluster.audit(method="ApplyConfiguration")
    assert [(entry["node"], entry["mode"], entry["dry_run"], entry["roles"]) for entry in audit] == [
        ("controlplane-1", "AUTO", False, ["os:reader"]), ("worker-1", "REBOOT", False, ["os:reader"])]


def test_apply_dry_run_in_maintenance_changes_nothing(emulator, api):
    cluster = emulator(maintenance=True)
    client = api(cluster, insecure=True)
    request = machine_pb2.ApplyConfigurationRequest(data=cluster.machine_config("controlplane").encode(), mode=Mode.AUTO, dry_run=True)
    reply = client.call("machine.MachineService/ApplyConfiguration", request).messages[0]
    assert reply.mode_details.startswith("Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n--- old\n+++ new\n")
    assert cluster.nodes[0].maintenance and cluster.nodes[0].reboots == 0
    assert cluster.audit(include_dry_run=False) == []


def test_maintenance_v112_rules(emulator, api):
    cluster = emulator(maintenance=True, talos_version="v1.12.0")
    client = api(cluster, insecure=True)
    assert _error(client, "machine.MachineService/Version") == (Status.UNIMPLEMENTED, "API is not implemented in maintenance mode")
    assert _error(client, "machine.MachineService/Hostname") == (Status.UNIMPLEMENTED, "method Hostname not implemented")
    assert _error(client, "machine.LifecycleService/Upgrade") == (Status.UNIMPLEMENTED, "unknown service machine.LifecycleService")
    assert client.call("storage.StorageService/Disks").messages[0].disks
    data = cluster.machine_config("controlplane").encode()
    assert _error(client, "machine.MachineService/ApplyConfiguration", machine_pb2.ApplyConfigurationRequest(data=data, mode=Mode.NO_REBOOT)) == (
        Status.UNIMPLEMENTED, "apply configuration --mode='no-reboot' is not supported in maintenance mode")
    assert _error(client, "machine.MachineService/ApplyConfiguration", machine_pb2.ApplyConfigurationRequest(data=b"{{", mode=Mode.AUTO))[0] == Status.UNKNOWN
    dry = client.call("machine.MachineService/ApplyConfiguration", machine_pb2.ApplyConfigurationRequest(data=data, dry_run=True)).messages[0]
    assert dry.mode_details == "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
    reply = client.call("machine.MachineService/ApplyConfiguration", machine_pb2.ApplyConfigurationRequest(data=data, mode=Mode.REBOOT)).messages[0]
    assert reply.mode == 0 and reply.mode_details == ""
    cluster.wait_until(lambda: cluster.nodes[0].reboots == 1)
    cluster.wait_ready(cluster.nodes[0])
    assert api(cluster).call("machine.MachineService/Version").messages[0].version.tag == "v1.12.0"


def test_worker_waits_for_a_control_plane_holding_its_os_ca(emulator, api):
    cluster = emulator(maintenance=True, workers=1, reboot_seconds=0.1)
    cp, worker = cluster.nodes
    secrets = configgen.SecretsBundle.generate()
    endpoint = "https://%s:6443" % cp.address

    def apply(node, role):
        data = configgen.generate_machine_config(secrets, role, "fresh", endpoint).encode()
        api(cluster, insecure=True).call("machine.MachineService/ApplyConfiguration",
                                         machine_pb2.ApplyConfigurationRequest(data=data, mode=Mode.AUTO), endpoint=node.endpoint)

    apply(worker, "worker")
    cluster.wait_until(lambda: worker.reboots == 1 and worker.powered)
    # trustd has nothing to offer yet: the worker's API stays down.
    assert not worker.reachable
    apply(cp, "controlplane")
    cluster.wait_ready(cp)
    cluster.wait_ready(worker)
    talosconfig = configgen.generate_talosconfig(secrets, "fresh", [cp.endpoint])
    assert api(cluster, talosconfig=talosconfig).call("machine.MachineService/Hostname", node=worker.address).messages[0].hostname == "worker-1"
