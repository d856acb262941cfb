# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role-based access control as machined applies it.

The rules table follows Talos's ``internal/app/machined/pkg/system/services/machined.go``;
a method missing from it needs ``os:admin``. Roles are not hierarchical: a rule
lists every role it accepts and any one of them suffices.
"""

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from .versions import older_than

ADMIN = "os:admin"
OPERATOR = "os:operator"
READER = "os:reader"
ETCD_BACKUP = "os:etcd:backup"

_A = frozenset([ADMIN])
_AO = frozenset([ADMIN, OPERATOR])
_AOR = frozenset([ADMIN, OPERATOR, READER])
_AR = frozenset([ADMIN, READER])
_AOE = frozenset([ADMIN, OPERATOR, ETCD_BACKUP])
_AORE = frozenset([ADMIN, OPERATOR, READER, ETCD_BACKUP])

RULES = {
    "/machine.MachineService/ApplyConfiguration": _AR,
    "/machine.MachineService/Bootstrap": _A,
    "/machine.MachineService/CPUInfo": _AOR,
    "/machine.MachineService/Dmesg": _AOR,
    "/machine.MachineService/EtcdAlarmDisarm": _AO,
    "/machine.MachineService/EtcdAlarmList": _AORE,
    "/machine.MachineService/EtcdDefragment": _AO,
    "/machine.MachineService/EtcdForfeitLeadership": _A,
    "/machine.MachineService/EtcdLeaveCluster": _A,
    "/machine.MachineService/EtcdMemberList": _AORE,
    "/machine.MachineService/EtcdRecover": _A,
    "/machine.MachineService/EtcdRemoveMemberByID": _A,
    "/machine.MachineService/EtcdSnapshot": _AOE,
    "/machine.MachineService/EtcdStatus": _AORE,
    "/machine.MachineService/Events": _AOR,
    "/machine.MachineService/Hostname": _AOR,
    "/machine.MachineService/Kubeconfig": _A,
    "/machine.MachineService/LoadAvg": _AOR,
    "/machine.MachineService/Logs": _AOR,
    "/machine.MachineService/Memory": _AOR,
    "/machine.MachineService/Mounts": _AOR,
    "/machine.MachineService/Read": _A,
    "/machine.MachineService/Reboot": _AO,
    "/machine.MachineService/Reset": _A,
    "/machine.MachineService/Rollback": _A,
    "/machine.MachineService/ServiceList": _AOR,
    "/machine.MachineService/ServiceRestart": _AO,
    "/machine.MachineService/ServiceStart": _AO,
    "/machine.MachineService/ServiceStop": _AO,
    "/machine.MachineService/Shutdown": _AO,
    "/machine.MachineService/SystemStat": _AOR,
    "/machine.MachineService/Upgrade": _A,
    "/machine.MachineService/Version": _AOR,
    "/storage.StorageService/Disks": _AOR,
    "/machine.LifecycleService/Install": _A,
    "/machine.LifecycleService/Upgrade": _A,
    "/machine.ImageService/Pull": _AO,
    "/cluster.ClusterService/HealthCheck": _AOR,
    "/cosi.resource.State/Get": _AOR,
    "/cosi.resource.State/List": _AOR,
    "/cosi.resource.State/Watch": _AOR,
}

# Rules that were narrower on older releases.
_OLDER_RULES = (
    ("v1.11.0", "/machine.MachineService/EtcdMemberList", _AOR),
    ("v1.11.0", "/machine.MachineService/EtcdStatus", _AO),
    ("v1.11.0", "/machine.MachineService/EtcdAlarmList", _AO),
    ("v1.13.0", "/machine.MachineService/ApplyConfiguration", _A),
)


def allowed_roles(method, talos_version):
    """The roles that may call ``method`` (a full gRPC path) on a node of ``talos_version``."""
    for introduced, rule_method, roles in _OLDER_RULES:
        if rule_method == method and older_than(talos_version, introduced):
            return roles
    return RULES.get(method, _A)


def authorize(method, roles, talos_version):
    """Raise PermissionDenied "not authorized" unless one of ``roles`` may call ``method``."""
    if not allowed_roles(method, talos_version) & frozenset(roles):
        raise GRPCError(Status.PERMISSION_DENIED, "not authorized")


def roles_from_peer_certificate(peer_cert):
    """Roles from a verified client certificate as ``SSLSocket.getpeercert()`` returns it.

    Roles are the Subject Organization values; unknown strings are kept and
    empty ones ignored, as Talos does.
    """
    roles = []
    for rdn in (peer_cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "organizationName" and value:
                roles.append(value)
    return roles
