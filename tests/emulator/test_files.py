# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""List, Read, DiskUsage, Copy and Processes (services/files.py) as upstream v1alpha1_server.go answers them."""

import gzip
import io
import tarfile

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from talos_emulator.services.files import GO_MODE_CHAR_DEVICE, GO_MODE_DEVICE, GO_MODE_DIR, GO_MODE_SYMLINK

M = "machine.MachineService/"


def _refusal(client, method, request, **options):
    with pytest.raises(GRPCError) as excinfo:
        client.call(M + method, request, **options)
    return excinfo.value.status, excinfo.value.message


def _read(client, path, **options):
    frames = client.call(M + "Read", machine_pb2.ReadRequest(path=path), **options)
    assert all(len(frame.bytes) <= 1024 for frame in frames)
    return b"".join(frame.bytes for frame in frames)


def _copy(client, path, **options):
    frames = client.call(M + "Copy", machine_pb2.CopyRequest(root_path=path), **options)
    return tarfile.open(fileobj=io.BytesIO(gzip.decompress(b"".join(frame.bytes for frame in frames))))


def test_list_walks_like_the_archiver(module_emulator, api):
    cluster = module_emulator(controlplanes=1, workers=1)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    client = api(cluster, role="reader")
    top = client.call(M + "List", machine_pb2.ListRequest(root="etc/"), node=cp.address)
    assert [(info.name, info.relative_name) for info in top][:3] == [
        ("/etc", "."), ("/etc/hostname", "hostname"), ("/etc/hosts", "hosts")]
    by_name = {info.name: info for info in top}
    assert by_name["/etc"].is_dir and by_name["/etc"].mode == GO_MODE_DIR | 0o755
    assert by_name["/etc/mtab"].mode == GO_MODE_SYMLINK | 0o777 and by_name["/etc/mtab"].link == "/proc/mounts"
    assert by_name["/etc/hostname"].size == len(cp.hostname) + 1 and by_name["/etc/hostname"].mode == 0o644
    # Without recurse only the root's children; a depth counts levels below the root.
    shallow = [info.name for info in client.call(M + "List", machine_pb2.ListRequest(root="/var"), node=cp.address)]
    assert shallow == ["/var", "/var/lib", "/var/log"]
    deeper = [info.relative_name for info in client.call(
        M + "List", machine_pb2.ListRequest(root="/var", recurse=True, recursion_depth=2), node=cp.address)]
    assert "log/pods" in deeper and not any(name.count("/") > 1 for name in deeper)
    # Content follows the node: only a control plane has static pod logs; the worker's files name the worker.
    every = client.call(M + "List", machine_pb2.ListRequest(root="/var/log", recurse=True), node=cp.address)
    links = [info for info in every if info.link]
    assert links and all(info.name.startswith("/var/log/containers/") for info in links)
    assert [info.name for info in client.call(M + "List", machine_pb2.ListRequest(root="/var/log", recurse=True),
                                              node=worker.address)] == ["/var/log", "/var/log/audit"]
    devices = {info.name: info.mode for info in client.call(M + "List", machine_pb2.ListRequest(root="/dev"), node=cp.address)}
    assert devices["/dev/null"] == GO_MODE_DEVICE | GO_MODE_CHAR_DEVICE | 0o666 and devices["/dev/sda"] == GO_MODE_DEVICE | 0o660
    # A type filter leaves out directories yet walks into them, past the depth (upstream returns before its depth check).
    regular = [info.name for info in client.call(
        M + "List", machine_pb2.ListRequest(root="/var", types=[machine_pb2.ListRequest.REGULAR]), node=cp.address)]
    assert regular and all(name.endswith("0.log") or name.endswith(".log") for name in regular)
    assert any(name.startswith("/var/log/pods/") for name in regular)
    assert _refusal(client, "List", machine_pb2.ListRequest(root="/nope"), node=cp.address) == (
        Status.UNKNOWN, "lstat /nope: no such file or directory")


def test_read_follows_links_and_refuses_what_talos_refuses(module_emulator, api):
    cluster = module_emulator(controlplanes=1, workers=1)
    cp = cluster.controlplanes[0]
    client = api(cluster)
    assert _read(client, "/etc/hostname", node=cp.address) == (cp.hostname + "\n").encode()
    assert cp.address.encode() in _read(client, "/etc/hosts", node=cp.address)
    assert _read(client, "/etc/mtab", node=cp.address) == _read(client, "/proc/mounts", node=cp.address)
    assert cp.boot_id.encode() in _read(client, "/proc/sys/kernel/random/boot_id", node=cp.address)
    assert _refusal(client, "Read", machine_pb2.ReadRequest(path="/etc/missing")) == (
        Status.NOT_FOUND, "stat /etc/missing: no such file or directory")
    for path in ("/var/log", "/dev/null"):
        assert _refusal(client, "Read", machine_pb2.ReadRequest(path=path)) == (Status.UNKNOWN, "path must be a regular file")
    # machined's rules: Read and Copy are os:admin only; List, DiskUsage and Processes take os:reader too.
    for role in ("reader", "operator"):
        limited = api(cluster, role=role)
        assert _refusal(limited, "Read", machine_pb2.ReadRequest(path="/etc/hostname"))[0] == Status.PERMISSION_DENIED
        assert _refusal(limited, "Copy", machine_pb2.CopyRequest(root_path="/etc"))[0] == Status.PERMISSION_DENIED
        assert limited.call(M + "DiskUsage", machine_pb2.DiskUsageRequest(paths=["/etc"]))
        assert limited.call(M + "Processes").messages[0].processes


def test_placed_files_stream_in_kib_frames(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    cluster.call(node.place_file, "/var/log/big.bin", size=3 * 1024 * 1024 + 5)
    cluster.call(node.place_file, "/var/log/note.txt", content=b"hello\n", mode=0o600)
    client = api(cluster)
    data = _read(client, "/var/log/big.bin")
    assert len(data) == 3 * 1024 * 1024 + 5 and data[:1024 * 1024] == data[1024 * 1024:2 * 1024 * 1024]
    assert data == _read(client, "/var/log/big.bin")
    listed = {info.name: info for info in client.call(M + "List", machine_pb2.ListRequest(root="/var/log"))}
    assert listed["/var/log/note.txt"].mode == 0o600 and listed["/var/log/big.bin"].size == len(data)
    cluster.call(node.remove_file, "/var/log/note.txt")
    assert _refusal(client, "Read", machine_pb2.ReadRequest(path="/var/log/note.txt"))[0] == Status.NOT_FOUND


def test_disk_usage_sums_subtrees(emulator, api):
    cluster = emulator()
    node = cluster.nodes[0]
    cluster.call(node.place_file, "/var/data/a/one", size=1000)
    cluster.call(node.place_file, "/var/data/a/two", size=2000)
    cluster.call(node.place_file, "/var/data/b", size=500)
    client = api(cluster, role="reader")
    directories = client.call(M + "DiskUsage", machine_pb2.DiskUsageRequest(paths=["/var/data"]))
    sizes = {info.name: info.size for info in directories}
    assert sizes == {"/var/data/a": 4096 + 3000, "/var/data": 4096 * 2 + 3500}
    assert directories[-1].name == "/var/data" and directories[-1].relative_name == "."
    every = client.call(M + "DiskUsage", machine_pb2.DiskUsageRequest(paths=["/var/data"], all=True, threshold=1500))
    assert {info.name for info in every} == {"/var/data/a/two", "/var/data/a", "/var/data"}
    shallow = client.call(M + "DiskUsage", machine_pb2.DiskUsageRequest(paths=["/var/data"], recursion_depth=1))
    assert [info.name for info in shallow] == ["/var/data"]
    # A path that cannot be walked is an entry with an error, not a failed call.
    missing = client.call(M + "DiskUsage", machine_pb2.DiskUsageRequest(paths=["/nope", "/var/data/b"], all=True))
    assert [(info.name, info.error, info.size) for info in missing] == [
        ("/nope", "lstat /nope: no such file or directory", 0), ("/var/data/b", "", 500)]


def test_copy_is_a_gzipped_tar_without_its_root(emulator, api):
    cluster = emulator(controlplanes=1)
    node = cluster.nodes[0]
    client = api(cluster)
    with _copy(client, "/etc/../etc") as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert "hostname" in members and "." not in members and "" not in members
        assert members["mtab"].issym() and members["mtab"].linkname == "/proc/mounts"
        assert archive.extractfile(members["hostname"]).read() == (node.hostname + "\n").encode()
    with _copy(client, "/var/log") as archive:
        names = archive.getnames()
        assert "pods/" in [member.name + ("/" if member.isdir() else "") for member in archive.getmembers()]
        assert any(name.startswith("containers/") for name in names)
    with _copy(client, "/dev") as archive:
        kinds = {member.name: (member.ischr(), member.isblk()) for member in archive.getmembers()}
        assert kinds == {"null": (True, False), "sda": (False, True)}
    with _copy(client, "/etc/hosts") as archive:
        assert archive.getnames() == ["hosts"]
    assert _refusal(client, "Copy", machine_pb2.CopyRequest(root_path="etc")) == (Status.UNKNOWN, "path is not absolute etc")
    assert _refusal(client, "Copy", machine_pb2.CopyRequest(root_path="/nope")) == (
        Status.UNKNOWN, "lstat /nope: no such file or directory")


def test_processes_follow_the_services(emulator, api):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    client = api(cluster, role="reader")
    listed = client.call(M + "Processes", node=cp.address).messages[0].processes
    commands = [process.command for process in listed]
    assert listed[0].pid == 1 and "etcd" in commands and "kube-apiserver" in commands
    assert all(cp.boot_id in process.args for process in listed[1:])
    worker_commands = [process.command for process in client.call(M + "Processes", node=worker.address).messages[0].processes]
    assert "etcd" not in worker_commands and "kubelet" in worker_commands
    cluster.set_service_state(worker, "kubelet", "Finished")
    worker_commands = [process.command for process in client.call(M + "Processes", node=worker.address).messages[0].processes]
    assert "kubelet" not in worker_commands


def test_containers_and_disk_stats(emulator, api):
    cluster = emulator(controlplanes=1, workers=1, bootstrapped=True)
    cp, worker = cluster.controlplanes[0], cluster.workers[0]
    client = api(cluster, role="reader")
    request = machine_pb2.ContainersRequest(namespace="k8s.io", driver=common_pb2.CRI)
    listed = client.call(M + "Containers", request, node=cp.address).messages[0].containers
    running = [(info.id, info.name) for info in listed if info.status == "CONTAINER_RUNNING"]
    assert ("kube-system/kube-apiserver-%s:kube-apiserver" % cp.hostname, "kube-apiserver") in running
    assert len([info for info in listed if info.status == "SANDBOX_READY"]) == len(running) == 3
    assert not client.call(M + "Containers", request, node=worker.address).messages[0].containers
    assert _refusal(client, "Containers", machine_pb2.ContainersRequest()) == (Status.INVALID_ARGUMENT, "namespace can't be empty")
    stats = client.call(M + "DiskStats", node=worker.address).messages[0]
    assert [device.name for device in stats.devices] == ["sda", "sdb"]
    assert stats.total.read_sectors == sum(device.read_sectors for device in stats.devices) > 0


def test_controller_runtime_dependencies_follow_the_machine_type(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster, role="reader")
    graphs = {}
    for node in cluster.nodes:
        reply = client.call("inspect.InspectService/ControllerRuntimeDependencies", node=node.address)
        graphs[node.role] = {edge.controller_name for edge in reply.messages[0].edges}
    assert "etcd.SpecController" in graphs["controlplane"] and "etcd.SpecController" not in graphs["worker"]
    assert "k8s.KubeletSpecController" in graphs["worker"]
