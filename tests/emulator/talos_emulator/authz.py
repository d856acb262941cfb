# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role-based access control as machined applies it.

The rules table is the collection's RPC catalogue (``plugins/module_utils/client/rpc.py``),
which follows Talos's ``internal/app/machined/pkg/system/services/machined.go``
and records the rules that were narrower on older releases; a method missing
from it needs ``os:admin``. Roles are not hierarchical: a rule lists every role
it accepts and any one of them suffices.
"""

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc

from .versions import older_than

ADMIN = rpc.ADMIN
READER = rpc.READER
# Rules of machined.go for RPCs only talosctl calls (the catalogue has no row for them).
NOT_IN_CATALOGUE = {
    "machine.MachineService/Netstat": (rpc.ADMIN, rpc.OPERATOR, rpc.READER),
    "machine.MachineService/Stats": (rpc.ADMIN, rpc.OPERATOR, rpc.READER),
    "time.TimeService/Time": (rpc.ADMIN, rpc.OPERATOR, rpc.READER),
    "time.TimeService/TimeCheck": (rpc.ADMIN, rpc.OPERATOR, rpc.READER),
}


def allowed_roles(method, talos_version):
    """The roles that may call ``method`` (a full gRPC path) on a node of ``talos_version``."""
    path = method.lstrip("/")
    if path in NOT_IN_CATALOGUE:
        return frozenset(NOT_IN_CATALOGUE[path])
    for widened_in, roles_before in rpc.role_history(path):
        if older_than(talos_version, widened_in):
            return frozenset(roles_before)
    return frozenset(rpc.rule_roles(path))


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
