# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talos machine configuration on the controller: loading, patching, redaction, diffs.

A machine config is a YAML stream: one v1alpha1 document (``version: v1alpha1``
with ``machine`` and ``cluster``) and any number of documents identified by
``kind`` (and ``name`` where the kind is named). Patches are JSON merge patches
(RFC 7386) given as mappings, or JSON patches (RFC 6902) given as lists of
operations; both are applied in order before anything is sent to a node.

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
import traceback

try:
    import yaml
    HAS_YAML = True
except ImportError:  # reported by TalosModule through missing_required_lib
    HAS_YAML = False

try:
    import jsonpatch
    import jsonpointer
    HAS_JSONPATCH = True
    JSONPATCH_IMPORT_ERROR = None
except ImportError:  # modules that take patches report it with missing_required_lib
    HAS_JSONPATCH = False
    JSONPATCH_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.files import read_text_file
from ansible_collections.talos_linux.talos.plugins.module_utils.redaction import redact, redact_text, secret_values

DRY_RUN_DIFF_MARKER = "Config diff:"
NO_CHANGES = "No changes."


class _Loader(yaml.SafeLoader if HAS_YAML else object):
    """SafeLoader that keeps timestamps as strings, as Talos's YAML decoder does."""


class _Dumper(yaml.SafeDumper if HAS_YAML else object):
    """SafeDumper writing multi-line strings as literal blocks, so diffs stay readable."""


if HAS_YAML:
    _Loader.yaml_implicit_resolvers = dict(
        (first, [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"])
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items())

    def _represent_str(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _represent_str)


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
        return [document for document in yaml.load_all(text, Loader=_Loader) if document is not None]
    except yaml.YAMLError as exc:
        raise TalosConfigError("%s is not valid YAML: %s." % (parameter, _yaml_problem(exc)))


def dump_documents(documents):
    """A YAML stream of ``documents``, keys in their given order."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         allow_unicode=True, width=1 << 30, explicit_start=len(documents) > 1)


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

    def secret_values(self):
        return secret_values(self.documents)

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
    operations is a JSON patch of the v1alpha1 document.
    """
    documents = copy.deepcopy(documents)
    for index, item in enumerate(config_patches):
        parameter = "config_patches[%d]" % index
        for patch in parse_patch(item, parameter):
            if isinstance(patch, list):
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
