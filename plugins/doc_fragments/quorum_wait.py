# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  quorum_wait_timeout:
    description:
      - Seconds to wait for the etcd quorum guard to let a control plane go when it refuses for now - other members
        unhealthy, or one still catching up after its own reboot. The guard is asked again every two seconds until it
        lets the node go, and the task fails when it still refuses after this many seconds. Nothing changes meanwhile.
      - Once it waits longer than a few seconds, the task shows why etcd cannot spare the node yet, in lines that start
        with C(waiting for etcd to spare <node>), when it runs in the controller (the default).
      - V(0) refuses at once. A refusal no wait changes (the removal of the last voting member) is never waited for.
    type: int
    default: 0
'''
