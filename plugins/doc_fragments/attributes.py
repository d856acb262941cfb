# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes every module of the collection declares; modules add support and details."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and report whether it would change something, without changing it.
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) with C(--diff).
  idempotent:
    description: A second run with the same arguments reports no change and changes nothing.
"""

    ACTIONGROUP_TALOS = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/talos_linux.talos.talos) in C(module_defaults) to set the connection options once.
    support: full
    membership:
      - talos_linux.talos.talos
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs unchanged in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
"""
