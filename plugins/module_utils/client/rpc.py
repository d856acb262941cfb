# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RPC catalogue: every Talos API call the collection makes, named once, one row each.

Each RPC is a constant holding its gRPC path without the leading slash
(``VERSION = "machine.MachineService/Version"``): code calls ``rpc.VERSION``
and spells no path itself. The names follow one rule:

- machine.MachineService: the method in upper snake case (``EtcdMemberList``
  is ``ETCD_MEMBER_LIST``, ``CPUInfo`` is ``CPU_INFO``); Upgrade, ImageList
  and ImagePull, which Talos deprecated in v1.13 for LifecycleService and
  ImageService, take ``LEGACY_`` (``LEGACY_UPGRADE``);
- every other service: its name without ``Service`` before the method
  (``IMAGE_PULL``, ``LIFECYCLE_UPGRADE``, ``STORAGE_DISKS``,
  ``CLUSTER_HEALTH_CHECK``), and ``COSI_`` for cosi.resource.State
  (``COSI_GET``).

A row of ``RPCS`` says how the call streams, whether it only reads, which
roles may make it and since when Talos serves it. The client (its method
table and which calls it retries), the error messages (the role a refused
call needs, the release that introduced a missing API) and the emulator read
it. The emulator takes it as its rules table (roles, first release, which
calls it audits), so it also holds three RPCs the emulator serves and no
plugin calls: CPUInfo, LoadAvg and LifecycleService/Install.

A new RPC is a line in a ``.proto`` under ``protos/`` (the generated stub
gives its message types), a constant and a row here; a new service also gets
a branch in ``service_stub``. The catalogue's unit test holds the names to the
rule and fails on a path spelled anywhere else in ``plugins/``.

Only plain literals are built at import time: the client imports this module
for every task.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

# Cardinalities, spelled as grpclib's Cardinality members.
UNARY = "UNARY_UNARY"
SERVER_STREAM = "UNARY_STREAM"
CLIENT_STREAM = "STREAM_UNARY"

# A read changes nothing on the node, so the client may repeat it.
READ_ONLY = "read"
MUTATING = "mutate"

ADMIN = "os:admin"
OPERATOR = "os:operator"
READER = "os:reader"
ETCD_BACKUP = "os:etcd:backup"

_A = (ADMIN,)
_AO = (ADMIN, OPERATOR)
_AR = (ADMIN, READER)
_AOR = (ADMIN, OPERATOR, READER)
_AOE = (ADMIN, OPERATOR, ETCD_BACKUP)
_AORE = (ADMIN, OPERATOR, READER, ETCD_BACKUP)

# The RPCs, by service.
APPLY_CONFIGURATION = "machine.MachineService/ApplyConfiguration"
BOOTSTRAP = "machine.MachineService/Bootstrap"
CPU_INFO = "machine.MachineService/CPUInfo"
CONTAINERS = "machine.MachineService/Containers"
COPY = "machine.MachineService/Copy"
DISK_STATS = "machine.MachineService/DiskStats"
DISK_USAGE = "machine.MachineService/DiskUsage"
DMESG = "machine.MachineService/Dmesg"
ETCD_ALARM_DISARM = "machine.MachineService/EtcdAlarmDisarm"
ETCD_ALARM_LIST = "machine.MachineService/EtcdAlarmList"
ETCD_DEFRAGMENT = "machine.MachineService/EtcdDefragment"
ETCD_FORFEIT_LEADERSHIP = "machine.MachineService/EtcdForfeitLeadership"
ETCD_LEAVE_CLUSTER = "machine.MachineService/EtcdLeaveCluster"
ETCD_MEMBER_LIST = "machine.MachineService/EtcdMemberList"
ETCD_RECOVER = "machine.MachineService/EtcdRecover"
ETCD_REMOVE_MEMBER_BY_ID = "machine.MachineService/EtcdRemoveMemberByID"
ETCD_SNAPSHOT = "machine.MachineService/EtcdSnapshot"
ETCD_STATUS = "machine.MachineService/EtcdStatus"
EVENTS = "machine.MachineService/Events"
HOSTNAME = "machine.MachineService/Hostname"
LEGACY_IMAGE_LIST = "machine.MachineService/ImageList"
LEGACY_IMAGE_PULL = "machine.MachineService/ImagePull"
KUBECONFIG = "machine.MachineService/Kubeconfig"
LIST = "machine.MachineService/List"
LOAD_AVG = "machine.MachineService/LoadAvg"
LOGS = "machine.MachineService/Logs"
MEMORY = "machine.MachineService/Memory"
MOUNTS = "machine.MachineService/Mounts"
PROCESSES = "machine.MachineService/Processes"
READ = "machine.MachineService/Read"
REBOOT = "machine.MachineService/Reboot"
RESET = "machine.MachineService/Reset"
ROLLBACK = "machine.MachineService/Rollback"
SERVICE_LIST = "machine.MachineService/ServiceList"
SERVICE_RESTART = "machine.MachineService/ServiceRestart"
SERVICE_START = "machine.MachineService/ServiceStart"
SERVICE_STOP = "machine.MachineService/ServiceStop"
SHUTDOWN = "machine.MachineService/Shutdown"
SYSTEM_STAT = "machine.MachineService/SystemStat"
LEGACY_UPGRADE = "machine.MachineService/Upgrade"
VERSION = "machine.MachineService/Version"

LIFECYCLE_INSTALL = "machine.LifecycleService/Install"
LIFECYCLE_UPGRADE = "machine.LifecycleService/Upgrade"

IMAGE_LIST = "machine.ImageService/List"
IMAGE_PULL = "machine.ImageService/Pull"
IMAGE_REMOVE = "machine.ImageService/Remove"

STORAGE_DISKS = "storage.StorageService/Disks"

INSPECT_CONTROLLER_RUNTIME_DEPENDENCIES = "inspect.InspectService/ControllerRuntimeDependencies"

CLUSTER_HEALTH_CHECK = "cluster.ClusterService/HealthCheck"

COSI_GET = "cosi.resource.State/Get"
COSI_LIST = "cosi.resource.State/List"
COSI_WATCH = "cosi.resource.State/Watch"

# RPC: (cardinality, READ_ONLY or MUTATING,
#     roles of machined's rules table in Talos v1.14 (any one suffices),
#     first Talos release that serves it (None: v1.0 or older),
#     narrower rules of older releases: ((release that widened the rule, roles before it), ...) in release order)
# From server-behaviour.md §3.4; a method the rules table does not list needs os:admin.
RPCS = {
    APPLY_CONFIGURATION: (UNARY, MUTATING, _AR, None, (("v1.13.0", _A),)),
    BOOTSTRAP: (UNARY, MUTATING, _A, None, ()),
    CPU_INFO: (UNARY, READ_ONLY, _AOR, None, ()),
    CONTAINERS: (UNARY, READ_ONLY, _AOR, None, ()),
    # Copy, DiskStats, DiskUsage and List: upstream internal/app/machined/pkg/system/services/machined.go (v1.14 rules).
    COPY: (SERVER_STREAM, READ_ONLY, _A, None, ()),
    DISK_STATS: (UNARY, READ_ONLY, _AOR, None, ()),
    DISK_USAGE: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    DMESG: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    ETCD_ALARM_DISARM: (UNARY, MUTATING, _AO, "v1.4.0", ()),
    ETCD_ALARM_LIST: (UNARY, READ_ONLY, _AORE, "v1.4.0", (("v1.11.0", _AO),)),
    ETCD_DEFRAGMENT: (UNARY, MUTATING, _AO, "v1.4.0", ()),
    ETCD_FORFEIT_LEADERSHIP: (UNARY, MUTATING, _A, None, ()),
    ETCD_LEAVE_CLUSTER: (UNARY, MUTATING, _A, None, ()),
    ETCD_MEMBER_LIST: (UNARY, READ_ONLY, _AORE, None, (("v1.11.0", _AOR),)),
    ETCD_RECOVER: (CLIENT_STREAM, MUTATING, _A, None, ()),
    ETCD_REMOVE_MEMBER_BY_ID: (UNARY, MUTATING, _A, "v1.3.0", ()),
    ETCD_SNAPSHOT: (SERVER_STREAM, READ_ONLY, _AOE, None, ()),
    ETCD_STATUS: (UNARY, READ_ONLY, _AORE, "v1.4.0", (("v1.11.0", _AO),)),
    EVENTS: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    HOSTNAME: (UNARY, READ_ONLY, _AOR, None, ()),
    LEGACY_IMAGE_LIST: (SERVER_STREAM, READ_ONLY, _AOR, "v1.5.0", ()),
    LEGACY_IMAGE_PULL: (UNARY, MUTATING, _AO, "v1.5.0", ()),
    KUBECONFIG: (SERVER_STREAM, READ_ONLY, _A, None, ()),
    LIST: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    LOAD_AVG: (UNARY, READ_ONLY, _AOR, None, ()),
    LOGS: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    MEMORY: (UNARY, READ_ONLY, _AOR, None, ()),
    MOUNTS: (UNARY, READ_ONLY, _AOR, None, ()),
    PROCESSES: (UNARY, READ_ONLY, _AOR, None, ()),
    READ: (SERVER_STREAM, READ_ONLY, _A, None, ()),
    REBOOT: (UNARY, MUTATING, _AO, None, ()),
    RESET: (UNARY, MUTATING, _A, None, ()),
    ROLLBACK: (UNARY, MUTATING, _A, None, ()),
    SERVICE_LIST: (UNARY, READ_ONLY, _AOR, None, ()),
    SERVICE_RESTART: (UNARY, MUTATING, _AO, None, ()),
    SERVICE_START: (UNARY, MUTATING, _AO, None, ()),
    SERVICE_STOP: (UNARY, MUTATING, _AO, None, ()),
    SHUTDOWN: (UNARY, MUTATING, _AO, None, ()),
    SYSTEM_STAT: (UNARY, READ_ONLY, _AOR, None, ()),
    LEGACY_UPGRADE: (UNARY, MUTATING, _A, None, ()),
    VERSION: (UNARY, READ_ONLY, _AOR, None, ()),
    LIFECYCLE_INSTALL: (SERVER_STREAM, MUTATING, _A, "v1.13.0", ()),
    LIFECYCLE_UPGRADE: (SERVER_STREAM, MUTATING, _A, "v1.13.0", ()),
    IMAGE_LIST: (SERVER_STREAM, READ_ONLY, _AOR, "v1.13.0", ()),
    IMAGE_PULL: (SERVER_STREAM, MUTATING, _AO, "v1.13.0", ()),
    IMAGE_REMOVE: (UNARY, MUTATING, _A, "v1.13.0", ()),
    STORAGE_DISKS: (UNARY, READ_ONLY, _AOR, None, ()),
    # Upstream machined.go rules table (not in server-behaviour.md).
    INSPECT_CONTROLLER_RUNTIME_DEPENDENCIES: (UNARY, READ_ONLY, _AOR, None, ()),
    CLUSTER_HEALTH_CHECK: (SERVER_STREAM, READ_ONLY, _AOR, None, ()),
    COSI_GET: (UNARY, READ_ONLY, _AOR, "v1.2.0", ()),
    COSI_LIST: (SERVER_STREAM, READ_ONLY, _AOR, "v1.2.0", ()),
    COSI_WATCH: (SERVER_STREAM, READ_ONLY, _AOR, "v1.2.0", ()),
}

# Roles the rules table lets through that the handler accepts only while the
# node is in maintenance mode: ApplyConfiguration re-checks for os:admin on a
# configured node and answers "not authorized".
MAINTENANCE_ONLY_ROLES = {
    APPLY_CONFIGURATION: (READER,),
}


def cardinality(method):
    """How ``method`` (``package.Service/Method``) streams: UNARY, SERVER_STREAM or CLIENT_STREAM."""
    return RPCS[method][0]


def is_read(method):
    """True when ``method`` changes nothing on the node (the client may repeat it)."""
    return method in RPCS and RPCS[method][1] == READ_ONLY


def rule_roles(method):
    """The roles machined's rules table of Talos v1.14 accepts for ``method``; os:admin when it is not listed."""
    return RPCS[method][2] if method in RPCS else _A


def configured_node_roles(method):
    """The roles a configured node accepts for ``method``: the rule without its maintenance-only roles."""
    maintenance_only = MAINTENANCE_ONLY_ROLES.get(method, ())
    return tuple(role for role in rule_roles(method) if role not in maintenance_only)


def role_history(method):
    """Narrower rules of older releases: ``((release that widened the rule, roles before it), ...)``, oldest first."""
    return RPCS[method][4] if method in RPCS else ()


def first_version(method):
    """The first Talos release that serves ``method`` (``"v1.13.0"``), or None for APIs of v1.0 and older."""
    return RPCS[method][3] if method in RPCS else None


def service_stub(service):
    """The generated grpclib stub class of ``package.Service``, imported on first use; None for an unknown service.

    A task imports the generated code of the services it calls only; the
    imports stay literal so that Ansible packs these modules with the task.
    """
    if service == "machine.MachineService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_grpc
        return machine_grpc.MachineServiceStub
    if service == "cosi.resource.State":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_grpc
        return state_grpc.StateStub
    if service == "storage.StorageService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.storage import storage_grpc
        return storage_grpc.StorageServiceStub
    if service == "machine.LifecycleService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import lifecycle_grpc
        return lifecycle_grpc.LifecycleServiceStub
    if service == "machine.ImageService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_grpc
        return image_grpc.ImageServiceStub
    if service == "inspect.InspectService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.inspect import inspect_grpc
        return inspect_grpc.InspectServiceStub
    if service == "cluster.ClusterService":
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cluster import cluster_grpc
        return cluster_grpc.ClusterServiceStub
    return None
