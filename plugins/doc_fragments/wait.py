# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  wait:
    description:
      - Wait after a change until the node reaches the state the task asked for.
      - The wait follows the node's event stream (C(MachineService.Events)) between its looks, so it ends within about
        a second of the node reaching the state; a node that does not answer meanwhile (rebooting) is looked at twice a
        second, one without the event stream every few seconds.
      - Not done in check mode.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait when O(wait=true).
    type: int
    default: 600
'''
