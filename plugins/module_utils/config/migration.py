# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The move of a config's deprecated v1alpha1 fields to the documents Talos v1.14 reads them from.

Talos v1.14 still reads the deprecated v1alpha1 fields, but refuses a config
that sets one of them next to the document that replaces it - on presence, so
equal values are refused too - and the legacy path adds things the documents
leave to the config: the control plane's role label and taint, the Node and
RBAC authorizers, the secretbox key named ``key2``, an installer that does not
wipe the disk, the cluster endpoint as service account issuer. ``plan`` reads a
parsed config and returns a ``Plan``: each step (the v1alpha1 field, the
document, its field and the value as mapped), the conflicts upstream's
validation would refuse, the fields that have no v1.14 home (refused unless
named in ``accept_dropped``) and the migrated documents, which hold every
mapped field in the document shapes generation.py writes for contract v1.14.

What stays in the v1alpha1 document: what v1.14 keeps there (type, token, CAs
of the machine and etcd, certSANs, the bootstrap token, etcd, features such as
diskQuotaSupport) and the deprecated sections that have no mechanical
translation and no conflict, which Talos v1.14 still honours (``KEPT``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import copy
import ipaddress
import json
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import redact
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents as config_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation
from ansible_collections.talos_linux.talos.plugins.module_utils.config import machine_config

# Control-plane-only kinds (container/validate.go): Talos refuses them on a worker.
CONTROLPLANE_ONLY = frozenset([
    "KubeAdmissionControlConfig", "KubeAggregatorCAConfig", "KubeAPIServerConfig", "KubeAuditPolicyConfig",
    "KubeAuthenticationConfig", "KubeAuthorizerConfig", "KubeControllerManagerConfig", "KubeCoreDNSConfig",
    "KubeEtcdEncryptionConfig", "KubeFlannelCNIConfig", "KubeProxyConfig", "KubeSchedulerConfig",
    "KubeServiceAccountConfig", "KubeTalosAPIAccessConfig",
])

# Deprecated sections Talos v1.14 still honours, with no conflict and no translation that keeps what the node has:
# left as they are, with why.
KEPT = (
    ("machine.disks",
     "Talos v1.14 finds a UserVolumeConfig's partition by its label u-<name> (labelVolumeMatch, "
     "controllers/block/internal/volumes/volumeconfig/types.go), which the partitions it made for .machine.disks do not "
     "carry (UserDiskConfigController finds them by disk and index), so it would create a new partition and mount it "
     "under /var/mnt/<name> instead of the legacy mountpoint, leaving the data unmounted"),
)

# kube-apiserver arguments a KubeAPIServerConfig document refuses (KubeAuthenticationConfig / KubeAuthorizerConfig own them).
_REFUSED_APISERVER_ARGS = ("anonymous-auth", "oidc-", "authentication-config", "authorization-config",
                           "authorization-mode", "authorization-webhook-")

# The file the v1alpha1 path reads as the CRI customization (Talos names it "customization", which no document may be),
# and the name its CRICustomizationConfig gets: right after the legacy one in the order Talos merges them.
_CRI_CUSTOMIZATION_PATH = "/etc/cri/conf.d/20-customization.part"
_CRI_CUSTOMIZATION_NAME = "customization-v1alpha1"
# What Talos manages under /etc, which an EtcFileConfig may not write (runtime/etc_file.go).
_MANAGED_ETC_FILES = ("resolv.conf", "hosts", "machine-id", "extensions.yaml", "localtime", "os-release", "xattr.conf")
_MANAGED_ETC_DIRECTORIES = ("apparmor.d", "apparmor", "ca-certificates", "cni", "cri", "iscsi", "kubernetes", "lvm", "nvme",
                            "pki", "selinux", "ssl")

_INSTALL_KIND = "UnattendedInstallConfig"
_ABSENT = object()


class Step:
    """One move: the v1alpha1 field ``source`` (dotted, from the document's root) to ``field`` of document ``kind``
    (``name`` for a named kind), ``value`` as the document takes it. ``field`` None: the whole document."""

    def __init__(self, source, kind, name, field, value, note=None):
        self.source = source
        self.kind = kind
        self.name = name
        self.field = field
        self.value = value
        self.note = note

    @property
    def document(self):
        return "%s/%s" % (self.kind, self.name) if self.name else self.kind

    def as_dict(self):
        """The step for a result: every secret redacted, by the field's name on either side and by the value's shape."""
        shown = _unnest(redact(_nest(self.field, self.value)), self.field) if self.field else redact(self.value)
        shown = _unnest(redact(_nest(self.source, shown)), self.source)
        field = ".".join(_keys(self.field)) if self.field else None
        step = {"from": "." + self.source, "to": self.document, "field": field, "value": shown}
        if self.note:
            step["note"] = self.note
        return step


class Plan:
    """What ``plan`` found: ``steps``, ``conflicts`` and ``homeless`` (sentences), ``dropped`` (accepted fields
    without a home, and fields Talos ignores), ``kept`` (deprecated sections left in v1alpha1), ``warnings`` (what
    the migrated config changes on the node beyond the moved fields) and ``documents`` (the migrated config; None
    when there is nothing to migrate)."""

    def __init__(self):
        self.steps = []
        self.conflicts = []
        self.homeless = []
        self.dropped = []
        self.kept = []
        self.warnings = []
        self.documents = None

    @property
    def changes(self):
        return bool(self.steps or self.dropped)

    def refusal(self):
        """The one sentence refusing the plan, or None: conflicts first, then fields with no home."""
        problems = self.conflicts + self.homeless
        if not problems:
            return None
        more = len(problems) - 1
        also = "" if not more else " (and %d more problem%s, listed in conflicts and homeless)" % (more, "s" if more > 1 else "")
        return "%s%s" % (problems[0].rstrip("."), also + ".")

    def as_dict(self):
        return {
            "steps": [step.as_dict() for step in self.steps],
            "conflicts": list(self.conflicts),
            "homeless": list(self.homeless),
            "dropped": list(self.dropped),
            "kept": list(self.kept),
            "warnings": list(self.warnings),
        }


def _keys(path):
    """A field's keys: a dotted path, or a tuple where a key holds dots (a sysctl's name)."""
    return list(path) if isinstance(path, tuple) else path.split(".")


def _nest(path, value):
    for key in reversed(_keys(path)):
        value = {key: value}
    return value


def _unnest(value, path):
    for key in _keys(path):
        value = value[key]
    return value


def _pem(text, source):
    """v1alpha1 keeps certificates and keys as base64 of PEM; the documents take the PEM text."""
    try:
        return base64.b64decode("".join(str(text).split()), validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TalosConfigError(".%s is not base64 of PEM text, so it cannot be moved into its v1.14 document." % source)


def _parent(document, path):
    """The mapping of ``document`` that holds the last key of ``path``, made where it is missing."""
    for key in _keys(path)[:-1]:
        document = document.setdefault(key, {})
    return document


def _disk_match(disk):
    return "disk.dev_path == %s" % json.dumps(disk)


class _Migration:
    """The working state of one plan: the v1alpha1 document being emptied and the documents being filled."""

    def __init__(self, documents, accept_dropped):
        self.plan = Plan()
        roots = [document for document in documents if config_documents.kind_of(document) == config_documents.ROOT]
        if len(roots) != 1:
            raise TalosConfigError("The config to migrate must hold exactly one v1alpha1 document, it holds %d." % len(roots))
        self.root = copy.deepcopy(roots[0])
        self.documents = [copy.deepcopy(document) for document in documents]
        self.root_position = documents.index(roots[0])
        self.existing = set(self._key(document) for document in documents if document is not roots[0])
        self.accept_dropped = set("." + path.lstrip(".") for path in accept_dropped or ())
        self.accepted = set()
        machine = self.root.get("machine") or {}
        self.controlplane = machine.get("type") in ("controlplane", "init")
        self.endpoint = ((self.root.get("cluster") or {}).get("controlPlane") or {}).get("endpoint")
        # A config whose Kubernetes still comes from v1alpha1: what it leaves out gets the legacy defaults.
        self.legacy_kubernetes = self.has("cluster.apiServer")

    @staticmethod
    def _key(document):
        return (config_documents.kind_of(document), document.get("name"))

    # -- reading the v1alpha1 document

    def has(self, path):
        return self.get(path, _ABSENT) is not _ABSENT

    def get(self, path, default=None):
        value = self.root
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                return default
            value = value[key]
        return value

    def take(self, path):
        """Remove ``path`` from the v1alpha1 document and return its value (None when absent); parents left empty go."""
        keys = path.split(".")
        parents = [self.root]
        for key in keys[:-1]:
            child = parents[-1].get(key) if isinstance(parents[-1], dict) else None
            if not isinstance(child, dict):
                return None
            parents.append(child)
        value = parents[-1].pop(keys[-1], None)
        for depth in range(len(keys) - 1, 1, -1):  # machine and cluster themselves stay
            if parents[depth] == {}:
                parents[depth - 1].pop(keys[depth - 1], None)
        return value

    # -- writing documents

    def document(self, kind, name=None):
        """The document of ``kind`` (and ``name``), created in the generator's shape when the config has none."""
        for document in self.documents:
            if self._key(document) == (kind, name):
                return document
        document = generation.new_document(kind)
        if name is not None:
            document["name"] = name
        self.documents.append(document)
        return document

    def conflict(self, source, kind, name, message):
        label = "%s/%s" % (kind, name) if name else kind
        self.plan.conflicts.append(
            "The config sets .%s in the v1alpha1 document and has a %s document, which Talos v1.14 refuses together "
            "even with equal values (%r): remove one of them before migrating." % (source, label, message))

    def move(self, source, kind, field, value, name=None, refused_with=None, note=None):
        """Record the move of ``source`` (already taken) to ``field`` of ``kind``/``name``.

        ``refused_with``: upstream's message when the config already has that document (presence-based conflict).
        Without it the document is one Talos merges with the legacy field: a value it already holds is kept when
        equal and is a conflict when it differs.
        """
        if not self.controlplane and kind in CONTROLPLANE_ONLY:
            self.plan.dropped.append(".%s: a worker does not run what %s configures, Talos refuses the document on a "
                                     "worker" % (source, kind))
            return
        preexisting = self.preexisting(kind, name)
        if preexisting and refused_with:
            self.conflict(source, kind, name, refused_with)
            return
        document = self.document(kind, name)
        fields = [(field, value)] if field is not None else sorted(value.items())
        for path, item in fields:
            parent, key = _parent(document, path), _keys(path)[-1]
            if preexisting and key in parent and parent[key] != item:
                label = "%s/%s" % (kind, name) if name else kind
                self.plan.conflicts.append(
                    "The config sets .%s in the v1alpha1 document and %s in its %s document to another value, and "
                    "Talos v1.14 uses the document's: make them equal or remove one before migrating."
                    % (source, ".".join(_keys(path)), label))
                return
        for path, item in fields:
            _parent(document, path)[_keys(path)[-1]] = item
        self.plan.steps.append(Step(source, kind, name, field, value, note))

    def preexisting(self, kind, name=None):
        """Whether the config to migrate already has the document (then Talos uses it, not the legacy defaults)."""
        return (kind, name) in self.existing

    def homeless(self, source, why):
        """A field set in the config with no v1.14 home: refused unless accepted as dropped."""
        if "." + source in self.accept_dropped:
            self.accepted.add("." + source)
            self.plan.dropped.append(".%s: %s; dropped as accept_dropped allows" % (source, why))
        else:
            self.plan.homeless.append(
                ".%s has no home in the Talos v1.14 documents (%s): remove it from the config, or name it in "
                "accept_dropped to migrate without it." % (source, why))

    def unmapped(self, source, section, known):
        """The keys of a taken v1alpha1 ``section`` outside ``known`` (those the plan maps): refused, never lost."""
        for key in sorted(set(section) - set(known)):
            if section[key] not in (None, False, "", [], {}):
                self.homeless("%s.%s" % (source, key), "no v1.14 document field is known to take it")

    def ignored(self, source, why):
        self.take(source)
        self.plan.dropped.append(".%s: %s" % (source, why))


def _hostname(m):
    static = m.has("machine.network.hostname")
    if static:
        m.move("machine.network.hostname", "HostnameConfig", "hostname", m.take("machine.network.hostname"),
               refused_with="static hostname is already set in v1alpha1 config")
    if m.has("machine.features.stableHostname"):
        stable = m.take("machine.features.stableHostname")
        if stable and static:
            # HostnameConfig takes a hostname or an automatic one, not both; a static hostname won in v1alpha1 too.
            m.plan.dropped.append(".machine.features.stableHostname: the static hostname wins over it, in v1alpha1 too")
        elif stable:
            m.move("machine.features.stableHostname", "HostnameConfig", "auto", "stable",
                   refused_with="stable hostname is already set in v1alpha1 config")
        else:
            m.plan.dropped.append(".machine.features.stableHostname: false is Talos's default without it")


def _resolver(m):
    if m.has("machine.network.nameservers"):
        servers = m.take("machine.network.nameservers") or []
        m.move("machine.network.nameservers", "ResolverConfig", "nameservers", [{"address": str(server)} for server in servers],
               refused_with=".machine.network.nameservers is already set in v1alpha1 config")
    if m.has("machine.network.searchDomains"):
        m.move("machine.network.searchDomains", "ResolverConfig", "searchDomains.domains", m.take("machine.network.searchDomains"),
               refused_with=".machine.network.searchDomains is already set in v1alpha1 config")
    if m.has("machine.network.disableSearchDomain"):
        m.move("machine.network.disableSearchDomain", "ResolverConfig", "searchDomains.disableDefault",
               m.take("machine.network.disableSearchDomain"),
               refused_with=".machine.network.disableSearchDomain is already set in v1alpha1 config")
    if m.has("machine.features.hostDNS"):
        host_dns = m.take("machine.features.hostDNS") or {}
        # Only a document that sets hostDNS itself is refused beside the v1alpha1 feature.
        if m.preexisting("ResolverConfig") and m.document("ResolverConfig").get("hostDNS"):
            m.conflict("machine.features.hostDNS", "ResolverConfig", None,
                       ".machine.features.hostDNS is already set in v1alpha1 config")
        else:
            m.move("machine.features.hostDNS", "ResolverConfig", "hostDNS", host_dns)


# The DHCP options a v1alpha1 interface (or VLAN) may set; the documents that configure links (then Talos runs no
# default DHCP).
_DHCP_OPTIONS = ("routeMetric", "ipv4", "ipv6", "duidv6")
_LINK_DOCUMENTS = ("LinkConfig", "VLANConfig", "BondConfig", "BridgeConfig", "DummyLinkConfig", "WireguardConfig",
                   "DHCPv4Config", "DHCPv6Config", "VRFConfig", "VethConfig", "EthernetConfig")


# Bond options: the v1alpha1 name, BondConfig's, and for an enumeration the names Talos's v1alpha1 path reads
# (nethelpers' *ByName; an empty value is the first). A zero number is the v1alpha1 default, which BondConfig leaves out.
_BOND_OPTIONS = (
    ("mode", "bondMode", ("balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb")),
    ("xmitHashPolicy", "xmitHashPolicy", ("layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4")),
    ("lacpRate", "lacpRate", ("slow", "fast")),
    ("arpValidate", "arpValidate", ("none", "active", "backup", "all", "filter", "filter-active", "filter-backup")),
    ("arpAllTargets", "arpAllTargets", ("any", "all")),
    ("primaryReselect", "primaryReselect", ("always", "better", "failure")),
    ("failOverMac", "failOverMac", ("none", "active", "follow")),
    ("adSelect", "adSelect", ("stable", "bandwidth", "count")),
    ("miimon", "miimon", None), ("updelay", "updelay", None), ("downdelay", "downdelay", None),
    ("arpInterval", "arpInterval", None), ("resendIgmp", "resendIGMP", None), ("minLinks", "minLinks", None),
    ("lpInterval", "lpInterval", None), ("packetsPerSlave", "packetsPerSlave", None), ("numPeerNotif", "numPeerNotif", None),
    ("tlbDynamicLb", "tlbLogicalLb", None), ("allSlavesActive", "allSlavesActive", None), ("useCarrier", "useCarrier", None),
    ("adActorSysPrio", "adActorSysPrio", None), ("adUserPortKey", "adUserPortKey", None),
    ("peerNotifyDelay", "peerNotifDelay", None),
)
# What SetBondMasterLegacy (controllers/network/network.go) reads of a v1alpha1 bond, beside its interfaces.
_BOND_READ = ("interfaces", "adActorSystem") + tuple(option for option, _target, _names in _BOND_OPTIONS)
_WIREGUARD_PEER = ("publicKey", "endpoint", "persistentKeepaliveInterval", "allowedIPs")
_LINK_KINDS = ("bond", "bridge", "wireguard", "dummy")
_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})+$")


def _endpoint_is_address(endpoint):
    """Whether a WireGuard endpoint is an IP address and port, as WireguardConfig takes it (an IPv6 one bracketed)."""
    host, _sep, port = str(endpoint).rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return port.isdigit() and int(port) <= 65535


def _bond_kept_why(bond):
    if bond.get("deviceSelectors"):
        return "Talos picks its bond's links with deviceSelectors, which BondConfig's links cannot say"
    if bond.get("primary"):
        return ("BondConfig has no primary link: Talos's v1alpha1 path sets .bond.primary on the bond by its link's index "
                "(SetBondMasterLegacy, controllers/network/network.go), a BondConfig never sets one")
    if bond.get("arpIPTarget"):
        return ("Talos's v1alpha1 path leaves .bond.arpIPTarget out of the bond (SetBondMasterLegacy), a BondConfig's "
                "arpIpTargets would start ARP monitoring of them")
    if not bond.get("interfaces"):
        return "a bond without interfaces, which BondConfig refuses"
    unknown = sorted(key for key in bond if key not in _BOND_READ and bond[key] not in (None, False, "", [], {}))
    if unknown:
        return "no document field is known to take bond %s" % ", ".join(unknown)
    for option, _target, names in _BOND_OPTIONS:
        if names and bond.get(option) and bond[option] not in names:
            return ("Talos's v1alpha1 path refuses bond %s %r and leaves the bond's options unset (SetBondMasterLegacy)"
                    % (option, bond[option]))
    return None


def _wireguard_kept_why(wireguard):
    unknown = sorted(set(key for key in wireguard if wireguard[key] not in (None, "", [], {}, 0)) -
                     set(("privateKey", "listenPort", "firewallMark", "peers")))
    if unknown:
        return "no document field is known to take wireguard %s" % ", ".join(unknown)
    if not wireguard.get("privateKey"):
        return "a WireGuard link without a private key, which WireguardConfig refuses"
    for peer in wireguard.get("peers") or []:
        unknown = sorted(set(key for key in peer if peer[key] not in (None, "", [], {}, 0)) - set(_WIREGUARD_PEER))
        if unknown:
            return "no document field is known to take wireguard peers %s" % ", ".join(unknown)
        if peer.get("endpoint") and not _endpoint_is_address(peer["endpoint"]):
            return ("WireguardConfig takes a peer's endpoint as an IP address and port, and %s is not one"
                    % peer["endpoint"])
        for allowed in peer.get("allowedIPs") or []:
            if "/" not in str(allowed):
                return ("Talos's v1alpha1 path refuses allowed IP %s without a prefix length and leaves the link without "
                        "its WireGuard settings (wireguardLinkLegacy, controllers/network/link_config.go)" % allowed)
    return None


def _interface_kept_why(interface):
    """Why a v1alpha1 interface stays in v1alpha1 (Talos v1.14 still configures it from there), or None."""
    if not interface.get("interface") or interface.get("deviceSelector"):
        return ("Talos's v1alpha1 path configures every link its deviceSelector matches, logical ones too "
                "(DeviceConfigController.selectDevices), where a LinkAliasConfig names only a physical link it matches "
                "alone (LinkAliasConfigController), so which links keep their settings depends on the node's links")
    if interface.get("ignore"):
        return ("no document leaves a link alone as ignore does (Talos's v1alpha1 path skips the link, its addresses, "
                "routes and DHCP: LinkConfigController.processDevicesConfiguration, OperatorConfigController)")
    # Talos reads a bond, bridge or WireGuard section that is present, even empty, as the link's kind.
    kinds = [kind for kind in _LINK_KINDS if interface.get(kind) not in (None, False)]
    if len(kinds) > 1:
        return "it is both %s, which no one document is" % " and ".join(kinds)
    if interface.get("bond") is not None:
        why = _bond_kept_why(interface["bond"])
        if why:
            return why
    if interface.get("wireguard") is not None:
        why = _wireguard_kept_why(interface["wireguard"])
        if why:
            return why
    if interface.get("bridgePort") is not None:
        unknown = sorted(set(interface["bridgePort"] or {}) - set(("master",)))
        if unknown:
            return "no document field is known to take bridgePort %s" % ", ".join(unknown)
        if not (interface["bridgePort"] or {}).get("master"):
            return "a bridge port without a master, which no BridgeConfig's links say"
    known = ("interface", "addresses", "cidr", "routes", "mtu", "dhcp", "dhcpOptions", "vlans", "vip", "ignore", "bond",
             "bridge", "bridgePort", "wireguard", "dummy")
    unknown = sorted(key for key in interface if key not in known and interface[key] not in (None, False, "", [], {}))
    if unknown:
        return "no document field is known to take %s" % ", ".join(unknown)
    for holder in [interface] + list(interface.get("vlans") or []):
        duid = (holder.get("dhcpOptions") or {}).get("duidv6")
        if duid and not _HEX.match(str(duid)):
            return ("Talos's v1alpha1 path ignores DUID %s, which is not plain hex (hex.DecodeString in "
                    "controllers/network/operator/client_identifier.go), where DHCPv6Config's duidRaw would send it" % duid)
        unknown = sorted(set(holder.get("dhcpOptions") or {}) - set(_DHCP_OPTIONS))
        if unknown:
            return "no document field is known to take dhcpOptions %s" % ", ".join(unknown)
        vip = holder.get("vip") or {}
        if vip.get("equinixMetal"):
            return ("an Equinix Metal VIP has no document (Talos v1.14 has Layer2VIPConfig and HCloudVIPConfig; "
                    "OperatorVIPConfigController reads equinixMetal from v1alpha1 only)")
        if set(vip) - set(("ip", "hcloud", "equinixMetal")):
            return "no document field is known to take vip %s" % ", ".join(sorted(set(vip) - set(("ip", "hcloud", "equinixMetal"))))
    bridge = interface.get("bridge") or {}
    unknown = sorted(set(bridge) - set(("interfaces", "stp", "vlan")) | set(bridge.get("stp") or {}) - set(("enabled",)) |
                     set(bridge.get("vlan") or {}) - set(("vlanFiltering",)))
    if unknown:
        return "no document field is known to take bridge %s" % ", ".join(unknown)
    for vlan in interface.get("vlans") or []:
        unknown = sorted(set(vlan) - set(("addresses", "cidr", "routes", "dhcp", "vlanId", "mtu", "vip", "dhcpOptions")))
        if unknown:
            return "no document field is known to take vlans %s" % ", ".join(unknown)
    for route in sum([list(holder.get("routes") or []) for holder in [interface] + list(interface.get("vlans") or [])], []):
        unknown = sorted(set(route) - set(("network", "gateway", "source", "metric", "mtu")))
        if unknown:
            return "no document field is known to take routes %s" % ", ".join(unknown)
    return None


def _link_addresses(holder, host_prefix):
    """A v1alpha1 link's addresses as LinkConfig takes them. Talos reads an interface's address without a prefix
    length as a host address (``host_prefix``) and skips such a VLAN address."""
    addresses = list(holder.get("addresses") or ([holder["cidr"]] if holder.get("cidr") else []))
    moved, skipped = [], []
    for address in addresses:
        address = str(address)
        if "/" in address:
            moved.append({"address": address})
        elif host_prefix:
            moved.append({"address": "%s/%d" % (address, 128 if ":" in address else 32)})
        else:
            skipped.append(address)
    return moved, skipped


def _link_routes(holder):
    """A v1alpha1 link's routes: ``network`` is the destination, left out for a default route (a /0 network, which
    Talos reads as none and the document refuses); a metric of 0 is Talos's default one (then left out)."""
    routes = []
    for route in holder.get("routes") or []:
        moved = {}
        for field, target in (("network", "destination"), ("gateway", "gateway"), ("source", "source")):
            if route.get(field) and not (field == "network" and str(route[field]).endswith("/0")):
                moved[target] = str(route[field])
        for field in ("metric", "mtu"):
            if route.get(field):
                moved[field] = route[field]
        routes.append(moved)
    return routes


def _link_kind(m, source, interface, ports):
    """The document of a v1alpha1 interface's link, and the fields its kind adds: a bridge's links (its interfaces,
    then the bridge ports naming it as master) and options, a bond's links and options, a WireGuard link's keys and
    peers (a dummy link adds none)."""
    if interface.get("bridge") is not None:
        bridge = interface["bridge"]
        links = list(bridge.get("interfaces") or [])
        extra = {"links": links + [port for port in ports if port not in links]}
        stp, vlan = bridge.get("stp") or {}, bridge.get("vlan") or {}
        if stp.get("enabled") is not None:
            extra["stp"] = {"enabled": stp["enabled"]}
        if vlan.get("vlanFiltering") is not None:
            extra["vlan"] = {"filtering": vlan["vlanFiltering"]}
        return "BridgeConfig", extra
    if interface.get("bond") is not None:
        bond = interface["bond"]
        # SetBondMasterLegacy reads an empty mode as balance-rr; BondConfig needs one.
        extra = {"links": list(bond["interfaces"]), "bondMode": bond.get("mode") or "balance-rr"}
        for option, target, _names in _BOND_OPTIONS[1:]:
            if bond.get(option) or (option == "useCarrier" and bond.get(option) is not None):
                extra[target] = bond[option]
        if bond.get("adActorSystem"):
            m.plan.dropped.append(".%s.bond.adActorSystem: Talos's v1alpha1 path never sets it on the bond "
                                  "(SetBondMasterLegacy) and BondConfig has no such field" % source)
        return "BondConfig", extra
    if interface.get("wireguard") is not None:
        wireguard = interface["wireguard"]
        extra = dict((key, wireguard[key]) for key in ("privateKey", "listenPort", "firewallMark") if wireguard.get(key))
        peers = [dict((key, peer[key]) for key in _WIREGUARD_PEER if peer.get(key)) for peer in wireguard.get("peers") or []]
        if peers:
            extra["peers"] = peers
        return "WireguardConfig", extra
    if interface.get("dummy"):
        return "DummyLinkConfig", None
    return "LinkConfig", None


def _link(m, source, kind, extra, name, holder, host_prefix):
    """One v1alpha1 link (an interface or a VLAN) to its link document, its DHCP documents and its VIP document."""
    value = dict(extra or {})
    addresses, skipped = _link_addresses(holder, host_prefix)
    for address in skipped:
        m.plan.dropped.append(".%s.addresses: %s has no prefix length, which Talos skips on a VLAN" % (source, address))
    if addresses:
        value["addresses"] = addresses
    routes = _link_routes(holder)
    if routes:
        value["routes"] = routes
    if holder.get("mtu"):
        value["mtu"] = holder["mtu"]
    m.move(source, kind, None, value, name=name)
    if holder.get("dhcp"):
        options = holder.get("dhcpOptions") or {}
        for family, kind_of_dhcp, default in (("ipv4", "DHCPv4Config", True), ("ipv6", "DHCPv6Config", False)):
            if not options.get(family, default):
                continue
            dhcp = {"clientIdentifier": "none"}  # the v1alpha1 path sends no client identifier; the document a MAC one
            if options.get("routeMetric"):
                dhcp["routeMetric"] = options["routeMetric"]
            if family == "ipv6" and options.get("duidv6"):
                # The v1alpha1 path sends the hex DUID as the client identifier; duidRaw takes its bytes colon-separated.
                duid = str(options["duidv6"]).lower()
                dhcp.update(clientIdentifier="duid", duidRaw=":".join(duid[i:i + 2] for i in range(0, len(duid), 2)))
            m.move(source + ".dhcp", kind_of_dhcp, None, dhcp, name=name)
    if (holder.get("dhcpOptions") or {}).get("duidv6") and not (holder.get("dhcp") and holder["dhcpOptions"].get("ipv6")):
        m.plan.dropped.append(".%s.dhcpOptions.duidv6: Talos runs no DHCPv6 on the link, so it sends no DUID" % source)
    vip = holder.get("vip") or {}
    if vip.get("hcloud"):
        m.move(source + ".vip", "HCloudVIPConfig", None, {"link": name, "apiToken": (vip["hcloud"] or {}).get("apiToken") or ""},
               name=str(vip.get("ip")))
    elif vip.get("ip"):
        m.move(source + ".vip", "Layer2VIPConfig", None, {"link": name}, name=str(vip["ip"]))


def _interfaces(m):
    """The v1alpha1 interfaces Talos's own v1alpha1 path reads as named links (bridges, bonds, WireGuard or dummy
    links, bridge ports) with addresses, routes, an MTU, DHCP, VLANs and a VIP: to LinkConfig (BridgeConfig,
    BondConfig, WireguardConfig, DummyLinkConfig; a port in its bridge's links), VLANConfig, DHCPv4Config/DHCPv6Config,
    Layer2VIPConfig/HCloudVIPConfig, built by link_config.go and operator_config.go as before. The others stay in
    v1alpha1 with why, which Talos v1.14 still reads beside the documents."""
    if not m.has("machine.network.interfaces"):
        return
    had_links = any(kind in _LINK_DOCUMENTS for kind, _name in m.existing)
    interfaces = m.get("machine.network.interfaces") or []
    whys = [_interface_kept_why(interface) for interface in interfaces]
    # A bridge port is a link of its master's BridgeConfig: it moves with a bridge that moves, and stays otherwise.
    bridges = set(interface["interface"] for interface, why in zip(interfaces, whys) if not why and interface.get("bridge") is not None)
    ports = {}
    for index, interface in enumerate(interfaces):
        master = (interface.get("bridgePort") or {}).get("master")
        if whys[index] or not master:
            continue
        if master in bridges:
            ports.setdefault(master, []).append(interface["interface"])
        else:
            whys[index] = ("its bridge %s is no v1alpha1 bridge this migration moves to a BridgeConfig, whose links "
                           "would name it" % master)
    kept = []
    for index, interface in enumerate(interfaces):
        label = interface.get("interface") or str(index)
        source = "machine.network.interfaces.%s" % label
        if whys[index]:
            kept.append(interface)
            m.plan.kept.append(".%s: %s; Talos v1.14 still reads it from v1alpha1" % (source, whys[index]))
            continue
        name = interface["interface"]
        kind, extra = _link_kind(m, source, interface, ports.get(name, []))
        _link(m, source, kind, extra, name=name, holder=interface, host_prefix=True)
        for vlan in interface.get("vlans") or []:
            vlan_name = "%s.%s" % (name, vlan.get("vlanId"))
            _link(m, "%s.vlans.%s" % (source, vlan.get("vlanId")), "VLANConfig", {"vlanID": vlan.get("vlanId"), "parent": name},
                  name=vlan_name, holder=vlan, host_prefix=False)
    if kept:
        m.root["machine"]["network"]["interfaces"] = kept
    else:
        m.take("machine.network.interfaces")
    if len(kept) < len(interfaces) and not had_links:
        m.plan.warnings.append(
            "With a link document in the config, Talos v1.14 stops the DHCP it runs by default on every link the config "
            "does not name: links left out of .machine.network.interfaces get no address unless a document configures them.")


def _static_hosts(m):
    for entry in m.take("machine.network.extraHostEntries") or []:
        m.move("machine.network.extraHostEntries", "StaticHostConfig", "hostnames", list(entry.get("aliases") or []),
               name=str(entry.get("ip")))


def _time(m):
    if not m.has("machine.time"):
        return
    time = m.take("machine.time") or {}
    m.unmapped("machine.time", time, ("disabled", "servers", "bootTimeout"))
    if m.preexisting("TimeSyncConfig"):
        for field, message in (("disabled", "time sync cannot be disabled in both v1alpha1 and new-style configuration"),
                               ("servers", "time servers cannot be specified in both v1alpha1 and new-style configuration"),
                               ("bootTimeout", "boot timeout cannot be specified in both v1alpha1 and new-style configuration")):
            if field in time:
                m.conflict("machine.time.%s" % field, "TimeSyncConfig", None, message)
        return
    # Both sides say whether time sync runs: the document's enabled is written even where v1alpha1 left it out.
    m.move("machine.time.disabled", "TimeSyncConfig", "enabled", not time.get("disabled", False),
           refused_with="time sync cannot be disabled in both v1alpha1 and new-style configuration")
    if "servers" in time:
        m.move("machine.time.servers", "TimeSyncConfig", "ntp.servers", list(time["servers"] or []),
               refused_with="time servers cannot be specified in both v1alpha1 and new-style configuration")
    if "bootTimeout" in time:
        m.move("machine.time.bootTimeout", "TimeSyncConfig", "bootTimeout", time["bootTimeout"],
               refused_with="boot timeout cannot be specified in both v1alpha1 and new-style configuration")


def _kubespan(m):
    if m.has("machine.network.kubespan"):
        m.move("machine.network.kubespan", "KubeSpanConfig", None, m.take("machine.network.kubespan") or {},
               refused_with="kubespan is already configured in v1alpha1 machine.network.kubespan")


def _install(m):
    if not m.has("machine.install"):
        return
    install = m.take("machine.install") or {}
    refused = "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)"
    if m.preexisting(_INSTALL_KIND):
        m.conflict("machine.install", _INSTALL_KIND, None, refused)
        return
    m.unmapped("machine.install", install, ("disk", "image", "wipe", "extraKernelArgs", "legacyBIOSSupport", "extensions",
                                            "diskSelector", "grubUseUKICmdline"))
    for field, why in (("extraKernelArgs", "kernel arguments belong to the boot assets or the Image Factory schematic"),
                       ("legacyBIOSSupport", "UnattendedInstallConfig has no BIOS option"),
                       ("extensions", "system extensions come from the installer image (Image Factory)"),
                       ("diskSelector", "its selector must be rewritten as a CEL expression by hand")):
        if install.get(field):
            m.homeless("machine.install.%s" % field, why)
    if install.get("grubUseUKICmdline") is False:
        m.homeless("machine.install.grubUseUKICmdline", "UnattendedInstallConfig has no such option")
    elif "grubUseUKICmdline" in install:
        # talosctl writes true for contracts v1.12 and v1.13 and leaves it out for v1.14: not the user's choice.
        m.plan.dropped.append(".machine.install.grubUseUKICmdline: UnattendedInstallConfig has no such option, and "
                              "talosctl leaves it out for Talos v1.14")
    if not install.get("disk"):
        if not install.get("diskSelector"):
            m.homeless("machine.install", "UnattendedInstallConfig needs the install disk, and the section names none")
        return
    if install.get("image"):
        m.move("machine.install.image", _INSTALL_KIND, "installer.image", install["image"])
    else:
        m.move("machine.install", _INSTALL_KIND, "installer", {})
    m.move("machine.install.disk", _INSTALL_KIND, "provisioning.diskSelector.match", _disk_match(install["disk"]))
    # The document wipes the disk by default; the v1alpha1 section did not.
    m.move("machine.install.wipe", _INSTALL_KIND, "provisioning.wipe", bool(install.get("wipe", False)),
           note="v1alpha1 does not wipe unless told; UnattendedInstallConfig wipes by default" if "wipe" not in install else None)


def _simple(m):
    if m.has("machine.env"):
        m.move("machine.env", "EnvironmentConfig", "variables", m.take("machine.env"))
    for source, kind in (("machine.sysctls", "SysctlConfig"), ("machine.sysfs", "SysfsConfig")):
        if m.has(source):
            values = m.take(source) or {}
            for key in sorted(values):
                m.move("%s.%s" % (source, key), kind, ("params", key), str(values[key]))
    for module in m.take("machine.kernel.modules") or []:
        m.move("machine.kernel.modules", "KernelModuleConfig", "parameters", list(module.get("parameters") or []),
               name=module.get("name"))
    if m.has("machine.udev.rules"):
        m.move("machine.udev.rules", "UdevRulesConfig", "rules", m.take("machine.udev.rules"))
    for pod in m.take("machine.pods") or []:
        metadata = pod.get("metadata") or {}
        # The name Talos gives a v1alpha1 static pod.
        name = "%s-%s" % (metadata.get("namespace") or "default", metadata.get("name") or "default")
        m.move("machine.pods", "KubeStaticPodConfig", "pod", pod, name=name)
    if m.has("machine.baseRuntimeSpecOverrides"):
        m.move("machine.baseRuntimeSpecOverrides", "CRIBaseRuntimeSpecConfig", "overrides", m.take("machine.baseRuntimeSpecOverrides"),
               refused_with="base runtime spec overrides are already set in v1alpha1 config")
    if m.has("machine.features.imageCache"):
        cache = m.take("machine.features.imageCache") or {}
        m.unmapped("machine.features.imageCache", cache, ("localEnabled",))
        if "localEnabled" in cache:
            m.move("machine.features.imageCache.localEnabled", "ImageCacheConfig", "local.enabled", cache["localEnabled"],
                   refused_with="image cache config is already set in v1alpha1 config")


def _disk_encryption(m):
    """STATE's and EPHEMERAL's encryption: a VolumeConfig's ``encryption`` takes the same fields, and Talos falls back
    to the v1alpha1 one only where the volume's document has none."""
    if not m.has("machine.systemDiskEncryption"):
        return
    section = m.take("machine.systemDiskEncryption") or {}
    m.unmapped("machine.systemDiskEncryption", section, ("state", "ephemeral"))
    for field, volume in (("state", "STATE"), ("ephemeral", "EPHEMERAL")):
        encryption = section.get(field)
        if encryption is None:
            continue
        source = "machine.systemDiskEncryption.%s" % field
        m.unmapped(source, encryption, ("provider", "keys", "cipher", "keySize", "blockSize", "options"))
        for key in encryption.get("keys") or []:
            m.unmapped(source + ".keys", key, ("slot", "static", "nodeID", "kms", "tpm"))
            m.unmapped(source + ".keys.tpm", key.get("tpm") or {}, ("checkSecurebootStatusOnEnroll",))
        if m.preexisting("VolumeConfig", volume) and m.document("VolumeConfig", volume).get("encryption"):
            m.conflict(source, "VolumeConfig", volume,
                       'system disk encryption for "%s" is configured in both v1alpha1.Config and VolumeConfig' % volume)
            continue
        value = copy.deepcopy(encryption)
        # v1alpha1 reads a missing provider as LUKS2; the document requires it said.
        value["provider"] = value.get("provider") or "luks2"
        value["keys"] = value.get("keys") or []
        m.move(source, "VolumeConfig", "encryption", value, name=volume)


def _file_mode(permissions):
    """A v1alpha1 file's permissions as a number: an integer, or the ``0o644`` text Talos writes."""
    if isinstance(permissions, int) and not isinstance(permissions, bool):
        return permissions
    if isinstance(permissions, str) and re.match(r"^0o?[0-7]+$", permissions):
        return int(permissions.replace("o", ""), 8)
    return None


def _etc_name(path):
    """The EtcFileConfig name of a v1alpha1 file's path, or why no EtcFileConfig can write it."""
    if not path.startswith("/etc/"):
        return None, "the v1alpha1 path writes it under /var and bind-mounts it there; documents write files only under /etc"
    name = path[len("/etc/"):]
    parts = name.split("/")
    if not name or name.startswith(".") or any(part in ("", ".", "..") for part in parts):
        return None, "EtcFileConfig takes only a plain path below /etc"
    if name in _MANAGED_ETC_FILES or parts[0] in _MANAGED_ETC_DIRECTORIES:
        return None, "Talos manages /etc/%s, which EtcFileConfig refuses to write" % (name if name in _MANAGED_ETC_FILES else parts[0])
    return name, None


def _files(m):
    """The v1alpha1 files: the CRI customization to its CRICustomizationConfig, a file that replaces one under /etc to an
    EtcFileConfig; what the legacy path does otherwise has no document."""
    if not m.has("machine.files"):
        return
    files = m.take("machine.files") or []
    customized = False
    for file in files:
        path = str(file.get("path") or "")
        source = "machine.files.%s" % path
        m.unmapped(source, file, ("content", "permissions", "path", "op"))
        op = file.get("op")
        if path == _CRI_CUSTOMIZATION_PATH:
            if customized:  # Talos reads the first one only
                m.plan.dropped.append(".%s: Talos reads only the first file at this path as the CRI customization" % source)
                continue
            customized = True
            later = [name for kind, name in m.existing if kind == "CRICustomizationConfig" and name and
                     "customization" < name < _CRI_CUSTOMIZATION_NAME]
            if later:
                m.homeless(source, "its CRICustomizationConfig %s would merge after %s, which Talos merges after it today"
                           % (_CRI_CUSTOMIZATION_NAME, ", ".join(sorted(later))))
                continue
            m.move(source, "CRICustomizationConfig", "content", file.get("content") or "", name=_CRI_CUSTOMIZATION_NAME,
                   note="Talos names the v1alpha1 customization \"customization\", which no document may be")
            continue
        name, why = _etc_name(path)
        mode = _file_mode(file.get("permissions"))
        if name and op == "create":
            why = "the v1alpha1 path refuses to create a file outside /var, so the node never wrote it"
        elif name and op == "append":
            why = "the v1alpha1 path appends to the file Talos has there; EtcFileConfig writes a whole file"
        elif name and op != "overwrite":
            why = "the v1alpha1 path knows no op %r" % op
        elif name and not mode:
            why = "the v1alpha1 path writes it with permissions %r; EtcFileConfig reads no mode as 0644" % file.get("permissions")
        if why:
            m.homeless(source, why)
            continue
        m.move(source, "EtcFileConfig", None, {"contents": file.get("content") or "", "mode": mode}, name=name)


def _registries(m):
    """Mirrors, credentials and TLS settings per registry: one document of each kind per registry, named by its host."""
    for host, mirror in sorted((m.take("machine.registries.mirrors") or {}).items()):
        source = "machine.registries.mirrors.%s" % host
        m.unmapped(source, mirror, ("endpoints", "overridePath", "skipFallback"))
        endpoints = [{"url": url} for url in mirror.get("endpoints") or []]
        if mirror.get("overridePath") is not None:
            for endpoint in endpoints:  # the document says it per endpoint
                endpoint["overridePath"] = mirror["overridePath"]
        value = {"endpoints": endpoints}
        if mirror.get("skipFallback") is not None:
            value["skipFallback"] = mirror["skipFallback"]
        m.move(source, "RegistryMirrorConfig", None, value, name=host)
    for host, settings in sorted((m.take("machine.registries.config") or {}).items()):
        source = "machine.registries.config.%s" % host
        m.unmapped(source, settings, ("auth", "tls"))
        m.unmapped(source + ".tls", settings.get("tls") or {}, ("clientIdentity", "ca", "insecureSkipVerify"))
        auth = settings.get("auth") or {}
        if auth:
            m.move(source + ".auth", "RegistryAuthConfig", None, dict(auth), name=host)
        tls = settings.get("tls") or {}
        value = {}
        identity = tls.get("clientIdentity") or {}
        if identity:
            value["clientIdentity"] = dict((key, _pem(identity[field], "%s.tls.clientIdentity.%s" % (source, field)))
                                           for field, key in (("crt", "cert"), ("key", "key")) if identity.get(field))
        if tls.get("ca"):
            value["ca"] = _pem(tls["ca"], source + ".tls.ca")
        if tls.get("insecureSkipVerify") is not None:
            value["insecureSkipVerify"] = tls["insecureSkipVerify"]
        if value:
            m.move(source + ".tls", "RegistryTLSConfig", None, value, name=host)


def _discovery(m):
    cluster_id, secret = m.take("cluster.id"), m.take("cluster.secret")
    refused = "cluster identity is already configured in .cluster.id/.cluster.secret of the v1alpha1 config"
    if cluster_id is not None:
        m.move("cluster.id", "DiscoveryIdentityConfig", "clusterID", cluster_id, refused_with=refused)
    if secret is not None:
        m.move("cluster.secret", "DiscoveryIdentityConfig", "clusterSecret", secret, refused_with=refused)
    if not m.has("cluster.discovery"):
        return
    discovery = m.take("cluster.discovery") or {}
    m.unmapped("cluster.discovery", discovery, ("enabled", "registries"))
    refused = "discovery service is already configured in .cluster.discovery of the v1alpha1 config"
    registries = discovery.get("registries") or {}
    if discovery.get("enabled") and not (registries.get("kubernetes") or {}).get("disabled"):
        m.homeless("cluster.discovery.registries.kubernetes", "the Kubernetes registry has no document; Talos v1.14 "
                   "reads it only from v1alpha1, and a DiscoveryServiceConfig refuses any .cluster.discovery")
    service = registries.get("service") or {}
    m.unmapped("cluster.discovery.registries", registries, ("kubernetes", "service"))
    m.unmapped("cluster.discovery.registries.service", service, ("disabled", "endpoint"))
    if discovery.get("enabled") and not service.get("disabled"):
        # Named as Talos names the service it reads from v1alpha1.
        m.move("cluster.discovery", "DiscoveryServiceConfig", "endpoint", service.get("endpoint") or generation.DISCOVERY_ENDPOINT,
               name="legacy", refused_with=refused)
    else:
        m.plan.dropped.append(".cluster.discovery: the discovery service is disabled, which is Talos v1.14's default "
                              "without a DiscoveryServiceConfig")


def _cluster(m):
    name_refused = ("cluster name is already set in the v1alpha1 config (.cluster.clusterName). Please remove it and use "
                    "only the new KubeClusterConfig document to avoid conflicts")
    if m.has("cluster.clusterName"):
        m.move("cluster.clusterName", "KubeClusterConfig", "clusterName", m.take("cluster.clusterName"), refused_with=name_refused)
    if m.has("cluster.controlPlane.endpoint"):
        m.move("cluster.controlPlane.endpoint", "KubeClusterConfig", "endpoint", m.take("cluster.controlPlane.endpoint"),
               refused_with="cluster endpoint is already set in the v1alpha1 config (.cluster.controlPlane.endpoint). Please "
                            "remove it and use only the new KubeClusterConfig document to avoid conflicts")
    if m.has("cluster.controlPlane.localAPIServerPort"):
        m.move("cluster.controlPlane.localAPIServerPort", "KubeAPIServerConfig", "apiPort",
               m.take("cluster.controlPlane.localAPIServerPort"),
               refused_with="kube-apiserver API port is already set in v1alpha1 config (.cluster.controlPlane.localAPIServerPort)")
    if m.has("cluster.network"):
        network = m.take("cluster.network") or {}
        m.unmapped("cluster.network", network, ("cni", "dnsDomain", "podSubnets", "serviceSubnets"))
        cni = network.pop("cni", None)
        refused = ("cluster network config is already set in the v1alpha1 config (.machine.cluster.network). Please remove "
                   "it and use only the new KubeNetworkConfig document to avoid conflicts")
        moved = dict((key, network[key]) for key in ("dnsDomain", "podSubnets", "serviceSubnets") if key in network)
        if moved:
            m.move("cluster.network", "KubeNetworkConfig", None, moved, refused_with=refused)
        if cni is not None or m.controlplane:
            _cni(m, cni)


def _cni(m, cni):
    refused = ("cluster network config in v1alpha1 config (.machine.cluster.network) can't be used with "
               "KubeFlannelCNIConfig document, please remove it to avoid conflicts")
    if cni is None and (m.preexisting("KubeFlannelCNIConfig") or m.preexisting("KubeExternalManifestConfig", "custom-cni")):
        return
    cni = cni or {}
    name = cni.get("name") or "flannel"
    if name == "flannel":
        flannel = cni.get("flannel") or {}
        value = {"backendType": "vxlan", "backendPort": 4789}
        value.update((key, flannel[key]) for key in ("extraArgs", "kubeNetworkPoliciesEnabled") if key in flannel)
        m.move("cluster.network.cni", "KubeFlannelCNIConfig", None, value, refused_with=refused,
               note=None if cni else "Flannel is the CNI a v1alpha1 config without .cluster.network.cni runs")
    elif name == "custom":
        urls = cni.get("urls") or []
        if len(urls) != 1:
            m.homeless("cluster.network.cni.urls", "KubeExternalManifestConfig custom-cni takes one URL, the config names %d" % len(urls))
            return
        m.move("cluster.network.cni.urls", "KubeExternalManifestConfig", "url", urls[0], name="custom-cni")
    else:
        m.plan.dropped.append(".cluster.network.cni: name none is a cluster without the CNI documents")


def _ca_pair(m, source):
    pair = m.take(source) or {}
    return _pem(pair.get("crt"), source + ".crt") if pair.get("crt") else None, (
        _pem(pair.get("key"), source + ".key") if pair.get("key") else None)


def _pki(m):
    refused_ca = "kube-apiserver CA is already set in v1alpha1 config (.cluster.ca)"
    accepted = [_pem(ca, "cluster.acceptedCAs") for ca in (m.take("cluster.acceptedCAs") or [])]
    if m.has("cluster.ca"):
        crt, key = _ca_pair(m, "cluster.ca")
        if crt and key:
            m.move("cluster.ca", "KubeAPIServerCAConfig", "issuingCA", {"cert": crt, "key": key}, refused_with=refused_ca)
        elif crt:
            accepted.insert(0, crt)
    if accepted:
        m.move("cluster.acceptedCAs", "KubeAPIServerCAConfig", "acceptedCAs", accepted)
    if m.has("cluster.aggregatorCA"):
        crt, key = _ca_pair(m, "cluster.aggregatorCA")
        m.move("cluster.aggregatorCA", "KubeAggregatorCAConfig", "issuingCA", {"cert": crt, "key": key},
               refused_with="kube-apiserver aggregator CA is already set in v1alpha1 config (.cluster.aggregatorCA), please "
                            "remove it and use the new KubeAggregatorCAConfig document instead")
    if m.has("cluster.serviceAccount"):
        account = m.take("cluster.serviceAccount") or {}
        issuer = {"privateKey": _pem(account.get("key"), "cluster.serviceAccount.key")}
        if m.endpoint:
            # The legacy path issues tokens for the cluster endpoint; the document's issuer must say so.
            issuer["issuerURL"] = m.endpoint
        m.move("cluster.serviceAccount", "KubeServiceAccountConfig", "issuer", issuer,
               refused_with="service account is already set in v1alpha1 config (.cluster.serviceAccount)")
    _encryption(m)


def _encryption(m):
    secretbox, aescbc = m.take("cluster.secretboxEncryptionSecret"), m.take("cluster.aescbcEncryptionSecret")
    if not secretbox and not aescbc:
        return
    # What the legacy path renders for kube-apiserver: secretbox key2, aescbc key1, then identity.
    providers = []
    if secretbox:
        providers.append({"secretbox": {"keys": [{"name": "key2", "secret": secretbox}]}})
    if aescbc:
        providers.append({"aescbc": {"keys": [{"name": "key1", "secret": aescbc}]}})
    providers.append({"identity": {}})
    source = "cluster.secretboxEncryptionSecret" if secretbox else "cluster.aescbcEncryptionSecret"
    m.move(source, "KubeEtcdEncryptionConfig", "config", {"resources": [{"providers": providers, "resources": ["secrets"]}]},
           refused_with="etcd encryption config is already set in v1alpha1 config",
           note="key names as the legacy path renders them, so that kube-apiserver still decrypts what it stored")


def _component(m, source, kind, refused, fields, extra=None, known=()):
    """A Kubernetes component's v1alpha1 section to its document: ``fields`` moved as named, ``extraVolumes`` homeless,
    ``known`` the keys the caller maps itself."""
    section = m.take(source) or {}
    m.unmapped(source, section, [field for field, _target in fields] + ["extraVolumes"] + list(known))
    if section.get("extraVolumes"):
        m.homeless(source + ".extraVolumes", "the %s document mounts no user volumes" % kind)
    value = dict((target, section[field]) for field, target in fields if field in section)
    value.update(extra or {})
    if value or section:
        m.move(source, kind, None, value, refused_with=refused)


def _api_server(m):
    if not m.has("cluster.apiServer"):
        return
    section = m.get("cluster.apiServer") or {}
    for arg in sorted(section.get("extraArgs") or {}):
        if arg.startswith(_REFUSED_APISERVER_ARGS):
            m.homeless("cluster.apiServer.extraArgs.%s" % arg,
                       "KubeAPIServerConfig refuses it: KubeAuthenticationConfig or KubeAuthorizerConfig configure it")
            section["extraArgs"].pop(arg)
    admission = section.pop("admissionControl", None)
    audit = section.pop("auditPolicy", None)
    authorizers = section.pop("authorizationConfig", None)
    if section.pop("disablePodSecurityPolicy", None) is not None:
        m.plan.dropped.append(".cluster.apiServer.disablePodSecurityPolicy: Talos ignores it since v1.12")
    _component(m, "cluster.apiServer", "KubeAPIServerConfig",
               "kube-apiserver config is already set in v1alpha1 config (.cluster.apiServer)",
               (("image", "image"), ("extraArgs", "extraArgs"), ("env", "env"), ("resources", "resources"),
                ("certSANs", "certExtraSANs")))
    for plugin in admission or []:
        m.move("cluster.apiServer.admissionControl", "KubeAdmissionControlConfig", "configuration", plugin.get("configuration") or {},
               name=plugin.get("name"), refused_with="admission control plugin config is already set in v1alpha1 config")
    if audit is not None or not m.preexisting("KubeAuditPolicyConfig"):
        m.move("cluster.apiServer.auditPolicy", "KubeAuditPolicyConfig", "configuration", audit or generation.audit_policy(),
               refused_with="audit policy config is already set in v1alpha1 config",
               note=None if audit else "the default policy the legacy path uses without one")
    if not m.preexisting("KubeAuthenticationConfig"):
        m.move("cluster.apiServer", "KubeAuthenticationConfig", "configuration", {
            "anonymous": {"conditions": [{"path": "/livez"}, {"path": "/readyz"}, {"path": "/healthz"}], "enabled": True},
            "jwt": [],
        }, note="what talosctl writes for Talos v1.14 beside a KubeAPIServerConfig")
    # The legacy path puts Node and RBAC first when the config leaves them out; the documents are the whole list.
    users = list(authorizers or [])
    for builtin, kind in (("node", "Node"), ("rbac", "RBAC")):
        if not any((authorizer.get("type") == kind) for authorizer in users):
            m.move("cluster.apiServer.authorizationConfig", "KubeAuthorizerConfig", "type", kind, name=builtin,
                   note="the legacy path adds it")
    for authorizer in users:
        value = dict((key, authorizer[key]) for key in ("type", "webhook") if key in authorizer)
        m.move("cluster.apiServer.authorizationConfig", "KubeAuthorizerConfig", None, value, name=authorizer.get("name"))


def _components(m):
    cm_disabled = m.take("machine.controlPlane.controllerManager.disabled")
    scheduler_disabled = m.take("machine.controlPlane.scheduler.disabled")
    standard = (("image", "image"), ("extraArgs", "extraArgs"), ("env", "env"), ("resources", "resources"))
    if m.has("cluster.controllerManager") or cm_disabled is not None:
        _component(m, "cluster.controllerManager", "KubeControllerManagerConfig",
                   "kube-controller-manager config is already set in v1alpha1 config (.cluster.controllerManager)", standard,
                   {"enabled": not cm_disabled} if cm_disabled is not None else None)
    if m.has("cluster.scheduler") or scheduler_disabled is not None:
        config = (m.get("cluster.scheduler") or {}).get("config") or {}
        extra = {"config": config}
        if scheduler_disabled is not None:
            extra["enabled"] = not scheduler_disabled
        _component(m, "cluster.scheduler", "KubeSchedulerConfig",
                   "kube-scheduler config is already set in v1alpha1 config (.cluster.scheduler)", standard, extra,
                   known=("config",))
    if m.has("cluster.proxy"):
        proxy = m.get("cluster.proxy") or {}
        extra = {"config": {}}
        if "disabled" in proxy:
            extra["enabled"] = not proxy["disabled"]
        _component(m, "cluster.proxy", "KubeProxyConfig",
                   "cluster proxy config in v1alpha1 config (.machine.cluster.proxy) can't be used with KubeProxyConfig "
                   "document, please remove it to avoid conflicts",
                   (("image", "image"), ("mode", "mode"), ("extraArgs", "extraArgs")), extra, known=("disabled",))
    # A control plane of a v1alpha1 config runs CoreDNS unless told not to; an already migrated one says so itself.
    if m.has("cluster.coreDNS") or (m.controlplane and m.legacy_kubernetes and not m.preexisting("KubeCoreDNSConfig")):
        coredns = m.take("cluster.coreDNS") or {}
        m.unmapped("cluster.coreDNS", coredns, ("disabled", "image"))
        value = {"enabled": not coredns.get("disabled", False)}
        if coredns.get("image"):
            value["image"] = coredns["image"]
        m.move("cluster.coreDNS", "KubeCoreDNSConfig", None, value,
               refused_with="CoreDNS config is already set in v1alpha1 config (.cluster.coreDNS)",
               note=None if coredns else "CoreDNS runs when a v1alpha1 config does not disable it")


def _manifest_name(url):
    """A document name (a DNS subdomain) for a manifest URL: its host and path, other characters as dashes."""
    name = re.sub(r"[^a-z0-9.]+", "-", url.split("://", 1)[-1].lower())
    return re.sub(r"(^|\.)[-.]+|[-.]+($|\.)", lambda match: match.group(1) or match.group(2), name).strip("-.")[:253]


def _manifests(m):
    headers = m.take("cluster.extraManifestHeaders")
    for url in m.take("cluster.extraManifests") or []:
        value = {"url": url}
        if headers:
            value["headers"] = headers
        m.move("cluster.extraManifests", "KubeExternalManifestConfig", None, value, name=_manifest_name(url),
               note="Talos names a v1alpha1 manifest by its URL, which no document name may be")
    for manifest in m.take("cluster.inlineManifests") or []:
        m.move("cluster.inlineManifests", "KubeInlineManifestConfig", "manifest", manifest.get("contents") or "",
               name=manifest.get("name"))


def _kubelet(m):
    if m.has("machine.kubelet"):
        kubelet = m.take("machine.kubelet") or {}
        m.unmapped("machine.kubelet", kubelet, (
            "image", "clusterDNS", "extraArgs", "extraMounts", "extraConfig", "credentialProviderConfig",
            "defaultRuntimeSeccompProfileEnabled", "registerWithFQDN", "nodeIP", "skipNodeRegistration", "disableManifestsDirectory"))
        if kubelet.get("extraMounts"):
            m.homeless("machine.kubelet.extraMounts", "KubeletConfig mounts nothing for the kubelet")
        if kubelet.get("disableManifestsDirectory") is not None:
            m.plan.dropped.append(".machine.kubelet.disableManifestsDirectory: Talos v1.14 always disables it")
        node_ip = kubelet.get("nodeIP") or {}
        for field in ("registerWithFQDN", "skipNodeRegistration"):
            if field in kubelet:
                m.move("machine.kubelet.%s" % field, "KubeNodeConfig", field, kubelet[field],
                       refused_with=".machine.kubelet.%s is already set in v1alpha1 config" % field)
        if "validSubnets" in node_ip:
            m.move("machine.kubelet.nodeIP.validSubnets", "KubeNodeConfig", "nodeIP.validSubnets", node_ip["validSubnets"],
                   refused_with=".machine.kubelet.nodeIP is already set in v1alpha1 config")
        if kubelet.get("credentialProviderConfig"):
            m.move("machine.kubelet.credentialProviderConfig", "KubeCredentialProviderConfig", "configuration",
                   kubelet["credentialProviderConfig"],
                   refused_with="cannot use KubeCredentialProviderConfig with legacy kubelet configuration (.machine.kubelet)")
        value = dict((target, kubelet[field]) for field, target in (
            ("image", "image"), ("clusterDNS", "clusterDNS"), ("extraArgs", "extraArgs"),
            ("defaultRuntimeSeccompProfileEnabled", "defaultRuntimeSeccompProfileEnabled")) if field in kubelet)
        value["config"] = kubelet.get("extraConfig") or {}
        m.move("machine.kubelet", "KubeletConfig", None, value,
               refused_with="kubelet config is already set in v1alpha1 config (.machine.kubelet)")
    _node(m)


def _node(m):
    labels = m.take("machine.nodeLabels")
    annotations = m.take("machine.nodeAnnotations")
    taints = m.take("machine.nodeTaints")
    allow = m.take("cluster.allowSchedulingOnControlPlanes")
    allow_masters = m.take("cluster.allowSchedulingOnMasters")
    allowed = bool(allow or allow_masters)
    if m.controlplane and not m.preexisting("KubeNodeConfig"):
        # The legacy path labels and taints a control plane itself; the document is the whole set.
        labels = dict(labels or {})
        labels.setdefault(generation.CONTROL_PLANE_ROLE_LABEL, "")
        if not allowed:
            taints = dict(taints or {})
            taints.setdefault(generation.CONTROL_PLANE_ROLE_LABEL, "NoSchedule")
    for source, field, value, note in (
            ("machine.nodeLabels", "labels", labels, "the legacy path labels a control plane itself"),
            ("machine.nodeAnnotations", "annotations", annotations, None),
            ("machine.nodeTaints", "taints", taints, "the legacy path taints a control plane unless scheduling is allowed")):
        if value:
            m.move(source, "KubeNodeConfig", field, value,
                   refused_with="%s is already set in v1alpha1 config" % ("." + source),
                   note=note if m.controlplane else None)
    for source, value in (("cluster.allowSchedulingOnControlPlanes", allow), ("cluster.allowSchedulingOnMasters", allow_masters)):
        if value is not None and m.preexisting("KubeNodeConfig"):
            m.conflict(source, "KubeNodeConfig", None, ".%s is already set in v1alpha1 config" % source)
        elif value is not None:
            m.plan.dropped.append(".%s: said by leaving the control-plane taint out of KubeNodeConfig" % source)
    if not m.preexisting("KubeNodeConfig"):
        m.document("KubeNodeConfig").setdefault("nodeIP", {})  # as talosctl writes it for Talos v1.14


def _features(m):
    if m.has("machine.features.kubePrism"):
        prism = m.take("machine.features.kubePrism") or {}
        m.unmapped("machine.features.kubePrism", prism, ("enabled", "port"))
        if prism.get("enabled"):
            m.move("machine.features.kubePrism", "KubePrismConfig", "port", prism.get("port") or generation.KUBEPRISM_PORT,
                   refused_with="KubePrism config in v1alpha1 config (.machine.features.kubePrism) can't be used with "
                                "KubePrismConfig document, please remove it to avoid conflicts")
        else:
            m.plan.dropped.append(".machine.features.kubePrism: disabled, which is no KubePrismConfig document")
    if m.has("machine.features.kubernetesTalosAPIAccess"):
        access = m.take("machine.features.kubernetesTalosAPIAccess") or {}
        m.unmapped("machine.features.kubernetesTalosAPIAccess", access, ("enabled", "allowedRoles", "allowedKubernetesNamespaces"))
        if access.get("enabled"):
            value = dict((key, access[key]) for key in ("allowedRoles", "allowedKubernetesNamespaces") if key in access)
            m.move("machine.features.kubernetesTalosAPIAccess", "KubeTalosAPIAccessConfig", None, value,
                   refused_with=".machine.features.kubernetesTalosAPIAccess is already set in v1alpha1 config")
        else:
            m.plan.dropped.append(".machine.features.kubernetesTalosAPIAccess: disabled, which is no document")
    for feature in ("rbac", "apidCheckExtKeyUsage"):
        if m.has("machine.features.%s" % feature):
            m.ignored("machine.features.%s" % feature, "Talos ignores it since v1.12 (always on)")


_AREAS = (_hostname, _resolver, _interfaces, _static_hosts, _time, _kubespan, _install, _simple, _disk_encryption, _files, _registries,
          _discovery, _cluster, _pki, _api_server, _components, _manifests, _kubelet, _features)


def _tidy(root):
    """Sections left empty by the moves go, as Talos v1.14's own configs leave them out."""
    for section in ("machine", "cluster"):
        for key in [key for key, value in (root.get(section) or {}).items() if value in ({}, None)
                    and key in ("network", "features", "kernel", "time", "controlPlane")]:
            root[section].pop(key)


def plan(documents, accept_dropped=()):
    """The migration plan of a parsed config (``documents``: the v1alpha1 document and any others).

    Nothing to migrate (no deprecated field set): a plan without steps whose ``documents`` is None. Fields named in
    ``accept_dropped`` (dotted paths such as ``cluster.apiServer.extraVolumes``) are dropped when they have no home;
    a name that matches no such field is refused, so that a typo drops nothing it did not mean.
    """
    m = _Migration(documents, accept_dropped)
    for kept, why in KEPT:
        if m.has(kept):
            m.plan.kept.append(".%s: %s; Talos v1.14 still reads it from v1alpha1" % (kept, why))
    for area in _AREAS:
        area(m)
    unmatched = sorted(m.accept_dropped - m.accepted)
    if unmatched:
        raise TalosConfigError("accept_dropped names %s, which the config does not set or which has a v1.14 home: name "
                               "only fields the plan lists as having none." % ", ".join(unmatched))
    if not m.plan.changes and not m.plan.homeless and not m.plan.conflicts:
        return m.plan
    _tidy(m.root)
    migrated = list(m.documents)
    migrated[m.root_position] = m.root
    m.plan.documents = migrated
    return m.plan


def plan_text(text, parameter, accept_dropped=()):
    """``plan`` of a config given as YAML text; messages about the text name ``parameter``."""
    return plan(machine_config.parse_yaml_stream(text, parameter), accept_dropped)


def plan_node(client, node, accept_dropped=()):
    """``plan`` of ``node``'s active machine config (read as machine_config.read_active_config reads it)."""
    return plan_text(machine_config.read_active_config(client, node), "the node's machine config", accept_dropped)


def migrated_config(plan):
    """The migrated config of a plan with changes, ready to apply (a machine_config.MachineConfig)."""
    text = go_yaml.dump_documents(plan.documents)
    return machine_config.MachineConfig(plan.documents, text.encode("utf-8"))
