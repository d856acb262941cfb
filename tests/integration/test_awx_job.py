# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A job template run as AWX runs it: the Talos API credential injected, ansible-runner transmit | worker | process.

The worker has only what the credential gives it (TALOSCONFIG to the injected
file), no talosctl on its PATH and an empty HOME. The job gathers facts on every
node and applies the machine configuration in check mode with diff, as a job
template of job type *Check* with *Show changes* and *Enable fact storage* does.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import shutil

import pytest
import yaml

from awx_job import CredentialType, Job, secret_values

PLAYBOOK = [{
    "name": "Talos facts and machine configuration",
    "hosts": "all",
    "gather_facts": False,
    "module_defaults": {"group/talos_linux.talos.talos": {"node": "{{ ansible_host }}"}},
    "tasks": [
        {"name": "Gather Talos facts", "talos_linux.talos.talos_facts": {}},
        {"name": "Apply the machine configuration", "talos_linux.talos.talos_apply_config": {
            "config_file": "{{ playbook_dir }}/configs/{{ 'controlplane' if 'controlplane' in group_names else 'worker' }}.yaml",
            "config_patches": [{"machine": {"sysctls": {"net.core.somaxconn": "{{ somaxconn | string }}"}}}],
        }},
    ],
}]


@pytest.fixture(scope="module")
def cluster(module_emulator):
    return module_emulator(controlplanes=2, workers=1, bootstrapped=True)


def prepare_job(cluster, tmp_path, inputs):
    """The job; ``inputs`` of the Talos API credential, or None for a job template without it."""
    job = Job(tmp_path)
    job.add_project_file("talos_check.yml", PLAYBOOK)
    for machine_type in ("controlplane", "worker"):
        with open(os.path.join(cluster.state_dir, "%s.yaml" % machine_type)) as config:
            job.add_project_file("configs/%s.yaml" % machine_type, config.read())
    if inputs is not None:
        job.attach_credential(CredentialType.load(), inputs)
    groups = {"controlplane": [n.name for n in cluster.controlplanes], "workers": [n.name for n in cluster.workers]}
    hostvars = dict((n.name, {"ansible_host": n.address}) for n in cluster.nodes)
    job.set_inventory(groups, hostvars, group_vars={
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"})
    return job


def pem_inputs(cluster):
    with open(cluster.talosconfig_path()) as talosconfig:
        document = yaml.safe_load(talosconfig)
    context = document["contexts"][document["context"]]
    inputs = dict((name, base64.b64decode(context[name]).decode()) for name in ("ca", "crt", "key"))
    inputs["endpoints"] = ", ".join(n.endpoint for n in cluster.controlplanes)
    return inputs


def test_check_job_gathers_facts_and_predicts_the_change_without_leaking(cluster, tmp_path):
    job = prepare_job(cluster, tmp_path, pem_inputs(cluster))
    before = [node.config_text() for node in cluster.nodes]

    result = job.run_playbook("talos_check.yml", extra_vars={"somaxconn": 4096}, check=True, diff=True)

    assert (result.status, job.rc) == ("successful", 0), job.artifact_texts().get("stdout", "")[-4000:]
    assert job.statuses[-1] == "successful" and "starting" in job.statuses
    # The worker really ran without talosctl, from its own copy of the private data dir.
    worker_path = job.execution_environment()["PATH"]
    assert shutil.which("talosctl", path=worker_path) is None
    assert job.env["TALOSCONFIG"].startswith(os.path.join(job.worker_dir, "env") + os.sep)

    facts = dict((e["event_data"]["host"], e["event_data"]["res"]) for e in job.host_results("runner_on_ok")
                 if e["event_data"]["task"] == "Gather Talos facts")
    assert sorted(facts) == sorted(n.name for n in cluster.nodes)
    for node in cluster.nodes:
        talos = facts[node.name]["ansible_facts"]["talos"]
        assert (talos["hostname"], talos["version"]["tag"]) == (node.hostname, node.talos_version)
        assert talos["machine"]["stage"] == "running"

    applied = dict((e["event_data"]["host"], e["event_data"]["res"]) for e in job.host_results("runner_on_ok")
                   if e["event_data"]["task"] == "Apply the machine configuration")
    assert sorted(applied) == sorted(n.name for n in cluster.nodes)
    assert all(res["changed"] for res in applied.values())
    stats = job.host_results("playbook_on_stats")[0]["event_data"]
    assert stats["failures"] == {} and stats["dark"] == {}
    assert stats["changed"] == dict((n.name, 1) for n in cluster.nodes)

    # Check mode changed nothing: only dry runs reached the nodes.
    assert [node.config_text() for node in cluster.nodes] == before
    assert cluster.audit(method="ApplyConfiguration", include_dry_run=False) == []

    # Fact storage kept the facts per host.
    cache = job.fact_cache()
    assert sorted(cache) == sorted(n.name for n in cluster.nodes)
    assert cache[cluster.workers[0].name]["talos"]["hostname"] == cluster.workers[0].hostname

    # The diff shows the change, and no artifact holds a secret.
    artifacts = job.artifact_texts()
    assert "stdout" in artifacts and any(name.startswith("job_events/") for name in artifacts)
    assert any(name.startswith("fact_cache/") for name in artifacts)
    assert "somaxconn" in artifacts["stdout"]
    for secret in secret_values(cluster):
        for name, text in artifacts.items():
            assert secret not in text, "a secret is in artifact %s" % name
        for event in job.events:
            assert secret not in repr(event)


def test_job_without_the_credential_fails_with_one_sentence_per_node(cluster, tmp_path):
    job = prepare_job(cluster, tmp_path, None)

    result = job.run_playbook("talos_check.yml", extra_vars={"somaxconn": 4096}, check=True)

    assert (result.status, job.rc) == ("failed", 2)
    failures = dict((e["event_data"]["host"], e["event_data"]["res"]["msg"]) for e in job.host_results("runner_on_failed"))
    assert sorted(failures) == sorted(n.name for n in cluster.nodes)
    assert all(message.startswith("No Talos endpoint is configured") for message in failures.values()), failures
    assert job.host_results("playbook_on_stats")[0]["event_data"]["failures"] == dict((n.name, 1) for n in cluster.nodes)
