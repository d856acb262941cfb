# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The talos inventory plugin as an AWX inventory source "sourced from a project", then a job on what it found.

The inventory update runs ``ansible-inventory --list --export`` on the project's
``cluster.talos.yml`` through ansible-runner (transmit | worker | process) with
only the Talos API credential's TALOSCONFIG; AWX imports the JSON it writes.
The job then runs on that imported inventory, as AWX writes it into the job's
private data dir.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from awx_job import CredentialType, Job, secret_values
from test_inventory_talos import plain_listing

FACTS_PLAYBOOK = [{
    "name": "Talos facts",
    "hosts": "all",
    "gather_facts": False,
    "module_defaults": {"group/talos_linux.talos.talos": {"node": "{{ talos_node }}"}},
    "tasks": [{"name": "Gather Talos facts", "talos_linux.talos.talos_facts": {"gather_subset": ["min"]}}],
}]


@pytest.fixture(scope="module")
def cluster(module_emulator):
    return module_emulator(controlplanes=2, workers=1, bootstrapped=True)


def credential_inputs(cluster):
    with open(cluster.talosconfig_path()) as talosconfig:
        return {"talosconfig": talosconfig.read()}


def test_inventory_update_then_a_job_on_the_imported_inventory(cluster, tmp_path):
    update = Job(tmp_path, job_id=61)
    update.add_project_file("inventories/cluster.talos.yml", {"plugin": "talos_linux.talos.talos"})
    update.attach_credential(CredentialType.load(), credential_inputs(cluster))

    result = update.run_inventory_update("inventories/cluster.talos.yml")

    assert (result.status, update.rc) == ("successful", 0), update.artifact_texts()
    listing = plain_listing(update.inventory_output())
    groups = dict((name, sorted(group.get("hosts", []))) for name, group in listing.items() if name not in ("_meta", "all"))
    assert groups["controlplane"] == sorted(n.hostname for n in cluster.controlplanes)
    assert groups["workers"] == sorted(n.hostname for n in cluster.workers)
    hostvars = listing["_meta"]["hostvars"]
    for node in cluster.nodes:
        assert hostvars[node.hostname]["ansible_host"] == node.address
        assert hostvars[node.hostname]["talos_node"] == node.address
        assert hostvars[node.hostname]["talos_machine_type"] == node.machine_type
        assert hostvars[node.hostname]["ansible_connection"] == "local"
    for secret in secret_values(cluster):
        for name, text in update.artifact_texts().items():
            assert secret not in text, "a secret is in artifact %s" % name

    job = Job(tmp_path, job_id=62)
    job.add_project_file("facts.yml", FACTS_PLAYBOOK)
    job.attach_credential(CredentialType.load(), credential_inputs(cluster))
    job.set_inventory(dict((group, hosts) for group, hosts in groups.items() if hosts), hostvars)

    result = job.run_playbook("facts.yml", job_template_name="Talos facts")

    assert (result.status, job.rc) == ("successful", 0), job.artifact_texts().get("stdout", "")[-4000:]
    facts = dict((e["event_data"]["host"], e["event_data"]["res"]["ansible_facts"]["talos"])
                 for e in job.host_results("runner_on_ok"))
    assert sorted(facts) == sorted(n.hostname for n in cluster.nodes)
    for node in cluster.nodes:
        assert facts[node.hostname]["node"] == node.address
        assert facts[node.hostname]["machine"]["type"] == node.machine_type
