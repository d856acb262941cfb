# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talos machine configuration: loading, patching, redaction, diffs, and applying it to nodes.

A machine config is a YAML stream: one v1alpha1 document (``version: v1alpha1``
with ``machine`` and ``cluster``) and any number of documents identified by
``kind`` (and ``name`` where the kind is named). Patches are strategic merge
patches given as mappings (a JSON merge patch, RFC 7386, of the document they
name), or JSON patches (RFC 6902) given as lists of operations, which only a
single-document config takes, as in Talos; both are applied in order before
anything is sent to a node.

``ConfigApplier`` applies a config the way ``talosctl apply-config`` does:
a dry run first, so that an identical config changes nothing and check mode
and diffs come from the node's own comparison.

Secrets never leave this module unredacted unless the caller asks: redaction
(redaction.py, re-exported here) replaces every secret-bearing field with
``REDACTED`` in text meant for output, and messages about a config or a patch
name the parameter, the operation and the path, never a value.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import hashlib
import json
import re

try:
    import yaml
except ImportError:  # reported by task.execute through missing_required_lib
    yaml = None

try:
    import jsonpatch
    import jsonpointer
    HAS_JSONPATCH = True
except ImportError:  # only JSON patches need it: applying one says so
    HAS_JSONPATCH = False

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosUnimplementedError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents as config_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import read_text_file
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import redact, redact_text, secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter

DRY_RUN_DIFF_MARKER = "Config diff:"
NO_CHANGES = "No changes."

# The only FailedPrecondition ApplyConfiguration answers: "another apply configuration is already in progress".
APPLY_RETRY_CODES = ("FailedPrecondition",)

# Talos v1.14 refuses the REBOOT apply mode outside maintenance mode.
REBOOT_MODE_REFUSED_SINCE = (1, 14)

# Up to this minor release a node in maintenance mode answers Version with Unimplemented: it tells no version.
MAINTENANCE_WITHOUT_VERSION_UNTIL = (1, 12)


def _yaml_problem(exc):
    """A YAML error without the source excerpt PyYAML adds (it may quote a secret)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "unreadable YAML"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return "%s at line %d, column %d" % (problem, mark.line + 1, mark.column + 1)
    return problem


def parse_yaml_stream(text, parameter):
    """Every non-empty document of a YAML stream; errors name ``parameter``."""
    try:
        return [document for document in go_yaml.load_all(text) if document is not None]
    except yaml.YAMLError as exc:
        raise TalosConfigError("%s is not valid YAML: %s." % (parameter, _yaml_problem(exc)))


def is_v1alpha1(document):
    return isinstance(document, dict) and document.get("version") == "v1alpha1" and "kind" not in document


def _document_label(document):
    if is_v1alpha1(document):
        return "v1alpha1"
    label = str(document.get("kind", "document"))
    if document.get("name"):
        label += "/%s" % document["name"]
    return label


class MachineConfig:
    """A machine config ready to send: its parsed documents and its bytes.

    ``data`` is the text as given when no patch was applied (so the node
    parses exactly what the user wrote), else the patched documents dumped
    as YAML.
    """

    def __init__(self, documents, data):
        self.documents = documents
        self.data = data
        self._secret_values = None

    @property
    def v1alpha1(self):
        for document in self.documents:
            if is_v1alpha1(document):
                return document
        return None

    @property
    def machine_type(self):
        document = self.v1alpha1 or {}
        return (document.get("machine") or {}).get("type")

    def hash(self):
        return config_hash(self.v1alpha1) if self.v1alpha1 is not None else None

    def valid_for(self):
        """The supported Talos releases that know every document and field of the config (documents.valid_for)."""
        return config_documents.valid_for(self.documents)

    def secret_values(self):
        if self._secret_values is None:  # read once: the config is ready to send and does not change
            self._secret_values = secret_values(self.documents)
        return self._secret_values

    def redacted_text(self):
        return dump_documents(redact(self.documents))


def load_config(config=None, config_file=None, config_patches=None):
    """Build a MachineConfig from ``config`` text or ``config_file``, then ``config_patches``.

    Raises TalosConfigError naming the parameter at fault before anything is sent.
    """
    if config_file is not None:
        parameter = "config_file"
        text = read_text_file(config_file, parameter)
    else:
        parameter = "config"
        text = config or ""

    documents = parse_yaml_stream(text, parameter)
    if not documents:
        raise TalosConfigError("%s holds no machine config document." % parameter)
    for position, document in enumerate(documents, start=1):
        if not isinstance(document, dict):
            raise TalosConfigError("%s document %d is a %s, a machine config document must be a mapping."
                                   % (parameter, position, _type_name(document)))

    if not config_patches:
        return MachineConfig(documents, text.encode("utf-8"))
    documents = apply_patches(documents, config_patches)
    return MachineConfig(documents, dump_documents(documents).encode("utf-8"))


def rewrite_image_line(text, old_image, new_image):
    """``text`` (a machine config) with the one ``image:`` line naming ``old_image`` naming ``new_image``.

    Only that line changes, so the node's config keeps its comments, order and
    everything else; None when ``old_image`` is not named on exactly one line.
    """
    pattern = re.compile(r"^(\s*(?:-\s+)?image:\s*)([\"']?)%s\2(\s*(?:#.*)?)$" % re.escape(old_image), re.MULTILINE)
    if len(pattern.findall(text)) != 1:
        return None
    return pattern.sub(lambda match: match.group(1) + match.group(2) + new_image + match.group(2) + match.group(3), text)


ACTIVE_CONFIG = ("config", "MachineConfigs.config.talos.dev", "v1alpha1")


def read_active_config(client, node):
    """The text of ``node``'s active machine config, as the node stores it (needs os:admin: it is sensitive)."""
    namespace, resource_type, resource_id = ACTIVE_CONFIG
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
    request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id)
    return client.call(rpc.COSI_GET, request, node=node)[0].resource.spec.yaml_spec


def _type_name(value):
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return "scalar"


def parse_patch(patch, parameter):
    """A patch option item as a list of patches: mappings (merge) and operation lists (JSON patch)."""
    if isinstance(patch, (dict, list)):
        patches = [patch]
    elif isinstance(patch, str):
        patches = parse_yaml_stream(patch, parameter)
    else:
        raise TalosConfigError("%s must be a mapping, a list of JSON patch operations or YAML text." % parameter)
    if not patches:
        raise TalosConfigError("%s is empty." % parameter)
    for item in patches:
        if not isinstance(item, (dict, list)):
            raise TalosConfigError("%s must be a mapping (merge patch) or a list of operations (JSON patch), not a scalar." % parameter)
        if isinstance(item, list) and not all(isinstance(operation, dict) for operation in item):
            raise TalosConfigError("%s is a list, so it must be a JSON patch: a list of operations such as "
                                   "{op: replace, path: /machine/network/hostname, value: node-1}." % parameter)
    return patches


def patch_secret_values(config_patches):
    """The secrets inside ``config_patches``, for no_log masking of the task's arguments.

    Each secret leaf of a structured patch, and the whole text of a YAML patch
    that holds one (or that cannot be read). Only these are masked, so that
    messages quoting a patch's operation or path stay readable.
    """
    found = set()
    for item in config_patches or ():
        if isinstance(item, str):
            try:
                inside = secret_values(parse_yaml_stream(item, "patch"))
            except TalosConfigError:
                inside = {item}
            if inside:
                found.update(inside)
                found.add(item)
        else:
            found.update(secret_values(item))
    return found


def apply_patches(documents, config_patches):
    """Apply ``config_patches`` in order to a copy of ``documents``.

    A mapping with ``kind`` is merged into the document of that kind (and
    ``name``), added when there is none, and removed by ``$patch: delete``;
    any other mapping is merged into the v1alpha1 document. A list of
    operations is a JSON patch of the v1alpha1 document, refused when the
    config has other documents (at that point of the patching), as Talos
    refuses it.
    """
    documents = copy.deepcopy(documents)
    for index, item in enumerate(config_patches):
        parameter = "config_patches[%d]" % index
        for patch in parse_patch(item, parameter):
            if isinstance(patch, list):
                if len(documents) > 1:
                    raise TalosConfigError(
                        "%s is a JSON patch (RFC 6902), which cannot be applied to a multi-document machine config "
                        "(%s): use a strategic merge patch instead, a mapping (with kind to patch a document other "
                        "than v1alpha1)." % (parameter, ", ".join(_document_label(document) for document in documents)))
                _json_patch_v1alpha1(documents, patch, parameter)
            elif "kind" in patch:
                documents = _merge_document(documents, patch)
            else:
                target = _find_v1alpha1(documents, parameter)
                documents[documents.index(target)] = merge_patch(target, patch)
    return documents


def _find_v1alpha1(documents, parameter):
    for document in documents:
        if is_v1alpha1(document):
            return document
    raise TalosConfigError("%s patches the v1alpha1 document, but the config has none." % parameter)


JSON_PATCH_OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")


def _check_json_patch_operation(operation, where):
    """Refuse a malformed operation; messages quote only the operation's op and path, never a value."""
    op = operation.get("op")
    if op not in JSON_PATCH_OPERATIONS:
        raise TalosConfigError("%s has no valid op: a JSON patch operation is one of %s."
                               % (where, ", ".join(JSON_PATCH_OPERATIONS)))
    for field in ("path",) + (("from",) if op in ("move", "copy") else ()):
        pointer = operation.get(field)
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise TalosConfigError("%s (%s) needs %s: a JSON pointer such as /machine/network/hostname."
                                   % (where, op, field))
    if op in ("add", "replace", "test") and "value" not in operation:
        raise TalosConfigError("%s (%s %s) needs a value." % (where, op, operation["path"]))


def _json_patch_failure(exc):
    """Why an operation failed, from the exception's type only (its text quotes the document)."""
    if isinstance(exc, jsonpatch.JsonPatchTestFailed):
        return "the value at the path is not the one the test expects"
    return "the path (for add, its parent) does not exist in the document, or a list index is out of range"


def _json_patch_v1alpha1(documents, operations, parameter):
    if not HAS_JSONPATCH:
        raise TalosConfigError("%s is a JSON patch (RFC 6902), which needs the Python library jsonpatch: install it "
                               "where the module runs (pip install jsonpatch)." % parameter)
    target = _find_v1alpha1(documents, parameter)
    for number, operation in enumerate(operations, start=1):
        _check_json_patch_operation(operation, "%s operation %d" % (parameter, number))
    patched = target
    for number, operation in enumerate(operations, start=1):
        try:
            patched = jsonpatch.apply_patch(patched, [operation])
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            pointers = operation["path"] if "from" not in operation else "%s to %s" % (operation["from"], operation["path"])
            raise TalosConfigError("%s operation %d (%s %s) cannot be applied to the v1alpha1 document: %s."
                                   % (parameter, number, operation["op"], pointers, _json_patch_failure(exc)))
    documents[documents.index(target)] = patched


def _merge_document(documents, patch):
    def matches(document):
        return (document.get("kind") == patch.get("kind") and document.get("name") == patch.get("name")
                and not is_v1alpha1(document))

    if patch.get("$patch") == "delete":
        return [document for document in documents if not matches(document)]
    for position, document in enumerate(documents):
        if matches(document):
            documents[position] = merge_patch(document, patch)
            return documents
    documents.append(merge_patch({}, patch))
    return documents


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: mappings merge, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def config_hash(document):
    """sha256 of a document in canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def dry_run_diff(mode_details):
    """The config diff part of a dry run's ``mode_details``, or None when it has none."""
    if not mode_details or DRY_RUN_DIFF_MARKER not in mode_details:
        return None
    return mode_details.split(DRY_RUN_DIFF_MARKER, 1)[1].strip("\n")


def redact_mode_details(mode_details, known_secrets=()):
    """An ApplyConfiguration ``mode_details`` with the secrets of its config diff redacted."""
    if not mode_details or DRY_RUN_DIFF_MARKER not in mode_details:
        return redact_text(mode_details or "", known_secrets)
    summary, diff = mode_details.split(DRY_RUN_DIFF_MARKER, 1)
    return redact_text(summary, known_secrets) + DRY_RUN_DIFF_MARKER + redact_text(diff, known_secrets, diff=True)


def dry_run_has_no_changes(mode_details):
    """True when a dry run reports the config identical to the node's."""
    diff = dry_run_diff(mode_details)
    return diff is not None and diff.strip() == NO_CHANGES


def split_unified_diff(diff_text):
    """Before and after texts from a unified diff: context lines in both, hunk headers kept as landmarks.

    Returns None when ``diff_text`` is not a unified diff.
    """
    before, after = [], []
    seen_hunk = False
    for line in diff_text.splitlines():
        if line.startswith(("--- ", "+++ ")) and not seen_hunk:
            continue
        if line.startswith("@@"):
            seen_hunk = True
            before.append(line)
            after.append(line)
        elif not seen_hunk:
            continue
        elif line.startswith("-"):
            before.append(line[1:])
        elif line.startswith("+"):
            after.append(line[1:])
        elif line.startswith(" ") or line == "":
            before.append(line[1:])
            after.append(line[1:])
    if not seen_hunk:
        return None
    return "\n".join(before) + "\n", "\n".join(after) + "\n"


def config_summary(text):
    """What may be said about an active config without its secrets: version, hash, type, documents."""
    documents = [document for document in parse_yaml_stream(text, "the node's machine config") if isinstance(document, dict)]
    config = MachineConfig(documents, None)
    v1alpha1 = config.v1alpha1 or {}
    return {
        "version": v1alpha1.get("version"),
        "hash": config.hash(),
        "machine_type": config.machine_type,
        "documents": [_document_label(document) for document in documents],
    }


def _machine_pb2():
    # Imported on first use: rendering and patching configs on the controller needs no protobuf.
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
    return machine_pb2


def request_mode(mode, maintenance, tag):
    """The ApplyConfiguration mode to send for the module's ``mode`` to a node running Talos ``tag``.

    ``reboot`` is sent as REBOOT where Talos still accepts it (maintenance
    mode, where Talos turns it into no_reboot itself, and versions before
    v1.14); elsewhere, and on a tag that is no version (a development build),
    the config is applied with no_reboot and the node rebooted afterwards.
    """
    if mode != "reboot" or maintenance:
        return mode
    return "reboot" if talos_node.runs_at_least(tag, REBOOT_MODE_REFUSED_SINCE) is False else "no_reboot"


def mode_name(value):
    """``ApplyConfigurationRequest.Mode`` number -> the module's spelling (``NO_REBOOT`` -> ``no_reboot``)."""
    return _machine_pb2().ApplyConfigurationRequest.Mode.Name(value).lower()


def apply_request(data, mode, try_timeout, dry_run):
    """The ApplyConfigurationRequest sending ``data`` in ``mode`` (``try`` rolls back after ``try_timeout`` seconds)."""
    from google.protobuf.duration_pb2 import Duration
    messages = _machine_pb2()
    request = messages.ApplyConfigurationRequest(
        data=data, mode=messages.ApplyConfigurationRequest.Mode.Value(mode.upper()), dry_run=dry_run)
    if mode == "try":
        request.try_mode_timeout.CopyFrom(Duration(seconds=try_timeout))
    return request


def apply_diff(node, mode_details, config, known_secrets, show_secrets):
    """Before/after texts for --diff from a dry run's config diff (the whole config when there is nothing to compare)."""
    text = dry_run_diff(mode_details)
    if text and not show_secrets:
        text = redact_text(text, known_secrets, diff=True)
    sides = split_unified_diff(text) if text else None
    if sides is None:
        whole = config.data.decode("utf-8")
        sides = ("", whole if show_secrets else redact_text(whole, known_secrets))
    name = label(node)
    return {
        "before": sides[0],
        "after": sides[1],
        "before_header": "%s: active machine configuration" % name,
        "after_header": "%s: machine configuration to apply" % name,
    }


def _check_fits_maintenance(config, node):
    config_documents.check_fits(
        config.documents, MAINTENANCE_WITHOUT_VERSION_UNTIL,
        "%s runs Talos v%d.%d or older (in maintenance mode it does not tell which)"
        % ((label(node),) + MAINTENANCE_WITHOUT_VERSION_UNTIL), node=node)


def check_nodes_fit(client, config, nodes, maintenance=False, max_concurrency=None):
    """Refuse ``config`` before any of ``nodes`` is touched when one of them runs a Talos that cannot decode it
    (documents.check_fits): ``{node: version tag}`` of the nodes read, for ConfigApplier's ``versions``.

    The versions are read at once, and only when the config holds a document
    or field some supported release does not know. A node that does not answer
    is left out: its own apply reads it again and fails it alone. A refusal
    names the first node refused and how many others are.
    """
    if not config_documents.requirements(config.documents):
        return {}
    versions, refusals = {}, []
    for node, reply in sorted(client.call_many(rpc.VERSION, nodes=nodes, max_concurrency=max_concurrency).items()):
        try:
            if isinstance(reply, TalosUnimplementedError) and maintenance:
                _check_fits_maintenance(config, node)
            elif not isinstance(reply, Exception):
                tag = reply[0].version.tag
                config_documents.check_fits(config.documents, tag, "%s runs %s" % (label(node), tag), node=node)
                versions[node] = tag
        except TalosConfigError as refusal:
            refusals.append(refusal)
    if len(refusals) == 1:
        raise refusals[0]
    if refusals:
        others = [refusal.node for refusal in refusals[1:]]
        raise TalosConfigError("%s, and %d other node%s too (%s)." % (
            refusals[0].message.rstrip("."), len(others), "s are refused" if len(others) > 1 else " is refused",
            ", ".join(others)), node=refusals[0].node)
    return versions


class ConfigApplier:
    """Applies one MachineConfig to nodes as ``talosctl apply-config`` does: dry run, decision, apply, reboot or wait.

    ``mode`` is one of auto, no_reboot, reboot, staged, try. ``maintenance``
    means the nodes are in maintenance mode (reached without a client
    certificate): they have no config to compare with and install the new one
    by restarting. An apply that reboots a configured node passes the etcd
    quorum guard first (etcd/quorum.py guard: ``force_quorum_loss``,
    ``quorum_wait_timeout``), in check mode too. ``wait_timeout`` (seconds;
    None for no wait) bounds the wait for a reboot or for the secure API.
    ``check_mode`` stops after the dry run and the guard. ``progress`` (a
    callable taking a line) hears how a node's state changes during a long wait.
    With ``keep_newer_installer`` a configured node's installer reference never
    moves back to an older release (installer_reference.keep_newer_installer).
    """

    def __init__(self, client, config, mode="auto", try_timeout=60, maintenance=False, wait_timeout=None,
                 show_secrets=False, check_mode=False, progress=None, force_quorum_loss=False, quorum_wait_timeout=0,
                 keep_newer_installer=False, versions=None):
        self.client = client
        self.config = config
        self.mode = mode
        self.try_timeout = try_timeout
        self.maintenance = maintenance
        self.wait_timeout = wait_timeout
        self.show_secrets = show_secrets
        self.check_mode = check_mode
        self.progress = progress
        self.force_quorum_loss = force_quorum_loss
        self.quorum_wait_timeout = quorum_wait_timeout
        self.keep_newer_installer = keep_newer_installer
        self.known_secrets = config.secret_values()
        # The versions check_nodes_fit read for the whole task, so that each node's apply does not read its own again.
        self.versions = versions or {}

    def _call_apply(self, node, config, mode, dry_run):
        request = apply_request(config.data, mode, self.try_timeout, dry_run)
        return self.client.call(rpc.APPLY_CONFIGURATION, request, node=node, retry_codes=APPLY_RETRY_CODES)[0]

    def _checked_version(self, node):
        """The Talos version ``node`` runs (None when it was not needed or the node does not tell), once the config
        is known to fit it: a config that holds a document or field the node's release does not know is refused
        (documents.check_fits) before anything is sent."""
        gated = bool(config_documents.requirements(self.config.documents))
        if not gated and (self.mode != "reboot" or self.maintenance):
            return None
        if node in self.versions:
            return self.versions[node]
        try:
            tag = talos_node.read_version_tag(self.client, node)
        except TalosUnimplementedError:
            if not self.maintenance:
                raise
            _check_fits_maintenance(self.config, node)
            return None
        config_documents.check_fits(self.config.documents, tag, "%s runs %s" % (label(node), tag), node=node)
        return tag

    def _config_for(self, node):
        """The config to apply to ``node`` and, when its installer was kept at the node's release, what was kept."""
        if not self.keep_newer_installer or self.maintenance:
            return self.config, None
        # installer_reference applies configs through ConfigApplier: imported here, not at the top, to break the cycle.
        from ansible_collections.talos_linux.talos.plugins.module_utils.config import installer_reference
        return installer_reference.keep_newer_installer(self.config, installer_reference.read_installer_reference(self.client, node))

    def apply(self, node):
        """Apply the config to ``node``: ``(result, diff)``, diff None when the node already runs it.

        ``result`` holds node, changed, mode, mode_details, warnings and
        rebooted, with every secret of the config redacted.
        """
        reboot_mode = _machine_pb2().ApplyConfigurationRequest.REBOOT
        tag = self._checked_version(node)
        mode = request_mode(self.mode, self.maintenance, tag)
        config, kept = self._config_for(node)

        dry_run = self._call_apply(node, config, mode, dry_run=True)
        result = {
            "node": node,
            "changed": False,
            "mode": mode_name(dry_run.mode),
            "mode_details": redact_mode_details(dry_run.mode_details, self.known_secrets),
            "warnings": [],
            "rebooted": False,
        }
        if kept:
            result["installer_kept"] = kept
        # A node in maintenance mode has no configuration: applying is always a change.
        if not self.maintenance and dry_run_has_no_changes(dry_run.mode_details):
            return result, None
        result["changed"] = True
        diff = apply_diff(node, dry_run.mode_details, config, self.known_secrets, self.show_secrets)
        # Talos reboots by itself in REBOOT mode: sent before v1.14, or chosen there by AUTO for some changes.
        rebooting = (self.mode == "reboot" or dry_run.mode == reboot_mode) and not self.maintenance
        if rebooting:
            # The one etcd quorum guard every reboot passes (a worker has nothing to guard).
            result.update(etcd_quorum.guard(self.client, node, "reboot", self.force_quorum_loss,
                                            quorum_wait_timeout=self.quorum_wait_timeout, progress=self.progress))
        if self.check_mode:
            return result, diff

        boot_id = waits.read_boot_id(self.client, node) if rebooting else None

        applied = self._call_apply(node, config, mode, dry_run=False)
        result.update(mode=mode_name(applied.mode), mode_details=redact_mode_details(applied.mode_details, self.known_secrets),
                      warnings=[redact_text(warning, self.known_secrets) for warning in applied.warnings])

        if self.maintenance:
            # The node installs the configuration and restarts into it by itself.
            result["rebooted"] = True
            if self.wait_timeout:
                with self.client.with_settings(insecure=False) as secure_client:
                    waits.wait_for_secure_api(secure_client, node, Waiter(self.wait_timeout, progress=self.progress))
        elif self.mode == "reboot" or applied.mode == reboot_mode:
            if applied.mode != reboot_mode:
                self.client.call(rpc.REBOOT, _machine_pb2().RebootRequest(), node=node)
            result["rebooted"] = True
            if self.wait_timeout:
                waits.wait_for_reboot(self.client, node, boot_id, Waiter(self.wait_timeout, progress=self.progress))
        return result, diff


def file_diff(before, after, known_secrets, path):
    """--diff of a config file at ``path`` from text ``before`` (None: no file) to ``after``, every secret redacted.

    ``known_secrets`` are those of ``after``; the old text's own are found by
    reading it, so that a rotated secret is redacted on both sides.
    """
    secrets = set(known_secrets)
    if before:
        try:
            secrets |= secret_values(parse_yaml_stream(before, path))
        except TalosConfigError:
            pass  # not YAML: its lines are still redacted by field name and shape
    return {"before": redact_text(before, secrets) if before else "", "after": redact_text(after, secrets) if after else "",
            "before_header": path, "after_header": path}
