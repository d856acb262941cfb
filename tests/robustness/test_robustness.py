# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad inputs and faults for every module and both roles, through ansible-playbook -vvv.

Every row of robustness_cases.MODULE_CASES runs as one task of a playbook (one playbook
per group, so that emulated clusters and playbook runs are shared); the roles
run in their own playbooks. Each case must end as expected with a clear
message (no traceback, no module failure), nothing may change on the nodes
(audit log and node state), and no secret the clusters hold, nor one the
patches carry, may appear anywhere in the Ansible output.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import re

import pytest
import yaml

from talos_emulator import EmulatedCluster
from talos_emulator import configgen
from playbook_runner import run_playbook_in

from robustness_cases import MODULE_CASES

REGISTRY_PASSWORD = "robo-Pa55word-for-the-registry"
# One process per task instead of a copy, a chmod and a clean-up: the suite runs many short tasks.
FAST = {"ANSIBLE_PIPELINING": "True"}
GROUPS = ("rejected", "node", "old")
# A snapshot of real etcd v3.7 (the unit tests' vector): what a restore verifies.
ETCD_SNAPSHOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit", "plugins", "module_utils",
                             "data", "etcd-v3.7.snapshot")


def _start(tmp_path_factory, name, **options):
    cluster = EmulatedCluster.start(str(tmp_path_factory.mktemp(name)), reboot_seconds=0.2, bootstrapped=True, **options)
    return cluster


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    started = {
        "main": _start(tmp_path_factory, "main", controlplanes=1, workers=2, talos_version="v1.14.0"),
        "old": _start(tmp_path_factory, "old", controlplanes=1, workers=1, talos_version="v1.12.0"),
    }
    yield started
    for cluster in started.values():
        cluster.stop()


def _talosconfig_variant(cluster, path, **context_changes):
    """A copy of the cluster's admin talosconfig with some context fields replaced."""
    with open(cluster.talosconfig_path("admin")) as handle:
        data = yaml.safe_load(handle)
    data["contexts"][data["context"]].update(context_changes)
    with open(path, "w") as handle:
        yaml.safe_dump(data, handle)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory, clusters):
    """Files the cases point at, per cluster."""
    made = {}
    other = configgen.SecretsBundle.generate()
    for name, cluster in clusters.items():
        tmp = tmp_path_factory.mktemp("files-%s" % name)
        other_talosconfig = yaml.safe_load(configgen.generate_talosconfig(other, "other", [n.endpoint for n in cluster.controlplanes]))
        other_context = other_talosconfig["contexts"]["other"]
        binary = tmp / "talosconfig.bin"
        binary.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x00binary\x00")
        cp_config = tmp / "controlplane.yaml"
        cp_config.write_text(cluster.controlplanes[0].config_text())
        etcd_snapshot = tmp / "etcd.snapshot"
        with open(ETCD_SNAPSHOT, "rb") as vector:
            etcd_snapshot.write_bytes(vector.read())
        corrupt_backups = tmp / "corrupt-backups"
        corrupt_backups.mkdir()
        damaged = bytearray(etcd_snapshot.read_bytes())
        damaged[5000] ^= 0xFF
        (corrupt_backups / "prod-20260101T000000Z-r4.snapshot").write_bytes(bytes(damaged))
        made[name] = {
            "tmp": str(tmp),
            "binary": str(binary),
            "cp_config": str(cp_config),
            "etcd_snapshot": str(etcd_snapshot),
            "corrupt_backups": str(corrupt_backups),
            "wrong_ca": _talosconfig_variant(cluster, str(tmp / "wrong-ca"), ca=other_context["ca"]),
            "mismatched_key": _talosconfig_variant(cluster, str(tmp / "mismatched-key"), key=other_context["key"]),
            "bad_port": _talosconfig_variant(cluster, str(tmp / "bad-port"),
                                             endpoints=["%s:70000" % cluster.controlplanes[0].address]),
        }
    return made


def context(cluster, files):
    workers = cluster.workers
    return dict(
        files,
        cp=cluster.controlplanes[0].address,
        cp_endpoint=cluster.controlplanes[0].endpoint,
        cp_member_id="%016x" % cluster.etcd.member_of(cluster.controlplanes[0]).id,
        worker=workers[0].address,
        worker_endpoint=workers[0].endpoint,
        other_worker=workers[-1].address,
        admin=cluster.talosconfig_path("admin"),
        reader=cluster.talosconfig_path("reader"),
        secrets_bundle=os.path.join(cluster.state_dir, "secrets.yaml"),
        # Secrets reach the tasks as variables, as in a real playbook: Ansible quotes the playbook's
        # own lines around a failed task, which would show a literal.
        registry_password="{{ registry_password }}",
    )


def _fill(value, ctx):
    if isinstance(value, str):
        return value.format(**ctx)
    if isinstance(value, dict):
        return dict((key, _fill(item, ctx)) for key, item in value.items())
    if isinstance(value, list):
        return [_fill(item, ctx) for item in value]
    return value


def secret_forms(value):
    """A secret as it could leak: itself, its base64, and each long line of a multi-line one (PEM bodies)."""
    if isinstance(value, bytes):
        value = value.decode()
    forms = {value, base64.b64encode(value.encode()).decode()}
    forms.update(line.strip() for line in value.splitlines() if len(line.strip()) >= 16 and not line.startswith("-----"))
    return forms


def cluster_secrets(cluster):
    """Every secret of an emulated cluster: the secrets bundle and the client keys of its talosconfigs."""
    bundle = cluster.secrets
    # The bootstrap token's secret part alone too: "<id>.<secret>", where the ID is no secret.
    values = [bundle.cluster_secret, bundle.bootstrap_token, bundle.bootstrap_token.split(".")[-1], bundle.machine_token,
              bundle.secretbox_secret, bundle.service_account_key_pem]
    values += [ca.key_pem for ca in (bundle.os_ca, bundle.etcd_ca, bundle.k8s_ca, bundle.k8s_aggregator_ca)]
    for role in ("admin", "operator", "reader"):
        with open(cluster.talosconfig_path(role)) as handle:
            data = yaml.safe_load(handle)
        values.append(base64.b64decode(data["contexts"][data["context"]]["key"]))
    forms = set()
    for value in values:
        forms.update(secret_forms(value))
    return forms


def assert_no_secret(output, secrets):
    leaked = sorted(secret for secret in secrets if secret in output)
    where = []
    for secret in leaked:
        at = output.index(secret)
        where.append(output[max(0, at - 300):at] + "<SECRET>" + output[at + len(secret):at + len(secret) + 100])
    assert not leaked, "secrets leaked into the Ansible output:\n%s" % "\n----\n".join(where)


def snapshot(cluster):
    """What a case must not change: every node's config, version and stage, and etcd."""
    nodes = [(node.name, node.config_text(), node.talos_version, node.stage) for node in cluster.nodes]
    return nodes, sorted(member.id for member in cluster.etcd.members)


def changes(cluster, before_count, allow_dry_run):
    """Audit entries recorded since ``before_count`` that count as changes for the group's rule."""
    entries = cluster.audit()[before_count:]
    if allow_dry_run:
        entries = [entry for entry in entries if entry["code"] == "OK" and not entry["dry_run"]]
    return entries


def module_play(cases, ctx):
    tasks = []
    for row in cases:
        task = {"name": row.id, "talos_linux.talos." + row.module: _fill(row.args, ctx), "ignore_errors": True}
        if row.check_mode:
            task["check_mode"] = True
        if row.diff:
            task["diff"] = True
        tasks.append(task)
    return [{
        "name": "Robustness cases",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": ctx["admin"], "node": ctx["cp"], "timeout": 10}},
        "tasks": tasks,
    }]


def assert_clear_failure(row, result):
    """A failure that is one sentence naming the problem: no traceback, no module crash."""
    message = result.get("msg", "")
    assert message, "%s: no msg in %s" % (row.id, result)
    assert "Traceback" not in message and "MODULE FAILURE" not in message and "Module failed" not in message, (row.id, message)
    # At -vvv Ansible adds "exception": "(traceback unavailable)" to every failure; a crash carries a real one.
    assert "module_stderr" not in result and "Traceback" not in str(result.get("exception", "")), (row.id, result)
    assert re.search(row.expect, message), "%s: %r does not match %r" % (row.id, message, row.expect)


def check_case(row, result):
    if row.outcome == "failed":
        assert result["status"] == "failed", "%s should fail, got %s: %s" % (row.id, result["status"], result["result"])
        assert_clear_failure(row, result["result"])
    else:
        assert result["status"] == row.outcome, "%s should be %s, got %s: %s" % (
            row.id, row.outcome, result["status"], result["result"].get("msg"))
    if row.result:
        row.result(result["result"])


@pytest.mark.parametrize("group", GROUPS)
def test_module_cases(group, clusters, files, tmp_path):
    cluster = clusters["old" if group == "old" else "main"]
    ctx = context(cluster, files["old" if group == "old" else "main"])
    rows = [row for row in MODULE_CASES if row.group == group]
    before, audited = snapshot(cluster), len(cluster.audit())

    run = run_playbook_in(tmp_path, group, module_play(rows, ctx), extra_vars={"registry_password": REGISTRY_PASSWORD},
                          verbosity=3, env=FAST)

    output = run.stdout + run.stderr
    by_task = dict((result["task"], result) for result in run.results)
    problems = []
    for row in rows:
        try:
            assert row.id in by_task, "%s did not run:\n%s" % (row.id, output[-3000:])
            check_case(row, by_task[row.id])
        except AssertionError as failure:
            problems.append(str(failure))
    assert not problems, "\n".join(problems)
    assert "Traceback" not in output
    assert changes(cluster, audited, allow_dry_run=group != "rejected") == []
    assert snapshot(cluster) == before
    assert_no_secret(output, cluster_secrets(cluster) | secret_forms(REGISTRY_PASSWORD))


def test_there_are_enough_cases():
    modules = set(row.module for row in MODULE_CASES)
    assert len(MODULE_CASES) + len(ROLE_CASES) >= 40
    assert modules == set(name[:-3] for name in os.listdir(os.path.join(os.path.dirname(__file__), "..", "..", "plugins", "modules"))
                          if name.endswith(".py"))
    assert len(set(row.id for row in MODULE_CASES)) == len(MODULE_CASES)


UPGRADE_PLAY = """
- name: Roll the upgrade
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.upgrade
      vars:
        upgrade_talosconfig: "{{ talos_state_dir }}/talosconfig"
        upgrade_wait_timeout: 30
        upgrade_quorum_wait_timeout: 120
"""

CLUSTER_PLAY = """
- name: Provision with the cluster role
  hosts: controlplane:workers
  gather_facts: false
  roles:
    - role: talos_linux.talos.cluster
      vars:
        cluster_controlplane_config_file: "{{ talos_state_dir }}/controlplane.yaml"
        cluster_worker_config_file: "{{ talos_state_dir }}/worker.yaml"
        cluster_maintenance_endpoint: "{{ ansible_host }}:{{ talos_port }}"
        cluster_kubeconfig: ""
        cluster_wait_timeout: 30
"""

# (id, playbook, extra vars with {name} from the context, message regex)
ROLE_CASES = [
    ("upgrade-role-version-latest", UPGRADE_PLAY, {"upgrade_version": "latest"},
     r"^upgrade_version 'latest' is not a Talos release: give a release such as v1\.14\.1\. Nothing was upgraded\.$"),
    ("upgrade-role-version-beyond-the-supported-releases", UPGRADE_PLAY, {"upgrade_version": "v1.99.0"},
     r"^upgrade_version 'v1\.99\.0' is not a Talos release this collection supports \(v1\.9 to v1\.14"),
    ("upgrade-role-image-without-tag", UPGRADE_PLAY, {"upgrade_installer_image": "ghcr.io/siderolabs/installer"}, r"has no tag"),
    ("upgrade-role-version-and-image", UPGRADE_PLAY, {"upgrade_version": "v1.14.1", "upgrade_installer_image": "ghcr.io/siderolabs/installer:v1.14.1"},
     r"Set exactly one of upgrade_version and upgrade_installer_image"),
    ("upgrade-role-zero-batch", UPGRADE_PLAY, {"upgrade_version": "v1.14.1", "upgrade_worker_batch_size": 0},
     r"a positive upgrade_worker_batch_size"),
    ("cluster-role-wrong-ca", CLUSTER_PLAY, {"cluster_talosconfig": "{wrong_ca}"},
     r"is configured already, but the talosconfig was refused: Certificate verification of endpoint"),
    ("cluster-role-no-config", CLUSTER_PLAY, {"cluster_talosconfig": "{admin}", "cluster_controlplane_config_file": "",
                                              "cluster_worker_config_file": ""},
     r"cluster_(controlplane|worker)_config or cluster_(controlplane|worker)_config_file must be set"),
]


@pytest.mark.parametrize("row", ROLE_CASES, ids=[row[0] for row in ROLE_CASES])
def test_role_cases(row, clusters, files, tmp_path):
    case_id, playbook, extra_vars, expect = row
    cluster = clusters["main"]
    ctx = context(cluster, files["main"])
    before, audited = snapshot(cluster), len(cluster.audit())

    run = run_playbook_in(tmp_path, case_id, playbook, inventory=os.path.join(cluster.state_dir, "inventory.yml"),
                          extra_vars=_fill(extra_vars, ctx), verbosity=3, env=FAST)

    output = run.stdout + run.stderr
    assert run.rc != 0, output[-3000:]
    failed = [result for result in run.results if result["status"] == "failed"]
    assert failed, output[-3000:]
    messages = [result["result"].get("msg", "") for result in failed]
    assert any(re.search(expect, message) for message in messages), messages
    assert "Traceback" not in output
    # A permanent error is never retried (the etcd gate wait would retry for minutes).
    assert all(result["result"].get("attempts", 1) == 1 for result in run.results), [
        (result["task"], result["result"].get("attempts")) for result in run.results if result["result"].get("attempts", 1) != 1]
    assert changes(cluster, audited, allow_dry_run=True) == []
    assert snapshot(cluster) == before
    assert_no_secret(output, cluster_secrets(cluster))
