# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``proto_spec`` bytes of the COSI resources the emulator serves.

Talos marshals every resource with both a YAML and a protobuf spec; the Go
client (talosctl, the Terraform provider) decodes the protobuf one into its
typed resources and ignores the YAML. Field numbers are those of Talos's
``api/resource/definitions`` messages (``MachineStatusSpec``, ``MemberSpec``,
``MachineConfigSpec``, ...) and of COSI's ``ResourceDefinitionSpec``; addresses
are ``common.NetIP`` / ``common.NetIPPrefix`` messages. These few messages are
written with the protobuf wire format directly rather than adding generated
code that the collection itself never uses.
"""

import base64
import ipaddress

from google.protobuf import struct_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

# Talos's machine.Type numbers (pkg/machinery/config/machine).
_MACHINE_TYPES = {"unknown": 0, "init": 1, "controlplane": 2, "worker": 3}
_SENSITIVITY = {"non-sensitive": 0, "sensitive": 1}


def _varint(value):
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _number(field, value):
    """A varint field (int, enum, bool), left out at its zero value as proto3 does."""
    return _varint(field << 3) + _varint(int(value)) if value else b""


def _bytes(field, value):
    """A length-delimited field (string, bytes, message), left out when empty."""
    if isinstance(value, str):
        value = value.encode()
    return _varint(field << 3 | 2) + _varint(len(value)) + value if value else b""


def _message(field, value):
    """An embedded message: present even when all its fields are zero."""
    return _varint(field << 3 | 2) + _varint(len(value)) + value


def _net_ip(address):
    return _bytes(1, ipaddress.ip_address(address).packed)


def _net_ip_prefix(prefix):
    network = ipaddress.ip_interface(prefix)
    return _bytes(1, network.ip.packed) + _number(2, network.network.prefixlen)


def machine_status(spec):
    stage = machine_pb2.MachineStatusEvent.MachineStage.Value(spec["stage"].upper().replace(" ", "_"))
    conditions = b"".join(
        _message(2, _bytes(1, condition["name"]) + _bytes(2, condition["reason"]))
        for condition in spec["status"]["unmetConditions"]
    )
    return _number(1, stage) + _message(2, _number(1, spec["status"]["ready"]) + conditions)


def machine_config(text):
    return _bytes(1, text)


def machine_type(text):
    return _number(1, _MACHINE_TYPES[text.strip()])


def hostname_status(spec):
    return _bytes(1, spec["hostname"]) + _bytes(2, spec["domainname"])


def nodename(spec):
    return _bytes(1, spec["nodename"]) + _bytes(2, spec["hostnameVersion"]) + _number(3, spec["skipNodeRegistration"])


def member(spec):
    addresses = b"".join(_message(2, _net_ip(address)) for address in spec["addresses"])
    return (_bytes(1, spec["nodeId"]) + addresses + _bytes(3, spec["hostname"])
            + _number(4, _MACHINE_TYPES[spec["machineType"]]) + _bytes(5, spec["operatingSystem"]))


def node_address(spec):
    return b"".join(_message(1, _net_ip_prefix(prefix)) for prefix in spec["addresses"])


def service(spec):
    return _number(1, spec["running"]) + _number(2, spec["healthy"]) + _number(3, spec["unknown"])


def diagnostic(spec):
    return _bytes(1, spec["message"]) + b"".join(_bytes(2, detail) for detail in spec["details"])


def resource_definition(spec):
    columns = b"".join(
        _message(6, _bytes(1, column["name"]) + _bytes(2, column["jsonPath"])) for column in spec["printColumns"]
    )
    return (_bytes(1, spec["type"]) + _bytes(2, spec["displayType"]) + _bytes(3, spec["defaultNamespace"])
            + b"".join(_bytes(4, alias) for alias in spec["aliases"])
            + b"".join(_bytes(5, alias) for alias in spec["allAliases"])
            + columns + _number(7, _SENSITIVITY[spec["sensitivity"]]))


def extension_status(spec):
    metadata = spec["metadata"]
    compatibility = _message(1, _bytes(1, metadata["compatibility"]["talos"]["version"]))
    encoded = (_bytes(1, metadata["name"]) + _bytes(2, metadata["version"]) + _bytes(3, metadata["author"])
               + _bytes(4, metadata["description"]) + _message(5, compatibility) + _bytes(6, metadata.get("extraInfo", "")))
    return _bytes(1, spec["image"]) + _message(2, encoded)


def image_factory_schematic(spec):
    return _bytes(1, spec["schematicId"]) + _bytes(2, spec["flavor"]) + _bytes(3, spec["apiUrl"])


def security_state(spec):
    return _number(1, spec["secureBoot"]) + _number(5, spec.get("bootedWithUKI", False))


# Talos's enums.BlockVolumePhase, BlockVolumeType and BlockFilesystemType numbers.
_VOLUME_PHASES = {"waiting": 0, "failed": 1, "missing": 2, "located": 3, "provisioned": 4, "prepared": 5, "ready": 6, "closed": 7}
_VOLUME_TYPES = {"partition": 0, "disk": 1, "tmpfs": 2, "directory": 3, "symlink": 4, "overlay": 5, "external": 6}
_FILESYSTEMS = {"none": 0, "xfs": 1, "vfat": 2, "ext4": 3}


def volume_status(spec):
    mount = spec.get("mountSpec")
    mount_spec = b""
    if mount is not None:
        mount_spec = _message(15, _bytes(1, mount["targetPath"]) + _bytes(2, mount["selinuxLabel"])
                              + _number(3, mount["projectQuotaSupport"]) + _bytes(4, mount.get("parentId", "")))
    return (_number(1, _VOLUME_PHASES[spec["phase"]]) + _bytes(2, spec.get("location", ""))
            + _bytes(7, spec.get("parentLocation", "")) + _number(8, spec.get("partitionIndex", 0))
            + _number(9, spec.get("size", 0)) + _number(10, _FILESYSTEMS[spec.get("filesystem", "none")])
            + _bytes(13, spec.get("prettySize", "")) + mount_spec + _number(16, _VOLUME_TYPES[spec["type"]]))


def disk(spec):
    return (_number(1, spec["size"]) + _number(2, spec["io_size"]) + _number(3, spec["sector_size"]) + _number(4, spec["readonly"])
            + _bytes(5, spec["model"]) + _bytes(6, spec["serial"]) + _bytes(9, spec["bus_path"]) + _bytes(10, spec["sub_system"])
            + _bytes(11, spec["transport"]) + _number(12, spec["rotational"]) + _number(13, spec["cdrom"])
            + _bytes(14, spec["dev_path"]) + _bytes(15, spec["pretty_size"]))


def system_disk(spec):
    return _bytes(1, spec["diskID"]) + _bytes(2, spec["devPath"])


def discovered_volume(spec):
    return (_number(1, spec["size"]) + _number(2, spec["sector_size"]) + _number(3, spec["io_size"]) + _bytes(4, spec["name"])
            + _bytes(6, spec.get("label", "")) + _number(7, spec.get("block_size", 0))
            + _bytes(12, spec.get("partition_label", "")) + _number(13, spec.get("partition_index", 0))
            + _bytes(14, spec["type"]) + _bytes(15, spec["device_path"]) + _bytes(16, spec.get("parent", ""))
            + _bytes(17, spec["dev_path"]) + _bytes(18, spec.get("parent_dev_path", "")) + _bytes(19, spec["pretty_size"])
            + _number(20, spec["offset"]))


# nethelpers: LinkType (ARPHRD), OperationalState, Family, Scope numbers.
_LINK_TYPES = {"ether": 1, "loopback": 772}
_OPERATIONAL_STATES = {"unknown": 0, "down": 2, "up": 6}
_FAMILIES = {"inet4": 2, "inet6": 10}
_SCOPES = {"global": 0, "link": 253, "host": 254}


def _hardware_address(text):
    return bytes(int(part, 16) for part in text.split(":")) if text else b""


def link_status(spec):
    return (_number(1, spec["index"]) + _number(2, _LINK_TYPES[spec["type"]]) + _number(4, spec["flags"])
            + _bytes(5, _hardware_address(spec["hardwareAddr"])) + _bytes(6, _hardware_address(spec["broadcastAddr"]))
            + _number(7, spec["mtu"]) + _bytes(8, spec["queueDisc"])
            + _number(10, _OPERATIONAL_STATES[spec["operationalState"]]) + _bytes(11, spec["kind"])
            + _bytes(15, spec.get("driver", "")) + _number(22, spec["linkState"]))


def address_status(spec):
    return (_message(1, _net_ip_prefix(spec["address"])) + _message(2, _net_ip(spec["local"])) + _number(6, spec["linkIndex"])
            + _bytes(7, spec["linkName"]) + _number(8, _FAMILIES[spec["family"]]) + _number(9, _SCOPES[spec["scope"]])
            + _number(10, spec["flags"]))


# network.ConfigLayer: default, cmdline, platform, operator, configuration.
_CONFIG_LAYERS = {"default": 0, "cmdline": 1, "platform": 2, "operator": 3, "configuration": 4}


def hostname_spec(spec):
    return _bytes(1, spec["hostname"]) + _bytes(2, spec["domainname"]) + _number(3, _CONFIG_LAYERS[spec["layer"]])


def _certificate_and_key(field, pair):
    return _message(field, _bytes(1, base64.b64decode(pair["crt"])) + _bytes(2, base64.b64decode(pair.get("key", ""))))


def kubernetes_root(spec):
    return (_bytes(1, spec["name"]) + _message(2, _bytes(1, spec["endpoint"])) + _bytes(6, spec["dnsDomain"])
            + _certificate_and_key(7, spec["issuingCA"])
            + b"".join(_message(15, _bytes(1, base64.b64decode(accepted["crt"]))) for accepted in spec["acceptedCAs"]))


def os_root(spec):
    # PEM blocks are base64 in the YAML (Go's []byte), raw in the protobuf.
    issuing = spec["issuingCA"]
    return (_message(1, _bytes(1, base64.b64decode(issuing["crt"])) + _bytes(2, base64.b64decode(issuing.get("key", ""))))
            + b"".join(_message(2, _net_ip(address)) for address in spec["certSANIPs"])
            + b"".join(_bytes(3, name) for name in spec["certSANDNSNames"]) + _bytes(4, spec["token"])
            + b"".join(_message(5, _bytes(1, base64.b64decode(accepted["crt"]))) for accepted in spec["acceptedCAs"]))


# Talos's k8s.proto: KubeletSpecSpec, APIServerConfigSpec, ControllerManagerConfigSpec, SchedulerConfigSpec,
# StaticPodStatusSpec, ManifestSpec (free-form maps are google.protobuf.Struct).

def _struct(field, value):
    message = struct_pb2.Struct()
    message.update(value)
    return _message(field, message.SerializeToString())


def _strings(field, values):
    return b"".join(_bytes(field, value) for value in values)


def _string_map(field, values):
    return b"".join(_message(field, _bytes(1, key) + _bytes(2, value)) for key, value in sorted(values.items()))


def _kubernetes_resources(field, resources):
    return _message(field, _string_map(1, resources.get("requests", {})) + _string_map(2, resources.get("limits", {})))


def kubelet_spec(spec):
    return (_bytes(1, spec["image"]) + _strings(2, spec.get("args", [])) + _bytes(4, spec.get("expectedNodename", ""))
            + _struct(5, spec.get("config", {})))


def apiserver_config(spec):
    return (_bytes(1, spec["image"]) + _bytes(2, spec["cloudProvider"]) + _bytes(3, spec["controlPlaneEndpoint"])
            + _strings(4, spec["etcdServers"]) + _number(5, spec["localPort"]) + _strings(6, spec["serviceCIDR"])
            + _string_map(9, spec["environmentVariables"]) + _bytes(11, spec["advertisedAddress"])
            + _kubernetes_resources(12, spec["resources"]))


def controller_manager_config(spec):
    return (_number(1, spec["enabled"]) + _bytes(2, spec["image"]) + _bytes(3, spec["cloudProvider"])
            + _strings(4, spec["podCIDRs"]) + _strings(5, spec["serviceCIDRs"])
            + _string_map(8, spec["environmentVariables"]) + _kubernetes_resources(9, spec["resources"]))


def scheduler_config(spec):
    return (_number(1, spec["enabled"]) + _bytes(2, spec["image"]) + _string_map(5, spec["environmentVariables"])
            + _kubernetes_resources(6, spec["resources"]) + _struct(7, spec["config"]))


def static_pod(pod):
    return _struct(1, pod)


def static_pod_status(pod_status):
    return _struct(1, pod_status)


def secrets_status(spec):
    # SecretsStatusSpec{ready = 1, version = 2}.
    return _number(1, spec["ready"]) + _bytes(2, spec["version"])


def manifest(objects):
    # SingleManifest{object = 1}, one per item.
    return b"".join(_message(1, _struct(1, obj)) for obj in objects)


def kubelet_config(spec):
    return _bytes(1, spec["image"]) + _strings(2, spec["clusterDNS"]) + _bytes(3, spec["clusterDomain"])


def bootstrap_manifests_config(spec):
    return (_bytes(1, spec["string"]) + _bytes(2, spec["clusterDomain"]) + _strings(3, spec["podCIDRs"])
            + _number(4, spec["proxyEnabled"]) + _bytes(5, spec["proxyImage"]) + _number(7, spec["coreDNSEnabled"])
            + _bytes(8, spec["coreDNSImage"]) + _bytes(9, spec["dnsServiceIP"]) + _number(11, spec["flannelEnabled"])
            + _bytes(21, spec["cniName"]))


def etcd_config(spec):
    return _bytes(3, spec["image"])


def etcd_spec(spec):
    return (_bytes(1, spec["name"]) + b"".join(_message(2, _net_ip(address)) for address in spec["advertisedAddresses"])
            + _bytes(3, spec["image"]) + b"".join(_message(5, _net_ip(address)) for address in spec["listenPeerAddresses"])
            + b"".join(_message(6, _net_ip(address)) for address in spec["listenClientAddresses"]))
