# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster role's internal variables render as the types its tasks pass on, on every ansible-core line."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import yaml

ROLE_VARS = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "cluster", "vars", "main.yml")


def test_controlplane_addresses_are_a_list_of_ansible_hosts_or_names(run_playbook, tmp_path):
    # Without cluster_talosconfig_endpoints the talosconfig's endpoints are these addresses: a string here
    # would reach talos_client_config's list option as comma-split fragments of its text.
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "controlplane": {"hosts": {"cp1": {"ansible_host": "10.5.0.2"}, "cp2": {}, "cp3": {"ansible_host": "fd00::3"}}},
        "workers": {"hosts": {"w1": {"ansible_host": "10.5.0.9"}}},
    }}}))
    play = [{"hosts": "localhost", "gather_facts": False, "vars_files": [os.path.abspath(ROLE_VARS)],
             "vars": {"cluster_controlplane_group": "controlplane"},
             "tasks": [{"name": "Addresses", "ansible.builtin.debug": {"msg": "{{ _cluster_controlplane_addresses }}"}},
                       {"name": "Type", "ansible.builtin.debug": {"msg": "{{ _cluster_controlplane_addresses | type_debug }}"}},
                       {"name": "No group", "vars": {"cluster_controlplane_group": "absent"},
                        "ansible.builtin.debug": {"msg": "{{ _cluster_controlplane_addresses }}"}}]}]
    run = run_playbook(play, inventory=str(inventory))
    messages = dict((result["task"], result["result"]["msg"]) for result in run.results)
    assert messages["Addresses"] == ["10.5.0.2", "cp2", "fd00::3"]
    assert messages["Type"] == "list"
    assert messages["No group"] == []
