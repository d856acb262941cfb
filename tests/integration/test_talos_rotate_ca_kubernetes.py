# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_rotate_ca for the Kubernetes CA end to end: 3 control planes and 2 workers provisioned by the cluster role, a
real kube-apiserver (tests/kube_apiserver) storing its objects in the control planes' real etcd, restarted with the
CAs of the control planes' configs whenever they change (as Talos restarts the static pod), and the emulator's nodes
acting as kubelets. Both config forms: Talos v1.13 (``cluster.ca``/``cluster.acceptedCAs``) and Talos v1.14
(``KubeAPIServerCAConfig``).

Check mode plans and changes nothing; ``rotate: [kubernetes]`` runs with -vvv holding no key and returns once the
kube-apiserver runs the final CAs, even one that keeps serving with the old ones for seconds before it restarts;
afterwards the old admin kubeconfig is refused, one from the new CA works at once, the bundle matches every node's
config, and a rerun changes nothing.
A worker powered off right after its swap step stops the run with both credentials still accepted, and a rerun
finishes it. Then ``rotate: [talos, kubernetes]`` rotates both, the Talos API CA first.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import shutil
import time

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
import kubernetes_cluster
from playbook_runner import run_playbook_in

from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from talos_emulator import configgen
from test_robustness import assert_no_secret

# The Kubernetes CA rotation proves the rotation's logic: it runs on the default stack only (tests/run-all); the
# stacks' runs take the Kubernetes client through talos_kubernetes_upgrade and the Talos API CA rotation.
pytestmark = [pytest.mark.once, pytest.mark.long]

FORMS = {"v1alpha1": ("v1.13.5", "1.35.4"), "documents": ("v1.14.0", "1.36.3")}


class Setup(object):
    def __init__(self, form, cluster, server, workdir):
        self.form = form
        self.cluster = cluster
        self.server = server
        self.workdir = workdir
        self.secrets = workdir / "generated" / "secrets.yaml"
        self.talosconfig = workdir / "generated" / "talosconfig"
        self.kubeconfig = workdir / "generated" / "kubeconfig"
        self.runs = 0

    @property
    def addresses(self):
        return [node.address for node in self.cluster.nodes]

    def play(self, module, args, check=False, diff=False, verbosity=0, expect_rc=0):
        self.runs += 1
        play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                 "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": str(self.talosconfig), "timeout": 10}},
                 "tasks": [{"name": "task", "talos_linux.talos." + module: args}]}]
        run = run_playbook_in(self.workdir, "run-%d" % self.runs, play, check=check, diff=diff, verbosity=verbosity)
        assert run.rc == expect_rc, "ansible-playbook exited %d, expected %d\n%s\n%s" % (
            run.rc, expect_rc, run.stdout[-6000:], run.stderr[-3000:])
        return run, run.task("task")

    def rotate(self, rotate, issued_after, wait_timeout=90, abandon=False, **options):
        args = dict(nodes=self.addresses, secrets=str(self.secrets), rotate=rotate, issued_after=issued_after,
                    wait_timeout=wait_timeout)
        if abandon:
            args["abandon"] = True
        return self.play("talos_rotate_ca", args, **options)

    def bundle(self):
        return yaml.safe_load(self.secrets.read_text())

    def ca(self, name):
        return base64.b64decode(self.bundle()["certs"][name]["crt"]).decode()

    def node_cas(self, node):
        """``(issuing, accepted)`` Kubernetes CA certificates (PEM) of ``node``'s config, in either form."""
        settings = configgen.kubernetes_settings(node.config_bytes)
        accepted = [pem.decode() for pem in settings["accepted_crts"]]
        if settings["ca_crt"]:
            return settings["ca_crt"].decode(), accepted
        return accepted[0], accepted[1:]  # a v1.14 worker: the issuing CA is the first accepted one

    def settle(self):
        """Wait until the API server runs with the CAs of the control planes' configs (its restart takes seconds)."""
        deadline = time.monotonic() + 120
        while not self.server.settled(self.cluster.kubernetes_cas()):
            assert time.monotonic() < deadline, "the kube-apiserver did not restart with the new CAs"
            time.sleep(0.2)

    def fetch_kubeconfig(self, name):
        path = self.workdir / name
        _run, fetched = self.play("talos_kubeconfig", {"node": self.cluster.controlplanes[0].address, "dest": str(path)})
        assert fetched["status"] == "changed", fetched["result"]
        return path

    def secret_strings(self, *bundles):
        found = set()
        for bundle in bundles:
            for pair in bundle["certs"].values():
                key = pair.get("key")
                if key:
                    pem = base64.b64decode(key).decode()
                    found.update({key, pem})
                    found.update(line for line in pem.splitlines() if len(line) >= 16 and not line.startswith("-----"))
        for path in list(self.workdir.glob("**/kubeconfig*")) + list(self.workdir.glob("**/talosconfig*")):
            document = yaml.safe_load(path.read_text()) if path.is_file() else None
            if not isinstance(document, dict):
                continue
            found.update(user["user"]["client-key-data"] for user in document.get("users") or []
                         if "client-key-data" in user["user"])
            if isinstance(document.get("contexts"), dict):  # a talosconfig
                found.update(context["key"] for context in document["contexts"].values() if context.get("key"))
        return found


def node_names(kubeconfig_path=None, config=None):
    """The Node names the API server lists to this kubeconfig (a file, or a mapping)."""
    if config is not None:
        api = kube_config.new_client_from_config_dict(config)
    else:
        api = kube_config.new_client_from_config(config_file=str(kubeconfig_path))
    try:
        return sorted(node.metadata.name for node in kube_client.CoreV1Api(api).list_node(_request_timeout=10).items)
    finally:
        api.close()


def with_ca(kubeconfig_path, *ca_pems):
    """The kubeconfig at ``kubeconfig_path`` trusting the CAs ``ca_pems`` instead of its own: its client certificate
    is what the API server then judges."""
    config = yaml.safe_load(open(str(kubeconfig_path)).read())
    for entry in config["clusters"]:
        entry["cluster"]["certificate-authority-data"] = base64.b64encode("".join(ca_pems).encode()).decode()
    return config


@pytest.fixture(scope="module", params=sorted(FORMS))
def rotation_cluster(request, tmp_path_factory):
    talos_version, kubernetes_version = FORMS[request.param]
    workdir = tmp_path_factory.mktemp("rotate-k8s-%s" % request.param)
    with kubernetes_cluster.provisioned(workdir, "rotate-k8s-%s" % request.param, talos_version,
                                        kubernetes_version) as (cluster, server, _inventory, _secrets):
        yield Setup(request.param, cluster, server, workdir)


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _assert_rotated(setup, old_ca, old_kubeconfig):
    """Every node's config names the bundle's new Kubernetes CA alone; the old admin kubeconfig is refused, one the
    cluster issues now works; no previous bundle is left."""
    new_ca = setup.ca("k8s")
    assert new_ca != old_ca
    new_key = base64.b64decode(setup.bundle()["certs"]["k8s"]["key"])
    for node in setup.cluster.nodes:
        assert setup.node_cas(node) == (new_ca, []), node.name
        key = configgen.kubernetes_settings(node.config_bytes)["ca_key"]
        assert key == (new_key if node in setup.cluster.controlplanes else b""), node.name
    assert not setup.secrets.with_name("secrets.yaml.previous").exists()
    # The task returned once the kube-apiserver ran the configs' CAs: nothing to wait for.
    assert setup.server.settled(setup.cluster.kubernetes_cas()), "the kube-apiserver still restarts"
    assert old_ca.encode().strip() not in setup.server.client_ca_pem
    # The old kubeconfig no longer trusts the API server's certificate; and its client certificate, even trusting the
    # new CA, is refused by the API server.
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        node_names(old_kubeconfig)
    with pytest.raises(kube_client.exceptions.ApiException) as refused:
        node_names(config=with_ca(old_kubeconfig, new_ca))
    assert refused.value.status == 401
    new_kubeconfig = setup.fetch_kubeconfig("kubeconfig-%d" % setup.runs)
    assert len(node_names(new_kubeconfig)) == 5
    config = yaml.safe_load(new_kubeconfig.read_text())
    client = talos_pki.load_certificate(base64.b64decode(config["users"][0]["user"]["client-certificate-data"]).decode(), "crt")
    assert talos_pki.signed_by(client, talos_pki.load_certificate(new_ca, "new"))
    return new_kubeconfig


def _kubelet_stops(node):
    return sum(1 for _message, state, _stamp in node.services["kubelet"].events if state == "Finished")


def test_check_mode_plans_and_the_rotation_revokes_the_old_admin_kubeconfig(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    old_ca, talos_ca, old_bundle = setup.ca("k8s"), setup.ca("os"), setup.bundle()
    old_kubeconfig = setup.workdir / "kubeconfig-before"
    shutil.copy(str(setup.kubeconfig), str(old_kubeconfig))
    talosconfig = setup.talosconfig.read_text()
    assert len(node_names(old_kubeconfig)) == 5
    configs = [node.config_bytes for node in cluster.nodes]
    audited = len(cluster.audit())

    run, check = setup.rotate(["kubernetes"], _now(), check=True, diff=True, verbosity=3)
    assert check["status"] == "changed", check["result"]
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle))
    result = check["result"]
    controlplanes = [node.address for node in cluster.controlplanes]
    assert [(entry["step"], entry["node"]) for entry in result["plan"]] == (
        [("accept", node) for node in setup.addresses] + [("swap", node) for node in setup.addresses]
        + [("prove", node) for node in controlplanes] + [("drop", node) for node in setup.addresses])
    document = "KubeAPIServerCAConfig" if setup.form == "documents" else "v1alpha1"
    assert {entry["document"] for entry in result["plan"] if entry["step"] != "prove"} == {document}
    assert {entry["ca"] for entry in result["plan"]} == {"kubernetes"}
    assert all(entry["kubernetes_phase"] == "original" and "phase" not in entry for entry in result["node_phases"].values())
    assert result["rotation"].startswith("the Kubernetes CA was issued on ") and "talos_ca" not in result
    assert "<new CA>" in result["diff"]["after"] and "certs.k8s" in result["diff"]["before"]
    assert [node.config_bytes for node in cluster.nodes] == configs and len(cluster.audit()) == audited
    assert setup.ca("k8s") == old_ca and not setup.secrets.with_name("secrets.yaml.previous").exists()

    restarts = setup.server.restarts
    kubelet_stops = dict((node.name, _kubelet_stops(node)) for node in cluster.nodes)
    # The old kube-apiserver answers for seconds after each change of its CAs before it restarts: the run waits for
    # the restart, and the task returns with the API server running the final CAs.
    setup.server.restart_delay = 4
    try:
        run, rotated = setup.rotate(["kubernetes"], _now(), diff=True, verbosity=3)
    finally:
        setup.server.restart_delay = 0
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    result = rotated["result"]
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    assert len(result["done"]) == 18 and result["files"]["previous_secrets"] is None
    new = result["kubernetes_ca"]["new"]
    assert new["key_algorithm"] == result["kubernetes_ca"]["old"]["key_algorithm"] == "ecdsa"
    assert new["subject"] == result["kubernetes_ca"]["old"]["subject"]
    assert result["diff"]["after"].count(" %s, " % new["fingerprint_sha256"]) == 5
    applies = [entry for entry in cluster.audit()[audited:] if entry["method"].endswith("ApplyConfiguration")
               and not entry["dry_run"]]
    assert len(applies) == 15 and {entry["mode"] for entry in applies} == {"NO_REBOOT"}
    # The Talos API CA and the talosconfig stay; the API server restarted with the new CAs.
    assert setup.ca("os") == talos_ca and setup.talosconfig.read_text() == talosconfig
    assert setup.server.restarts > restarts
    # Each of the three changes of its Kubernetes CAs restarted every kubelet, as Talos does.
    assert dict((node.name, _kubelet_stops(node) - kubelet_stops[node.name]) for node in cluster.nodes) == dict(
        (node.name, 3) for node in cluster.nodes)
    _assert_rotated(setup, old_ca, old_kubeconfig)

    _run, again = setup.rotate(["kubernetes"], new["not_before"])
    assert again["status"] == "ok" and again["result"]["plan"] == [] and again["result"]["rotation"] is None


def test_a_worker_off_after_its_swap_leaves_both_credentials_working_and_a_rerun_finishes(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    worker = cluster.workers[0]
    old_ca = setup.ca("k8s")
    old_kubeconfig = setup.fetch_kubeconfig("kubeconfig-before-interrupted")
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    old_bundle = setup.bundle()
    # The worker loses power right after its swap step's change: the step's wait for its kubelet fails.
    cluster.faults.power_off_when(worker.name, lambda node: setup.node_cas(node)[0] != old_ca)
    run, failed = setup.rotate(["kubernetes"], _now(), wait_timeout=15, expect_rc=2, verbosity=3)
    cluster.faults.clear()
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    message = failed["result"]["msg"]
    assert message.startswith("The Kubernetes CA rotation stopped at the swap step on node %s" % worker.address), message
    assert "rerun the task to continue" in message.lower()
    assert failed["result"]["files"]["previous_secrets"] == str(setup.secrets) + ".previous"
    new_ca = setup.ca("k8s")
    # Both CAs' admin certificates are accepted: the old one (trusting both CAs, the API server may serve either) and
    # one the control planes issue now, of the new CA.
    setup.settle()
    assert len(node_names(config=with_ca(old_kubeconfig, old_ca, new_ca))) == 5
    assert len(node_names(setup.fetch_kubeconfig("kubeconfig-during-interrupted"))) == 5

    cluster.power_on(worker)
    # With both CAs, the rotation in progress is finished before the Talos API CA's starts (which would overwrite the
    # previous bundle holding the old Kubernetes CA).
    talos_ca = setup.ca("os")
    _run, finished = setup.rotate(["talos", "kubernetes"], _now())
    assert finished["status"] == "changed", finished["result"].get("msg")
    result = finished["result"]
    assert result["rotation"].startswith("a Kubernetes CA rotation in progress is continued; the Talos CA was issued on")
    done = [entry["ca"] for entry in result["done"]]
    assert done == ["kubernetes"] * (len(done) - 20) + ["talos"] * 20 and len(done) > 20
    assert setup.ca("k8s") == new_ca and setup.ca("os") != talos_ca
    _assert_rotated(setup, old_ca, old_kubeconfig)


def test_both_cas_rotate_talos_first(rotation_cluster):
    setup = rotation_cluster
    old_kubeconfig = setup.fetch_kubeconfig("kubeconfig-before-both")
    old_talosconfig = setup.workdir / "talosconfig-before-both"
    shutil.copy(str(setup.talosconfig), str(old_talosconfig))
    old_ca, old_talos_ca, old_bundle = setup.ca("k8s"), setup.ca("os"), setup.bundle()
    time.sleep(1)

    run, rotated = setup.rotate(["kubernetes", "talos"], _now(), verbosity=3)
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    result = rotated["result"]
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, setup.bundle()))
    assert [entry["ca"] for entry in result["done"]] == ["talos"] * 20 + ["kubernetes"] * 18
    assert "the Talos CA was issued on" in result["rotation"] and "the Kubernetes CA was issued on" in result["rotation"]
    assert setup.ca("os") != old_talos_ca
    for node in setup.addresses:
        assert result["node_phases"][node]["phase"] == result["node_phases"][node]["kubernetes_phase"] == "original"
    # The old talosconfig is refused, the new one reads every node.
    _run, refused = setup.play("talos_certificate_info", {"nodes": setup.addresses, "talosconfig": str(old_talosconfig)},
                               expect_rc=2)
    assert "Certificate verification of endpoint" in refused["result"]["msg"], refused["result"]["msg"]
    _assert_rotated(setup, old_ca, old_kubeconfig)

    # The Talos API CA was made first: its time is the earlier of the two new CAs'.
    _run, again = setup.rotate(["talos", "kubernetes"], result["talos_ca"]["new"]["not_before"])
    assert again["status"] == "ok" and again["result"]["plan"] == [] and again["result"]["rotation"] is None


# The rollback runs the rotation's own steps with the roles swapped: one form proves it end to end (the unit tests roll
# both forms back from every phase).
@pytest.mark.parametrize("rotation_cluster", ["documents"], indirect=True)
def test_a_rotation_that_failed_half_way_is_abandoned_and_a_talos_ca_rotation_then_runs(rotation_cluster):
    setup = rotation_cluster
    cluster = setup.cluster
    worker = cluster.workers[0]
    old_ca, old_talos_ca = setup.ca("k8s"), setup.ca("os")
    old_kubeconfig = setup.fetch_kubeconfig("kubeconfig-before-abandon")
    cas = dict((node.name, setup.node_cas(node)) for node in cluster.nodes)
    time.sleep(1)  # issued_after below falls after the second in which the current CA was made

    old_bundle = setup.bundle()
    # The worker loses power right after its swap step's change: the step's wait for its kubelet fails.
    cluster.faults.power_off_when(worker.name, lambda node: setup.node_cas(node)[0] != old_ca)
    _run, failed = setup.rotate(["kubernetes"], _now(), wait_timeout=15, expect_rc=2)
    cluster.faults.clear()
    message = failed["result"]["msg"]
    assert message.startswith("The Kubernetes CA rotation stopped at the swap step on node %s" % worker.address), message
    assert "or with abandon: true to roll the rotation back" in message
    new_bundle = setup.bundle()
    cluster.power_on(worker)
    # While it is in progress, a rotation of the Talos API CA is refused, and says how to get out of it.
    _run, refused = setup.rotate(["talos"], _now(), expect_rc=2)
    assert refused["result"]["msg"] == (
        "A rotation of the Kubernetes CA is in progress (%s.previous holds the old one): finish it first with rotate: "
        "[kubernetes], or roll it back with rotate: [kubernetes] and abandon: true." % setup.secrets)

    run, abandoned = setup.rotate(["kubernetes"], None, abandon=True, verbosity=3)
    assert abandoned["status"] == "changed", abandoned["result"].get("msg")
    result = abandoned["result"]
    assert_no_secret(run.stdout + run.stderr, setup.secret_strings(old_bundle, new_bundle))
    assert result["rotation"] == "a Kubernetes CA rotation in progress is rolled back"
    assert result["kubernetes_ca"]["new"]["fingerprint_sha256"] == talos_pki.fingerprint(talos_pki.load_certificate(old_ca, "old"))
    assert {entry["step"] for entry in result["done"]} == {"swap", "prove", "drop"}
    # Every node, and the bundle, are back on the old CA; the old admin kubeconfig works again.
    assert dict((node.name, setup.node_cas(node)) for node in cluster.nodes) == cas
    assert setup.bundle() == old_bundle and not setup.secrets.with_name("secrets.yaml.previous").exists()
    setup.settle()
    assert len(node_names(old_kubeconfig)) == 5

    # The Talos API CA rotation runs now.
    _run, rotated = setup.rotate(["talos"], _now())
    assert rotated["status"] == "changed", rotated["result"].get("msg")
    assert setup.ca("os") != old_talos_ca and setup.ca("k8s") == old_ca
    assert len(node_names(setup.fetch_kubeconfig("kubeconfig-after-abandon"))) == 5
