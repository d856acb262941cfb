# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs talos_linux.talos.talos_adopt in the controller (see plugin_utils/controller_door.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.modules import talos_adopt
from ansible_collections.talos_linux.talos.plugins.plugin_utils.controller_door import TalosAction


class ActionModule(TalosAction):
    MODULE = talos_adopt
