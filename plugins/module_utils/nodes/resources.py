# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""COSI resources as ``talosctl get`` reads them: type resolution, label queries,
reads with secrets redacted, and waiting for a condition.

Shared by talos_resource_info, talos_facts (its ``resources`` option) and the
health checks.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConfigError,
    TalosError,
    TalosTimeoutError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import redact_resource_spec
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    resource_pb2 = state_pb2 = None

DEFINITIONS_TYPE = "ResourceDefinitions.meta.cosi.dev"
DEFINITIONS_NAMESPACE = "meta"

_SET_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_COMPARE_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|!=|=)\s*([^\s=!<>(),]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


class ResourceKind:
    """A resolved resource type: its full name, default namespace and whether the node marks it sensitive."""

    def __init__(self, resource_type, default_namespace, sensitive=False):
        self.type = resource_type
        self.default_namespace = default_namespace
        self.sensitive = sensitive


def _definition_spec(resource):
    spec = resource_to_dict(resource)["spec"] if not isinstance(resource, dict) else resource["spec"]
    return spec if isinstance(spec, dict) else {}


def _kind_from_definition(spec, fallback_type):
    return ResourceKind(spec.get("type") or fallback_type, spec.get("defaultNamespace"),
                        sensitive=spec.get("sensitivity") == "sensitive")


def resolve_kind(client, type_ref, node=None, waiter=None):
    """The ResourceKind that ``type_ref`` names (full type, display type or alias, any case), as talosctl resolves it.

    The definition whose ID is the lower-cased full type is read first; otherwise
    every definition is listed and ``type_ref`` matched against IDs and aliases.
    With a ``waiter`` (a common/waiter.Waiter), the reads ride out a node or endpoint that
    does not answer yet, within the wait's time: resolving the type is part of the wait.
    """
    wanted = type_ref.strip().lower()
    patience = dict(deadline=max(1.0, waiter.remaining), retry_unreachable=True) if waiter else {}
    try:
        definition = client.get_resource(DEFINITIONS_NAMESPACE, DEFINITIONS_TYPE, wanted, node=node, **patience)
        return _kind_from_definition(_definition_spec(definition), type_ref)
    except TalosError as error:
        if error.code != "NotFound":
            raise
    if waiter:
        patience["deadline"] = max(1.0, waiter.remaining)
    for definition in client.list_resources(DEFINITIONS_NAMESPACE, DEFINITIONS_TYPE, node=node, **patience):
        spec = _definition_spec(definition)
        names = [definition["metadata"]["id"]] + list(spec.get("allAliases") or spec.get("aliases") or [])
        if wanted in (str(name).lower() for name in names):
            return _kind_from_definition(spec, definition["metadata"]["id"])
    raise TalosConfigError("type %r is not a resource type or alias the node knows; list the types with "
                           "type: ResourceDefinitions.meta.cosi.dev." % type_ref)


def namespace_for(kind, namespace):
    """``namespace`` or the type's default namespace; a clear error when neither is known."""
    if namespace:
        return namespace
    if not kind.default_namespace:
        raise TalosConfigError("the namespace of %s is unknown (no resource definition names it); set namespace." % kind.type)
    return kind.default_namespace


def _split_terms(selector):
    """``a=b,c in (x, y)`` -> ``["a=b", "c in (x, y)"]``: commas inside parentheses stay."""
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


def label_query(selectors):
    """A COSI LabelQuery from Kubernetes-style selectors (all terms must match).

    Each selector may hold several comma-separated terms: ``key``, ``!key``,
    ``key=value`` (or ``==``), ``key!=value``, ``key in (a, b)``, ``key notin (a, b)``.
    """
    operation = resource_pb2.LabelTerm.Operation
    query = resource_pb2.LabelQuery()
    for selector in selectors or []:
        for term in _split_terms(selector):
            match = _SET_TERM.match(term)
            if match:
                values = [value.strip() for value in match.group(3).split(",") if value.strip()]
                query.terms.add(key=match.group(1), op=operation.IN, value=values, invert=match.group(2) == "notin")
                continue
            match = _COMPARE_TERM.match(term)
            if match:
                query.terms.add(key=match.group(1), op=operation.EQUAL, value=[match.group(3)], invert=match.group(2) == "!=")
                continue
            match = _EXISTS_TERM.match(term)
            if match:
                query.terms.add(key=match.group(2), op=operation.EXISTS, invert=match.group(1) == "!")
                continue
            raise TalosConfigError("label_selectors entry %r is not a label selector; use key, !key, key=value, key!=value, "
                                   "key in (a, b) or key notin (a, b)." % selector)
    return query


def redact_resource(resource, sensitive=False):
    """A resource dict with the secrets of its spec redacted: every value of a sensitive type (Talos's list,
    the secrets namespace, or ``sensitive`` from the node's definition), secret-looking ones of any other."""
    metadata = resource["metadata"]
    redacted = dict(resource)
    redacted["spec"] = redact_resource_spec(resource["spec"], metadata.get("type"), metadata.get("namespace"), sensitive)
    return redacted


def read_resources(client, kind, namespace, resource_id=None, selectors=None, node=None):
    """The redacted resources of ``kind`` on ``node``: the one with ``resource_id`` (none when it is
    missing), or every one matching ``selectors``."""
    if resource_id:
        try:
            found = [client.get_resource(namespace, kind.type, resource_id, node=node)]
        except TalosError as error:
            if error.code != "NotFound":
                raise
            found = []
        query = label_query(selectors)
        if query.terms:
            found = [resource for resource in found if labels_match(resource["metadata"]["labels"], query)]
    else:
        found = client.list_resources(namespace, kind.type, node=node, label_query=label_query(selectors))
    return [redact_resource(resource, kind.sensitive) for resource in found]


def labels_match(labels, query):
    """Whether ``labels`` (a dict) satisfy every term of ``query``, as COSI evaluates it."""
    operation = resource_pb2.LabelTerm.Operation
    for term in query.terms:
        present = term.key in labels
        if term.op == operation.EXISTS:
            matched = present
        elif term.op == operation.NOT_EXISTS:
            matched = not present
        elif term.op == operation.EQUAL:
            matched = present and labels[term.key] == (term.value[0] if term.value else "")
        elif term.op == operation.IN:
            matched = present and labels[term.key] in term.value
        else:
            raise TalosConfigError("label operation %s is not supported here." % operation.Name(term.op))
        if matched == term.invert:
            return False
    return True


# -- conditions ------------------------------------------------------------

def field_value(spec, path):
    """The value at a dotted ``path`` in a spec (``status.ready``), or a marker when it is absent."""
    value = spec
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


class _Absent:
    def __repr__(self):
        return "absent"


_ABSENT = _Absent()


def _equal(actual, expected):
    if actual is _ABSENT:
        return False
    if actual == expected:
        return True
    # Ansible passes raw values as strings often: compare as YAML prints them.
    return _text(actual) == _text(expected)


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def condition_met(resources, condition):
    """``(met, observed)`` for a wait condition over the resources found on one node.

    ``state: absent`` needs no resource; ``present`` needs at least one, and with
    ``field`` every resource's field equal to ``value``.
    """
    if condition["state"] == "absent":
        if not resources:
            return True, "no resource"
        return False, "%d resource(s) present: %s" % (len(resources), ", ".join(r["metadata"]["id"] for r in resources))
    if not resources:
        return False, "no resource"
    if not condition.get("field"):
        return True, "%d resource(s) present" % len(resources)
    observed = []
    met = True
    for resource in resources:
        actual = field_value(resource["spec"], condition["field"])
        observed.append("%s: %s=%s" % (resource["metadata"]["id"], condition["field"], _text(actual)))
        met = met and _equal(actual, condition["value"])
    return met, "; ".join(observed)


def _worth_waiting_out(error):
    """Errors a wait for a condition keeps going through: all but a refused or a malformed request."""
    return error.code not in ("PermissionDenied", "InvalidArgument")


def wait_for_condition(client, kind, namespace, resource_id, selectors, condition, node, waiter, use_watch=True):
    """Wait through ``waiter`` (a common/waiter.Waiter) until ``condition`` holds for the resources on ``node``;
    returns the redacted resources then.

    COSI Watch delivers every change as it happens; a node that cannot watch
    (the call is refused or breaks) is polled instead.
    """
    subject = short_label(node)
    if use_watch:
        try:
            found = _watch(client, kind, namespace, resource_id, selectors, condition, node, waiter)
            if found is not None:
                return found
        except TalosTimeoutError:
            pass
        except TalosError as error:
            if not _worth_waiting_out(error):
                raise

    def poll():
        resources = read_resources(client, kind, namespace, resource_id, selectors, node=node)
        met, observed = condition_met(resources, condition)
        return Seen(observed, done=met, value=resources)

    return waiter.until(poll, "%s on %s to be %s" % (_describe(kind, resource_id, selectors), label(node),
                                                     describe_condition(condition)),
                        subject, tolerate=_worth_waiting_out)


def describe_condition(condition):
    if condition["state"] == "absent":
        return "absent"
    if condition.get("field"):
        return "present with %s=%s" % (condition["field"], _text(condition["value"]))
    return "present"


def _describe(kind, resource_id, selectors):
    text = "%s %s" % (kind.type, resource_id) if resource_id else kind.type
    if selectors:
        text += " (%s)" % ", ".join(selectors)
    return text


def _watch(client, kind, namespace, resource_id, selectors, condition, node, waiter):
    """Follow COSI Watch until the condition holds (returns the resources) or the time is up (None)."""
    query = label_query(selectors)
    request = state_pb2.WatchRequest(namespace=namespace, type=kind.type, api_version=1)
    if resource_id:
        request.id = resource_id
    else:
        request.options.bootstrap_contents = True
        if query.terms:
            request.options.label_query.add().CopyFrom(query)
    current = {}
    state = {"bootstrapped": bool(resource_id), "result": None}

    def on_event(reply):
        if not reply.event:
            # The first reply of a COSI watch is empty: it only says the watch is established.
            return False
        for event in reply.event:
            if event.event_type == state_pb2.BOOTSTRAPPED:
                state["bootstrapped"] = True
            elif event.event_type == state_pb2.ERRORED:
                raise TalosError("Watching %s on %s failed: %s." % (kind.type, label(node), event.error))
            elif event.event_type == state_pb2.DESTROYED:
                current.pop(event.resource.metadata.id, None)
            elif event.event_type in (state_pb2.CREATED, state_pb2.UPDATED):
                resource = resource_to_dict(event.resource)
                if resource_id or labels_match(resource["metadata"]["labels"], query):
                    current[resource["metadata"]["id"]] = resource
                else:
                    current.pop(resource["metadata"]["id"], None)
        if not state["bootstrapped"]:
            return False
        resources = [redact_resource(current[key], kind.sensitive) for key in sorted(current)]
        met, observed = condition_met(resources, condition)
        waiter.see(short_label(node), observed)
        if met:
            state["result"] = resources
        return met

    if waiter.remaining <= 0:
        return None
    client.stream(rpc.COSI_WATCH, request, node=node, on_message=on_event, deadline=waiter.remaining)
    return state["result"]
