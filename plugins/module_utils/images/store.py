# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The images of a node's containerd namespace: ``ImageService`` List, Pull and Remove, the legacy
``MachineService`` ImageList and ImagePull on nodes older than Talos v1.13.

Image references and version tags are reference.py's, the Image Factory factory.py's, a node's installer
installer.py's.
Nothing here sees a Task: functions take a client and plain values and raise
the collection's errors.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, TalosUnimplementedError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import parse_reference

# containerd namespaces by the name users give (talosctl --namespace): (driver, namespace) of common.ContainerdInstance.
NAMESPACES = {
    "system": ("CRI", "NS_SYSTEM"),
    "cri": ("CRI", "NS_CRI"),
}

# Seconds a pull may take on one node by default: Talos's own pulls give up after 20 minutes.
PULL_TIMEOUT = 1200

# How often a node's pull progress is reported while it lasts.
PROGRESS_INTERVAL = 5.0
_MIB = 1024.0 * 1024.0


def _containerd(namespace):
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    driver, name = NAMESPACES[namespace]
    return common_pb2.ContainerdInstance(driver=common_pb2.ContainerDriver.Value(driver),
                                         namespace=common_pb2.ContainerdNamespace.Value(name))


def _legacy_namespace(namespace):
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    return common_pb2.ContainerdNamespace.Value(NAMESPACES[namespace][1])


def _image_record(message):
    created = message.created_at.ToJsonString() if message.HasField("created_at") else None
    record = {"name": message.name, "digest": message.digest, "size": message.size, "created_at": created}
    if hasattr(message, "labels"):
        record["labels"] = dict(message.labels)
    return record


class _PullProgress:
    """A node's layers during a pull, reported at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, report, node, image):
        self.report = report
        self.node = node
        self.image = image
        self.layers = {}
        self.last = time.monotonic()

    def update(self, message):
        if message.WhichOneof("response") != "pull_progress":
            return
        progress = message.pull_progress.progress
        self.layers[message.pull_progress.layer_id] = (progress.status, progress.offset, progress.total)
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL:
            self.last = now
            done = sum(1 for status, _offset, _total in self.layers.values() if status >= 1)
            have = sum(offset for _status, offset, _total in self.layers.values())
            total = sum(size for _status, _offset, size in self.layers.values())
            self.report("%s: pulling %s: %d of %d layers downloaded, %.1f of %.1f MiB"
                        % (label(self.node), self.image, done, len(self.layers), have / _MIB, total / _MIB))


class NodeImages:
    """The images of one containerd ``namespace`` (``system`` or ``cri``) on several nodes at once.

    Every method returns ``{node: result dict or TalosError}``; nodes older
    than Talos v1.13 are served by the legacy MachineService image API (which
    cannot remove images). ``progress(line)`` hears about slow pulls.
    """

    def __init__(self, client, namespace, max_concurrency=None, progress=None):
        self.client = client
        self.namespace = namespace
        self.max_concurrency = max_concurrency
        self.progress = progress or (lambda line: None)
        # Nodes that answered Unimplemented to ImageService.
        self.legacy = set()

    def list(self, nodes):
        """``{node: [image records] or TalosError}``."""
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, machine_pb2
        listed = self.client.stream_many(rpc.IMAGE_LIST, image_pb2.ImageServiceListRequest(containerd=_containerd(self.namespace)),
                                         nodes=nodes, max_concurrency=self.max_concurrency)
        old = [node for node, answer in listed.items() if isinstance(answer, TalosUnimplementedError)]
        if old:
            self.legacy.update(old)
            listed.update(self.client.stream_many(
                rpc.LEGACY_IMAGE_LIST, machine_pb2.ImageListRequest(namespace=_legacy_namespace(self.namespace)),
                nodes=old, max_concurrency=self.max_concurrency))
        return dict((node, answer if isinstance(answer, TalosError) else [_image_record(item) for item in answer])
                    for node, answer in listed.items())

    def ensure_present(self, wanted, check_mode=False, timeout=PULL_TIMEOUT):
        """Pull ``wanted[node]`` (an image reference) where it is missing.

        A node's result: ``image`` (as containerd names it), ``changed``,
        ``pulled`` (``name@digest`` the node answered, None when nothing was
        pulled or in check mode) and ``api`` (``image_service`` or ``legacy``).
        """
        references = dict((node, parse_reference(ref)) for node, ref in wanted.items())
        results = {}
        missing = {}
        for node, images in self.list(list(wanted)).items():
            if isinstance(images, TalosError):
                results[node] = images
                continue
            present = str(references[node]) in set(record["name"] for record in images)
            results[node] = {"image": str(references[node]), "namespace": self.namespace, "changed": not present,
                             "pulled": None, "api": "legacy" if node in self.legacy else "image_service"}
            if not present:
                missing.setdefault(str(references[node]), []).append(node)
        if check_mode:
            return results
        for image, nodes in sorted(missing.items()):
            for node, outcome in self._pull(image, nodes, timeout).items():
                if isinstance(outcome, TalosError):
                    results[node] = outcome
                else:
                    results[node]["pulled"] = outcome
        return results

    def _pull(self, image, nodes, timeout):
        """Pull ``image`` on ``nodes`` concurrently: ``{node: pinned name or TalosError}``."""
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, machine_pb2
        modern = [node for node in nodes if node not in self.legacy]
        legacy = [node for node in nodes if node in self.legacy]
        outcomes = {}
        if modern:
            trackers = dict((node, _PullProgress(self.progress, node, image)) for node in modern)
            names = {}

            def on_message(node, message):
                if message.WhichOneof("response") == "name":
                    names[node] = message.name
                trackers[node].update(message)

            for node in modern:
                self.progress("%s: pulling %s into the %s namespace" % (label(node), image, self.namespace))
            request = image_pb2.ImageServicePullRequest(containerd=_containerd(self.namespace), image_ref=image)
            answers = self.client.stream_many(rpc.IMAGE_PULL, request, nodes=modern, deadline=timeout,
                                              max_concurrency=self.max_concurrency, on_message=on_message)
            for node, answer in answers.items():
                outcomes[node] = answer if isinstance(answer, TalosError) else names.get(node, image)
        if legacy:
            request = machine_pb2.ImagePullRequest(namespace=_legacy_namespace(self.namespace), reference=image)
            answers = self.client.call_many(rpc.LEGACY_IMAGE_PULL, request, nodes=legacy, deadline=timeout,
                                            max_concurrency=self.max_concurrency)
            for node, answer in answers.items():
                outcomes[node] = answer if isinstance(answer, TalosError) else image
        return outcomes

    def ensure_absent(self, ref, nodes, check_mode=False):
        """Remove the image ``ref`` names from ``nodes``.

        Besides the name itself, its ``name@digest`` and bare digest aliases
        go when no other tag still names the same content. A node's result:
        ``image``, ``changed``, ``removed`` (the names removed, or that would be).
        """
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2
        reference = parse_reference(ref)
        results = {}
        for node, images in self.list(nodes).items():
            if isinstance(images, TalosError):
                results[node] = images
                continue
            names = _names_to_remove(reference, images)
            results[node] = {"image": str(reference), "namespace": self.namespace, "changed": bool(names), "removed": names}
            if names and node in self.legacy:
                results[node] = TalosUnimplementedError(
                    "%s cannot remove images: ImageService.Remove needs Talos v1.13 or later." % label(node, start=True),
                    code="Unimplemented", node=node)
        if check_mode:
            return results
        for node, result in results.items():
            if isinstance(result, TalosError):
                continue
            for name in result["removed"]:
                try:
                    self.client.call(rpc.IMAGE_REMOVE, image_pb2.ImageServiceRemoveRequest(
                        containerd=_containerd(self.namespace), image_ref=name), node=node)
                except TalosError as error:
                    # Gone meanwhile is as good as removed.
                    if error.code != "NotFound":
                        results[node] = error
                        break
        return results


def _names_to_remove(reference, images):
    """The names to remove for ``reference`` from the listed ``images``: none when it is not there."""
    by_name = dict((record["name"], record) for record in images)
    record = by_name.get(str(reference))
    if record is None:
        return []
    digest = record["digest"]
    aliases = set([digest, reference.pinned(digest)]) - set([str(reference)])
    others = [name for name, item in by_name.items() if item["digest"] == digest and name != str(reference) and name not in aliases]
    if others:
        return [str(reference)]
    return [str(reference)] + sorted(name for name in aliases if name in by_name)
