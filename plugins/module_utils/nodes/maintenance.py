# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Maintenance mode: whether a node runs without configuration, and a client that reaches it there.

A node in maintenance mode (not configured yet, or reset with STATE wiped)
serves its API insecurely on its own address only: it forwards nothing, and an
endpoint cannot forward to it, since its certificate is not the cluster CA's.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, TalosUnimplementedError
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import read_version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import split_endpoint

# How long the maintenance-mode probe of a node that does not answer may take.
MAINTENANCE_PROBE_SECONDS = 10


def maintenance_client(client, node):
    """An insecure client that talks to ``node`` directly: a node in maintenance mode forwards nothing,
    and an endpoint cannot forward to it (its certificate is not from the cluster CA)."""
    if node is None:
        return client.with_settings(insecure=True)
    port = split_endpoint(client.active_endpoint)[1]
    host = "[%s]" % node if ":" in node else node
    return client.with_settings(insecure=True, endpoints=["%s:%d" % (host, port)], node=None)


def in_maintenance(client, node, deadline):
    """True when ``node`` answers Version over an insecure connection (or, up to v1.12, Unimplemented).

    A configured node requires a client certificate, so only a node in
    maintenance mode answers at all.
    """
    probe = maintenance_client(client, node)
    try:
        probe.call(rpc.VERSION, retry_codes=(), deadline=deadline)
    except TalosUnimplementedError:
        return True
    except TalosError:
        return False
    finally:
        probe.close()
    return True


def found_in_maintenance(client, node, probe_seconds):
    """True when ``node`` is in maintenance mode; raises the secure client's error when it simply does not answer."""
    if client.settings.insecure:
        return in_maintenance(client, node, probe_seconds)
    try:
        client.call(rpc.VERSION, node=node, retry_codes=(), deadline=probe_seconds)
    except TalosError:
        if in_maintenance(client, node, probe_seconds):
            return True
        read_version_tag(client, node)  # a node that is only slow to answer gets the whole timeout
    return False
