# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The smallest patches that turn one machine config into another.

The patches are strategic merge patches in the form ``apply_patches``
(machine_config.py) applies and talosctl's ``--config-patch`` reads: a mapping
without ``kind`` is merged into the v1alpha1 document, a mapping with
``apiVersion``/``kind`` (and ``name``) into the document of that kind, added
when the config has none; ``{apiVersion, kind, name, $patch: delete}`` removes a
document. Inside a document, a field the target lacks is removed with ``null``
(JSON merge patch, RFC 7386) and a list that differs is given whole: the
collection replaces lists, it never appends to them.

Documents keep their order, because a node compares configs as text: a
document the target has and the base lacks is appended, so the base's
documents that the target lists after it are removed and appended again,
whole. Everything is computed on parsed YAML: comments and key order do not
count, any other difference does.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy

from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import apply_patches, is_v1alpha1

# What a document's patch keeps to name the document it patches.
IDENTITY_KEYS = ("apiVersion", "kind", "name")
DELETE = "$patch"


class _Nothing:
    """No patch: the values are equal (or, intersecting, have nothing in common)."""

    def __repr__(self):
        return "NOTHING"


NOTHING = _Nothing()


def document_key(document):
    """None for the v1alpha1 document, else ``(kind, name)``: how patches find a document."""
    if is_v1alpha1(document):
        return None
    return (document.get("kind"), document.get("name"))


def merge_diff(current, desired):
    """The JSON merge patch that turns ``current`` into ``desired``, or NOTHING when they are equal.

    Mappings are compared key by key (a key ``desired`` lacks becomes ``null``);
    anything else (scalars, lists, a change of type) is given whole.
    """
    if current == desired:
        return NOTHING
    if isinstance(current, dict) and isinstance(desired, dict):
        patch = {}
        for key in current:
            if key not in desired:
                patch[key] = None
        for key, value in desired.items():
            if key not in current:
                patch[key] = copy.deepcopy(value)
            else:
                inner = merge_diff(current[key], value)
                if inner is not NOTHING:
                    patch[key] = inner
        return patch
    return copy.deepcopy(desired)


def _identity(document):
    return dict((key, document[key]) for key in IDENTITY_KEYS if key in document)


def _kept_prefix(base_keys, target_keys):
    """How many of the target's first documents stay where the base has them: documents of the base, in its order."""
    position = -1
    for count, key in enumerate(target_keys):
        if key not in base_keys or base_keys.index(key) < position:
            return count
        position = base_keys.index(key)
    return len(target_keys)


def smallest_patches(base, target):
    """The patches that make the documents ``base`` into the documents ``target``: ``[]`` when they are equal.

    The v1alpha1 document's patch comes first, then those of the documents both
    have, then the removals, then the documents appended in the target's order.
    """
    patches = []
    base_v1alpha1 = next((document for document in base if is_v1alpha1(document)), None)
    target_v1alpha1 = next((document for document in target if is_v1alpha1(document)), None)
    if base_v1alpha1 is not None and target_v1alpha1 is not None:
        change = merge_diff(base_v1alpha1, target_v1alpha1)
        if change is not NOTHING:
            patches.append(change)

    base_documents = [document for document in base if not is_v1alpha1(document)]
    target_documents = [document for document in target if not is_v1alpha1(document)]
    base_keys = [document_key(document) for document in base_documents]
    target_keys = [document_key(document) for document in target_documents]
    kept = _kept_prefix(base_keys, target_keys)
    by_key = dict(zip(base_keys, base_documents))

    removed, appended = [], []
    for document in target_documents[:kept]:
        change = merge_diff(by_key[document_key(document)], document)
        if change is not NOTHING:
            patches.append(dict(_identity(document), **change))
    for key, document in zip(base_keys, base_documents):
        if key not in target_keys[:kept]:
            removed.append(dict(_identity(document), **{DELETE: "delete"}))
    for document in target_documents[kept:]:
        appended.append(copy.deepcopy(document))
    return patches + removed + appended


def patch_size(patches):
    """How much ``patches`` say: the values they set or remove (a document removal counts one)."""
    def count(value, top=False):
        if isinstance(value, dict) and value:
            return sum(count(item) for key, item in value.items() if not (top and key in IDENTITY_KEYS))
        if isinstance(value, list) and value:
            return sum(count(item) for item in value)
        return 1
    return sum(count(patch, top=True) for patch in patches)


def _intersection(first, second):
    """What two patch values have in common, or NOTHING."""
    if first == second:
        return copy.deepcopy(first)
    if isinstance(first, dict) and isinstance(second, dict):
        common = {}
        for key, value in first.items():
            if key in second:
                inner = _intersection(value, second[key])
                if inner is not NOTHING:
                    common[key] = inner
        return common or NOTHING
    return NOTHING


def _patch_key(patch):
    """What a patch acts on: the v1alpha1 document, a document's change, its removal or its addition."""
    if "kind" not in patch:
        return ("v1alpha1",)
    return ("delete" if patch.get(DELETE) == "delete" else "patch", patch.get("kind"), patch.get("name"))


def common_patches(patch_lists, base=()):
    """The patches every one of ``patch_lists`` has in common, in the first list's order.

    For each patch of the first list acting on a document that every other list
    also patches, the values they all set alike (a document's name and kind
    kept). A document the ``base`` documents lack is common only when every
    list adds the same: a document is never split between patches.
    """
    if not patch_lists:
        return []
    existing = set(document_key(document) for document in base)
    common = []
    for patch in patch_lists[0]:
        key = _patch_key(patch)
        added = key[0] == "patch" and tuple(key[1:]) not in existing
        shared = patch
        for others in patch_lists[1:]:
            match = next((other for other in others if _patch_key(other) == key), None)
            if match is None or (added and match != patch):
                shared = NOTHING
                break
            shared = _intersection(shared, match)
            if shared is NOTHING:
                break
        if shared is NOTHING or (key[0] == "patch" and not set(shared) - set(IDENTITY_KEYS)):
            continue
        if key[0] == "patch":
            shared = dict(_identity(patch), **shared)
        common.append(shared)
    return common


def differences(documents, target):
    """Where ``documents`` still differ from ``target``: a sorted list of paths (``v1alpha1.machine.network``,
    ``LinkConfig/eth0``, ``document order``); empty when they are equal."""
    found = set()
    by_key = dict((document_key(document), document) for document in documents)
    target_by_key = dict((document_key(document), document) for document in target)

    def label(key):
        return "v1alpha1" if key is None else "/".join(part for part in key if part)

    def walk(path, first, second):
        if first == second:
            return
        if isinstance(first, dict) and isinstance(second, dict):
            for name in set(first) | set(second):
                walk("%s.%s" % (path, name), first.get(name, NOTHING), second.get(name, NOTHING))
            return
        found.add(path)

    for key in set(by_key) | set(target_by_key):
        if key not in by_key or key not in target_by_key:
            found.add(label(key))
        else:
            walk(label(key), by_key[key], target_by_key[key])
    if not found and [document_key(document) for document in documents] != [document_key(document) for document in target]:
        found.add("document order")
    return sorted(found)


def patched(base, patches):
    """``base`` with ``patches`` applied as the collection applies them."""
    return apply_patches(base, patches) if patches else copy.deepcopy(base)
