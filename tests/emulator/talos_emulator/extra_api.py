# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Messages of the Talos API that talosctl's everyday commands call and the collection does not, so that the
collection's protos (``protos/``) leave them out: ``time.TimeService`` (talosctl time) and MachineService's
``Stats`` (talosctl stats) and ``Netstat`` (talosctl netstat).

Field names, numbers and types are upstream's (``api/time/time.proto``, ``api/machine/machine.proto`` of
siderolabs/talos v1.14); enums are declared by their numbers (the wire carries a varint either way) and nested
messages at the top level (the wire does not name them). The classes are built from these tables when the module
is imported, in a proto package of the emulator's own, so they never clash with the collection's generated code.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# The upstream files these messages come from load first (common.Metadata, google.protobuf.Timestamp).
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2  # noqa: F401 pylint: disable=unused-import
from google.protobuf import timestamp_pb2  # noqa: F401 pylint: disable=unused-import

_PACKAGE = "talos_emulator.api"
_FIELD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _FIELD.TYPE_STRING, "bool": _FIELD.TYPE_BOOL, "uint32": _FIELD.TYPE_UINT32, "uint64": _FIELD.TYPE_UINT64,
            "int32": _FIELD.TYPE_INT32, "enum": _FIELD.TYPE_INT32}
_MESSAGES_ELSEWHERE = {"Metadata": ".common.Metadata", "Timestamp": ".google.protobuf.Timestamp"}

# message -> [(field, number, type, repeated)]
_MESSAGES = {
    # api/time/time.proto
    "TimeRequest": [("server", 1, "string", False)],
    "Time": [("metadata", 1, "Metadata", False), ("server", 2, "string", False), ("localtime", 3, "Timestamp", False),
             ("remotetime", 4, "Timestamp", False)],
    "TimeResponse": [("messages", 1, "Time", True)],
    # api/machine/machine.proto: Stats
    "StatsRequest": [("namespace", 1, "string", False), ("driver", 2, "enum", False)],
    "Stat": [("namespace", 1, "string", False), ("id", 2, "string", False), ("memory_usage", 4, "uint64", False),
             ("cpu_usage", 5, "uint64", False), ("pod_id", 6, "string", False), ("name", 7, "string", False)],
    "Stats": [("metadata", 1, "Metadata", False), ("stats", 2, "Stat", True)],
    "StatsResponse": [("messages", 1, "Stats", True)],
    # api/machine/machine.proto: Netstat (NetstatRequest.Feature, .L4proto, .NetNS; ConnectRecord.Process)
    "NetstatFeature": [("pid", 1, "bool", False)],
    "NetstatL4proto": [(name, number, "bool", False) for number, name in enumerate(
        ("tcp", "tcp6", "udp", "udp6", "udplite", "udplite6", "raw", "raw6"), 1)],
    "NetstatNetNS": [("hostnetwork", 1, "bool", False), ("netns", 2, "string", True), ("allnetns", 3, "bool", False)],
    "NetstatRequest": [("filter", 1, "enum", False), ("feature", 2, "NetstatFeature", False), ("l4proto", 3, "NetstatL4proto", False),
                       ("netns", 4, "NetstatNetNS", False)],
    "ConnectRecordProcess": [("pid", 1, "uint32", False), ("name", 2, "string", False)],
    "ConnectRecord": [("l4proto", 1, "string", False), ("localip", 2, "string", False), ("localport", 3, "uint32", False),
                      ("remoteip", 4, "string", False), ("remoteport", 5, "uint32", False), ("state", 6, "enum", False),
                      ("txqueue", 7, "uint64", False), ("rxqueue", 8, "uint64", False), ("tr", 9, "enum", False),
                      ("timerwhen", 10, "uint64", False), ("retrnsmt", 11, "uint64", False), ("uid", 12, "uint32", False),
                      ("timeout", 13, "uint64", False), ("inode", 14, "uint64", False), ("ref", 15, "uint64", False),
                      ("pointer", 16, "uint64", False), ("process", 17, "ConnectRecordProcess", False), ("netns", 18, "string", False)],
    "Netstat": [("metadata", 1, "Metadata", False), ("connectrecord", 2, "ConnectRecord", True)],
    "NetstatResponse": [("messages", 1, "Netstat", True)],
}

# NetstatRequest.Filter and ConnectRecord.State numbers.
NETSTAT_ALL, NETSTAT_CONNECTED, NETSTAT_LISTENING = 0, 1, 2
TCP_ESTABLISHED, TCP_LISTEN = 1, 10


def _file():
    proto = descriptor_pb2.FileDescriptorProto(name="talos_emulator/api.proto", package=_PACKAGE, syntax="proto3",
                                               dependency=["common/common.proto", "google/protobuf/timestamp.proto"])
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, repeated in fields:
            field = message.field.add(name=field_name, number=number, json_name=field_name,
                                      label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL)
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = _FIELD.TYPE_MESSAGE
                field.type_name = _MESSAGES_ELSEWHERE.get(kind, ".%s.%s" % (_PACKAGE, kind))
    return proto


def _classes():
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("talos_emulator/api.proto")
    except KeyError:
        pool.AddSerializedFile(_file().SerializeToString())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName("%s.%s" % (_PACKAGE, name))) for name in _MESSAGES}


_CLASSES = _classes()
TimeRequest = _CLASSES["TimeRequest"]
Time = _CLASSES["Time"]
TimeResponse = _CLASSES["TimeResponse"]
StatsRequest = _CLASSES["StatsRequest"]
Stat = _CLASSES["Stat"]
Stats = _CLASSES["Stats"]
StatsResponse = _CLASSES["StatsResponse"]
NetstatRequest = _CLASSES["NetstatRequest"]
ConnectRecord = _CLASSES["ConnectRecord"]
ConnectRecordProcess = _CLASSES["ConnectRecordProcess"]
Netstat = _CLASSES["Netstat"]
NetstatResponse = _CLASSES["NetstatResponse"]
