# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster and upgrade roles as AWX job templates with the surveys in docs/awx/survey-*.json.

A survey fits its role when every question names an option of the role's
meta/argument_specs.yml of a matching type (text: str or path; integer: int;
multiplechoice: the option's choices, or true/false for a bool; multiselect: a
list of str). Then both job templates run, as AWX runs them, with the answers
typed as AWX types them (integers as numbers, choices as text, multiselect as a
list): the cluster job provisions an emulated cluster from maintenance mode, the
upgrade job rolls it to a new Talos version.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from awx_job import REPO, CredentialType, Job

from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
FITTING_TYPES = {"text": {"str", "path"}, "textarea": {"str"}, "password": {"str"}, "integer": {"int"},
                 "float": {"float"}, "multiplechoice": {"str", "bool"}, "multiselect": {"list"}}
ROLES = ["cluster", "upgrade"]


def survey(role):
    with open(os.path.join(REPO, "docs", "awx", "survey-%s.json" % role)) as spec:
        return json.load(spec)


def role_options(role):
    with open(os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")) as specs:
        return yaml.safe_load(specs)["argument_specs"]["main"]["options"]


def answers(role, **overrides):
    """The survey's defaults typed as AWX puts answers into extra_vars, with some answers changed."""
    values = {}
    for question in survey(role)["spec"]:
        default = question["default"]
        values[question["variable"]] = default.splitlines() if question["type"] == "multiselect" else default
    values.update(overrides)
    return values


@pytest.mark.parametrize("role", ROLES)
def test_survey_questions_fit_the_role_options(role):
    options = role_options(role)
    spec = survey(role)["spec"]
    assert len(set(q["variable"] for q in spec)) == len(spec)
    for question in spec:
        variable, kind = question["variable"], question["type"]
        assert kind in SURVEY_TYPES, question
        assert variable in options, "%s is not an option of the %s role" % (variable, role)
        option = options[variable]
        assert option["type"] in FITTING_TYPES[kind], "%s: a %s question for a %s option" % (variable, kind, option["type"])
        if kind == "integer":
            assert question["min"] <= question["default"] <= question["max"] and isinstance(question["default"], int)
        if kind == "multiplechoice":
            allowed = ["false", "true"] if option["type"] == "bool" else option["choices"]
            assert sorted(question["choices"]) == sorted(allowed), variable
            assert question["default"] in question["choices"]
            assert str(option["default"]).lower() == question["default"], "%s: the survey default differs from the role's" % variable
        if kind == "multiselect":
            assert option["elements"] == "str" and set(question["default"].splitlines()) <= set(question["choices"])
        if kind == "text":
            assert isinstance(question["default"], str) and question["min"] <= len(question["default"]) <= question["max"]


@pytest.fixture(scope="module")
def cluster(module_emulator):
    return module_emulator(controlplanes=1, workers=1, maintenance=True, talos_version="v1.13.0", reboot_seconds=0.2)


def example(name):
    """The guides' playbook docs/examples/``name``, as the project of an AWX job holds it (docs/awx.md)."""
    with open(os.path.join(REPO, "docs", "examples", name)) as playbook:
        return playbook.read()


def role_job(cluster, tmp_path, job_id, role):
    job = Job(tmp_path, job_id=job_id)
    job.add_project_file("%s.yml" % role, example("%s.yml" % role))
    for machine_type in ("controlplane", "worker"):
        with open(os.path.join(cluster.state_dir, "%s.yaml" % machine_type)) as config:
            job.add_project_file("configs/%s.yaml" % machine_type, config.read())
    with open(cluster.talosconfig_path()) as talosconfig:
        job.attach_credential(CredentialType.load(), {"talosconfig": talosconfig.read()})
    groups = {"controlplane": [n.name for n in cluster.controlplanes], "workers": [n.name for n in cluster.workers]}
    # Host variables as an AWX inventory holds them: the address, the node's own patch.
    hostvars = dict((n.name, {"ansible_host": n.address, "cluster_host_patches": [{"machine": {"network": {"hostname": n.name}}}]})
                    for n in cluster.nodes)
    job.set_inventory(groups, hostvars, group_vars={
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        # The emulator serves every node on one port; a real node in maintenance mode listens on 50000.
        "cluster_maintenance_endpoint": "{{ ansible_host }}:%d" % cluster.port})
    return job


def assert_successful(job, result):
    assert (result.status, job.rc) == ("successful", 0), job.artifact_texts().get("stdout", "")[-5000:]


def test_cluster_then_upgrade_job_templates_with_their_surveys(cluster, tmp_path):
    provision = role_job(cluster, tmp_path, 51, "cluster")
    survey_answers = answers("cluster", cluster_wait_timeout=60, cluster_gather_subset=["version", "hostname", "machine", "etcd"])
    result = provision.run_playbook("cluster.yml", extra_vars=survey_answers, job_template_name="Talos cluster")
    assert_successful(provision, result)
    assert all(node.stage == "running" and node.hostname == node.name for node in cluster.nodes)
    assert [member.node.name for member in cluster.etcd.members] == [cluster.controlplanes[0].name]
    reports = [e["event_data"]["res"] for e in provision.host_results("runner_on_ok")
               if e["event_data"]["task"].endswith("Gather the node's Talos facts")]
    assert sorted(r["ansible_facts"]["talos"]["hostname"] for r in reports) == sorted(n.name for n in cluster.nodes)
    assert all(set(r["ansible_facts"]["talos"]) >= {"version", "machine"} for r in reports)

    upgrade = role_job(cluster, tmp_path, 52, "upgrade")
    # One control plane: its etcd cannot keep quorum, so the survey's quorum-loss answer is "true".
    result = upgrade.run_playbook("upgrade.yml", extra_vars=answers(
        "upgrade", upgrade_version="v1.14.0", upgrade_force_quorum_loss="true", upgrade_wait_timeout=60, upgrade_quorum_wait_timeout=10),
        job_template_name="Talos upgrade")
    assert_successful(upgrade, result)
    assert all(node.talos_version == "v1.14.0" for node in cluster.nodes)
    stats = upgrade.host_results("playbook_on_stats")[0]["event_data"]
    assert stats["failures"] == {} and stats["dark"] == {}


def test_the_cluster_template_from_nothing_with_a_vaulted_bundle(emulator, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, talos_version="v1.14.0", reboot_seconds=0.2)
    bundle = SecretsBundle.generate(talos_version="v1.14.0")
    job = Job(tmp_path, job_id=53)
    job.add_project_file("provision-vaulted.yml", example("provision-vaulted.yml"))
    vault = VaultLib([("default", VaultSecret(b"vault password"))])
    job.add_project_file("secrets.vault.yaml", vault.encrypt(bundle.to_yaml()).decode())
    job.attach_vault_password("vault password")
    groups = {"controlplane": [n.name for n in cluster.controlplanes], "workers": [n.name for n in cluster.workers]}
    job.set_inventory(groups, dict((n.name, {"ansible_host": n.address}) for n in cluster.nodes), group_vars={
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        # The emulator serves every node on one port; a real node listens on 50000.
        "cluster_maintenance_endpoint": "{{ ansible_host }}:%d" % cluster.port,
        "cluster_talosconfig_endpoints": [n.endpoint for n in cluster.controlplanes], "cluster_wait_timeout": 60})

    # The template's extra variables (docs/awx.md): the bundle in the project, no kubeconfig.
    result = job.run_playbook("provision-vaulted.yml", job_template_name="Talos cluster from nothing",
                              extra_vars={"secrets_vault": "secrets.vault.yaml", "cluster_kubeconfig": ""})

    assert_successful(job, result)
    assert all(node.stage == "running" for node in cluster.nodes)
    assert [member.node.name for member in cluster.etcd.members] == [cluster.controlplanes[0].name]
    # The nodes run configs rendered from the vaulted bundle, and no key outlives the job.
    assert all(node.config["machine"]["token"] == bundle.trustd_token for node in cluster.nodes)
    work = [e["event_data"]["res"]["path"] for e in job.host_results("runner_on_ok")
            if e["event_data"]["task"] == "Private directory for the bundle and the generated files"]
    assert work and not os.path.exists(work[0])
    output = job.artifact_texts().get("stdout", "")
    assert not [value for value in bundle.secret_values() if value in output]
