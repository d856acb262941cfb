# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files on a node: list a directory (List), read a file (Read), disk usage (DiskUsage) and copy a file or
directory to the controller (Copy), as ``talosctl ls``, ``read``, ``usage`` and ``cp`` do.

List, DiskUsage and Processes take os:reader; Read and Copy need os:admin (machined's rules table, rpc.py).
Copy streams a gzip'd tar. It is spooled to an anonymous temporary file, then
unpacked member by member into the destination: nothing may land outside it
(absolute names, ``..``, writing through a link), device files, pipes and hard
links are skipped, symbolic links stay links, and a file whose content and mode
are already in place is left alone - so fetching again changes nothing.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import fnmatch
import hashlib
import os
import posixpath
import stat
import tarfile
import tempfile

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import PrivateFile
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import redact_text

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

# Go's os.FileMode bits, which FileInfo.mode carries (upstream api/machine/machine.proto: "the bitmap of UNIX
# mode/permission flags", filled from Go's fs.FileMode, not from the POSIX st_mode).
_GO_TYPES = (
    (1 << 31, "directory"),
    (1 << 27, "symlink"),
    (1 << 25, "pipe"),
    (1 << 24, "socket"),
    (1 << 21, "char_device"),
    (1 << 26, "block_device"),  # ModeDevice without ModeCharDevice
    (1 << 19, "irregular"),
)
_GO_SETUID, _GO_SETGID, _GO_STICKY = 1 << 23, 1 << 22, 1 << 20
FILE_TYPES = ("file", "directory", "symlink")
_READ_CHUNK = 64 * 1024


def _about(error, what, path, node):
    """``error`` (a TalosError of a call about ``path``) as the same kind of error naming the path first."""
    return type(error)("Cannot %s %s on %s: %s" % (what, path, label(node), error.message),
                       code=error.code, node=error.node, server_message=error.server_message)


def node_path(path, parameter):
    """``path`` as an absolute, normalized path on the node; TalosConfigError naming ``parameter`` otherwise."""
    if not path or not path.startswith("/"):
        raise TalosConfigError("%s must be an absolute path on the node, got %r." % (parameter, path))
    return posixpath.normpath(path).replace("//", "/")


def file_type(go_mode):
    for bit, name in _GO_TYPES:
        if go_mode & bit:
            return name
    return "file"


def permissions(go_mode):
    """The octal permission string (``"0644"``, ``"4755"``) of a Go file mode."""
    bits = go_mode & 0o777
    bits |= 0o4000 if go_mode & _GO_SETUID else 0
    bits |= 0o2000 if go_mode & _GO_SETGID else 0
    bits |= 0o1000 if go_mode & _GO_STICKY else 0
    return "%04o" % bits


def _entry(info):
    if info.error:
        return {"path": info.name, "name": info.relative_name, "error": info.error}
    entry = {"path": info.name, "name": info.relative_name, "type": file_type(info.mode), "size": info.size,
             "mode": permissions(info.mode), "modified": info.modified, "uid": info.uid, "gid": info.gid}
    if info.link:
        entry["link"] = info.link
    return entry


def _depth(relative_name):
    return 0 if relative_name in (".", "") else relative_name.count("/") + 1


def list_files(client, node, path, depth=1, types=(), patterns=()):
    """The entries of ``path`` down to ``depth`` levels below it (0: no limit), the path itself first.

    ``types`` (file, directory, symlink) and ``patterns`` (shell globs on the entry's name) are applied here
    rather than by the server: Talos's own type filter walks into directories it leaves out without a depth
    limit (pkg/archiver/walker.go), and ``/`` as root would reach one level deeper than asked.
    """
    request = machine_pb2.ListRequest(root=path, recurse=depth != 1, recursion_depth=0 if depth == 1 else depth)
    try:
        replies = client.stream(rpc.LIST, request, node=node)
    except TalosError as error:
        raise _about(error, "list", path, node)
    entries = []
    for info in replies:
        entry = _entry(info)
        level = _depth(info.relative_name)
        if depth and level > depth:
            continue
        if level and types and entry.get("type") not in types:
            continue
        if level and patterns and not any(fnmatch.fnmatchcase(posixpath.basename(info.name), glob) for glob in patterns):
            continue
        entries.append(entry)
    return entries


def stat_file(client, node, path):
    """The metadata of ``path`` itself; a link is not followed.

    Talos's walk resolves a root that is a link, so the entry is read from a
    listing of the parent directory (the root itself for ``/``).
    """
    parent, name = posixpath.split(path)
    found = []

    # Every entry of the parent is read rather than stopping at the match: cancelling a stream that the server
    # has already ended fails in grpclib.
    def pick(info):
        if not found and (not name or info.relative_name == name):
            found.append(info)

    try:
        client.stream(rpc.LIST, machine_pb2.ListRequest(root=parent if name else path), node=node,
                      on_message=pick)
    except TalosError as error:
        raise _about(error, "stat", path, node)
    if not found:
        raise TalosError("Cannot stat %s on %s: no such file or directory." % (path, label(node)), node=node)
    return _entry(found[0])


def _too_large(path, node, max_size):
    return TalosError("Cannot read %s on %s: it is larger than max_size (%d bytes); fetch it to the controller with "
                      "talos_linux.talos.talos_fetch." % (path, label(node), max_size), node=node)


def read_text(client, node, path, max_size):
    """The UTF-8 text of the file ``path`` (links followed), redacted as the collection redacts YAML text (values
    of secret fields, private key bodies, long base64 runs); a file larger than ``max_size`` bytes or not UTF-8
    fails with a sentence pointing to talos_fetch.

    The size is checked before the file is read (a file under /proc says 0 and is checked as it arrives).
    """
    entry = stat_file(client, node, path)
    if entry.get("type") == "file" and entry["size"] > max_size:
        raise _too_large(path, node, max_size)
    received = bytearray()
    seen = [0]

    def collect(message):
        seen[0] += len(message.bytes)
        if seen[0] <= max_size:
            received.extend(message.bytes)

    try:
        client.stream(rpc.READ, machine_pb2.ReadRequest(path=path), node=node, on_message=collect)
    except TalosError as error:
        raise _about(error, "read", path, node)
    if seen[0] > max_size:
        raise _too_large(path, node, max_size)
    try:
        text = bytes(received).decode("utf-8")
    except UnicodeDecodeError:
        raise TalosError("Cannot read %s on %s as text: it is not UTF-8; fetch it to the controller with "
                         "talos_linux.talos.talos_fetch." % (path, label(node)), node=node)
    return redact_text(text)


def disk_usage(client, node, path, depth=1, all_files=False, threshold=0):
    """Sizes of ``path`` and what it holds down to ``depth`` levels below it (0: no limit), the path itself last.

    Talos sums a directory's whole subtree; ``all_files`` reports files too, ``threshold`` leaves out entries
    smaller than it (a negative one: larger than its absolute value).
    """
    request = machine_pb2.DiskUsageRequest(paths=[path], recursion_depth=depth + 1 if depth else 0, all=all_files,
                                           threshold=threshold)
    try:
        replies = client.stream(rpc.DISK_USAGE, request, node=node)
    except TalosError as error:
        raise _about(error, "measure", path, node)
    entries = []
    for info in replies:
        if info.error:
            raise TalosError("Cannot measure %s on %s: %s." % (info.name, label(node), info.error.rstrip(".")),
                             node=node, server_message=info.error)
        entries.append({"path": info.name, "name": info.relative_name, "size": info.size})
    return entries


# -- Copy -------------------------------------------------------------------


class FetchRefused(TalosError):
    """The archive from the node holds a member that would land outside the destination."""


def spool_copy(client, node, path, spool):
    """Stream Copy of ``path`` into the open binary file ``spool``; nothing is held in memory."""
    def write(message):
        spool.write(message.bytes)

    try:
        client.stream(rpc.COPY, machine_pb2.CopyRequest(root_path=path), node=node, on_message=write)
    except TalosError as error:
        raise _about(error, "copy", path, node)
    spool.flush()
    spool.seek(0)


def _member_path(member, src, node):
    """The member's name as relative path parts; FetchRefused for a name that leaves the destination."""
    name = member.name
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
        raise FetchRefused("Refused to fetch %s from %s: its archive holds %r, a path outside the destination."
                           % (src, label(node), name), node=node)
    return parts


def _refuse_writes_through_links(planned, src, node):
    """FetchRefused when a member would be written below a link the archive itself makes."""
    links = set(tuple(parts) for member, parts in planned if member.issym())
    for member, parts in planned:
        for end in range(1, len(parts)):
            if tuple(parts[:end]) in links:
                raise FetchRefused("Refused to fetch %s from %s: its archive holds %r below the link %r, which would "
                                   "write through the link." % (src, label(node), member.name, "/".join(parts[:end])),
                                   node=node)


def _inside(root, parts, src, node):
    """The destination path of ``parts`` under ``root``, refusing any existing parent that is not a directory
    of its own (a link planted by an earlier member could otherwise redirect the write)."""
    current = root
    for part in parts[:-1]:
        current = os.path.join(current, part)
        if os.path.lexists(current) and (os.path.islink(current) or not os.path.isdir(current)):
            raise FetchRefused("Refused to fetch %s from %s: %s is not a directory in the destination, so nothing "
                               "is written through it." % (src, label(node), current), node=node)
    return os.path.join(root, *parts)


def _digest_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_READ_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _place_file(archive, member, target, mode, check_mode):
    """Make ``target`` hold the member's content with ``mode``; (changed, sha256). Streams, never whole."""
    source = archive.extractfile(member)
    digest = hashlib.sha256()
    same_kind = os.path.isfile(target) and not os.path.islink(target)
    if check_mode:
        for block in iter(lambda: source.read(_READ_CHUNK), b""):
            digest.update(block)
        changed = not same_kind or _digest_file(target) != digest.hexdigest() or stat.S_IMODE(os.lstat(target).st_mode) != mode
        return changed, digest.hexdigest()
    if os.path.isdir(target) and not os.path.islink(target):
        raise TalosError("Cannot fetch into %s: a directory is in the way of the file." % target)
    with PrivateFile(target, "the fetched file", mode=mode) as staged:
        for block in iter(lambda: source.read(_READ_CHUNK), b""):
            digest.update(block)
            staged.write(block)
        if same_kind and stat.S_IMODE(os.lstat(target).st_mode) == mode and _digest_file(target) == digest.hexdigest():
            return False, digest.hexdigest()
        staged.commit()
    return True, digest.hexdigest()


def _place_link(target, link, check_mode):
    if os.path.islink(target) and os.readlink(target) == link:
        return False
    if check_mode:
        return True
    if os.path.isdir(target) and not os.path.islink(target):
        raise TalosError("Cannot fetch the link %s: a directory is in the way." % target)
    # A new link beside the target, renamed over it: the target is never missing or half made.
    suffix = binascii.hexlify(os.urandom(6)).decode()
    staged = os.path.join(os.path.dirname(target), ".%s.%s" % (os.path.basename(target), suffix))
    os.symlink(link, staged)
    os.rename(staged, target)
    return True


def _place_directory(target, mode, check_mode):
    if os.path.isdir(target) and not os.path.islink(target):
        if stat.S_IMODE(os.stat(target).st_mode) == mode:
            return False
        if not check_mode:
            os.chmod(target, mode)
        return True
    if os.path.lexists(target):
        raise TalosError("Cannot fetch the directory %s: a file is in the way." % target)
    if not check_mode:
        os.mkdir(target, mode)
        os.chmod(target, mode)
    return True


def unpack(spool, root, src, node, check_mode=False):
    """Unpack the gzip'd tar in ``spool`` under ``root`` (made when missing, 0700); ``(files, skipped)``.

    ``files`` lists every member placed (``path`` on the controller, ``type``, ``changed``, ``sha256`` or
    ``link``), ``skipped`` the members that are not fetched (device files, pipes, hard links) and why. Every
    member name is checked before anything is written.
    """
    try:
        with tarfile.open(fileobj=spool, mode="r:gz") as archive:
            planned = [(member, _member_path(member, src, node)) for member in archive.getmembers()]
            _refuse_writes_through_links(planned, src, node)
            if not check_mode and not os.path.isdir(root):
                os.makedirs(root, 0o700)
            files, skipped = [], []
            for member, parts in planned:
                target = _inside(root, parts, src, node)
                mode = member.mode & 0o777
                if member.isdir():
                    files.append({"path": target, "type": "directory", "changed": _place_directory(target, mode, check_mode)})
                elif member.issym():
                    files.append({"path": target, "type": "symlink", "link": member.linkname,
                                  "changed": _place_link(target, member.linkname, check_mode)})
                elif member.isfile():
                    changed, digest = _place_file(archive, member, target, mode, check_mode)
                    files.append({"path": target, "type": "file", "size": member.size, "sha256": digest, "changed": changed})
                else:
                    kind = "hard link" if member.islnk() else "device file" if member.isdev() else "special file"
                    skipped.append({"path": target, "reason": "a %s is not fetched" % kind})
    except (tarfile.TarError, EOFError, OSError) as error:
        if isinstance(error, OSError) and getattr(error, "filename", None):
            raise TalosError("Cannot fetch %s from %s into %s: %s (%s)."
                             % (src, label(node), root, error.strerror or error, error.filename), node=node)
        raise TalosError("Cannot fetch %s from %s: the archive the node sent cannot be read (%s)."
                         % (src, label(node), error), node=node)
    return files, skipped


def fetch(client, node, src, root, check_mode=False):
    """Copy ``src`` from the node into the directory ``root``; ``(files, skipped)`` as ``unpack`` returns them."""
    with tempfile.TemporaryFile(prefix="talos-fetch-") as spool:
        spool_copy(client, node, src, spool)
        return unpack(spool, root, src, node, check_mode)
