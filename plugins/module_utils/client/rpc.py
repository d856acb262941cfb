# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RPC catalogue: every Talos API call the collection makes, one row each.

A row says how the call streams, whether it only reads, which roles may make
it and since when Talos serves it. The client (its method table and which
calls it retries), the error messages (the role a refused call needs, the
release that introduced a missing API) and the emulator's rules table all read
it. A new RPC is a line in a ``.proto`` under ``protos/`` (the generated stub
gives its message types) and a row here; a new service also gets a branch in
``service_stub``.

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
READ = "read"
MUTATE = "mutate"

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

# "package.Service/Method": (cardinality, READ or MUTATE,
#     roles of machined's rules table in Talos v1.14 (any one suffices),
#     first Talos release that serves it (None: v1.0 or older),
#     narrower rules of older releases: ((release that widened the rule, roles before it), ...) in release order)
# From server-behaviour.md §3.4; a method the rules table does not list needs os:admin.
RPCS = {
    "machine.MachineService/ApplyConfiguration": (UNARY, MUTATE, _AR, None, (("v1.13.0", _A),)),
    "machine.MachineService/Bootstrap": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/CPUInfo": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Containers": (UNARY, READ, _AOR, None, ()),
    # Copy, DiskStats, DiskUsage and List: upstream internal/app/machined/pkg/system/services/machined.go (v1.14 rules).
    "machine.MachineService/Copy": (SERVER_STREAM, READ, _A, None, ()),
    "machine.MachineService/DiskStats": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/DiskUsage": (SERVER_STREAM, READ, _AOR, None, ()),
    "machine.MachineService/Dmesg": (SERVER_STREAM, READ, _AOR, None, ()),
    "machine.MachineService/EtcdAlarmDisarm": (UNARY, MUTATE, _AO, "v1.4.0", ()),
    "machine.MachineService/EtcdAlarmList": (UNARY, READ, _AORE, "v1.4.0", (("v1.11.0", _AO),)),
    "machine.MachineService/EtcdDefragment": (UNARY, MUTATE, _AO, "v1.4.0", ()),
    "machine.MachineService/EtcdForfeitLeadership": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/EtcdLeaveCluster": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/EtcdMemberList": (UNARY, READ, _AORE, None, (("v1.11.0", _AOR),)),
    "machine.MachineService/EtcdRecover": (CLIENT_STREAM, MUTATE, _A, None, ()),
    "machine.MachineService/EtcdRemoveMemberByID": (UNARY, MUTATE, _A, "v1.3.0", ()),
    "machine.MachineService/EtcdSnapshot": (SERVER_STREAM, READ, _AOE, None, ()),
    "machine.MachineService/EtcdStatus": (UNARY, READ, _AORE, "v1.4.0", (("v1.11.0", _AO),)),
    "machine.MachineService/Events": (SERVER_STREAM, READ, _AOR, None, ()),
    "machine.MachineService/Hostname": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/ImageList": (SERVER_STREAM, READ, _AOR, "v1.5.0", ()),
    "machine.MachineService/ImagePull": (UNARY, MUTATE, _AO, "v1.5.0", ()),
    "machine.MachineService/Kubeconfig": (SERVER_STREAM, READ, _A, None, ()),
    "machine.MachineService/List": (SERVER_STREAM, READ, _AOR, None, ()),
    "machine.MachineService/LoadAvg": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Logs": (SERVER_STREAM, READ, _AOR, None, ()),
    "machine.MachineService/Memory": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Mounts": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Processes": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Read": (SERVER_STREAM, READ, _A, None, ()),
    "machine.MachineService/Reboot": (UNARY, MUTATE, _AO, None, ()),
    "machine.MachineService/Reset": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/Rollback": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/ServiceList": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/ServiceRestart": (UNARY, MUTATE, _AO, None, ()),
    "machine.MachineService/ServiceStart": (UNARY, MUTATE, _AO, None, ()),
    "machine.MachineService/ServiceStop": (UNARY, MUTATE, _AO, None, ()),
    "machine.MachineService/Shutdown": (UNARY, MUTATE, _AO, None, ()),
    "machine.MachineService/SystemStat": (UNARY, READ, _AOR, None, ()),
    "machine.MachineService/Upgrade": (UNARY, MUTATE, _A, None, ()),
    "machine.MachineService/Version": (UNARY, READ, _AOR, None, ()),
    "machine.LifecycleService/Install": (SERVER_STREAM, MUTATE, _A, "v1.13.0", ()),
    "machine.LifecycleService/Upgrade": (SERVER_STREAM, MUTATE, _A, "v1.13.0", ()),
    "machine.ImageService/List": (SERVER_STREAM, READ, _AOR, "v1.13.0", ()),
    "machine.ImageService/Pull": (SERVER_STREAM, MUTATE, _AO, "v1.13.0", ()),
    "machine.ImageService/Remove": (UNARY, MUTATE, _A, "v1.13.0", ()),
    "storage.StorageService/Disks": (UNARY, READ, _AOR, None, ()),
    # Upstream machined.go rules table (not in server-behaviour.md).
    "inspect.InspectService/ControllerRuntimeDependencies": (UNARY, READ, _AOR, None, ()),
    "cluster.ClusterService/HealthCheck": (SERVER_STREAM, READ, _AOR, None, ()),
    "cosi.resource.State/Get": (UNARY, READ, _AOR, "v1.2.0", ()),
    "cosi.resource.State/List": (SERVER_STREAM, READ, _AOR, "v1.2.0", ()),
    "cosi.resource.State/Watch": (SERVER_STREAM, READ, _AOR, "v1.2.0", ()),
}

# Roles the rules table lets through that the handler accepts only while the
# node is in maintenance mode: ApplyConfiguration re-checks for os:admin on a
# configured node and answers "not authorized".
MAINTENANCE_ONLY_ROLES = {
    "machine.MachineService/ApplyConfiguration": (READER,),
}


def cardinality(method):
    """How ``method`` (``package.Service/Method``) streams: UNARY, SERVER_STREAM or CLIENT_STREAM."""
    return RPCS[method][0]


def is_read(method):
    """True when ``method`` changes nothing on the node (the client may repeat it)."""
    return method in RPCS and RPCS[method][1] == READ


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
