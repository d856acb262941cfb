# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_rotate_ca end to end: 3 control planes and 2 workers provisioned by the cluster role, for each config form
(Talos v1.13 configs: v1alpha1 fields only; Talos v1.14: the multi-document form).

Check mode plans and changes nothing; the rotation runs with -vvv holding no key; afterwards the old talosconfig is
refused, the new one works, the bundle matches every node's config, and a rerun changes nothing. Interrupted runs - a
node powered off right after its accept step, another right after its swap - leave a cluster the credentials reach,
and a rerun finishes the rotation.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import os
import shutil
import signal
import time

import pytest
import yaml
from playbook_runner import kill_run, process_tree, run_playbook_in, when

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotation as ca_rotation
from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from talos_emulator import EmulatedCluster
from test_robustness import assert_no_secret, cluster_secrets, secret_forms

pytestmark = pytest.mark.long

FORMS = {"v1alpha1": "v1.13.5", "documents": "v1.14.0"}


class Setup(object):
    def __init__(self, form, cluster, workdir):
        self.form = form
        self.cluster = cluster
        self.workdir = workdir
        self.secrets = workdir / "generated" / "secrets.yaml"
        self.talosconfig = workdir / "generated" / "talosconfig"
        self.runs = 0

    @property
    def addresses(self):
        return [node.address for node in self.cluster.nodes]

    def play(self, module, args, talosconfig=None, check=False, diff=False, verbosity=0, expect_rc=0, on_start=None,
             **keywords):
        self.runs += 1
        task = dict({"name": "task", "talos_linux.talos." + module: args}, **keywords)
        play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                 "module_defaults": {"group/talos_linux.talos.talos": {
                     "talosconfig": str(talosconfig or self.talosconfig), "timeout": 10}},
                 "tasks": [task]}]
        run = run_playbook_in(self.workdir, "run-%d" % self.runs, play, check=check, diff=diff, verbosity=verbosity,
                              on_start=on_start)
        assert run.rc == expect_rc, "ansible-playbook exited %d, expected %d\n%s\n%s" % (
            run.rc, expect_rc, run.stdout[-6000:], run.stderr[-3000:])
        # A run killed mid-task records no result.
        return run, (run.task("task") if run.tasks("task") else None)

    def rotate(self, issued_after, new_talos_ca=None, rotate=None, abandon=False, wait_timeout=5, **options):
        args = dict(nodes=self.addresses, secrets=str(self.secrets), issued_after=issued_after, wait_timeout=wait_timeout)
        if new_talos_ca is not None:
            args["new_cas"] = [dict(new_talos_ca, ca="talos")]
        if rotate is not None:
            args["rotate"] = rotate
        if abandon:
            args["abandon"] = True
        return self.play("talos_rotate_ca", args, **options)

    def keep_talosconfig(self, name):
        """A copy of the talosconfig as it is now (the old credentials a rotation revokes), at ``name``."""
        path = self.workdir / name
        shutil.copy(str(self.talosconfig), str(path))
        return path

    def bundle(self):
        return yaml.safe_load(self.secrets.read_text())

    def talos_ca(self):
        return base64.b64decode(self.bundle()["certs"]["os"]["crt"]).decode()

    def machine(self, node):
        return [document for document in yaml.safe_load_all(node.config_bytes) if "kind" not in document][0]["machine"]

    def kinds(self):
        return [[document.get("kind") for document in yaml.safe_load_all(node.config_bytes)] for node in self.cluster.nodes]

    def secret_strings(self, *bundles):
        found = set()
        for bundle in bundles:
            for name, pair in bundle["certs"].items():
                key = pair.get("key")
                if key:
                    found.update({key, base64.b64decode(key).decode()})
                    found.update(line for line in base64.b64decode(key).decode().splitlines() if len(line) >= 16
                                 and not line.startswith("-----"))
        for path in self.workdir.glob("**/talosconfig*"):
            document = yaml.safe_load(path.read_text())
            for context in document["contexts"].values():
                found.update({context["key"], base64.b64decode(context["key"]).decode()})
        return found


# The stacks' runs (tests/run-all) take the v1alpha1 form only: the documents form is the same code on another input.
@pytest.fixture(scope="module", params=[pytest.param("documents", marks=pytest.mark.once), "v1alpha1"])
def rotation_cluster(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rotate-%s" % request.param)
    cluster = EmulatedCluster.start(str(workdir / "cluster"), controlplanes=3, workers=2, maintenance=True,
                                    talos_version=FORMS[request.param], reboot_seconds=0.1)
    try:
        generated = workdir / "generated"
        generated.mkdir()
        # Provisioned with the modules the cluster role runs, without etcd's bootstrap: the Talos API CA needs no etcd.
        common = dict(secrets=str(generated / "secrets.yaml"), cluster_name="rotate-%s" % request.param,
                      talos_version=FORMS[request.param])
        provision = run_playbook_in(workdir, "provision", [{
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "tasks": [
                {"talos_linux.talos.talos_machine_secrets": {"path": common["secrets"], "talos_version": common["talos_version"]}},
                {"talos_linux.talos.talos_machine_config": dict(
                    common, machine_type="{{ item }}", dest="%s/{{ item }}.yaml" % generated,
                    cluster_endpoint="https://%s:6443" % cluster.controlplanes[0].address),
                 "loop": ["controlplane", "worker"]},
                {"talos_linux.talos.talos_client_config": {
                    "secrets": common["secrets"], "cluster_name": common["cluster_name"], "dest": str(generated / "talosconfig"),
                    "endpoints": [node.endpoint for node in cluster.controlplanes]}},
                {"talos_linux.talos.talos_apply_config": {
                    "node": "{{ item.address }}", "endpoints": ["{{ item.endpoint }}"], "insecure": True,
                    "config_file": "%s/{{ item.type }}.yaml" % generated, "wait": True, "wait_timeout": 60,
                    "talosconfig": str(generated / "talosconfig")},
                 "loop": [{"address": node.address, "endpoint": node.endpoint,
                           "type": "controlplane" if node in cluster.controlplanes else "worker"} for node in cluster.nodes]},
            ]}])
        assert provision.rc == 0, provision.stdout[-6000:] + provision.stderr[-3000:]
        yield Setup(request.param, cluster, workdir)
    finally:
        cluster.stop()


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _assert_rotated(setup, old_ca, old_talosconfig):
    new_ca = setup.talos_ca()
    assert new_ca != old_ca
    for node in setup.cluster.nodes:
        machine = setup.machine(node)
        assert base64.b64decode(machine["ca"]["crt"]).decode() == new_ca, node.name
        assert "acceptedCAs" not in machine, node.name
        if node in setup.cluster.controlplanes:
            assert machine["ca"]["key"] == setup.bundle()["certs"]["os"]["key"]
        else:
            assert machine["ca"]["key"] == ""
    assert not setup.secrets.with_name("secrets.yaml.previous").exists()
    assert not setup.talosconfig.with_name("talosconfig.previous").exists()
    # The new talosconfig reaches every node, whose apid serves a certificate of the new CA; the old one is refused.
    _run, info = setup.play("talos_certificate_info", {"nodes": setup.addresses})
    assert info["status"] == "ok", info["result"]
    fingerprint = talos_pki.fingerprint(talos_pki.load_certificate(new_ca, "new"))
    for node in setup.addresses:
        assert info["result"]["nodes"][node]["talos_ca"]["fingerprint_sha256"] == fingerprint
        assert info["result"]["nodes"][node]["apid"]["trusted"] is True
    _run, refused = setup.play("talos_certificate_info", {"nodes": setup.addresses}, talosconfig=old_talosconfig,
                               expect_rc=2)
    assert "Certificate verification of endpoint" in refused["result"]["msg"], refused["result"]["msg"]
    # The old client certificate, even when its talosconfig trusts the new CA, is refused by every node.
    document = yaml.safe_load(open(old_talosconfig).read())
    for context in document["contexts"].values():
        context["ca"] = base64.b64encode(new_ca.encode()).decode()
    for node in setup.cluster.controlplanes:
        for context in document["contexts"].values():
            context["endpoints"] = [node.endpoint]
        old_certificate = setup.workdir / ("talosconfig-old-certificate-%s" % node.name)
        old_certificate.write_text(yaml.safe_dump(document))
        _run, refused = setup.play("talos_certificate_info", {"nodes": [node.address]}, talosconfig=str(old_certificate),
                                   expect_rc=2)
        assert "refused the client certificate" in refused["result"]["msg"], refused["result"]["msg"]


def test_check_mode_plans_and_the_rotation_revokes_the_old_talosconfig(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    old_ca, old_bundle = setup.talos_ca(), setup.bundle()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before")
    configs = [node.config_bytes for node in cluster.nodes]
    audited = len(cluster.audit())
    kinds = setup.kinds()
    assert ("KubeAPIServerCAConfig" in kinds[0]) == (setup.form == "documents")

    run, check = setup.rotate(_now(), check=True, diff=True, verbosity=3)
    assert check["status"] == "changed", check["result"]
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle))
    result = check["result"]
    assert [(entry["step"], entry["node"]) for entry in result["plan"]][:5] == [("accept", node) for node in setup.addresses]
    assert [entry["step"] for entry in result["plan"]] == ["accept"] * 5 + ["swap"] * 5 + ["prove"] * 5 + ["drop"] * 5
    assert all(entry["phase"] == "original" for entry in result["node_phases"].values())
    assert "<new CA>" in result["diff"]["after"] and "machine.acceptedCAs" in result["diff"]["before"]
    assert [node.config_bytes for node in cluster.nodes] == configs and len(cluster.audit()) == audited
    assert setup.talos_ca() == old_ca and not setup.secrets.with_name("secrets.yaml.previous").exists()

    boot_ids = [node.boot_id for node in cluster.nodes]
    run, rotated = setup.rotate(_now(), diff=True, verbosity=3)
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    result = rotated["result"]
    assert len(result["done"]) == 20 and result["files"]["previous_secrets"] is None
    new_fingerprint = result["talos_ca"]["new"]["fingerprint_sha256"]
    assert result["diff"]["after"].count("machine.ca %s, machine.acceptedCAs []" % new_fingerprint) == 5
    assert result["talos_ca"]["new"]["key_algorithm"] == result["talos_ca"]["old"]["key_algorithm"] == "ed25519"
    assert result["talos_ca"]["new"]["subject"] == result["talos_ca"]["old"]["subject"]
    applies = [entry for entry in cluster.audit()[audited:] if entry["method"].endswith("ApplyConfiguration")
               and not entry["dry_run"]]
    assert len(applies) == 15 and {entry["mode"] for entry in applies} == {"NO_REBOOT"}
    assert [node.boot_id for node in cluster.nodes] == boot_ids
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    _assert_rotated(setup, old_ca, str(old_talosconfig))
    # Only the Talos API CAs changed: every other document stays.
    assert setup.kinds() == kinds
    # A config rendered before the rotation still names the old CA: applied now, it would lock the new talosconfig out.
    configs, audited = [node.config_bytes for node in cluster.nodes], len(cluster.audit())
    _run, stale = setup.play("talos_apply_config", {"node": setup.addresses[0],
                                                    "config_file": str(setup.workdir / "generated" / "controlplane.yaml")},
                             expect_rc=2)
    assert stale["result"]["msg"].startswith(
        "The Talos CA of config_file (machine.ca.crt, sha256 %s) is not a CA the talosconfig trusts"
        % result["talos_ca"]["old"]["fingerprint_sha256"][:23]), stale["result"]["msg"]
    assert [node.config_bytes for node in cluster.nodes] == configs and len(cluster.audit()) == audited

    # The same issued_after again: the CA is younger now, nothing is due.
    _run, again = setup.rotate(result["talos_ca"]["new"]["not_before"])
    assert again["status"] == "ok" and again["result"]["plan"] == [] and again["result"]["rotation"] is None


@pytest.mark.once
def test_a_node_off_after_its_accept_step_and_another_after_its_swap_are_finished_by_reruns(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    worker, other = cluster.workers
    old_ca = setup.talos_ca()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before-2")
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    # The second worker loses power right after it accepted the new CA.
    old_bundle = setup.bundle()
    cluster.faults.power_off_when(other.name, lambda node: "acceptedCAs" in setup.machine(node))
    run, failed = setup.rotate(_now(), expect_rc=2, verbosity=3)
    cluster.faults.clear()
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    assert failed["status"] == "failed"
    message = failed["result"]["msg"]
    assert message.startswith("The Talos API CA rotation stopped at the accept step on node %s" % other.address), message
    assert "rerun the task to continue" in message.lower()
    assert failed["result"]["files"]["previous_secrets"] == str(setup.secrets) + ".previous"
    # Both talosconfigs work on the nodes that answer: the previous one, and the current one (trusting both CAs).
    for talosconfig in (str(old_talosconfig), str(setup.talosconfig)):
        _run, info = setup.play("talos_certificate_info", {"nodes": [n.address for n in cluster.nodes if n is not other]},
                                talosconfig=talosconfig)
        assert info["status"] == "ok", info["result"]

    cluster.power_on(other)
    # The first worker loses power right after it swapped to the new CA.
    new_ca = setup.talos_ca()
    cluster.faults.power_off_when(worker.name, lambda node: base64.b64decode(setup.machine(node)["ca"]["crt"]).decode() == new_ca)
    _run, failed = setup.rotate(_now(), expect_rc=2)
    cluster.faults.clear()
    assert failed["result"]["msg"].startswith("The Talos API CA rotation stopped at the swap step on node %s" % worker.address)
    assert failed["result"]["rotation"] == "a rotation in progress is continued"
    phases = dict((node, entry["phase"]) for node, entry in failed["result"]["node_phases"].items())
    assert phases[other.address] == "accepted" and phases[worker.address] == "accepted"

    cluster.power_on(worker)
    _run, finished = setup.rotate(_now())
    assert finished["status"] == "changed", finished["result"].get("msg")
    assert setup.talos_ca() == new_ca
    _assert_rotated(setup, old_ca, str(old_talosconfig))


def _new_ca(algorithm):
    """A CA as a user's PKI would hand it over: certificate and key in PEM."""
    certificate, key = talos_pki.generate_ca(algorithm, "talos", talos_pki.now_utc(), datetime.timedelta(days=3650))
    return {"crt": talos_pki.certificate_pem(certificate), "key": talos_pki.private_key_pem(key)}


# The Talos API CA lives in the v1alpha1 document in both forms: one form is enough for these two.
@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_run_killed_right_after_its_swap_step_is_finished_by_a_rerun(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    old_ca = setup.talos_ca()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before-kill")
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    def swapped_everywhere():
        if not setup.secrets.with_name("secrets.yaml.previous").exists() or setup.talos_ca() == old_ca:
            return False
        new = setup.talos_ca()
        return all(base64.b64decode(setup.machine(node)["ca"]["crt"]).decode() == new for node in cluster.nodes)

    def kill():
        # Every node answers slowly from here on, so the kill lands before the run gets any further.
        for node in cluster.nodes:
            cluster.faults.set_latency(node, 2)
        kill_run(processes[0])

    processes = []
    watcher = when(swapped_everywhere, kill)
    run, killed = setup.rotate(_now(), on_start=processes.append, expect_rc=-signal.SIGKILL)
    watcher.join(5)
    for node in cluster.nodes:
        cluster.faults.set_latency(node, 0)
    assert killed is None, killed
    new_ca = setup.talos_ca()
    # Every node issues from the new CA and still accepts the old one: the run stopped between swap and drop.
    for node in cluster.nodes:
        machine = setup.machine(node)
        assert base64.b64decode(machine["ca"]["crt"]).decode() == new_ca, node.name
        assert [base64.b64decode(entry["crt"]).decode() for entry in machine["acceptedCAs"]] == [old_ca], node.name
    assert setup.talosconfig.with_name("talosconfig.previous").exists()
    # The talosconfig on disk trusts both CAs and reaches every node; so does the old client certificate once its
    # talosconfig trusts the new CA too: the nodes serve certificates of the new CA and still accept the old one's.
    old_certificate = setup.workdir / "talosconfig-old-certificate-both-cas"
    document = yaml.safe_load(old_talosconfig.read_text())
    for context in document["contexts"].values():
        context["ca"] = base64.b64encode((old_ca + new_ca).encode()).decode()
    old_certificate.write_text(yaml.safe_dump(document))
    for talosconfig in (str(setup.talosconfig), str(old_certificate)):
        _run, info = setup.play("talos_certificate_info", {"nodes": setup.addresses}, talosconfig=talosconfig)
        assert info["status"] == "ok", info["result"]
        assert {entry["apid"]["trusted"] for entry in info["result"]["nodes"].values()} == {True}
    _run, unverified = setup.play("talos_certificate_info", {"nodes": setup.addresses}, talosconfig=str(old_talosconfig),
                                  expect_rc=2)
    assert "Certificate verification of endpoint" in unverified["result"]["msg"], unverified["result"]["msg"]

    _run, finished = setup.rotate(_now())
    assert finished["status"] == "changed", finished["result"].get("msg")
    result = finished["result"]
    assert result["rotation"] == "a rotation in progress is continued"
    assert set(entry["phase"] for entry in result["node_phases"].values()) == {"swapped"}
    assert [entry["step"] for entry in result["done"]] == ["prove"] * 5 + ["drop"] * 5
    assert setup.talos_ca() == new_ca
    _assert_rotated(setup, old_ca, str(old_talosconfig))


@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_rotation_to_a_given_ca(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    old_ca, old_bundle = setup.talos_ca(), setup.bundle()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before-given")
    configs, audited = [node.config_bytes for node in cluster.nodes], len(cluster.audit())

    # A CA of another key type than the bundle's is refused before anything changes.
    _run, refused = setup.rotate(None, new_talos_ca=_new_ca("ecdsa"), expect_rc=2)
    assert refused["result"]["msg"] == ("new_cas[ca=talos] holds an ecdsa key, but the CA it replaces has an ed25519 key: "
                                        "give an ed25519 CA, as the nodes' certificates keep their key type.")
    assert [node.config_bytes for node in cluster.nodes] == configs and len(cluster.audit()) == audited
    assert setup.bundle() == old_bundle and not setup.secrets.with_name("secrets.yaml.previous").exists()

    given = _new_ca("ed25519")
    fingerprint = talos_pki.fingerprint(talos_pki.load_certificate(given["crt"], "given"))
    _run, check = setup.rotate(None, new_talos_ca=given, check=True, diff=True)
    assert check["status"] == "changed" and check["result"]["rotation"] == "a new Talos CA was given"
    assert check["result"]["talos_ca"]["new"]["fingerprint_sha256"] == fingerprint
    assert fingerprint in check["result"]["diff"]["after"]
    assert [node.config_bytes for node in cluster.nodes] == configs and setup.bundle() == old_bundle

    run, rotated = setup.rotate(None, new_talos_ca=given, verbosity=3)
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    assert rotated["result"]["talos_ca"]["new"]["fingerprint_sha256"] == fingerprint
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()) | {given["key"]})
    assert setup.talos_ca() == given["crt"]
    assert base64.b64decode(setup.bundle()["certs"]["os"]["key"]).decode() == given["key"]
    _assert_rotated(setup, old_ca, str(old_talosconfig))

    _run, again = setup.rotate(None, new_talos_ca=given)
    assert again["status"] == "ok" and again["result"]["plan"] == [] and again["result"]["rotation"] is None


def test_a_node_older_than_talos_1_7_is_refused_before_anything_changes(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, talos_version="v1.6.7")
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    shutil.copy(cluster.state_dir + "/secrets.yaml", str(secrets))
    shutil.copy(cluster.talosconfig_path(), str(talosconfig))
    before = (secrets.read_text(), talosconfig.read_text())
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
        "name": "rotate", "talos_linux.talos.talos_rotate_ca": {
            "talosconfig": str(talosconfig), "nodes": [node.address for node in cluster.nodes], "secrets": str(secrets),
            "issued_after": _now()}}]}]
    result = run_playbook(play, expect_rc=2).task("rotate")["result"]
    assert result["msg"] == ("Node %s runs Talos v1.6.7: the Talos API CA can be rotated from Talos v1.7 on "
                             "(machine.acceptedCAs); upgrade it first." % cluster.controlplanes[0].address)
    assert (secrets.read_text(), talosconfig.read_text()) == before
    assert not (tmp_path / "secrets.yaml.previous").exists() and not (tmp_path / "talosconfig.previous").exists()
    assert cluster.audit() == []


def _applies(cluster, since=0):
    return [entry for entry in cluster.audit()[since:] if entry["method"].endswith("ApplyConfiguration")]


@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_kubernetes_ca_rotation_without_a_kubernetes_api_is_refused_at_once_before_any_change(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    # The cluster runs no Kubernetes API: nothing answers at the endpoint its configs name.
    before = (setup.secrets.read_text(), setup.talosconfig.read_text(), [node.config_bytes for node in cluster.nodes])
    audited = len(cluster.audit())
    for rotate, check in ((["kubernetes"], True), (["kubernetes"], False), (["talos", "kubernetes"], False)):
        started = time.monotonic()
        run, refused = setup.rotate(_now(), rotate=rotate, wait_timeout=60, check=check, diff=check, verbosity=3,
                                    expect_rc=2)
        assert_no_secret(run.stdout + run.stderr, setup.secret_strings(setup.bundle()))
        message = refused["result"]["msg"]
        assert "The Kubernetes API at https://%s:6443 could not be reached" % cluster.controlplanes[0].address in message, message
        assert message.endswith("The Kubernetes CA rotation waits for the Kubernetes API after each node's change, so it "
                                "changed nothing."), message
        # It fails at once, without the wait each step would make for the API.
        assert time.monotonic() - started < 60
        assert (setup.secrets.read_text(), setup.talosconfig.read_text(), [node.config_bytes for node in cluster.nodes]) == before
        assert _applies(cluster, audited) == []
        assert not setup.secrets.with_name("secrets.yaml.previous").exists()
        assert not setup.talosconfig.with_name("talosconfig.previous").exists()


@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_rotation_that_failed_half_way_is_rolled_back_with_abandon(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    worker = cluster.workers[0]
    old_ca, old_bundle = setup.talos_ca(), setup.bundle()
    talosconfig = setup.talosconfig.read_text()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before-abandon")
    configs = dict((node.name, setup.machine(node)) for node in cluster.nodes)
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    # The first worker loses power right after it swapped to the new CA: control planes swapped, the other worker not.
    cluster.faults.power_off_when(worker.name, lambda node: base64.b64decode(setup.machine(node)["ca"]["crt"]).decode() != old_ca)
    _run, failed = setup.rotate(_now(), expect_rc=2)
    cluster.faults.clear()
    assert failed["result"]["msg"].startswith("The Talos API CA rotation stopped at the swap step on node %s" % worker.address)
    assert "or with abandon: true to roll the rotation back" in failed["result"]["msg"]
    new_bundle, new_ca = setup.bundle(), setup.talos_ca()
    cluster.power_on(worker)

    # abandon with issued_after is refused before anything.
    _run, refused = setup.rotate(_now(), abandon=True, expect_rc=2)
    assert refused["result"]["msg"].startswith("abandon: true rolls the rotation in progress back")

    audited = len(cluster.audit())
    run, check = setup.rotate(None, abandon=True, check=True, diff=True, verbosity=3)
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, new_bundle))
    result = check["result"]
    assert check["status"] == "changed" and result["rotation"] == "a rotation in progress is rolled back"
    assert result["talos_ca"]["old"]["fingerprint_sha256"] == talos_pki.fingerprint(talos_pki.load_certificate(new_ca, "new"))
    assert result["talos_ca"]["new"]["fingerprint_sha256"] == talos_pki.fingerprint(talos_pki.load_certificate(old_ca, "old"))
    phases = dict((node.address, result["node_phases"][node.address]["phase"]) for node in cluster.nodes)
    assert phases == dict((node.address, "accepted" if node is cluster.workers[1] else "swapped") for node in cluster.nodes)
    assert [entry["step"] for entry in result["plan"]] == ["swap"] * 4 + ["prove"] * 5 + ["drop"] * 5
    assert _applies(cluster, audited) == [] and setup.bundle() == new_bundle

    run, abandoned = setup.rotate(None, abandon=True, verbosity=3)
    assert abandoned["status"] == "changed", abandoned["result"].get("msg")
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, new_bundle))
    assert [entry["step"] for entry in abandoned["result"]["done"]] == ["swap"] * 4 + ["prove"] * 5 + ["drop"] * 5
    # Every node, the bundle and the talosconfig are what they were; the old talosconfig works again.
    assert dict((node.name, setup.machine(node)) for node in cluster.nodes) == configs
    assert setup.bundle() == old_bundle and setup.talosconfig.read_text() != "" and (
        yaml.safe_load(setup.talosconfig.read_text()) == yaml.safe_load(talosconfig))
    assert not setup.secrets.with_name("secrets.yaml.previous").exists()
    assert not setup.talosconfig.with_name("talosconfig.previous").exists()
    _run, info = setup.play("talos_certificate_info", {"nodes": setup.addresses}, talosconfig=str(old_talosconfig))
    assert info["status"] == "ok" and {entry["apid"]["trusted"] for entry in info["result"]["nodes"].values()} == {True}

    _run, again = setup.rotate(None, abandon=True)
    assert again["status"] == "ok" and again["result"]["plan"] == [] and again["result"]["rotation"] is None

    # A new rotation starts from the old CA.
    _run, rotated = setup.rotate(_now())
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    assert setup.talos_ca() not in (old_ca, new_ca)
    _assert_rotated(setup, old_ca, str(old_talosconfig))


def _foreign_context(cluster, name):
    """A talosconfig context of another cluster (its own CA and client certificate) with this cluster's endpoints."""
    other = SecretsBundle.generate("v1.14")
    text, _issued, _crt = client_config.render_talosconfig(other, name, endpoints=[node.endpoint for node in cluster.controlplanes])
    return yaml.safe_load(text)["contexts"][name], other


def test_a_talosconfig_of_another_cluster_is_refused_and_the_ca_keeps_its_subject(emulator, run_playbook, tmp_path):
    # The emulator's bundle holds a Talos API CA with a Common Name (CN=talos,O=talos), as a CA made elsewhere may.
    cluster = emulator(controlplanes=1, workers=1)
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    shutil.copy(cluster.state_dir + "/secrets.yaml", str(secrets))
    document = yaml.safe_load(open(cluster.talosconfig_path()).read())
    ours = document["context"]
    foreign, other = _foreign_context(cluster, "other")
    document["contexts"]["other"] = foreign
    document["context"] = "other"
    talosconfig.write_text(yaml.safe_dump(document))
    before = (secrets.read_text(), talosconfig.read_text())

    def play(**options):
        return [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [{
            "name": "rotate", "talos_linux.talos.talos_rotate_ca": dict({
                "talosconfig": str(talosconfig), "nodes": [node.address for node in cluster.nodes], "secrets": str(secrets),
                "issued_after": _now(), "wait_timeout": 30}, **options)}]}]

    secrets_of_both = cluster_secrets(cluster)
    for value in [base64.b64decode(foreign["key"]).decode()] + [authority.key_pem for authority in other.cas.values()]:
        secrets_of_both |= secret_forms(value)
    # The task reaches the nodes with certificates of the bundle, so nothing else would stop it: refused at once.
    for check in (True, False):
        run = run_playbook(play(), check=check, diff=check, verbosity=3, expect_rc=2)
        assert_no_secret(run.stdout + run.stderr, secrets_of_both)
        result = run.task("rotate")["result"]
        assert result["msg"].startswith("The talosconfig %s (context other) trusts the Talos API CA O=talos (%s), not this "
                                        "cluster's: give the talosconfig of this cluster, whose Talos API CA the secrets "
                                        "bundle %s holds (" % (talosconfig, talos_pki.fingerprint(other.os_ca.certificate),
                                                               secrets)), result["msg"]
        assert (secrets.read_text(), talosconfig.read_text()) == before
        assert not list(tmp_path.glob("*.previous")) and cluster.audit() == []

    # The cluster's own context of the same file: rotated, and the other context stays as it was.
    run = run_playbook(play(context=ours), verbosity=3)
    for value in [SecretsBundle.load(str(secrets)).os_ca.key_pem,
                  base64.b64decode(yaml.safe_load(talosconfig.read_text())["contexts"][ours]["key"]).decode()]:
        secrets_of_both |= secret_forms(value)
    assert_no_secret(run.stdout + run.stderr, secrets_of_both)
    result = run.task("rotate")["result"]
    assert run.task("rotate")["status"] == "changed", result.get("msg")
    old, new = result["talos_ca"]["old"], result["talos_ca"]["new"]
    assert old["subject"] == new["subject"] == new["issuer"] and "CN=talos" in old["subject"] and "O=talos" in old["subject"]
    assert old["fingerprint_sha256"] != new["fingerprint_sha256"]
    after = yaml.safe_load(talosconfig.read_text())
    assert after["contexts"]["other"] == foreign and after["context"] == "other"
    assert after["contexts"][ours]["ca"] != document["contexts"][ours]["ca"]


@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_kill_9_of_ansible_playbook_alone_leaves_its_worker_to_finish_the_rotation(rotation_cluster):
    """What docs/security.md says of a killed run: ansible-core's worker runs the task in a session of its own, so a
    kill -9 of ansible-playbook alone does not stop it: the rotation ends, and a rerun finds nothing left to do."""
    setup = rotation_cluster
    cluster = setup.cluster
    old_ca = setup.talos_ca()
    old_talosconfig = setup.keep_talosconfig("talosconfig-before-kill-9")
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    processes, workers = [], []
    first = cluster.controlplanes[0]

    def kill_ansible_playbook():
        workers.extend(process_tree(processes[0].pid)[1:])
        os.kill(processes[0].pid, signal.SIGKILL)

    watcher = when(lambda: "acceptedCAs" in setup.machine(first), kill_ansible_playbook)
    _run, killed = setup.rotate(_now(), on_start=processes.append, expect_rc=-signal.SIGKILL)
    watcher.join(5)
    assert killed is None and workers
    assert setup.secrets.with_name("secrets.yaml.previous").exists()
    # The worker goes on with the task (its output goes nowhere now) until the rotation is done.
    deadline = time.monotonic() + 300
    while any(os.path.exists("/proc/%d" % pid) for pid in workers):
        assert time.monotonic() < deadline, "the worker still runs"
        time.sleep(0.5)
    new_ca = setup.talos_ca()
    assert new_ca != old_ca
    _assert_rotated(setup, old_ca, str(old_talosconfig))

    _run, rerun = setup.rotate(talos_pki.certificate_facts(talos_pki.load_certificate(new_ca, "new"))["not_before"])
    assert rerun["status"] == "ok" and rerun["result"]["plan"] == [] and rerun["result"]["rotation"] is None


@pytest.mark.once
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_kubernetes_ca_rotation_killed_before_its_first_step_is_abandoned_without_the_kubernetes_api(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    old_bundle = setup.bundle()
    # As a run killed right after it wrote the bundle: the new Kubernetes CA in it, the old one in the previous bundle.
    files = ca_rotation.ControllerFiles(str(setup.secrets), str(setup.talosconfig), None, ca_rotation.KUBERNETES)
    files.start(ca_rotation.new_authority_like(files.old, talos_pki.now_utc()))
    audited = len(cluster.audit())

    # Going on needs the Kubernetes API (there is none here): refused at once, nothing changes.
    _run, refused = setup.rotate(None, rotate=["kubernetes"], expect_rc=2)
    assert "could not be reached" in refused["result"]["msg"] and _applies(cluster, audited) == []
    # No node has a step to go back: the rollback needs no Kubernetes API and puts the bundle back.
    run, abandoned = setup.rotate(None, rotate=["talos", "kubernetes"], abandon=True, verbosity=3)
    assert abandoned["status"] == "changed", abandoned["result"].get("msg")
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    assert abandoned["result"]["plan"] == [] and abandoned["result"]["done"] == []
    assert abandoned["result"]["rotation"] == "a Kubernetes CA rotation in progress is rolled back"
    assert setup.bundle() == old_bundle and not setup.secrets.with_name("secrets.yaml.previous").exists()
    assert _applies(cluster, audited) == []
    _run, again = setup.rotate(None, rotate=["talos", "kubernetes"], abandon=True)
    assert again["status"] == "ok" and again["result"]["rotation"] is None
