# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The file, process and disk RPCs of machine.MachineService: List, Read, DiskUsage, Copy, Processes,
Containers and DiskStats.

A node's files are a small tree made from its state at every call (hostname,
addresses, boot ID, the logs of its static pods, its services as processes)
plus the files a test placed (``EmulatedNode.place_file``). The answers follow
upstream Talos (siderolabs/talos v1.14): ``internal/app/machined/internal/
server/v1alpha1/v1alpha1_server.go`` (List, DiskUsage, Copy, Read) and
``pkg/archiver`` (the walk and the tar that List, DiskUsage and Copy share).
Who may call what is machined's rules table (rpc.py): Read and Copy need
os:admin, List, DiskUsage and Processes take os:reader too (so do Containers and DiskStats). Talos has no
allowed roots: an admin may read any path, which is why its rules keep Read
and Copy to os:admin.
"""

import posixpath
import random
import tarfile
import time
import zlib

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from ..runners import GOROUTINES, service_pid
from . import volumes
from .common import CHUNK_SIZE
from .logs import container_ids, container_log
from .monitoring import system_containers

# Go's os.FileMode type bits, which FileInfo.mode carries (not the POSIX st_mode).
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27
GO_MODE_DEVICE = 1 << 26
GO_MODE_CHAR_DEVICE = 1 << 21

_DIRECTORY_SIZE = 4096
# Generated content repeats a random block longer than gzip's 32 KiB window, so it does not compress.
_GENERATED_BLOCK = 1 << 20
_LIST_TYPES = machine_pb2.ListRequest.Type


class Entry:
    """One file of the tree: kind is dir, file, symlink, char or block."""

    def __init__(self, kind, perm, modified, content=b"", size=None, link="", generated=False):
        self.kind = kind
        self.perm = perm
        self.modified = int(modified)
        self.content = content
        self.size = _DIRECTORY_SIZE if kind == "dir" else (len(link) if kind == "symlink" else (len(content) if size is None else size))
        self.link = link
        self.generated = generated

    @property
    def go_mode(self):
        bits = {"dir": GO_MODE_DIR, "symlink": GO_MODE_SYMLINK, "block": GO_MODE_DEVICE,
                "char": GO_MODE_DEVICE | GO_MODE_CHAR_DEVICE}.get(self.kind, 0)
        return bits | self.perm

    def chunks(self, path, size=64 * 1024):
        """The content in pieces; a generated file is produced piece by piece, never whole."""
        if not self.generated:
            for offset in range(0, len(self.content), size):
                yield self.content[offset:offset + size]
            return
        block = random.Random(path).randbytes(_GENERATED_BLOCK)
        for offset in range(0, self.size, size):
            start = offset % _GENERATED_BLOCK
            yield block[start:start + min(size, self.size - offset)]


# /proc/cpuinfo of the two CPUs the CPUInfo RPC reports.
_CPUINFO = "".join(
    "processor\t: %d\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
    "model name\t: Intel Xeon Processor (Cascadelake)\nstepping\t: 6\ncpu MHz\t\t: 2793.438\ncache size\t: 16384 KB\n"
    "physical id\t: 0\nsiblings\t: 2\ncore id\t\t: %d\ncpu cores\t: 2\nfpu\t\t: yes\nflags\t\t: fpu vme sse2\n"
    "bogomips\t: 5586.87\naddress sizes\t: 46 bits physical, 48 bits virtual\n\n" % (index, index) for index in range(2))


def node_tree(node):
    """``{absolute path: Entry}`` of the node's files now."""
    booted = node.booted_at or 0
    tree = {}

    def add(path, entry):
        tree[path] = entry
        parent = posixpath.dirname(path)
        while parent not in tree:
            tree[parent] = Entry("dir", 0o755, booted)
            parent = posixpath.dirname(parent)

    tree["/"] = Entry("dir", 0o755, booted)
    hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n%s %s\n" % (node.address, node.hostname)
    add("/etc/hostname", Entry("file", 0o644, booted, (node.hostname + "\n").encode()))
    add("/etc/hosts", Entry("file", 0o644, booted, hosts.encode()))
    # Talos points the resolver at its host DNS cache.
    add("/etc/resolv.conf", Entry("file", 0o644, booted, b"nameserver 127.0.0.53\n"))
    os_release = 'NAME="Talos"\nID=talos\nVERSION_ID=%s\nPRETTY_NAME="Talos (%s)"\n' % (node.talos_version, node.talos_version)
    add("/etc/os-release", Entry("file", 0o644, booted, os_release.encode()))
    add("/etc/mtab", Entry("symlink", 0o777, booted, link="/proc/mounts"))
    add("/proc/mounts", Entry("file", 0o444, booted, "".join("%s %s xfs rw 0 0\n" % (device, target)
                                                             for device, target, _size, _used in volumes.mounts(node)).encode()))
    add("/proc/cpuinfo", Entry("file", 0o444, booted, _CPUINFO.encode()))
    add("/proc/sys/kernel/random/boot_id", Entry("file", 0o444, booted, ((node.boot_id or "") + "\n").encode()))
    add("/proc/bus/pci/devices", Entry("file", 0o444, booted, b"0000\t80861237\t0\n0008\t1af41000\t0b\n"))
    add("/dev/null", Entry("char", 0o666, booted))
    add("/dev/sda", Entry("block", 0o660, booted))
    # The STATE partition holds the machine config, secrets included: left empty here, so nothing the emulator
    # serves as a file carries a secret (Talos would serve it to os:admin).
    add("/system/state", Entry("dir", 0o700, booted))
    add("/var/lib/kubelet", Entry("dir", 0o700, booted))
    add("/var/log/audit", Entry("dir", 0o700, booted))
    for container_id in container_ids(node):
        pod, name = container_id.split("/", 1)[1].split(":")
        lines = "".join(line + "\n" for line in container_log(node, container_id)).encode()
        pod_dir = "/var/log/pods/kube-system_%s_%s" % (pod, node.boot_id[:8])
        add("%s/%s/0.log" % (pod_dir, name), Entry("file", 0o640, booted, lines))
        add("/var/log/containers/%s_kube-system_%s-%s.log" % (pod, name, node.boot_id[:12]),
            Entry("symlink", 0o777, booted, link="%s/%s/0.log" % (pod_dir, name)))
    if node.is_control_plane:
        audit = "".join('{"kind":"Event","stage":"ResponseComplete","verb":"get","boot":"%s","n":%d}\n' % (node.boot_id, index)
                        for index in range(10))
        add("/var/log/audit/kube/kube-apiserver.log", Entry("file", 0o600, booted, audit.encode()))
    for path, placed in node.placed_files.items():
        if placed["link"] is not None:
            add(path, Entry("symlink", 0o777, placed["modified"], link=placed["link"]))
        else:
            add(path, Entry("file", placed["mode"], placed["modified"], placed["content"] or b"", placed["size"],
                            generated=placed["content"] is None))
    return tree


def _resolve(tree, path, hops=0):
    """``path`` with every symlink followed (filepath.EvalSymlinks), or None when it leads nowhere."""
    parts = [part for part in path.split("/") if part]
    current = "/"
    for index, part in enumerate(parts):
        current = posixpath.join(current, part)
        entry = tree.get(current)
        if entry is None:
            return None
        if entry.kind == "symlink":
            if hops > 40:
                return None
            target = posixpath.normpath(posixpath.join(posixpath.dirname(current), entry.link))
            rest = "/".join(parts[index + 1:])
            return _resolve(tree, posixpath.join(target, rest) if rest else target, hops + 1)
    return current


def _children(tree, path):
    prefix = path.rstrip("/") + "/"
    return sorted(name for name in tree if name != path and name.startswith(prefix) and "/" not in name[len(prefix):])


def _at_max_depth(maximum, root, current):
    # archiver.atMaxDepth: the root is always entered; depth counts separators, so "/" as root reaches one level
    # deeper than any other directory does.
    if maximum < 0 or root == current:
        return False
    return current.count("/") - root.count("/") >= maximum


def walk(tree, root, max_depth=-1, types=(), skip_root=False):
    """archiver.Walker: ``(path, relative path, entry)`` in filepath.Walk's lexical order; raises for a missing root.

    A directory that ``types`` leaves out is still entered and without a depth limit: upstream returns before
    its depth check for it, and this copies that.
    """
    entry = tree.get(root)
    if entry is None:
        raise GRPCError(Status.UNKNOWN, "lstat %s: no such file or directory" % root)
    if entry.kind == "symlink":
        resolved = _resolve(tree, root)
        if resolved is None:
            raise GRPCError(Status.UNKNOWN, "lstat %s: no such file or directory" % root)
        root = resolved

    def visit(path):
        item = tree[path]
        if path == root and item.kind != "dir":
            relative = posixpath.basename(path)
        else:
            relative = posixpath.relpath(path, root)
        if types and item.kind not in types:
            if item.kind == "dir":
                for child in _children(tree, path):
                    yield from visit(child)
            return
        if not (path == root and skip_root and item.kind == "dir"):
            yield path, relative, item
        if item.kind == "dir" and not _at_max_depth(max_depth, root, path):
            for child in _children(tree, path):
                yield from visit(child)

    yield from visit(root)


def _clean_root(path):
    # List and DiskUsage make the path absolute and drop one trailing slash; empty means "/".
    if not path.startswith("/"):
        path = "/" + path
    if path.endswith("/"):
        path = path[:-1]
    return path or "/"


def _tar_header(relative, entry):
    info = tarfile.TarInfo(relative + ("/" if entry.kind == "dir" else ""))
    info.mode = entry.perm
    info.mtime = entry.modified
    info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "char": tarfile.CHRTYPE,
                 "block": tarfile.BLKTYPE}.get(entry.kind, tarfile.REGTYPE)
    info.linkname = entry.link
    info.size = entry.size if entry.kind == "file" else 0
    return info.tobuf(tarfile.PAX_FORMAT)


def _tar_pieces(tree, root):
    """archiver.Tar of the walk under ``root`` (the root directory itself left out), piece by piece."""
    for _path, relative, entry in walk(tree, root, skip_root=True):
        yield _tar_header(relative, entry)
        if entry.kind == "file" and entry.size:
            yield from entry.chunks(_path)
            padding = -entry.size % tarfile.BLOCKSIZE
            if padding:
                yield b"\0" * padding
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _process_list(node):
    """Processes as miniprocfs reads them: machined as PID 1, one process per running service (but those machined
    runs as goroutines) and static pod, with the PIDs Containers and Netstat report."""
    uptime = time.time() - node.booted_at if node.booted_at else 0.0
    processes = [machine_pb2.ProcessInfo(pid=1, ppid=0, state="S", threads=24, cpu_time=round(0.01 * uptime, 2),
                                         virtual_memory=1500000000, resident_memory=120000000,
                                         command="init", executable="/sbin/init", args="/sbin/init")]
    # Services machined runs as goroutines live in PID 1.
    running = [service_id for service_id, service in node.services.items() if service.running and service_id not in GOROUTINES]
    running += [container_id.rsplit(":", 1)[-1] for container_id in container_ids(node)]
    for index, name in enumerate(running):
        processes.append(machine_pb2.ProcessInfo(
            pid=service_pid(name), ppid=1, state="S", threads=8 + index % 5, cpu_time=0.5 * (index + 1),
            virtual_memory=700000000 + index * 1000000, resident_memory=40000000 + index * 100000,
            command=name[:15], executable="/usr/local/bin/%s" % name, args="/usr/local/bin/%s --boot-id=%s" % (name, node.boot_id),
        ))
    return processes


class FileRPCs:
    async def List(self, stream):
        request = await stream.recv_message()
        root = _clean_root(request.root)
        depth = (int(request.recursion_depth) or -1) if request.recurse else 0
        names = {_LIST_TYPES.REGULAR: "file", _LIST_TYPES.DIRECTORY: "dir", _LIST_TYPES.SYMLINK: "symlink"}
        types = tuple(names[kind] for kind in request.types)
        for path, relative, entry in walk(node_tree(self.node), root, depth, types):
            await stream.send_message(machine_pb2.FileInfo(
                name=path, relative_name=relative, size=entry.size, mode=entry.go_mode, modified=entry.modified,
                is_dir=entry.kind == "dir", link=entry.link,
            ))

    async def Read(self, stream):
        request = await stream.recv_message()
        tree = node_tree(self.node)
        resolved = _resolve(tree, request.path) if request.path.startswith("/") else None
        if resolved is None:
            raise GRPCError(Status.NOT_FOUND, "stat %s: no such file or directory" % request.path)
        entry = tree[resolved]
        if entry.kind != "file":
            raise GRPCError(Status.UNKNOWN, "path must be a regular file")
        pending = b""
        for piece in entry.chunks(resolved):
            pending = await _send_full_frames(stream, pending + piece)
        await _send_full_frames(stream, pending, last=True)

    async def DiskUsage(self, stream):
        request = await stream.recv_message()
        tree = node_tree(self.node)
        for path in request.paths:
            path = _clean_root(path)
            try:
                walked = list(walk(tree, path))
            except GRPCError as error:
                # Upstream sends a walk failure as an entry of the reply, not as the call's status.
                await stream.send_message(machine_pb2.DiskUsageInfo(name=path, relative_name=path, error=error.message))
                continue
            for info in _disk_usage(walked, request):
                await stream.send_message(info)

    async def Copy(self, stream):
        request = await stream.recv_message()
        path = posixpath.normpath(request.root_path) if request.root_path else "."
        if not path.startswith("/"):
            raise GRPCError(Status.UNKNOWN, "path is not absolute %s" % path)
        pieces = _tar_pieces(node_tree(self.node), path)
        # The walk checks the root before anything is compressed or sent.
        first = next(pieces)
        # Level 1: the emulator's speed; the client only sees a gzip stream either way.
        compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        pending = compressor.compress(first)
        for piece in pieces:
            pending = await _send_full_frames(stream, pending + compressor.compress(piece))
        await _send_full_frames(stream, pending + compressor.flush(), last=True)

    async def Processes(self, stream):
        await stream.recv_message()
        reply = machine_pb2.Process(processes=_process_list(self.node))
        await stream.send_message(machine_pb2.ProcessesResponse(messages=[reply]))

    async def Containers(self, stream):
        request = await stream.recv_message()
        if not request.namespace:
            raise GRPCError(Status.INVALID_ARGUMENT, "namespace can't be empty")
        containers = []
        if request.namespace == "system" and request.driver == common_pb2.CONTAINERD:
            # The services machined runs as containers, each its own pod as the containerd inspector groups them.
            for service_id, image in system_containers(self.node):
                containers.append(machine_pb2.ContainerInfo(
                    namespace="system", id=service_id, internal_id=service_id, pod_id=service_id, name=service_id, image=image,
                    pid=service_pid(service_id), status="RUNNING"))
        elif request.namespace == "k8s.io" and request.driver == common_pb2.CRI:
            for index, container_id in enumerate(container_ids(self.node)):
                pod_id, name = container_id.split(":")
                # Every pod has its pause sandbox beside its containers, as CRI lists them.
                containers.append(machine_pb2.ContainerInfo(
                    namespace="k8s.io", id=pod_id, pod_id=pod_id, name=pod_id.split("/")[1], status="SANDBOX_READY",
                    image="registry.k8s.io/pause:3.10", pid=2000 + index * 2))
                containers.append(machine_pb2.ContainerInfo(
                    namespace="k8s.io", id=container_id, pod_id=pod_id, name=name, status="CONTAINER_RUNNING",
                    image="registry.k8s.io/%s" % name, pid=2001 + index * 2))
        await stream.send_message(machine_pb2.ContainersResponse(messages=[machine_pb2.Container(containers=containers)]))

    async def DiskStats(self, stream):
        await stream.recv_message()
        # Counters grow with the node's uptime, as /proc/diskstats does.
        uptime = int(time.time() - self.node.booted_at) if self.node.booted_at else 0
        devices = [machine_pb2.DiskStat(name=name, read_completed=100 * base + uptime, read_sectors=8000 * base + 8 * uptime,
                                        write_completed=50 * base + uptime, write_sectors=4000 * base + 8 * uptime,
                                        io_time_ms=20 * base + uptime, io_time_weighted_ms=30 * base + uptime)
                   for base, name in ((3, "sda"), (1, "sdb"))]
        total = machine_pb2.DiskStat(**{field: sum(getattr(device, field) for device in devices)
                                        for field in ("read_completed", "read_sectors", "write_completed", "write_sectors",
                                                      "io_time_ms", "io_time_weighted_ms")})
        reply = machine_pb2.DiskStats(total=total, devices=devices)
        await stream.send_message(machine_pb2.DiskStatsResponse(messages=[reply]))


async def _send_full_frames(stream, data, last=False):
    """Send ``data`` in CHUNK_SIZE frames (the chunker's size); return what is left for the next frame."""
    end = len(data) if last else len(data) - len(data) % CHUNK_SIZE
    for offset in range(0, end, CHUNK_SIZE):
        await stream.send_message(common_pb2.Data(bytes=data[offset:offset + CHUNK_SIZE]))
    return data[end:]


def _disk_usage(walked, request):
    """DiskUsageInfo of one walked path: directories hold their whole subtree's size, sent after what they hold."""
    root = walked[0][0]
    totals = {}
    for path, _relative, entry in walked:
        size = entry.size
        totals[path] = totals.get(path, 0) + size
        parent = path
        while parent != root:
            parent = posixpath.dirname(parent)
            totals[parent] = totals.get(parent, 0) + size
    # Post-order: the deepest paths first, as upstream flushes a folder once the walk has left it.
    ordered = sorted((item for item in walked if item[0] != root), key=lambda item: (-item[0].count("/"), item[0]))
    ordered.append(walked[0])
    root_depth = root.count("/")
    for path, relative, entry in ordered:
        depth = path.count("/") - root_depth
        size = totals[path]
        if request.recursion_depth > 0 and depth >= request.recursion_depth:
            continue
        if entry.kind != "dir" and not request.all:
            continue
        if request.threshold > 0 and size < request.threshold or request.threshold < 0 and size > -request.threshold:
            continue
        yield machine_pb2.DiskUsageInfo(name=path, relative_name=relative, size=size)
