# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What expires when: certificate reports, the CAs of both config forms, the kubeconfig's certificates, expiry, and
talos_certificate_info's read of nodes and files (against the emulator)."""

import base64
import datetime

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import expiry as certificates
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import kubeconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import CertificateAuthority, SecretsBundle

ENDPOINT = "https://cp.example:6443"
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14", now=NOW)


def test_report_counts_whole_days_and_goes_negative_once_expired(bundle):
    certificate = bundle.os_ca.certificate
    facts = certificates.report(certificate, NOW)
    assert facts["days_left"] == 3650 and facts["issuer"] == facts["subject"] == "O=talos"
    assert facts["key_algorithm"] == "ed25519" and facts["fingerprint_sha256"] == talos_pki.fingerprint(certificate)
    just_before_end = certificate.not_valid_after_utc - datetime.timedelta(hours=1)
    assert certificates.report(certificate, just_before_end)["days_left"] == 0
    assert certificates.report(certificate, certificate.not_valid_after_utc + datetime.timedelta(hours=1))["days_left"] == -1


@pytest.mark.parametrize("version,form", [("v1.13", "v1alpha1"), ("v1.14", "documents")])
@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
def test_config_authorities_of_both_forms(bundle, version, form, machine_type):
    text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version)
    authorities = certificates.ConfigAuthorities.from_config(text, "cp-1")
    assert authorities.form == form
    assert authorities.talos_ca == bundle.os_ca.crt_pem and authorities.talos_accepted == []
    if form == "documents" and machine_type == "worker":
        # A v1.14 worker config holds the Kubernetes CA as accepted only.
        assert authorities.kubernetes_ca is None and authorities.kubernetes_accepted == [bundle.cas["k8s"].crt_pem]
    else:
        assert authorities.kubernetes_ca == bundle.cas["k8s"].crt_pem
    report = authorities.report(NOW, "cp-1")
    assert report["talos_ca"]["fingerprint_sha256"] == talos_pki.fingerprint(bundle.os_ca.certificate)
    assert report["config_form"] == form
    assert bundle.os_ca.key_pem not in repr(report) and bundle.cas["k8s"].key_pem not in repr(report)


def test_config_authorities_read_accepted_talos_cas(bundle):
    other = CertificateAuthority.generate("ed25519", "talos", NOW)
    documents = list(yaml.safe_load_all(config_generation.generate_machine_config(bundle, "controlplane", "prod", ENDPOINT,
                                                                                  talos_version="v1.13")))
    documents[0]["machine"]["acceptedCAs"] = [{"crt": talos_pki.b64_pem(other.crt_pem)}]
    authorities = certificates.ConfigAuthorities.from_config(yaml.safe_dump_all(documents), "cp-1")
    assert authorities.talos_accepted == [other.crt_pem]
    accepted = authorities.report(NOW, "cp-1")["talos_accepted_cas"]
    assert [ca["fingerprint_sha256"] for ca in accepted] == [talos_pki.fingerprint(other.certificate)]


def test_a_damaged_accepted_ca_names_the_field_and_the_node():
    text = yaml.safe_dump({"version": "v1alpha1", "machine": {"type": "worker", "acceptedCAs": [{"crt": "bm90IHBlbQ=="}]}})
    with pytest.raises(TalosConfigError, match=r"^The machine config of cp-1 cannot be read: machine.acceptedCAs\[0\].crt "
                                               r"is not base64-encoded PEM\.$"):
        certificates.ConfigAuthorities.from_config(text, "cp-1")


def test_kubeconfig_helpers_read_ca_bundles_and_client_certificates(bundle):
    second = CertificateAuthority.generate("ecdsa", "kubernetes", NOW)
    client, _key = talos_pki.issue_client_certificate(bundle.cas["k8s"].certificate, bundle.cas["k8s"].key, ["system:masters"],
                                                      NOW, datetime.timedelta(days=10))
    config = {
        "clusters": [{"name": "prod", "cluster": {"server": "https://[fd00::1]:6443", "certificate-authority-data":
                                                  talos_pki.b64_pem(bundle.cas["k8s"].crt_pem + second.crt_pem)}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": talos_pki.b64_pem(talos_pki.certificate_pem(client))}},
                  {"name": "broken", "user": {"client-certificate-data": "bm90IHBlbQ=="}}],
    }
    ((name, server, authorities),) = kubeconfig.cluster_authorities(config)
    assert (name, server, len(authorities)) == ("prod", "https://[fd00::1]:6443", 2)
    assert [(user, cert is not None) for user, cert in kubeconfig.user_certificates(config)] == [("admin", True), ("broken", False)]
    assert kubeconfig.credentials_expire_soon(config, NOW)
    assert certificates._https_host_port(server) == ("fd00::1", 6443)
    assert certificates._https_host_port("https://k8s.example") == ("k8s.example", 443)
    assert certificates._https_host_port("http://k8s.example:6443") is None


def test_expiring_lists_certificates_within_warn_before_soonest_first(bundle):
    soon = {"subject": "O=os:admin", "not_after": "2026-06-06T12:00:00Z", "days_left": 5}
    later = {"subject": "CN=cp-1", "not_after": "2026-06-21T12:00:00Z", "days_left": 20}
    far = {"subject": "O=talos", "not_after": "2036-05-29T12:00:00Z", "days_left": 3650}
    result = {
        "nodes": {"10.5.0.2": {"talos_ca": far, "talos_accepted_cas": [far, later], "apid": None}, "10.5.0.3": {"error": "x"}},
        "files": {"talosconfig": {"path": "/t", "client": soon, "cas": [far]}, "secrets": None},
    }
    now = datetime.datetime(2026, 6, 1, 12, tzinfo=datetime.timezone.utc)
    assert certificates.expiring(result, datetime.timedelta(days=20), now) == [
        {"where": "talosconfig /t", "name": "client", "subject": "O=os:admin", "not_after": "2026-06-06T12:00:00Z",
         "days_left": 5},
        {"where": "node 10.5.0.2", "name": "talos_accepted_cas[1]", "subject": "CN=cp-1",
         "not_after": "2026-06-21T12:00:00Z", "days_left": 20},
    ]
    assert certificates.expiring(result, datetime.timedelta(days=4, hours=23), now) == []
    assert certificates.expiring(result, datetime.timedelta(days=5), now)[0]["name"] == "client"
    assert certificates.expiry_warning(dict(certificates.expiring(result, datetime.timedelta(days=5), now)[0],
                                            days_left=-1)) == (
        "The client of talosconfig /t (O=os:admin) expired on 2026-06-06T12:00:00Z.")


def test_load_certificates_reads_every_certificate_of_a_bundle(bundle):
    pem = bundle.os_ca.crt_pem + bundle.cas["k8s"].crt_pem
    assert [c.subject.rfc4514_string() for c in certificates.load_certificates(pem, "ca")] == ["O=talos", "O=kubernetes"]
    with pytest.raises(talos_pki.PKIError, match="^ca is not a PEM certificate$"):
        certificates.load_certificates(base64.b64encode(b"nothing").decode(), "ca")


# talos_certificate_info's read, against the emulator.

def _read(cluster, warnings, role="admin", **options):
    params = {"talosconfig": cluster.talosconfig_path(role), "timeout": 10}
    params.update((name, options.pop(name)) for name in ("node", "nodes") if name in options)
    client = TalosClient(ConnectionSettings.from_params(params))
    try:
        return certificates.read_certificates(client, client.nodes, warn=warnings.append, **options)
    finally:
        client.close()


def test_every_node_and_file_is_read_and_what_expires_is_a_warning(emulator):
    cluster = emulator(controlplanes=1, workers=1)
    nodes = [node.address for node in cluster.nodes]
    os_ca = talos_pki.fingerprint(SecretsBundle.load(cluster.state_dir + "/secrets.yaml").os_ca.certificate)
    warnings = []
    result = _read(cluster, warnings, nodes=nodes, secrets=cluster.state_dir + "/secrets.yaml", warn_before="400d")
    assert sorted(result) == ["changed", "expiring", "files", "nodes"] and result["changed"] is False
    for node in nodes:
        assert result["nodes"][node]["talos_ca"]["fingerprint_sha256"] == os_ca
        assert result["nodes"][node]["apid"]["trusted"] is True and "config_error" not in result["nodes"][node]
    assert result["files"]["secrets"]["talos_ca"]["fingerprint_sha256"] == os_ca and result["files"]["kubeconfig"] is None
    assert result["files"]["talosconfig"]["path"] == cluster.talosconfig_path()
    # warn_before above a year: each node's apid certificate and the talosconfig's client certificate expire within it.
    found = [(item["where"], item["name"]) for item in result["expiring"]]
    assert ("node %s" % nodes[0], "apid") in found and ("node %s" % nodes[1], "apid") in found
    assert ("talosconfig %s" % cluster.talosconfig_path(), "client") in found
    assert warnings == [certificates.expiry_warning(item) for item in result["expiring"]]
    assert _read(cluster, [], nodes=nodes)["expiring"] == []


def test_a_node_off_fails_the_read_after_the_others_with_the_files_and_what_expires(emulator):
    cluster = emulator(controlplanes=1, workers=1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    cluster.power_off(worker)
    warnings = []
    with pytest.raises(ActionFailed) as failed:
        _read(cluster, warnings, nodes=[cp.address, worker.address], warn_before="400d")
    assert failed.value.message.startswith("1 of 2 nodes failed (%s): " % worker.address)
    result = failed.value.to_result()
    assert result["nodes"][worker.address]["failed"] is True and result["nodes"][cp.address]["apid"]["trusted"] is True
    assert ("node %s" % cp.address, "apid") in [(item["where"], item["name"]) for item in result["expiring"]]
    assert result["files"]["talosconfig"]["client"]["roles"] == ["os:admin"] and len(warnings) == len(result["expiring"])

    # One node (not a list): its failure is the task's, with its own keys, the files and what expires.
    with pytest.raises(ActionFailed) as failed:
        _read(cluster, [], node=worker.address, warn_before="400d")
    result = failed.value.to_result()
    assert "nodes" not in result and result["node"] == worker.address and result["api_unreachable"] is True
    assert result["files"]["talosconfig"]["path"] == cluster.talosconfig_path()
    assert [item["where"] for item in result["expiring"]] == ["talosconfig %s" % cluster.talosconfig_path()]


def test_a_reader_gets_apid_alone_and_a_failed_handshake_is_a_warning(emulator):
    cluster = emulator(controlplanes=1)
    cp = cluster.controlplanes[0]
    warnings = []
    # One node: its certificates at the top. A reader may not read the machine config; port 1 answers no handshake.
    result = _read(cluster, warnings, role="reader", node=cp.address, api_port=1)
    assert "Permission denied" in result["config_error"] and "talos_ca" not in result
    assert result["apid"] is None and result["apid_error"].startswith("No TLS handshake with %s:1 completed" % cp.address)
    assert warnings == ["apid's serving certificate of node %s could not be read: %s" % (cp.address, result["apid_error"])]
    assert sorted(result["files"]) == ["kubeconfig", "secrets", "talosconfig"]


def test_a_missing_kubeconfig_and_a_bad_duration_are_refused(emulator, tmp_path):
    cluster = emulator(controlplanes=1)
    with pytest.raises(TalosConfigError, match="^kubeconfig %s does not exist or is not a kubeconfig" % (tmp_path / "none")):
        _read(cluster, [], nodes=[cluster.controlplanes[0].address], kubeconfig=str(tmp_path / "none"))
    with pytest.raises(TalosConfigError, match="warn_before"):
        _read(cluster, [], nodes=[cluster.controlplanes[0].address], warn_before="30 days")
