# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""certificates/rotate_ca.py: talos_rotate_ca's run against the emulator - the options refused before anything, the check
mode plan, a rotation and its rerun, a failed step carrying the whole result, and the run that finishes it."""

import base64
import datetime
import shutil

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotate_ca
from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotation as ca_rotation
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

# Every CA expires within a century: a rotation is due whenever the bundle's CA is the one the nodes started with.
CENTURY = "876000h"


class Setup(object):
    """An emulated cluster with its secrets bundle and talosconfig copied where a rotation may rewrite them."""

    def __init__(self, cluster, tmp_path):
        self.cluster = cluster
        self.secrets = tmp_path / "secrets.yaml"
        self.talosconfig = tmp_path / "talosconfig"
        shutil.copy(cluster.state_dir + "/secrets.yaml", str(self.secrets))
        shutil.copy(cluster.talosconfig_path(), str(self.talosconfig))
        self.nodes = [node.address for node in cluster.nodes]
        self.hidden = set()
        self.lines = []

    def settings(self):
        return ConnectionSettings.from_params({"talosconfig": str(self.talosconfig), "timeout": 10})

    def client(self):
        return TalosClient(self.settings())

    def rotate(self, client=None, nodes=None, **options):
        options.setdefault("wait_timeout", 10)
        client = client or self.client()
        try:
            return rotate_ca.rotate(client, self.nodes if nodes is None else nodes, str(self.secrets), hide=self.hidden.update,
                                    progress=self.lines.append, **options)
        finally:
            client.close()

    def bundle(self):
        return SecretsBundle.load(str(self.secrets))

    def issuing_ca(self, node):
        machine = next(document for document in yaml.safe_load_all(node.config_bytes) if "kind" not in document)["machine"]
        return base64.b64decode(machine["ca"]["crt"]).decode()

    def applies(self, since=0):
        return [entry for entry in self.cluster.audit()[since:] if entry["method"].endswith("ApplyConfiguration")
                and not entry["dry_run"]]


@pytest.fixture
def setup(emulator, tmp_path):
    return Setup(emulator(controlplanes=1, workers=1), tmp_path)


def _fingerprint(authority):
    return talos_pki.fingerprint(authority.certificate)


def test_bad_options_are_refused_before_anything_is_read_or_written(setup):
    audited = len(setup.cluster.audit())
    other_ca = talos_pki.generate_ca("ed25519", "talos", talos_pki.now_utc(), datetime.timedelta(days=3650))
    given = {"ca": "talos", "crt": talos_pki.certificate_pem(other_ca[0]), "key": talos_pki.private_key_pem(other_ca[1])}
    refusals = [
        (dict(nodes=[None]), "talos_rotate_ca changes every node of the cluster: list all of them (control planes and "
                             "workers) in nodes."),
        (dict(abandon=True, issued_after="2026-01-01"),
         "abandon: true rolls the rotation in progress back to the CA it replaces: leave issued_after and new_cas out."),
        (dict(new_cas=[dict(given, ca="kubernetes")]),
         "new_cas has a kubernetes CA but rotate does not hold kubernetes: add kubernetes to rotate, or drop that entry."),
        (dict(new_cas=[given, given]), "new_cas has two talos CAs: give one."),
        (dict(issued_after="2999-01-01"), "issued_after 2999-01-01 is in the future: every run until then would rotate the "
                                          "CA again."),
    ]
    for options, message in refusals:
        with pytest.raises(TalosConfigError) as refused:
            setup.rotate(**options)
        assert refused.value.message == message
    # The connection options' credentials instead of a talosconfig: the file a Talos API CA rotation rewrites is missing.
    settings = setup.settings()
    direct = TalosClient(ConnectionSettings(settings.endpoints, ca=settings.ca, crt=settings.crt, key=settings.key))
    with pytest.raises(TalosConfigError, match="^talos_rotate_ca updates the talosconfig it connects with: set talosconfig"):
        setup.rotate(client=direct)
    # A Kubernetes CA rotation in progress (<secrets>.previous holds its old CA) is refused to a Talos API CA rotation.
    files = ca_rotation.ControllerFiles(str(setup.secrets), str(setup.talosconfig), "emulated", ca_rotation.KUBERNETES)
    files.start(ca_rotation.new_authority_like(files.old, talos_pki.now_utc()))
    with pytest.raises(TalosConfigError) as refused:
        setup.rotate(renew_before=CENTURY)
    assert refused.value.message == (
        "A rotation of the Kubernetes CA is in progress (%s.previous holds the old one): finish it first with rotate: "
        "[kubernetes], or roll it back with rotate: [kubernetes] and abandon: true." % setup.secrets)
    # Nothing was sent to a node, and the given CA's key was met (to hide) only when an entry was read.
    assert len(setup.cluster.audit()) == audited and setup.applies() == []
    assert given["key"] not in setup.hidden


def test_check_mode_plans_every_step_and_changes_nothing(setup):
    cp, worker = setup.nodes
    bundle, talosconfig, audited = setup.secrets.read_text(), setup.talosconfig.read_text(), len(setup.cluster.audit())
    result = setup.rotate(renew_before=CENTURY, check_mode=True, diff=True)
    old = setup.bundle().os_ca
    assert result["changed"] is True and result["done"] == []
    assert result["rotation"].startswith("the Talos CA expires on ") and result["rotation"].endswith(", within renew_before")
    assert [(entry["ca"], entry["step"], entry["node"]) for entry in result["plan"]] == [
        ("talos", step, node) for step in ca_rotation.STEPS for node in (cp, worker)]
    assert result["plan"][2] == {"ca": "talos", "step": "swap", "node": cp, "document": "v1alpha1",
                                 "fields": ["machine.ca", "machine.acceptedCAs"]}
    assert result["node_phases"] == {cp: {"machine_type": "controlplane", "phase": "original"},
                                     worker: {"machine_type": "worker", "phase": "original"}}
    assert result["talos_ca"]["old"]["fingerprint_sha256"] == _fingerprint(old) and result["talos_ca"]["new"] is None
    assert "kubernetes_ca" not in result
    assert result["files"] == {"secrets": str(setup.secrets), "talosconfig": str(setup.talosconfig),
                               "previous_secrets": None, "previous_talosconfig": None}
    assert result["diff"]["before"].count(_fingerprint(old)) == 4  # the bundle, the talosconfig, each node's machine.ca
    assert "node %s: machine.ca <new CA>, machine.acceptedCAs []" % worker in result["diff"]["after"]
    # The bundle's keys were handed over to be hidden; nothing changed anywhere.
    assert old.key_pem in setup.hidden
    assert setup.secrets.read_text() == bundle and setup.talosconfig.read_text() == talosconfig
    assert not (setup.secrets.parent / "secrets.yaml.previous").exists()
    assert len(setup.cluster.audit()) == audited


def test_a_rotation_runs_every_step_and_its_rerun_changes_nothing(setup):
    cp, worker = setup.nodes
    old, audited = setup.bundle().os_ca, len(setup.cluster.audit())
    result = setup.rotate(renew_before=CENTURY, diff=True)
    new = setup.bundle().os_ca
    assert _fingerprint(new) != _fingerprint(old)
    assert result["changed"] is True
    assert result["done"] == [{"ca": "talos", "step": step, "node": node} for step in ca_rotation.STEPS for node in (cp, worker)]
    assert result["talos_ca"]["new"]["fingerprint_sha256"] == _fingerprint(new)
    assert result["files"]["previous_secrets"] is None and result["files"]["previous_talosconfig"] is None
    assert "node %s: machine.ca %s, machine.acceptedCAs []" % (cp, _fingerprint(new)) in result["diff"]["after"]
    # Every node issues from the new CA, changed without a reboot; the talosconfig trusts the new CA alone.
    assert [setup.issuing_ca(node) for node in setup.cluster.nodes] == [new.crt_pem] * 2
    assert len(setup.applies(audited)) == 6 and {entry["mode"] for entry in setup.applies(audited)} == {"NO_REBOOT"}
    settings = setup.settings()
    assert settings.ca.strip() == new.crt_pem.strip()
    assert talos_pki.signed_by(talos_pki.load_certificate(settings.crt, "crt"), new.certificate)
    assert "node %s: drop done" % worker in setup.lines
    # The new CA's key was handed over to be hidden as soon as it was made.
    assert new.key_pem in setup.hidden

    again = setup.rotate(issued_after=result["talos_ca"]["new"]["not_before"])
    assert again["changed"] is False and again["plan"] == [] and again["done"] == [] and again["rotation"] is None
    # The nodes stand where a rotation of the bundle's (new) CA would start.
    assert again["node_phases"][worker] == {"machine_type": "worker", "phase": "original"}
    assert len(setup.applies(audited)) == 6


def test_a_failed_step_carries_the_whole_result_and_a_rerun_finishes_the_rotation(setup):
    cluster = setup.cluster
    cp, worker = cluster.controlplanes[0], cluster.workers[0]

    def power_off_the_worker(line):
        setup.lines.append(line)
        if line == "node %s: accept done" % cp.address:
            cluster.power_off(worker)

    client = setup.client()
    try:
        with pytest.raises(ActionFailed) as failed:
            rotate_ca.rotate(client, setup.nodes, str(setup.secrets), renew_before=CENTURY, wait_timeout=5,
                             hide=setup.hidden.update, progress=power_off_the_worker)
    finally:
        client.close()
    new = setup.bundle().os_ca
    message = failed.value.message
    assert message.startswith("The Talos API CA rotation stopped at the accept step on node %s (" % worker.address), message
    assert message.endswith("Rerun the task to continue (or with abandon: true to roll the rotation back); the previous "
                            "secrets bundle and talosconfig are kept at %s.previous and %s.previous." % (
                                setup.secrets, setup.talosconfig))
    result = failed.value.to_result()
    # What the run did, with the node and code of the step's own failure.
    assert result["done"] == [{"ca": "talos", "step": "accept", "node": cp.address}]
    assert result["changed"] is True and result["node"] == worker.address and result["code"]
    assert result["talos_ca"]["new"]["fingerprint_sha256"] == _fingerprint(new)
    assert result["files"]["previous_secrets"] == str(setup.secrets) + ".previous"
    assert result["files"]["previous_talosconfig"] == str(setup.talosconfig) + ".previous"
    assert len(result["plan"]) == 8 and result["node_phases"][worker.address]["phase"] == "original"
    assert setup.issuing_ca(cp) != new.crt_pem  # accepted, not swapped

    cluster.power_on(worker)
    finished = setup.rotate()
    assert finished["rotation"] == "a rotation in progress is continued" and finished["changed"] is True
    assert finished["node_phases"][cp.address]["phase"] == "accepted"
    assert [(entry["step"], entry["node"]) for entry in finished["done"]][0] == ("accept", worker.address)
    assert [setup.issuing_ca(node) for node in cluster.nodes] == [new.crt_pem] * 2
    assert not (setup.secrets.parent / "secrets.yaml.previous").exists()
