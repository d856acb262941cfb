# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fact gathering for talos_facts: which subsets to read, the reads (one RPC at a time
for every node, concurrently) and the shape of the facts."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import resources
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConfigError,
    TalosConnectionError,
    TalosError,
    TalosRoutingError,
    TalosTimeoutError,
    TalosTLSError,
)

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = state_pb2 = None

SUBSETS = ("version", "hostname", "machine", "services", "etcd", "disks", "memory", "network", "mounts", "config")
MINIMAL_SUBSETS = ("version", "hostname", "machine")


def resolve_subsets(gather_subset):
    """The set of subsets ``gather_subset`` asks for, with ``all``, ``min`` and ``!name`` as in ansible.builtin.setup."""
    include, exclude = set(), set()
    for entry in gather_subset:
        name = entry.strip()
        negated = name.startswith("!")
        name = name.lstrip("!")
        if name not in SUBSETS + ("all", "min"):
            raise TalosConfigError("gather_subset entry %r is not one of all, min, %s (each may be prefixed with !)."
                                   % (entry, ", ".join(SUBSETS)))
        if name == "all":
            names = set(SUBSETS) - set(MINIMAL_SUBSETS) if negated else set(SUBSETS)
        elif name == "min":
            names = set(MINIMAL_SUBSETS)
        else:
            names = {name}
        (exclude if negated else include).update(names)
    if not any(not entry.strip().startswith("!") for entry in gather_subset):
        include = set(SUBSETS)
    return include - exclude


def node_is_down(error):
    """Errors that fail the node as a whole (configuration, TLS, connection, routing), as opposed to one refused call."""
    return isinstance(error, (TalosConfigError, TalosConnectionError, TalosTLSError, TalosTimeoutError, TalosRoutingError))


def _fields(message):
    return dict((field.name, getattr(message, field.name)) for field in message.DESCRIPTOR.fields)


def version_facts(item):
    version = item.version
    facts = dict((key, getattr(version, key)) for key in ("tag", "sha", "built", "go_version", "os", "arch"))
    facts["platform"] = {"name": item.platform.name, "mode": item.platform.mode} if item.HasField("platform") else None
    # A node in maintenance mode has no config, hence no features.
    facts["features"] = {"rbac": item.features.rbac} if item.HasField("features") else None
    return facts


def service_facts(info):
    return {
        "id": info.id,
        "state": info.state,
        "health": {"unknown": info.health.unknown, "healthy": info.health.healthy, "last_message": info.health.last_message},
    }


def disk_facts(disk):
    # Imported here, with the Disks call that needs it, as the config tools below are.
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_pb2

    facts = _fields(disk)
    facts["type"] = storage_pb2.Disk.DiskType.Name(disk.type)
    return facts


def machine_facts(status, machine_type):
    """The ``machine`` facts from a node.MachineStatus and the machine type."""
    return {
        "type": machine_type,
        "configured": talos_node.is_configured_type(machine_type),
        "stage": status.stage,
        "ready": status.ready,
        "unmet_conditions": status.unmet_conditions,
    }


def etcd_facts(member_items, status_items):
    members = [etcd.member_to_dict(member) for item in member_items for member in item.members]
    facts = {"members": members, "leader": None, "member_id": None, "is_leader": False}
    if status_items:
        status = status_items[0].member_status
        if status.leader:
            facts["leader"] = etcd.format_member_id(status.leader)
        if status.member_id:
            facts["member_id"] = etcd.format_member_id(status.member_id)
        facts["is_leader"] = bool(status.leader) and status.leader == status.member_id
    return facts


def network_facts(resources):
    by_id = dict((resource["metadata"]["id"], (resource["spec"] or {}).get("addresses") or []) for resource in resources)
    current = by_id.get("current", by_id.get("default", []))
    return {"addresses": current, "node_addresses": by_id}


# The unary reads of the subsets that depend on nothing else: they go out with the machine status and type.
_INDEPENDENT_READS = (
    ("version", rpc.VERSION),
    ("hostname", rpc.HOSTNAME),
    ("services", rpc.SERVICE_LIST),
    ("disks", rpc.STORAGE_DISKS),
    ("memory", rpc.MEMORY),
    ("mounts", rpc.MOUNTS),
)


def _resources(answers):
    """``{node: resource or TalosError}`` of COSI Get answers."""
    return dict((node, answer if isinstance(answer, TalosError) else answer[0].resource) for node, answer in answers.items())


class FactGatherer:
    """Reads the facts of several nodes concurrently: the reads that depend on nothing else go out together, the
    others (etcd, network, config, resources) one RPC at a time for all nodes."""

    def __init__(self, client, nodes, insecure, max_concurrency=None):
        self.client = client
        self.nodes = nodes
        self.insecure = insecure
        self.max_concurrency = max_concurrency
        self.facts = dict((node, {"node": node}) for node in nodes)
        self.unavailable = dict((node, {}) for node in nodes)
        self.errors = {}
        self.answered = set()
        self.first_refusal = {}

    def alive(self, nodes=None):
        return [node for node in (self.nodes if nodes is None else nodes) if node not in self.errors]

    def call(self, subset, method, request=None, nodes=None, quiet_codes=()):
        """``{node: items}`` of the nodes that answered; refusals are recorded under ``unavailable``.

        An unreachable node is recorded as failed and left out of later calls.
        Errors whose code is in ``quiet_codes`` are returned to the caller
        (as the item value) instead of being recorded.
        """
        return self.call_all([(subset, method, request, quiet_codes)], nodes)[0]

    def call_all(self, reads, nodes=None):
        """``call`` for reads that do not depend on each other, each ``(subset, method, request, quiet_codes)``,
        all in flight together: one ``{node: items}`` per read, in order."""
        targets = self.alive(nodes)
        if not targets:
            return [{} for _read in reads]
        batches = self.client.call_batch([(method, request, targets) for _subset, method, request, _quiet in reads],
                                         max_concurrency=self.max_concurrency)
        return [self._sort(subset, targets, answers, quiet_codes)
                for (subset, _method, _request, quiet_codes), answers in zip(reads, batches)]

    def _sort(self, subset, targets, answers, quiet_codes):
        """The items of the nodes that answered one read; the refusals recorded."""
        answered = {}
        for node in targets:
            answer = answers[node]
            if not isinstance(answer, TalosError):
                self.answered.add(node)
                answered[node] = answer
            elif answer.code in quiet_codes and not node_is_down(answer):
                self.answered.add(node)
                answered[node] = answer
            else:
                self._refused(node, subset, answer)
        return answered

    def _refused(self, node, subset, error):
        """Record a failed read: the node's failure, or the refusal of one subset."""
        if node_is_down(error):
            self.errors[node] = error
        else:
            self.unavailable[node][subset] = error.message
            self.first_refusal.setdefault(node, error)

    def get_resources(self, subset, namespace, resource_type, resource_id, nodes=None, quiet_codes=()):
        request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=resource_id)
        return _resources(self.call(subset, rpc.COSI_GET, request, nodes=nodes, quiet_codes=quiet_codes))

    def list_resources(self, subset, namespace, resource_type):
        """``{node: [resource]}`` of the nodes that answered a COSI List (a stream per node, read concurrently)."""
        targets = self.alive()
        if not targets:
            return {}
        request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
        answers = self.client.stream_many(rpc.COSI_LIST, request, nodes=targets, max_concurrency=self.max_concurrency)
        listed = {}
        for node in targets:
            answer = answers[node]
            if isinstance(answer, TalosError):
                self._refused(node, subset, answer)
            else:
                self.answered.add(node)
                listed[node] = [reply.resource for reply in answer]
        return listed

    def gather(self, subsets, resources):
        # Machine status and type decide `maintenance` and whether etcd applies: always read. They and every unary
        # read that depends on nothing go out together.
        reads = [("machine", rpc.COSI_GET, state_pb2.GetRequest(namespace=namespace, type=kind, id=name), quiet_codes)
                 for (namespace, kind, name), quiet_codes in ((talos_node.MACHINE_STATUS, ()),
                                                              (talos_node.MACHINE_TYPE, ("NotFound",)))]
        independent = [(subset, method) for subset, method in _INDEPENDENT_READS if subset in subsets]
        reads += [(subset, method, None, ()) for subset, method in independent]
        answers = self.call_all(reads)
        statuses, types = (_resources(answer) for answer in answers[:2])
        read = dict((subset, answer) for (subset, _method), answer in zip(independent, answers[2:]))
        machine_types = {}
        for node in self.alive():
            status = talos_node.MachineStatus(_resource_spec(statuses.get(node)))
            machine_types[node] = talos_node.machine_type_of(_resource_spec(types.get(node)))
            # Without a status (refused), only the connection tells: maintenance mode is reached insecurely.
            self.facts[node]["maintenance"] = status.in_maintenance if status.stage else self.insecure
            if "machine" in subsets:
                self.facts[node]["machine"] = machine_facts(status, machine_types[node])

        for node, items in read.get("version", {}).items():
            self.facts[node]["version"] = version_facts(items[0])
        for node, items in read.get("hostname", {}).items():
            self.facts[node]["hostname"] = items[0].hostname
        for node, items in read.get("services", {}).items():
            self.facts[node]["services"] = [service_facts(info) for info in talos_node.services_by_id(items).values()]
        if "etcd" in subsets:
            self._gather_etcd(machine_types)
        for node, items in read.get("disks", {}).items():
            self.facts[node]["disks"] = [disk_facts(disk) for item in items for disk in item.disks]
        for node, items in read.get("memory", {}).items():
            self.facts[node]["memory"] = _fields(items[0].meminfo)
        if "network" in subsets:
            for node, listed in self.list_resources("network", "network", "NodeAddresses.net.talos.dev").items():
                self.facts[node]["network"] = network_facts([resource_to_dict(resource) for resource in listed])
        for node, items in read.get("mounts", {}).items():
            self.facts[node]["mounts"] = [_fields(stat) for item in items for stat in item.stats]
        if "config" in subsets:
            # A node in maintenance mode has no configuration (and refuses the sensitive resource to its reader).
            configured = []
            for node in self.alive():
                if self.facts[node]["maintenance"]:
                    self.facts[node]["config"] = None
                else:
                    configured.append(node)
            # The config tools (jsonpatch, difflib) are imported only by the tasks that read a config.
            from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import config_summary

            configs = self.get_resources("config", "config", "MachineConfigs.config.talos.dev", "v1alpha1", nodes=configured,
                                         quiet_codes=("NotFound",))
            for node, resource in configs.items():
                self.facts[node]["config"] = None if isinstance(resource, TalosError) else config_summary(resource.spec.yaml_spec)
        if resources:
            self._gather_resources(resources)

        for node in self.alive():
            if node not in self.answered and node in self.first_refusal:
                # Every read was refused: nothing about the node is known, which is its failure, not a fact.
                self.errors[node] = self.first_refusal[node]
            elif self.unavailable[node]:
                self.facts[node]["unavailable"] = self.unavailable[node]
        return self.facts, self.errors

    def _gather_etcd(self, machine_types):
        # Workers have no etcd; nodes of unknown type are asked, and a worker's Unimplemented answer is not a refusal.
        candidates = [node for node in self.alive()
                      if machine_types.get(node) is None or talos_node.is_control_plane_type(machine_types[node])]
        quiet = ("Unimplemented",)
        members = self.call("etcd", rpc.ETCD_MEMBER_LIST, machine_pb2.EtcdMemberListRequest(query_local=False),
                            nodes=candidates, quiet_codes=quiet)
        statuses = self.call("etcd", rpc.ETCD_STATUS, nodes=list(members), quiet_codes=quiet)
        for node, items in members.items():
            if isinstance(items, TalosError) or node not in statuses:
                continue
            status = statuses[node]
            self.facts[node]["etcd"] = etcd_facts(items, None if isinstance(status, TalosError) else status)

    def _gather_resources(self, requested):
        collected = dict((node, []) for node in self.alive())
        for entry in requested:
            nodes = self.alive()
            if not nodes:
                break
            try:
                kind = resources.resolve_kind(self.client, entry["type"], node=nodes[0])
            except TalosConfigError:
                # A type without a definition may still be read in a namespace the task names.
                kind = resources.ResourceKind(entry["type"], None)
            namespace = resources.namespace_for(kind, entry["namespace"])
            subset = "resources"
            if entry["id"]:
                found = self.get_resources(subset, namespace, kind.type, entry["id"], quiet_codes=("NotFound",))
                items = dict((node, [] if isinstance(resource, TalosError) else [_redacted(resource, kind.sensitive)])
                             for node, resource in found.items())
            else:
                items = dict((node, [_redacted(resource, kind.sensitive) for resource in listed])
                             for node, listed in self.list_resources(subset, namespace, kind.type).items())
            for node, node_items in items.items():
                collected[node].append({"type": kind.type, "namespace": namespace, "id": entry["id"], "items": node_items})
        for node in self.alive():
            self.facts[node]["resources"] = collected[node]


def _redacted(resource, sensitive):
    return resources.redact_resource(resource_to_dict(resource), sensitive)


def _resource_spec(resource):
    if resource is None or isinstance(resource, TalosError):
        return None
    return resource_to_dict(resource)["spec"]
