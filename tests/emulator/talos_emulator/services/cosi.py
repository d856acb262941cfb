# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cosi.resource.State: the read verbs over the node's resources, each with a ``proto_spec`` and a ``yaml_spec``.

Access follows Talos's ``internal/app/resources/access.go``: unknown types and
namespaces are refused, sensitive types need ``os:admin``. Missing resources
are ``NotFound`` as the COSI server reports them.
"""

import asyncio
import base64
import functools
import ipaddress
import re
import time

import yaml
from google.protobuf import timestamp_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import resource_pb2, state_grpc, state_pb2

from .. import authz, configgen, image_factory, kubernetes, resource_specs
from ..context import current_call
from . import storage, volumes
from .image import DEFAULT_ETCD_IMAGE

_NAMESPACES = frozenset([
    "meta", "runtime", "config", "network", "k8s", "controlplane", "cluster", "secrets", "etcd", "v1alpha1", "hardware",
    "block", "cri", "files", "perf", "siderolink",
])
_WATCH_POLL_SECONDS = 0.01


class _Kind:
    """One resource type: its definition and how to read its resources from a node."""

    def __init__(self, resource_type, namespace, aliases, columns, read, encode, sensitive=False):
        self.type = resource_type
        self.namespace = namespace
        self.aliases = aliases
        self.columns = columns
        self.read = read
        self.encode = encode
        self.sensitive = sensitive

    def definition(self):
        singular = self.type.split(".", 1)[0]
        # As COSI singularizes: StaticPodStatuses -> StaticPodStatus, Manifests -> Manifest.
        display = singular[:-2] if singular.endswith("ses") else singular[:-1] if singular.endswith("s") else singular
        all_aliases = list(self.aliases) + [display, display.lower(), singular.lower(), self.type.lower()]
        return {
            "type": self.type,
            "displayType": display,
            "defaultNamespace": self.namespace,
            "aliases": list(self.aliases),
            "allAliases": sorted(set(all_aliases)),
            "printColumns": [{"name": name, "jsonPath": path} for name, path in self.columns],
            "sensitivity": "sensitive" if self.sensitive else "non-sensitive",
        }


def _machine_status(node):
    ready = node.stage in ("running", "maintenance")
    return [("machine", {"stage": node.stage, "status": {"ready": ready, "unmetConditions": []}})]


def _machine_config(node):
    return [("v1alpha1", node.config_text())] if not node.maintenance else []


def _machine_type(node):
    return [("machine-type", "%s\n" % (node.machine_type or "unknown"))]


def _hostname_status(node):
    return [("hostname", {"hostname": node.hostname, "domainname": ""})]


def _nodename(node):
    if node.maintenance:
        return []
    return [("nodename", {"nodename": node.hostname, "hostnameVersion": "1", "skipNodeRegistration": False})]


def _discovery_enabled(node):
    """Talos runs cluster discovery when the v1alpha1 ``cluster.discovery.enabled`` says so or, in the v1.14 layout,
    when the config has a ``DiscoveryServiceConfig`` document (omitted when discovery is off)."""
    if node.maintenance:
        return False
    if (((node.config.get("cluster") or {}).get("discovery")) or {}).get("enabled"):
        return True
    return _has_discovery_service_document(node.config_bytes)


def resolves_member_names(node):
    """Whether the node's host DNS answers the cluster members' names: host DNS on with ``resolveMemberNames``, in the
    v1alpha1 ``machine.features.hostDNS`` or the v1.14 ``ResolverConfig`` document's ``hostDNS``; it needs discovery."""
    if not _discovery_enabled(node):
        return False
    return _resolves_member_names(node.config_bytes)


@functools.lru_cache(maxsize=1024)
def _resolves_member_names(config_bytes):
    settings = {}
    for document in configgen.parse_documents(config_bytes):
        if document.get("kind") is None:
            settings.update(((((document.get("machine") or {}).get("features")) or {}).get("hostDNS")) or {})
    for document in configgen.parse_documents(config_bytes):
        if document.get("kind") == "ResolverConfig":
            settings.update(document.get("hostDNS") or {})
    return bool(settings.get("enabled") and settings.get("resolveMemberNames"))


@functools.lru_cache(maxsize=1024)
def _has_discovery_service_document(config_bytes):
    # Cached per config: Members asks every node of the cluster on every read.
    return any(document.get("kind") == "DiscoveryServiceConfig" for document in configgen.parse_documents(config_bytes))


def discovery_members(node):
    """The configured nodes that take part in discovery, named by nodename as Talos's MemberController does.

    A node that is off stays a member, as the discovery service keeps it until
    its TTL runs out; one whose reset wiped its configuration (STATE) is gone
    (the TTL is not modelled).
    """
    if not _discovery_enabled(node):
        return []
    members = []
    for member in node.cluster.nodes:
        if not (_discovery_enabled(member) and (member.powered or member.persistent_config_bytes is not None)):
            continue
        spec = {
            "nodeId": member.identity,
            "addresses": [member.address],
            "hostname": member.hostname,
            "machineType": member.machine_type,
            "operatingSystem": "Talos (%s)" % member.talos_version,
        }
        if member.is_control_plane:
            spec["controlPlane"] = {"apiServerPort": 6443}
        members.append((member.hostname, spec))
    return members


def _services(node):
    return [
        (service.id, {"running": service.running, "healthy": bool(service.healthy), "unknown": service.healthy is None})
        for service in node.services.values()
    ]


def _diagnostics(node):
    return sorted(node.diagnostics.items())


def _link_names(node):
    return ["lo", "eth0"] + ["eth%d" % (index + 1) for index in range(len(node.extra_addresses))]


def _links(node):
    """LinkStatuses: the loopback and one Ethernet link per address (MAC from the address, as a VM's would be)."""
    links = [("lo", {"index": 1, "type": "loopback", "flags": 0x49, "hardwareAddr": "00:00:00:00:00:00",
                     "broadcastAddr": "00:00:00:00:00:00", "mtu": 65536, "queueDisc": "noqueue", "operationalState": "unknown",
                     "kind": "", "linkState": True})]
    for index, (name, address) in enumerate(zip(_link_names(node)[1:], [node.address] + node.extra_addresses)):
        mac = "52:54:00:%02x:%02x:%02x" % tuple(ipaddress.ip_address(address).packed[1:])
        links.append((name, {"index": index + 2, "type": "ether", "flags": 0x11043, "hardwareAddr": mac,
                             "broadcastAddr": "ff:ff:ff:ff:ff:ff", "mtu": 1500, "queueDisc": "pfifo_fast", "operationalState": "up",
                             "kind": "", "driver": "virtio_net", "linkState": True}))
    return links


def _addresses(node):
    """AddressStatuses: ``<link>/<address>/<prefix>`` for the loopback, the node's address and its extra ones."""
    entries = [("lo", "127.0.0.1/8", "host")] + [("eth0", "%s/8" % node.address, "global")]
    entries += [(name, "%s/32" % address, "global") for name, address in zip(_link_names(node)[2:], node.extra_addresses)]
    link_index = {name: index + 1 for index, name in enumerate(_link_names(node))}
    return [("%s/%s" % (link, prefix), {"address": prefix, "local": prefix.split("/")[0], "linkIndex": link_index[link],
                                        "linkName": link, "family": "inet4", "scope": scope, "flags": 0x80})
            for link, prefix, scope in entries]


def _hostname_spec(node):
    layer = "configuration" if node.configured_hostname else "default"
    return [("hostname", {"hostname": node.hostname, "domainname": "", "layer": layer})]


def _os_root(node):
    """OSRootSecrets ``os``: the CA apid's certificate comes from (with its key on a control plane), the accepted CAs,
    the certificate's SANs and the trustd token."""
    if node.maintenance:
        return []
    machine = node.config.get("machine") or {}
    issuing = {key: value for key, value in (machine.get("ca") or {}).items() if key in ("crt", "key") and value}
    ips, names = node.api_certificate_sans()
    ips, names = sorted(set(ips), key=ipaddress.ip_address), sorted(set(names))
    return [("os", {"issuingCA": issuing, "acceptedCAs": [{"crt": entry["crt"]} for entry in machine.get("acceptedCAs") or []],
                    "certSANIPs": ips, "certSANDNSNames": names, "token": machine.get("token", "")})]


def _kubernetes_root(node):
    """KubernetesRootSecrets ``k8s`` on control planes: the cluster's name and endpoint, and the Kubernetes API CA the
    kube-apiserver's certificates are issued from (with its key) and the CAs it accepts."""
    if not node.is_control_plane:
        return []
    config = kubernetes.settings(node.config_bytes)
    issuing = {"crt": base64.b64encode(config["ca_crt"]).decode()}
    if config["ca_key"]:
        issuing["key"] = base64.b64encode(config["ca_key"]).decode()
    return [("k8s", {"name": config["cluster_name"], "endpoint": config["endpoint"], "dnsDomain": config["dns_domain"],
                     "issuingCA": issuing, "acceptedCAs": [{"crt": base64.b64encode(crt).decode()} for crt in config["accepted_crts"]]})]


def static_pod_secrets_version(node):
    """The version of the secrets Talos renders for the static pods of a control plane (the Kubernetes CAs,
    certificates and kubeconfigs), which moves whenever they change: here that of KubernetesRootSecrets ``k8s``, their
    source (None on other nodes)."""
    return resource_version(node, "KubernetesRootSecrets.secrets.talos.dev", "k8s")


def _static_pod_secrets(node):
    """SecretStatuses ``static-pods`` on control planes: the static pods' secrets are written, at their version (the
    ``talos.dev/secrets-version`` annotation of the static pods rendered with them)."""
    version = static_pod_secrets_version(node) if node.is_control_plane and node.config_bytes else None
    return [("static-pods", {"ready": True, "version": version})] if version else []


def _etcd_image(node):
    return (((node.config.get("cluster") or {}).get("etcd")) or {}).get("image") or DEFAULT_ETCD_IMAGE


def _etcd_configs(node):
    """EtcdConfigs ``etcd`` on control planes whose config has an etcd CA: what the config asks of etcd."""
    if not node.is_control_plane or not node.has_etcd_ca:
        return []
    return [("etcd", {"advertiseExcludeSubnets": [], "listenExcludeSubnets": [], "image": _etcd_image(node), "extraArgs": {}})]


def _etcd_specs(node):
    """EtcdSpecs ``etcd``: the member's name and the addresses it advertises and listens on."""
    if not _etcd_configs(node):
        return []
    return [("etcd", {"name": node.hostname, "advertisedAddresses": [node.address], "listenPeerAddresses": [node.address],
                      "listenClientAddresses": ["127.0.0.1", node.address], "image": _etcd_image(node), "extraArgs": {}})]


def _node_addresses(node):
    addresses = {"addresses": ["%s/8" % node.address] + ["%s/32" % address for address in node.extra_addresses]}
    return [(name, addresses) for name in ("accumulative", "current", "default", "routed")]


_KINDS = [
    _Kind("MachineStatuses.runtime.talos.dev", "runtime", ["machinestatus"], [("Stage", "{.stage}"), ("Ready", "{.status.ready}")],
          _machine_status, resource_specs.machine_status),
    _Kind("MachineConfigs.config.talos.dev", "config", ["mc", "machineconfig"], [], _machine_config, resource_specs.machine_config, sensitive=True),
    _Kind("MachineTypes.config.talos.dev", "config", ["machinetype"], [("Type", "{@}")], _machine_type, resource_specs.machine_type),
    _Kind("HostnameStatuses.net.talos.dev", "network", ["hostname"], [("Hostname", "{.hostname}"), ("Domainname", "{.domainname}")],
          _hostname_status, resource_specs.hostname_status),
    _Kind("Nodenames.kubernetes.talos.dev", "k8s", ["nodename"], [("Nodename", "{.nodename}")], _nodename, resource_specs.nodename),
    _Kind("Members.cluster.talos.dev", "cluster", ["member"], [("Hostname", "{.hostname}"), ("Machine Type", "{.machineType}")],
          discovery_members, resource_specs.member),
    _Kind("NodeAddresses.net.talos.dev", "network", ["nodeaddress"], [("Addresses", "{.addresses}")], _node_addresses, resource_specs.node_address),
    _Kind("Services.v1alpha1.talos.dev", "runtime", ["service", "svc"], [("Running", "{.running}"), ("Healthy", "{.healthy}")],
          _services, resource_specs.service),
    _Kind("Diagnostics.runtime.talos.dev", "runtime", ["diagnostic"], [("Message", "{.message}")], _diagnostics, resource_specs.diagnostic),
    _Kind("ExtensionStatuses.runtime.talos.dev", "runtime", ["extensions"], [("Name", "{.metadata.name}"), ("Version", "{.metadata.version}")],
          image_factory.extension_statuses, resource_specs.extension_status),
    _Kind("ImageFactorySchematics.runtime.talos.dev", "runtime", [],
          [("Schematic ID", "{.schematicId}"), ("Flavor", "{.flavor}"), ("API URL", "{.apiUrl}")],
          image_factory.image_factory_schematics, resource_specs.image_factory_schematic),
    _Kind("SecurityStates.talos.dev", "runtime", [], [("SecureBoot", "{.secureBoot}")], image_factory.security_states,
          resource_specs.security_state),
    _Kind("VolumeStatuses.block.talos.dev", "runtime", ["volumestatus"], [("Type", "{.type}"), ("Phase", "{.phase}"),
          ("Location", "{.location}"), ("Size", "{.prettySize}")], volumes.volume_statuses, resource_specs.volume_status),
    _Kind("Disks.block.talos.dev", "runtime", [], [("Size", "{.pretty_size}"), ("Read Only", "{.readonly}"),
          ("Transport", "{.transport}"), ("Rotational", "{.rotational}"), ("WWID", "{.wwid}"), ("Model", "{.model}"),
          ("Serial", "{.serial}")], storage.disk_specs, resource_specs.disk),
    _Kind("SystemDisks.block.talos.dev", "runtime", [], [("Disk", "{.diskID}")], storage.system_disk, resource_specs.system_disk),
    _Kind("DiscoveredVolumes.block.talos.dev", "runtime", [], [("Type", "{.type}"), ("Size", "{.pretty_size}"),
          ("Discovered", "{.name}"), ("Label", "{.label}"), ("PartitionLabel", "{.partition_label}")],
          volumes.discovered_volumes, resource_specs.discovered_volume),
    _Kind("LinkStatuses.net.talos.dev", "network", ["link", "links"], [("Alias", "{.alias}"), ("Type", "{.type}"),
          ("Kind", "{.kind}"), ("Hw Addr", "{.hardwareAddr}"), ("Oper State", "{.operationalState}"),
          ("Link State", "{.linkState}")], _links, resource_specs.link_status),
    _Kind("AddressStatuses.net.talos.dev", "network", ["address", "addresses"], [("Address", "{.address}"), ("Link", "{.linkName}")],
          _addresses, resource_specs.address_status),
    _Kind("HostnameSpecs.net.talos.dev", "network", [], [], _hostname_spec, resource_specs.hostname_spec),
    _Kind("EtcdConfigs.etcd.talos.dev", "etcd", [], [], _etcd_configs, resource_specs.etcd_config),
    _Kind("EtcdSpecs.etcd.talos.dev", "etcd", [], [], _etcd_specs, resource_specs.etcd_spec),
    _Kind("OSRootSecrets.secrets.talos.dev", "secrets", [], [], _os_root, resource_specs.os_root, sensitive=True),
    _Kind("KubernetesRootSecrets.secrets.talos.dev", "secrets", [], [], _kubernetes_root, resource_specs.kubernetes_root,
          sensitive=True),
    _Kind("KubeletSpecs.kubernetes.talos.dev", "k8s", [], [], kubernetes.kubelet_specs, resource_specs.kubelet_spec, sensitive=True),
    _Kind("KubeletConfigs.kubernetes.talos.dev", "k8s", [], [], kubernetes.kubelet_configs, resource_specs.kubelet_config,
          sensitive=True),
    _Kind("BootstrapManifestsConfigs.kubernetes.talos.dev", "controlplane", [], [], kubernetes.bootstrap_manifests_configs,
          resource_specs.bootstrap_manifests_config),
    _Kind(kubernetes.CONFIG_TYPES["kube-apiserver"], "controlplane", [], [], kubernetes.apiserver_configs,
          resource_specs.apiserver_config, sensitive=True),
    _Kind(kubernetes.CONFIG_TYPES["kube-controller-manager"], "controlplane", [], [], kubernetes.controller_manager_configs,
          resource_specs.controller_manager_config),
    _Kind(kubernetes.CONFIG_TYPES["kube-scheduler"], "controlplane", [], [], kubernetes.scheduler_configs,
          resource_specs.scheduler_config),
    _Kind("StaticPods.kubernetes.talos.dev", "k8s", [], [], kubernetes.static_pods, resource_specs.static_pod),
    _Kind("SecretStatuses.kubernetes.talos.dev", "controlplane", [], [("Ready", "{.ready}"), ("Secrets Version", "{.version}")],
          _static_pod_secrets, resource_specs.secrets_status),
    _Kind("StaticPodStatuses.kubernetes.talos.dev", "k8s", ["podstatus"], [("Ready", '{.conditions[?(@.type=="Ready")].status}')],
          kubernetes.static_pod_statuses, resource_specs.static_pod_status),
    _Kind("Manifests.kubernetes.talos.dev", "controlplane", [], [], kubernetes.manifests, resource_specs.manifest),
]


def _definitions(_node):
    return [(kind.type.lower(), kind.definition()) for kind in _KINDS + [_DEFINITIONS]]


_DEFINITIONS = _Kind(
    "ResourceDefinitions.meta.cosi.dev", "meta", ["api-resources", "rd"], [("Aliases", "{.aliases}")], _definitions,
    resource_specs.resource_definition,
)
_BY_TYPE = {kind.type: kind for kind in _KINDS + [_DEFINITIONS]}


def _timestamp(seconds):
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _resource(node, kind, resource_id, spec):
    # Specs given as text are YAML already (a machine config, a bare scalar).
    yaml_spec = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
    key = (kind.type, resource_id)
    previous, version, created = node.resource_versions.get(key, (None, 0, time.time()))
    if previous != yaml_spec:
        version += 1
        node.resource_versions[key] = (yaml_spec, version, created)
    metadata = resource_pb2.Metadata(
        namespace=kind.namespace, type=kind.type, id=resource_id, version=str(version), phase="running",
        created=_timestamp(created), updated=_timestamp(time.time()),
        labels=node.resource_labels.get((kind.type, resource_id), {}),
    )
    return resource_pb2.Resource(metadata=metadata, spec=resource_pb2.Spec(proto_spec=kind.encode(spec), yaml_spec=yaml_spec))


def resource_version(node, resource_type, resource_id):
    """The metadata version of one of the node's resources as a read now reports it (None when it has none)."""
    kind = _BY_TYPE[resource_type]
    for found_id, spec in kind.read(node):
        if found_id == resource_id:
            return _resource(node, kind, found_id, spec).metadata.version
    return None


class CosiStateService(state_grpc.StateBase):
    def __init__(self, node):
        self.node = node

    def _kind(self, namespace, resource_type):
        kind = _BY_TYPE.get(resource_type)
        if kind is None:
            raise GRPCError(Status.PERMISSION_DENIED, 'resource type "%s" is not supported' % resource_type)
        if namespace not in _NAMESPACES:
            raise GRPCError(Status.PERMISSION_DENIED, 'namespace "%s" is not supported' % namespace)
        if kind.sensitive and not current_call().has_role(authz.ADMIN):
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")
        return kind

    def _resources(self, kind, namespace):
        if namespace != kind.namespace:
            return []
        return [_resource(self.node, kind, resource_id, spec) for resource_id, spec in kind.read(self.node)]

    async def Get(self, stream):
        request = await stream.recv_message()
        kind = self._kind(request.namespace, request.type)
        for resource in self._resources(kind, request.namespace):
            if resource.metadata.id == request.id:
                await stream.send_message(state_pb2.GetResponse(resource=resource))
                return
        raise GRPCError(
            Status.NOT_FOUND, "resource %s(%s/%s@undefined) doesn't exist" % (request.type, request.namespace, request.id),
        )

    async def List(self, stream):
        request = await stream.recv_message()
        kind = self._kind(request.namespace, request.type)
        pattern = re.compile(request.options.id_query.regexp) if request.options.id_query.regexp else None
        for resource in self._resources(kind, request.namespace):
            if (pattern is None or pattern.search(resource.metadata.id)) and labels_match(resource.metadata.labels, request.options.label_query):
                await stream.send_message(state_pb2.ListResponse(resource=resource))

    async def Watch(self, stream):
        request = await stream.recv_message()
        kind = self._kind(request.namespace, request.type)
        wanted = request.id if request.HasField("id") else None
        if wanted is not None and request.options.bootstrap_contents:
            raise GRPCError(Status.UNIMPLEMENTED, "bootstrap contents is not implemented for resource watch")

        def snapshot():
            return {
                resource.metadata.id: resource for resource in self._resources(kind, request.namespace)
                if (wanted is None or resource.metadata.id == wanted) and labels_match(resource.metadata.labels, request.options.label_query)
            }

        async def send(event_type, resource, old=None):
            event = state_pb2.Event(event_type=event_type, resource=resource)
            if old is not None:
                event.old.CopyFrom(old)
            await stream.send_message(state_pb2.WatchResponse(event=[event]))

        seen = snapshot()
        # The COSI server first sends an empty reply: the watch is established.
        await stream.send_message(state_pb2.WatchResponse())
        if wanted is not None:
            if wanted in seen:
                await send(state_pb2.CREATED, seen[wanted])
            else:
                await send(state_pb2.DESTROYED, _tombstone(kind, request.namespace, wanted))
        elif request.options.bootstrap_contents:
            for resource in seen.values():
                await send(state_pb2.CREATED, resource)
            if request.api_version >= 1:
                await send(state_pb2.BOOTSTRAPPED, _tombstone(kind, request.namespace, ""))
        while True:
            await asyncio.sleep(_WATCH_POLL_SECONDS)
            current = snapshot()
            for resource_id, resource in current.items():
                old = seen.get(resource_id)
                if old is None:
                    await send(state_pb2.CREATED, resource)
                elif old.spec.yaml_spec != resource.spec.yaml_spec:
                    await send(state_pb2.UPDATED, resource, old)
            for resource_id, old in seen.items():
                if resource_id not in current:
                    await send(state_pb2.DESTROYED, old)
            seen = current


def _term_matches(term, labels):
    operation = resource_pb2.LabelTerm
    present = term.key in labels
    value = labels.get(term.key, "")
    if term.op == operation.EXISTS:
        matched = present
    elif term.op == operation.NOT_EXISTS:
        matched = not present
    elif term.op == operation.EQUAL:
        matched = present and value == (term.value[0] if term.value else "")
    elif term.op == operation.IN:
        matched = present and value in term.value
    elif term.op in (operation.LT, operation.LTE):
        bound = term.value[0] if term.value else ""
        matched = present and (value < bound or (term.op == operation.LTE and value == bound))
    elif not present:
        matched = False
    else:
        try:
            number, bound = int(value), int(term.value[0] if term.value else "")
        except ValueError:
            raise GRPCError(Status.INVALID_ARGUMENT, "label %s value is not a number" % term.key)
        matched = number < bound or (term.op == operation.LTE_NUMERIC and number == bound)
    return matched != term.invert


def labels_match(labels, queries):
    """COSI label queries: every term of every query must match."""
    return all(_term_matches(term, labels) for query in queries for term in query.terms)


def _tombstone(kind, namespace, resource_id):
    """What COSI sends for a resource that is not there (a watched ID, the bootstrapped marker)."""
    metadata = resource_pb2.Metadata(namespace=namespace, type=kind.type, id=resource_id, version="undefined", phase="running")
    return resource_pb2.Resource(metadata=metadata, spec=resource_pb2.Spec())
