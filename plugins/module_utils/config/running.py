# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The machine configs nodes run, read from them and backed up on the controller.

A node's running config is its active ``MachineConfigs`` resource, the text the
node was given (read with os:admin: it is sensitive), with the Talos version
and hostname the node reports. A backup is a directory of private files, one
per node as the node returned its config, and ``manifest.yaml``: for each node
its file, the file's sha256, the Talos version it runs, its hostname, its
machine type and the config's documents.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import os
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
    is_v1alpha1, parse_yaml_stream, read_active_config,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node

CONTROLPLANE = "controlplane"
WORKER = "worker"
MANIFEST = "manifest.yaml"

# What a node's key may not carry into a file name.
_UNSAFE_FILE_CHARACTERS = re.compile(r"[^A-Za-z0-9._:-]")


class RunningConfig:
    """One node's running machine config as the node returned it, with what the node reported about itself."""

    def __init__(self, node, text, talos_version=None, hostname=None):
        self.node = node
        self.text = text
        self.talos_version = talos_version
        self.hostname = hostname
        self.documents = [document for document in parse_yaml_stream(text, "the running machine config of %s" % label(node))
                          if isinstance(document, dict)]
        self.v1alpha1 = next((document for document in self.documents if is_v1alpha1(document)), None)
        if self.v1alpha1 is None:
            raise TalosConfigError("The running machine config of %s holds no v1alpha1 document: the node is not configured."
                                   % label(node))
        machine_type = (self.v1alpha1.get("machine") or {}).get("type")
        if not talos_node.is_configured_type(machine_type):
            raise TalosConfigError("The running machine config of %s has no machine type (%r): the node is not configured."
                                   % (label(node), machine_type))
        self.machine_type = CONTROLPLANE if talos_node.is_control_plane_type(machine_type) else WORKER

    @property
    def sha256(self):
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def document(self, kind, name=None):
        return next((document for document in self.documents
                     if document.get("kind") == kind and document.get("name") == name and not is_v1alpha1(document)), {})

    def section(self, *path):
        value = self.v1alpha1
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def summary(self):
        """What may be said about the config: no secret."""
        return {
            "sha256": self.sha256,
            "talos_version": self.talos_version,
            "hostname": self.hostname,
            "machine_type": self.machine_type,
            "documents": [_document_label(document) for document in self.documents],
        }


def _document_label(document):
    if is_v1alpha1(document):
        return "v1alpha1"
    return "/".join(str(part) for part in (document.get("kind"), document.get("name")) if part)


def read_running_config(client, node):
    """``node``'s RunningConfig: its active machine config, the Talos version and the hostname it reports."""
    text = read_active_config(client, node)
    return RunningConfig(node, text, talos_version=talos_node.read_version_tag(client, node),
                         hostname=talos_node.read_hostname(client, node))


def check_backed_up(configs, backup, key_of):
    """Refuse ``configs`` (RunningConfigs) that are not the ones ``backup`` read: talos_config_backup's registered
    result for the same nodes (``nodes`` keyed by node, or one node's keys at the top). ``key_of(node)`` is a node's
    key in ``nodes``. A config that changed between the two reads would be adopted in a state no backup holds."""
    by_node = backup.get("nodes")
    if not isinstance(by_node, dict) and "sha256" not in backup:
        raise TalosConfigError("backup must be the result talos_config_backup registered for these nodes: it has neither "
                               "nodes nor sha256.")
    for config in configs:
        entry = by_node.get(key_of(config.node)) if isinstance(by_node, dict) else backup
        if not isinstance(entry, dict) or not entry.get("sha256"):
            raise TalosConfigError("backup holds no config of %s: back up every node of the task first. Nothing was "
                                   "written." % label(config.node))
        if entry["sha256"] != config.sha256:
            raise TalosConfigError("The running config of %s changed since the backup (sha256 %s backed up, %s now): back "
                                   "up again once nothing applies configs to the cluster. Nothing was written."
                                   % (label(config.node), entry["sha256"][:12], config.sha256[:12]))


def backup_file_name(key):
    """The file of a node's config in a backup: its key (address or name) with nothing a path could misread."""
    return "%s.yaml" % _UNSAFE_FILE_CHARACTERS.sub("_", key)


def write_node_backup(directory, key, config, check_mode=False):
    """Write ``config``'s text to its file in ``directory``; ``(file name, changed)``."""
    name = backup_file_name(key)
    changed = update_private(os.path.join(directory, name), config.text, "the running machine config of %s" % label(config.node),
                             check_mode)
    return name, changed


def write_manifest(directory, entries, check_mode=False):
    """Write the backup's manifest from ``{key: entry}`` (each a node's summary and file); whether it changed."""
    fields = ("file", "sha256", "talos_version", "hostname", "machine_type", "documents")
    nodes = dict((key, dict((field, entry.get(field)) for field in fields)) for key, entry in entries.items())
    text = "# Running machine configs of a Talos cluster, one file per node (talos_linux.talos.talos_config_backup).\n"
    text += go_yaml.dump({"nodes": nodes})
    return update_private(os.path.join(directory, MANIFEST), text, "the backup manifest", check_mode)


def prepare_directory(directory, parameter, check_mode=False):
    """Make sure ``directory`` can take files: made private when missing (its parent must exist); check mode makes
    nothing."""
    if os.path.isdir(directory):
        return
    if os.path.exists(directory):
        raise TalosConfigError("%s %s is not a directory: set %s to a directory on the controller." % (parameter, directory, parameter))
    if check_mode:
        return  # its parent may be one an earlier task would have made
    parent = os.path.dirname(directory)
    if not os.path.isdir(parent):
        raise TalosConfigError("%s %s cannot be created: its parent directory %s does not exist." % (parameter, directory, parent))
    try:
        os.mkdir(directory, 0o700)
    except OSError as error:
        raise TalosConfigError("%s %s cannot be created: %s." % (parameter, directory, error.strerror or error))
