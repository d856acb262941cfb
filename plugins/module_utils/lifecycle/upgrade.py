# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Talos upgrade of one node as talos_upgrade runs it: the installer the node gets, the upgrade itself
(actions.upgrade) and the installer reference of its machine config afterwards.

Apart from actions.py because it reads and applies machine configs (config/installer_reference.py): reboot,
shutdown and reset do not, and their modules do not pay for importing it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.config import installer_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import choose_node_installer
from ansible_collections.talos_linux.talos.plugins.module_utils.images.store import PULL_TIMEOUT
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions


def upgrade_node(client, node, target, api, image=None, repository=None, factory_url=None, fall_back=True,
                 reboot_mode="default", preserve=False, stage=False, force_quorum_loss=False, quorum_wait_timeout=0,
                 pull_timeout=PULL_TIMEOUT, wait_timeout=None, check_mode=False, diff=False, progress=None, warn=None):
    """Upgrade ``node`` to Talos ``target`` and point its config's installer reference at the installer it got.

    The installer is ``image``, else ``repository`` tagged with ``target``,
    else the node's own (images/installer.choose_node_installer, from
    ``factory_url``). The config's installer reference is read before anything
    changes, so that a config that names two is refused first. ``api``,
    ``fall_back`` and the rest are actions.upgrade's; ``warn(text)`` hears of a
    reference that cannot follow yet. Returns actions.upgrade's result with
    ``image_reason`` and ``installer_reference``
    (installer_reference.update_installer_reference's outcome).
    """
    choice = choose_node_installer(client, node, target, image=image, repository=repository, factory_url=factory_url)
    reference = installer_reference.read_installer_reference(client, node)
    result = actions.upgrade(client, node, choice.image, target, api, fall_back=fall_back, reboot_mode=reboot_mode,
                             preserve=preserve, stage=stage, force_quorum_loss=force_quorum_loss,
                             quorum_wait_timeout=quorum_wait_timeout, pull_timeout=pull_timeout, wait_timeout=wait_timeout,
                             check_mode=check_mode, diff=diff, progress=progress)
    result["image_reason"] = choice.reason
    result["installer_reference"] = installer_reference.update_installer_reference(
        client, node, reference, choice.image, result, check_mode=check_mode, diff=diff, warn=warn)
    return result
