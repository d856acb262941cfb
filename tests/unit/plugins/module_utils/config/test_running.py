# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running configs compared with the backup talos_config_backup made of them."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config import running

CONFIG = "version: v1alpha1\nmachine:\n  type: %s\n  token: not-shown\ncluster:\n  clusterName: prod\n"


def configs():
    return [running.RunningConfig("10.5.0.2", CONFIG % "controlplane", "v1.14.0", "cp-1"),
            running.RunningConfig("10.5.0.3", CONFIG % "worker", "v1.14.0", "worker-1")]


def backup_of(configs):
    """What talos_config_backup registers for several nodes."""
    nodes = dict((config.node, dict(config.summary(), file=config.node + ".yaml", changed=True)) for config in configs)
    return {"changed": True, "nodes": nodes}


def key(node):
    return node


def test_configs_the_backup_read_pass_in_either_shape():
    read = configs()
    running.check_backed_up(read, backup_of(read), key)
    running.check_backed_up(read[:1], dict(read[0].summary(), changed=False), key)


def test_a_config_changed_since_the_backup_is_refused_with_both_hashes():
    backed_up = configs()
    now = configs()
    now[1] = running.RunningConfig("10.5.0.3", CONFIG % "worker" + "  env: {A: '1'}\n", "v1.14.0", "worker-1")
    with pytest.raises(TalosConfigError) as refused:
        running.check_backed_up(now, backup_of(backed_up), key)
    assert str(refused.value) == (
        "The running config of node 10.5.0.3 changed since the backup (sha256 %s backed up, %s now): back up again once "
        "nothing applies configs to the cluster. Nothing was written." % (backed_up[1].sha256[:12], now[1].sha256[:12]))


def test_a_node_the_backup_did_not_read_is_refused():
    read = configs()
    with pytest.raises(TalosConfigError) as refused:
        running.check_backed_up(read, backup_of(read[:1]), key)
    assert str(refused.value) == "backup holds no config of node 10.5.0.3: back up every node of the task first. Nothing was written."


@pytest.mark.parametrize("backup", [{}, {"changed": False, "msg": "something else"}])
def test_what_is_not_a_backup_result_is_refused(backup):
    with pytest.raises(TalosConfigError) as refused:
        running.check_backed_up(configs(), backup, key)
    assert str(refused.value) == ("backup must be the result talos_config_backup registered for these nodes: it has "
                                  "neither nodes nor sha256.")
