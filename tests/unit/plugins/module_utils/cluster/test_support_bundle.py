# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""support_bundle: talosctl's tables, redacted logs, age recipients and the private, atomic archive."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import zipfile

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster import support_bundle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2


def test_sizes_as_go_humanize_writes_them():
    assert [support_bundle._human_bytes(count) for count in (0, 999, 1500, 15000, 1500000000, 700000000)] == [
        "0 B", "999 B", "1.5 kB", "15 kB", "1.5 GB", "700 MB"]


def test_process_table_names_the_executable_as_talosctl_does():
    reply = machine_pb2.Process(processes=[
        machine_pb2.ProcessInfo(pid=1, state="S", threads=24, cpu_time=1.5, virtual_memory=1500000, resident_memory=999,
                                command="init", executable="/sbin/init", args="init --flag"),
        machine_pb2.ProcessInfo(pid=42, state="R", threads=1, command="kworker"),
    ])
    lines = support_bundle._processes(reply).decode().splitlines()
    assert lines[0].split() == ["PID", "STATE", "THREADS", "CPU-TIME", "VIRTMEM", "RESMEM", "COMMAND"]
    assert lines[1].split()[-2:] == ["/sbin/init", "--flag"] and "1.5 MB" in lines[1]
    assert lines[2].endswith("kworker")


def test_log_lines_holding_a_secret_are_replaced():
    text = support_bundle._text(b"ok line\nAuthorization: Bearer abc.def.ghi\nhttps://user:hunter2@example.com/x\n").decode()
    assert text.startswith("ok line\n") and "hunter2" not in text and "<redacted>" in text


def test_age_recipients_are_checked():
    pytest.importorskip("pyrage")
    import pyrage
    identity = pyrage.x25519.Identity.generate()
    assert len(support_bundle.age_recipients([str(identity.to_public())])) == 1
    with pytest.raises(TalosError, match="encryption_recipients holds 'nope'"):
        support_bundle.age_recipients(["nope"])
    with pytest.raises(TalosError, match="not a recipient age accepts"):
        support_bundle.age_recipients(["age1notvalid"])


class _Collected:
    """A bundle whose collection writes one file, or fails half way."""

    def __init__(self, fail=False):
        self.fail = fail

    def collect(self, spool):
        spool.write(b"half a zip")
        if self.fail:
            raise TalosError("the collection broke")
        spool.seek(0)
        writer = support_bundle.BundleWriter(spool)
        writer.add("10.5.0.2", "summary", "10.5.0.2/summary", b"Server:\n")
        writer.close({"missed": []})
        return {"missed": []}


def test_the_archive_is_private_and_atomic(tmp_path):
    dest = str(tmp_path / "support.zip")
    support_bundle.write_bundle(_Collected(), dest)
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    with zipfile.ZipFile(dest) as archive:
        assert archive.namelist() == ["10.5.0.2/summary", "support-bundle.yaml"]
    with pytest.raises(TalosError):
        support_bundle.write_bundle(_Collected(fail=True), str(tmp_path / "broken.zip"))
    assert os.listdir(str(tmp_path)) == ["support.zip"]


def test_an_encrypted_archive_opens_with_the_identity(tmp_path):
    pytest.importorskip("pyrage")
    import pyrage
    identity = pyrage.x25519.Identity.generate()
    dest = tmp_path / "support.zip.age"
    support_bundle.write_bundle(_Collected(), str(dest), support_bundle.age_recipients([str(identity.to_public())]))
    assert dest.read_bytes().startswith(b"age-encryption.org/v1")
    assert pyrage.decrypt(dest.read_bytes(), [identity])[:2] == b"PK"


def _fake_cluster():
    """Three nodes: two answer everything, 10.5.0.4 is unreachable; one definition is sensitive."""
    from fake_talos import FakeTalos, cosi_state, fails_with, resource
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.inspect import inspect_pb2

    nodes = ["10.5.0.2", "10.5.0.3", "10.5.0.4"]
    fake = FakeTalos(nodes=nodes)
    version = machine_pb2.Version(version=machine_pb2.VersionInfo(tag="v1.14.0", os="linux", arch="amd64"))
    fake.answer(rpc.VERSION, [version])
    fake.answer(rpc.VERSION, fails_with("Unavailable", "dial tcp 10.5.0.4:50000: connect: no route to host"),
                node="10.5.0.4")
    fake.answer(rpc.DMESG, b"kern: info: [2026-01-01T00:00:00Z]: booted\n")
    fake.answer(rpc.LOGS, b"2026-01-01T00:00:00Z started\nkey: -----BEGIN PRIVATE KEY-----\n")
    services = machine_pb2.ServiceList(services=[machine_pb2.ServiceInfo(id="apid", state="Running")])
    fake.answer(rpc.SERVICE_LIST, [services])
    container = machine_pb2.ContainerInfo(id="kube-system/kube-proxy-x:kube-proxy", pod_id="kube-system/kube-proxy-x",
                                          name="kube-proxy", status="CONTAINER_EXITED", pid=0)
    fake.answer(rpc.CONTAINERS,
                [machine_pb2.Container(containers=[container])])
    mounts = machine_pb2.Mounts(stats=[machine_pb2.MountStat(filesystem="/dev/sda6", size=10 ** 10, available=4 * 10 ** 9,
                                                             mounted_on="/var")])
    fake.answer(rpc.MOUNTS, [mounts])
    fake.answer(rpc.READ, b"0000\t80861237\t0\n")
    fake.answer(rpc.DISK_STATS,
                [machine_pb2.DiskStats(devices=[machine_pb2.DiskStat(name="sda")])])
    fake.answer(rpc.PROCESSES, [machine_pb2.Process()])
    edge = inspect_pb2.ControllerDependencyEdge(controller_name="k8s.NodenameController", edge_type=inspect_pb2.INPUT_WEAK,
                                                resource_namespace="network", resource_type="HostnameStatuses.net.talos.dev")
    fake.answer(rpc.INSPECT_CONTROLLER_RUNTIME_DEPENDENCIES, [inspect_pb2.ControllerRuntimeDependency(edges=[edge])])
    fake.answer(rpc.COSI_LIST, cosi_state(
        resource("meta", "ResourceDefinitions.meta.cosi.dev", "hostnamestatuses.net.talos.dev",
                 {"type": "HostnameStatuses.net.talos.dev", "defaultNamespace": "network", "sensitivity": "non-sensitive"}),
        resource("meta", "ResourceDefinitions.meta.cosi.dev", "machineconfigs.config.talos.dev",
                 {"type": "MachineConfigs.config.talos.dev", "defaultNamespace": "config", "sensitivity": "sensitive"}),
        resource("network", "HostnameStatuses.net.talos.dev", "hostname", {"hostname": "cp-1", "token": "s3cr3t-value"}),
        # A sensitive type by its definition, and one Talos marks sensitive (the emulator's definition says nothing).
        resource("config", "MachineConfigs.config.talos.dev", "v1alpha1",
                 "version: v1alpha1\nmachine:\n  token: m4chine-t0ken\n  ca:\n    key: c4-k3y-value\n",
                 labels={"talos.dev/config": "active"}),
        resource("meta", "ResourceDefinitions.meta.cosi.dev", "kubeletspecs.kubernetes.talos.dev",
                 {"type": "KubeletSpecs.kubernetes.talos.dev", "defaultNamespace": "k8s"}),
        resource("k8s", "KubeletSpecs.kubernetes.talos.dev", "kubelet", {"args": {"bootstrap-token": "k8s-b00tstrap"}}),
    ))
    fake.answer(rpc.KUBECONFIG, fails_with("Unimplemented", "kubeconfig is only available on control plane nodes"))
    return fake, nodes


def test_every_section_of_every_reachable_node_at_a_bounded_concurrency(tmp_path):
    fake, nodes = _fake_cluster()
    progress = []
    bundle = support_bundle.SupportBundle(fake, nodes, dict((node, node) for node in nodes), 2, progress.append,
                                          kube_api_factory=lambda kubeconfig: None)
    with open(str(tmp_path / "spool"), "w+b") as spool:
        report, unreached = bundle.collect(spool)
        spool.seek(0)
        archive = zipfile.ZipFile(spool)
        names = set(archive.namelist())
        assert {"10.5.0.2/summary", "10.5.0.2/dmesg.log", "10.5.0.2/service-logs/apid.log", "10.5.0.2/service-logs/apid.state",
                "10.5.0.2/kubernetes-logs/kube-system/kube-proxy-x-exited.log", "10.5.0.2/mounts", "10.5.0.2/devices",
                "10.5.0.2/io", "10.5.0.2/processes", "10.5.0.2/dependencies.dot", "10.5.0.2/controller-runtime.log",
                "10.5.0.2/resources/hostnamestatuses.net.talos.dev.yaml", "support-bundle.yaml"} <= names
        assert not [name for name in names if name.startswith("10.5.0.4/")]
        hostname = archive.read("10.5.0.2/resources/hostnamestatuses.net.talos.dev.yaml").decode()
        assert "cp-1" in hostname and "s3cr3t-value" not in hostname
        # Sensitive types are written as talosctl writes them: the metadata, and the spec replaced whole.
        machine_config = archive.read("10.5.0.3/resources/machineconfigs.config.talos.dev.yaml").decode()
        assert yaml.safe_load(machine_config) == {
            "metadata": {"namespace": "config", "type": "MachineConfigs.config.talos.dev", "id": "v1alpha1", "version": "1",
                         "owner": "", "phase": "", "created": None, "updated": None, "finalizers": [],
                         "labels": {"talos.dev/config": "active"}, "annotations": {}},
            "spec": "<REDACTED>"}
        assert "spec: <REDACTED>\n" in machine_config
        kubelet = yaml.safe_load(archive.read("10.5.0.2/resources/kubeletspecs.kubernetes.talos.dev.yaml"))
        assert kubelet["metadata"]["id"] == "kubelet" and kubelet["spec"] == "<REDACTED>"
        for name in names:
            text = archive.read(name).decode("utf-8", "replace")
            assert not [secret for secret in ("m4chine-t0ken", "c4-k3y-value", "k8s-b00tstrap") if secret in text], name
        assert "BEGIN PRIVATE KEY" not in archive.read("10.5.0.3/service-logs/apid.log").decode()
        assert "60.00%" in archive.read("10.5.0.2/mounts").decode()
        # The archive's report is the task's: what each node and the cluster gave and missed.
        assert yaml.safe_load(archive.read("support-bundle.yaml")) == report
    assert sorted(unreached) == ["10.5.0.4"] and "10.5.0.4" in unreached["10.5.0.4"].message
    assert dict((name, entry["reached"]) for name, entry in report["nodes"].items()) == {
        "10.5.0.2": True, "10.5.0.3": True, "10.5.0.4": False}
    assert [entry["section"] for entry in report["nodes"]["10.5.0.4"]["missed"]] == ["summary"]
    assert "resources" in report["nodes"]["10.5.0.2"]["collected"]
    assert "resources" not in [entry["section"] for entry in report["nodes"]["10.5.0.2"]["missed"]]
    assert [entry["section"] for entry in report["cluster"]["missed"]] == ["kubernetes-nodes", "kubernetes-system-pods"]
    assert report["cluster"]["collected"] == []
    unbounded = [call for call in fake.calls if call.via in ("call_many", "stream_many") and call.kwargs["max_concurrency"] != 2]
    assert not unbounded and len(fake.calls) > 20
    assert progress[0] == "support bundle: summary of 3 node(s)"
