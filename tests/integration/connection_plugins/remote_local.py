# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only connection: runs commands locally but presents itself as a remote host (a bastion)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
name: remote_local
short_description: A local connection that Ansible treats as remote, for the collection's door tests
description: Runs commands on the controller like ansible.builtin.local, without claiming that the remote is local.
author: talos_linux.talos contributors
"""

from ansible.plugins.connection.local import Connection as LocalConnection


class Connection(LocalConnection):
    transport = "remote_local"
