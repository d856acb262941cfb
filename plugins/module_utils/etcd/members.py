# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""etcd members as Talos lists them (EtcdMemberList): their IDs, lookup by name or ID, the address to reach each.

The rest of the package builds on it: status.py (health and alarms),
quorum.py (the quorum guard), membership.py (removal, leadership, joining),
maintenance.py (defragmentation, alarm disarm), bootstrap.py, snapshot.py and
recovery.py (the restore).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re
from urllib.parse import urlparse

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import is_transient

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    machine_pb2 = None

# A member whose node does not answer EtcdStatus within this many seconds
# (or the task's timeout, when shorter) counts as unhealthy.
HEALTH_PROBE_SECONDS = 10

_MEMBER_ID = re.compile(r"^[0-9a-fA-F]{1,16}$")


def format_member_id(member_id):
    """etcd member IDs as talosctl prints them: 16 lower-case hex digits."""
    return "%016x" % member_id


def parse_member_id(text):
    """The integer ID for a hex member ID such as ``"8e9e05c52164694d"``, or None when ``text`` is not one."""
    text = str(text).strip()
    if text.lower().startswith("0x"):
        text = text[2:]
    if not _MEMBER_ID.match(text):
        return None
    return int(text, 16)


def member_id_option(value):
    """The member ID an option names: a string is hex as talosctl prints it (``0x`` allowed), an integer is decimal."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        if 0 < value < 2 ** 64:
            return value
        raise TalosConfigError("member_id %d is not an etcd member ID: member IDs are 1 to 2^64-1." % value)
    member_id = parse_member_id(value)
    if not member_id:
        raise TalosConfigError("member_id %r is not an etcd member ID: give it in hexadecimal as talosctl etcd members "
                               "prints it (8e9e05c52164694d, 0x allowed) or as a decimal integer." % (value,))
    return member_id


def describe_ref(ref):
    """A member reference as messages show it: a hostname as it is, a member ID in hex."""
    return format_member_id(ref) if isinstance(ref, int) else str(ref)


def member_to_dict(member):
    """An ``EtcdMember`` message as the modules return it."""
    return {
        "id": format_member_id(member.id),
        "hostname": member.hostname,
        "peer_urls": list(member.peer_urls),
        "client_urls": list(member.client_urls),
        "is_learner": member.is_learner,
    }


def list_members(client, node):
    """The cluster's members as seen by ``node`` (EtcdMemberList with the cluster view)."""
    items = client.call(rpc.ETCD_MEMBER_LIST, machine_pb2.EtcdMemberListRequest(query_local=False), node=node)
    return [member_to_dict(member) for item in items for member in item.members]


def find_member(members, ref):
    """The member named by ``ref``, or None: a string is a hostname, else the address of the member's node (as its
    etcd URLs give it), else a hex member ID; an int is a member ID."""
    if isinstance(ref, int):
        member_id = ref
    else:
        for member in members:
            if member["hostname"] == ref:
                return member
        for member in members:
            if member_address(member) == ref:
                return member
        member_id = parse_member_id(ref)
    if member_id is None:
        return None
    for member in members:
        if int(member["id"], 16) == member_id:
            return member
    return None


def member_address(member):
    """The address Talos can target for ``member``: the host of its client (else peer) URL, or None.

    Talos registers each control plane's node IP in its etcd URLs, and that
    address is what the ``node`` metadata of a call accepts.
    """
    for url in member["client_urls"] + member["peer_urls"]:
        host = urlparse(url).hostname
        if host:
            return host
    return None


# -- the quorum guard ----------------------------------------------------------


def own_member_name(client, node):
    """The etcd member name of ``node``: Talos names members after the node's hostname."""
    return client.call(rpc.HOSTNAME, node=node)[0].hostname


def still_starting(error):
    """True for the answers of a node whose etcd is starting, joining or electing a leader: worth waiting out."""
    return is_transient(error) or error.code in ("FailedPrecondition", "Unknown")


# -- membership (talos_etcd_member) ----------------------------------------------


# -- health and maintenance (talos_etcd_info, talos_etcd_maintenance) ------------


# -- bootstrap (talos_bootstrap) -------------------------------------------------
