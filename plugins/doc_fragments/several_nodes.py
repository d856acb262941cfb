# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  max_concurrency:
    description:
      - How many of several O(nodes) the task works on at the same time; the others wait their turn, so a task on a
        thousand nodes never works on a thousand at once. Each node's O(timeout) starts when its turn does.
      - Where the module takes nodes down, control planes still go one at a time.
    type: int
    default: 32
'''
