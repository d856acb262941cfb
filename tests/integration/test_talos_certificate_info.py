# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_certificate_info through ansible-playbook against the emulator: what expires when, with -vvv free of secrets."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import os
import socket
import ssl
import threading

import yaml

from module_plays import module_play
from test_robustness import assert_no_secret, cluster_secrets

from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from talos_emulator import pki


def _fingerprint(authority):
    return talos_pki.fingerprint(authority.cert)


def info_play(cluster, nodes, role="admin", **options):
    play = module_play(cluster, "talos_certificate_info", dict(options, nodes=nodes), None, "certificates", role=role)
    del play["module_defaults"]["group/talos_linux.talos.talos"]["node"]
    return play


class _TLSServer(object):
    """A TLS listener on 127.0.0.1 showing one certificate: the Kubernetes API server a kubeconfig names."""

    def __init__(self, tmp_path, crt_pem, key_pem):
        path = str(tmp_path / "apiserver.pem")
        with open(path, "wb") as handle:
            handle.write(crt_pem + pki.to_standard_pem(key_pem))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(path)
        os.unlink(path)
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(5)
        self.port = self.socket.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                raw, _address = self.socket.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(raw, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    def close(self):
        self.socket.close()


def _kubeconfig(cluster, server, days):
    """An admin kubeconfig whose client certificate, from the cluster's Kubernetes CA, expires in ``days`` days."""
    authority, now = cluster.secrets.k8s_ca, talos_pki.now_utc()
    certificate, private_key = talos_pki.issue_client_certificate(
        authority.cert, authority.key, ["system:masters"], now - datetime.timedelta(days=30),
        datetime.timedelta(days=30 + days, hours=1))
    crt = talos_pki.certificate_pem(certificate).encode()
    key = talos_pki.private_key_pem(private_key).encode()
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "admin@emulated",
        "clusters": [{"name": "emulated", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(cluster.secrets.k8s_ca.crt_pem).decode()}}],
        "contexts": [{"name": "admin@emulated", "context": {"cluster": "emulated", "user": "admin@emulated"}}],
        "users": [{"name": "admin@emulated", "user": {
            "client-certificate-data": base64.b64encode(crt).decode(), "client-key-data": base64.b64encode(key).decode()}}],
    }, key


def test_reports_nodes_and_files_and_warns_of_a_client_certificate_close_to_expiry(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    serving_crt, serving_key = cluster.secrets.k8s_ca.issue_server("kube-apiserver", ip_addresses=["127.0.0.1"], days=200)
    server = _TLSServer(tmp_path, serving_crt, serving_key)
    try:
        config, client_key = _kubeconfig(cluster, "https://127.0.0.1:%d" % server.port, days=10)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        secrets = os.path.join(cluster.state_dir, "secrets.yaml")
        run = run_playbook(info_play(cluster, [cp.address, worker.address], secrets=secrets, kubeconfig=str(kubeconfig),
                                     warn_before="30d"), verbosity=3)
    finally:
        server.close()
    task = run.task("certificates")
    assert task["status"] == "ok", task["result"]
    result = task["result"]
    talos_ca, k8s_ca = _fingerprint(cluster.secrets.os_ca), _fingerprint(cluster.secrets.k8s_ca)
    for address in (cp.address, worker.address):
        node = result["nodes"][address]
        assert node["config_form"] == "v1alpha1"
        assert node["talos_ca"]["fingerprint_sha256"] == talos_ca and node["talos_accepted_cas"] == []
        assert node["kubernetes_ca"]["fingerprint_sha256"] == k8s_ca
        assert node["kubernetes_ca"]["days_left"] in (3649, 3650)
        apid = node["apid"]
        assert apid["trusted"] is True and apid["issuer"] == cluster.secrets.os_ca.cert.subject.rfc4514_string()
        assert apid["subject"] == "CN=%s" % node_name(cluster, address)
        assert "key" not in str(sorted(node))
    files = result["files"]
    assert files["secrets"]["path"] == secrets and files["secrets"]["talos_ca"]["fingerprint_sha256"] == talos_ca
    assert files["secrets"]["etcd_ca"]["fingerprint_sha256"] == _fingerprint(cluster.secrets.etcd_ca)
    assert files["talosconfig"]["path"] == cluster.talosconfig_path("admin")
    assert files["talosconfig"]["client"]["roles"] == ["os:admin"] and files["talosconfig"]["client"]["trusted"] is True
    assert [ca["fingerprint_sha256"] for ca in files["talosconfig"]["cas"]] == [talos_ca]
    (entry,) = files["kubeconfig"]["clusters"]
    assert entry["server_certificate"]["trusted"] is True and entry["server_certificate"]["days_left"] in (199, 200)
    (user,) = files["kubeconfig"]["users"]
    assert user["client"]["days_left"] in (9, 10)
    # Only the kubeconfig's client certificate is within 30 days, and it says so.
    assert [(item["where"], item["name"]) for item in result["expiring"]] == [
        ("kubeconfig %s" % kubeconfig, "users[0].client")]
    assert any("users[0].client of kubeconfig" in warning and "expires in" in warning for warning in result["warnings"])
    assert cluster.audit() == []
    secrets_seen = cluster_secrets(cluster) | {client_key.decode(), base64.b64encode(client_key).decode()}
    assert_no_secret(run.stdout + run.stderr, secrets_seen)


def node_name(cluster, address):
    return cluster.node(address).hostname


def test_a_reader_sees_serving_certificates_and_a_node_that_is_off_fails_the_task_after_the_others(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=2)
    cp, worker, off = cluster.controlplanes[0], cluster.workers[0], cluster.workers[1]
    cluster.power_off(off)
    run = run_playbook(info_play(cluster, [cp.address, worker.address, off.address], role="reader", warn_before="400d"),
                       expect_rc=2)
    task = run.task("certificates")
    assert task["status"] == "failed", task["result"]
    result = task["result"]
    assert result["msg"].startswith("1 of 3 nodes failed (%s): " % off.address)
    for address in (cp.address, worker.address):
        node = result["nodes"][address]
        assert "Permission denied" in node["config_error"] and "talos_ca" not in node
        assert node["apid"]["trusted"] is True
    assert result["nodes"][off.address]["failed"] is True and result["nodes"][off.address]["code"]
    # warn_before above a year: every apid serving certificate and the talosconfig's client certificate are listed.
    names = sorted((item["where"], item["name"]) for item in result["expiring"])
    assert ("node %s" % cp.address, "apid") in names and ("node %s" % worker.address, "apid") in names
    assert ("talosconfig %s" % cluster.talosconfig_path("reader"), "client") in names


def test_every_node_off_fails_the_task(emulator, run_playbook):
    cluster = emulator(controlplanes=1, workers=1)
    worker = cluster.workers[0]
    cluster.power_off(worker)
    play = info_play(cluster, [worker.address])
    play["module_defaults"]["group/talos_linux.talos.talos"]["endpoints"] = [worker.endpoint]
    task = run_playbook(play, expect_rc=2).task("certificates")
    assert task["status"] == "failed" and task["result"]["nodes"][worker.address]["failed"] is True
    assert task["result"]["msg"].startswith("Talos endpoint %s " % worker.endpoint)


def test_expired_certificate_is_reported_with_negative_days(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1)
    now = datetime.datetime.now(datetime.timezone.utc)
    config, _key = _kubeconfig(cluster, "http://127.0.0.1:1", days=-2)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    result = run_playbook(info_play(cluster, [cluster.controlplanes[0].address], kubeconfig=str(kubeconfig))).task(
        "certificates")["result"]
    (user,) = result["files"]["kubeconfig"]["users"]
    assert user["client"]["days_left"] < 0 and user["client"]["not_after"] < now.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert any("expired on" in warning for warning in result["warnings"])


def test_one_node_is_reported_at_the_top_and_a_list_of_one_under_nodes(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    cp = cluster.controlplanes[0]
    listed = run_playbook(info_play(cluster, [cp.address])).task("certificates")["result"]
    assert sorted(listed["nodes"]) == [cp.address] and "apid" not in listed
    one = info_play(cluster, [cp.address], warn_before="400d")
    del one["tasks"][0]["talos_linux.talos.talos_certificate_info"]["nodes"]
    one["module_defaults"]["group/talos_linux.talos.talos"]["node"] = cp.address
    result = run_playbook(one).task("certificates")["result"]
    # The same certificate; its days_left may have turned over between the two runs.
    same = [{key: value for key, value in entry.items() if key != "days_left"}
            for entry in (result["apid"], listed["nodes"][cp.address]["apid"])]
    assert "nodes" not in result and same[0] == same[1]
    assert result["talos_ca"]["fingerprint_sha256"] == _fingerprint(cluster.secrets.os_ca)
    # warn_before above a year: the node's apid certificate is found at the top as it is under nodes.
    assert ("node %s" % cp.address, "apid") in [(item["where"], item["name"]) for item in result["expiring"]]
    assert result["files"]["talosconfig"]["path"] == cluster.talosconfig_path("admin")
