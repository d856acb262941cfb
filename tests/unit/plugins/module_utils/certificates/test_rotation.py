# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Talos API CA rotation's rules: phases, patched configs of both forms, the new CA, the controller's files."""

import datetime
import os
import stat

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import rotation as ca_rotation
from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import CertificateAuthority, SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter, WaitTimedOut
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubernetesAPIError

import fake_talos

ENDPOINT = "https://cp.example:6443"
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14", now=NOW - datetime.timedelta(days=400))


@pytest.fixture(scope="module")
def new(bundle):
    return ca_rotation.new_authority_like(bundle.os_ca, NOW)


def node_config(bundle, machine_type, version):
    text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version)
    return ca_rotation.NodeConfig("10.5.0.2", text, "v1.14.0")


def machine(text):
    return next(document for document in yaml.safe_load_all(text) if "kind" not in document)["machine"]


def test_the_new_ca_has_the_key_type_subject_and_lifetime_of_the_old(bundle, new):
    old = bundle.os_ca.certificate
    assert talos_pki.key_algorithm(new.key) == "ed25519" and new.certificate.subject == old.subject
    # talosctl's generator gives the Talos API CA O=talos and the Kubernetes CA O=kubernetes; so does the collection's.
    assert old.subject.rfc4514_string() == "O=talos"
    assert ca_rotation.new_authority_like(bundle.cas["k8s"], NOW).certificate.subject.rfc4514_string() == "O=kubernetes"
    # A CA made elsewhere keeps its whole subject, a Common Name too, with its attributes' order and encoding.
    named = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "talos"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "talos")])
    certificate, key = talos_pki.generate_ca("ed25519", None, NOW, subject=named)
    elsewhere = CertificateAuthority(talos_pki.certificate_pem(certificate), talos_pki.private_key_pem(key), certificate, key)
    renewed = ca_rotation.new_authority_like(elsewhere, NOW).certificate
    assert renewed.subject == renewed.issuer == certificate.subject
    assert renewed.subject.public_bytes() == certificate.subject.public_bytes()
    assert (new.certificate.not_valid_after_utc - new.certificate.not_valid_before_utc
            == old.not_valid_after_utc - old.not_valid_before_utc)
    assert new.certificate.not_valid_before_utc == NOW and talos_pki.public_key_matches(new.certificate, new.key)
    ecdsa = CertificateAuthority.generate("ecdsa", "talos", NOW)
    assert talos_pki.key_algorithm(ca_rotation.new_authority_like(ecdsa, NOW).key) == "ecdsa"


@pytest.mark.parametrize("version", ["v1.13", "v1.14"])
@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
def test_the_steps_move_a_config_through_every_phase_and_touch_nothing_else(bundle, new, version, machine_type):
    old = bundle.os_ca
    config = node_config(bundle, machine_type, version)
    others = [document for document in yaml.safe_load_all(config.text) if "kind" in document]
    assert config.phase(old.crt_pem, None) == config.phase(old.crt_pem, new.crt_pem) == ca_rotation.ORIGINAL
    expected = {ca_rotation.ACCEPT: ca_rotation.ACCEPTED, ca_rotation.SWAP: ca_rotation.SWAPPED,
                ca_rotation.DROP: ca_rotation.DONE}
    for step in (ca_rotation.ACCEPT, ca_rotation.SWAP, ca_rotation.DROP):
        text = config.patched(step, old, new)
        config = ca_rotation.NodeConfig(config.node, text, config.version)
        assert config.phase(old.crt_pem, new.crt_pem) == expected[step], step
        assert [document for document in yaml.safe_load_all(text) if "kind" in document] == others
        if step == ca_rotation.SWAP:
            swapped = machine(text)
            assert swapped["ca"]["crt"] == talos_pki.b64_pem(new.crt_pem)
            assert swapped["ca"]["key"] == (talos_pki.b64_pem(new.key_pem) if machine_type == "controlplane" else "")
            assert swapped["acceptedCAs"] == [{"crt": talos_pki.b64_pem(old.crt_pem)}]
    assert "acceptedCAs" not in machine(config.text)
    # A step applied twice changes nothing more.
    assert config.patched(ca_rotation.DROP, old, new) == config.text


def test_accepted_cas_of_the_user_stay_through_every_step(bundle, new):
    old, extra = bundle.os_ca, CertificateAuthority.generate("ed25519", "talos", NOW)
    documents = list(yaml.safe_load_all(node_config(bundle, "worker", "v1.13").text))
    documents[0]["machine"]["acceptedCAs"] = [{"crt": talos_pki.b64_pem(extra.crt_pem)}]
    config = ca_rotation.NodeConfig("10.5.0.5", yaml.safe_dump_all(documents), "v1.13.5")
    for step in (ca_rotation.ACCEPT, ca_rotation.SWAP, ca_rotation.DROP):
        config = ca_rotation.NodeConfig(config.node, config.patched(step, old, new), config.version)
    assert machine(config.text)["acceptedCAs"] == [{"crt": talos_pki.b64_pem(extra.crt_pem)}]
    assert config.phase(old.crt_pem, new.crt_pem) == ca_rotation.DONE


def test_a_node_of_another_ca_has_no_phase_and_fields_show_fingerprints(bundle, new):
    config = node_config(SecretsBundle.generate("v1.14", now=NOW), "controlplane", "v1.14")
    assert config.phase(bundle.os_ca.crt_pem, new.crt_pem) is None
    fields = config.fields()
    assert fields["machine.acceptedCAs"] == [] and fields["machine.ca"].count(":") == 31


def test_rotation_is_due_when_the_ca_is_older_than_issued_after_or_expires_soon(bundle):
    certificate = bundle.os_ca.certificate  # issued 400 days before NOW, valid ten years
    year = datetime.timedelta(hours=8760)
    assert ca_rotation.rotation_due(certificate, None, year, NOW) is None
    assert "before issued_after" in ca_rotation.rotation_due(certificate, NOW, year, NOW)
    assert ca_rotation.rotation_due(certificate, certificate.not_valid_before_utc, year, NOW) is None
    late = certificate.not_valid_after_utc - datetime.timedelta(days=100)
    assert "within renew_before" in ca_rotation.rotation_due(certificate, None, year, late)


def _given(algorithm, not_before=NOW, validity=datetime.timedelta(days=3650), ca=True):
    if ca:
        certificate, key = talos_pki.generate_ca(algorithm, "talos", not_before, validity)
    else:
        issuer = CertificateAuthority.generate(algorithm, "talos", NOW)
        certificate, key = talos_pki.issue_client_certificate(issuer.certificate, issuer.key, ["os:admin"], not_before, validity)
    return talos_pki.certificate_pem(certificate), talos_pki.private_key_pem(key)


def test_a_given_ca_must_be_a_ca_of_its_own_key_the_old_key_type_and_valid(bundle):
    old = bundle.os_ca
    crt, key = _given("ed25519")
    given = ca_rotation.given_authority(crt, key, old, "new_talos_ca", NOW)
    assert given.crt_pem == crt and given.key_pem == key
    # Kubernetes: Talos's Kubernetes CA is ECDSA.
    k8s_crt, k8s_key = _given("ecdsa")
    assert ca_rotation.given_authority(k8s_crt, k8s_key, bundle.cas["k8s"], "new_kubernetes_ca", NOW).crt_pem == k8s_crt
    refusals = [
        ((crt, _given("ed25519")[1]), "new_talos_ca.key is not the private key of new_talos_ca.crt."),
        ((crt, "not a key"), "new_talos_ca.key is not a PEM private key."),
        (("not a certificate", key), "new_talos_ca.crt is not a PEM certificate."),
        (_given("ed25519", ca=False), "new_talos_ca.crt is not a CA certificate (its BasicConstraints do not say "
                                      "CA:TRUE), so the nodes could not verify the certificates it issues."),
        ((k8s_crt, k8s_key), "new_talos_ca holds an ecdsa key, but the CA it replaces has an ed25519 key: give an ed25519 "
                             "CA, as the nodes' certificates keep their key type."),
        (_given("ed25519", not_before=NOW + datetime.timedelta(days=2)),
         "new_talos_ca.crt is valid only from 2026-06-03T12:00:00Z: give a CA valid now."),
        (_given("ed25519", not_before=NOW - datetime.timedelta(days=10), validity=datetime.timedelta(days=10, hours=12)),
         "new_talos_ca.crt expires on 2026-06-02T00:00:00Z: give a CA valid for longer than a day."),
    ]
    for (bad_crt, bad_key), message in refusals:
        with pytest.raises(TalosConfigError) as raised:
            ca_rotation.given_authority(bad_crt, bad_key, old, "new_talos_ca", NOW)
        assert str(raised.value) == message
        assert key not in str(raised.value) and (bad_key or "x") not in str(raised.value)


def test_a_given_ca_makes_the_rotation_due_until_the_bundle_holds_it(bundle):
    crt, key = _given("ed25519")
    given = ca_rotation.given_authority(crt, key, bundle.os_ca, "new_talos_ca", NOW)
    far = datetime.timedelta(hours=1)
    # Not consulted: issued_after and renew_before say nothing is due.
    assert ca_rotation.rotation_due(bundle.os_ca.certificate, None, far, NOW, ca_rotation.TALOS, given) == (
        "a new Talos CA was given")
    assert ca_rotation.rotation_due(given.certificate, NOW, far, NOW, ca_rotation.TALOS, given) is None


def test_controller_files_keep_the_previous_ones_until_the_end(bundle, new, tmp_path):
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    secrets.write_text(bundle.to_yaml())
    text, _issued, _crt = client_config.render_talosconfig(bundle, "prod", endpoints=["10.5.0.2"])
    talosconfig.write_text(text)
    files = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod")
    assert not files.in_progress and files.new is None and files.kept() == {"secrets": None, "talosconfig": None}

    files.start(new)
    assert files.in_progress and files.old.crt_pem == bundle.os_ca.crt_pem and files.new is new
    assert files.kept() == {"secrets": str(secrets) + ".previous", "talosconfig": str(talosconfig) + ".previous"}
    assert (tmp_path / "talosconfig.previous").read_text() == text
    for name in ("secrets.yaml", "secrets.yaml.previous", "talosconfig.previous"):
        assert stat.S_IMODE(os.stat(str(tmp_path / name)).st_mode) == 0o600
    # A rerun finds the rotation in progress from the files alone, with the other secrets of the bundle kept.
    again = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod")
    assert again.in_progress and again.new.crt_pem == new.crt_pem and again.old.crt_pem == bundle.os_ca.crt_pem
    assert again.bundle.cas["k8s"].key_pem == bundle.cas["k8s"].key_pem and again.bundle.cluster_secret == bundle.cluster_secret

    old_context = yaml.safe_load(text)["contexts"]["prod"]
    assert again.trust_both(talos_pki.pem_from_b64(old_context["ca"], "ca")) is True
    context = yaml.safe_load(talosconfig.read_text())["contexts"]["prod"]
    assert context["ca"] == talos_pki.b64_pem(bundle.os_ca.crt_pem + new.crt_pem) and context["key"] == old_context["key"]
    assert again.trust_both(talos_pki.pem_from_b64(context["ca"], "ca")) is False

    again.finish_talosconfig(["os:admin"], datetime.timedelta(hours=24))
    context = yaml.safe_load(talosconfig.read_text())["contexts"]["prod"]
    assert again.is_final(talos_pki.pem_from_b64(context["ca"], "ca"), talos_pki.pem_from_b64(context["crt"], "crt"))
    assert again.end() is True and again.kept() == {"secrets": None, "talosconfig": None}
    assert again.end() is False


def test_a_previous_bundle_equal_to_the_current_one_is_no_rotation(bundle, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(bundle.to_yaml())
    (tmp_path / "secrets.yaml.previous").write_text(bundle.to_yaml())
    files = ca_rotation.ControllerFiles(str(secrets), str(tmp_path / "talosconfig"), "prod")
    assert not files.in_progress and files.old.crt_pem == bundle.os_ca.crt_pem


# The Kubernetes CA.

def kube_ca_document(text):
    return next((document for document in yaml.safe_load_all(text) if document.get("kind") == "KubeAPIServerCAConfig"), None)


def cluster(text):
    return next(document for document in yaml.safe_load_all(text) if "kind" not in document)["cluster"]


@pytest.mark.parametrize("version", ["v1.13", "v1.14"])
@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
def test_the_kubernetes_steps_move_either_form_through_every_phase(bundle, version, machine_type):
    old = bundle.cas["k8s"]
    new = ca_rotation.new_authority_like(old, NOW)
    text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version)
    config = ca_rotation.NodeConfig("10.5.0.2", text, "v1.14.0", ca_rotation.KUBERNETES)
    assert config.form == ("documents" if version == "v1.14" else "v1alpha1")
    untouched = [document for document in yaml.safe_load_all(text) if document.get("kind") != "KubeAPIServerCAConfig"]
    if version == "v1.14":
        untouched[0].pop("cluster", None)
    else:
        untouched[0]["cluster"] = dict((key, value) for key, value in untouched[0]["cluster"].items()
                                       if key not in ("ca", "acceptedCAs"))
    assert config.phase(old.crt_pem, new.crt_pem) == ca_rotation.ORIGINAL
    expected = {ca_rotation.ACCEPT: ca_rotation.ACCEPTED, ca_rotation.SWAP: ca_rotation.SWAPPED,
                ca_rotation.DROP: ca_rotation.DONE}
    for step in (ca_rotation.ACCEPT, ca_rotation.SWAP, ca_rotation.DROP):
        text = config.patched(step, old, new)
        config = ca_rotation.NodeConfig(config.node, text, config.version, ca_rotation.KUBERNETES)
        assert config.phase(old.crt_pem, new.crt_pem) == expected[step], step
        # The Talos API CA stays as it was.
        assert config.authorities.talos_ca == bundle.os_ca.crt_pem
        if step != ca_rotation.SWAP:
            continue
        if version == "v1.14":
            document = kube_ca_document(text)
            if machine_type == "controlplane":
                assert document["issuingCA"] == {"cert": new.crt_pem, "key": new.key_pem}
                assert document["acceptedCAs"] == [old.crt_pem]
            else:
                # A worker's document holds certificates only, the issuing one first, as Talos's patcher writes it.
                assert "issuingCA" not in document and document["acceptedCAs"] == [new.crt_pem, old.crt_pem]
        else:
            assert cluster(text)["ca"] == {"crt": talos_pki.b64_pem(new.crt_pem),
                                           "key": talos_pki.b64_pem(new.key_pem) if machine_type == "controlplane" else ""}
            assert cluster(text)["acceptedCAs"] == [{"crt": talos_pki.b64_pem(old.crt_pem)}]
    rest = [document for document in yaml.safe_load_all(text) if document.get("kind") != "KubeAPIServerCAConfig"]
    if version == "v1.14":
        rest[0].pop("cluster", None)
        assert "acceptedCAs" not in kube_ca_document(text) or machine_type == "worker"
    else:
        assert "acceptedCAs" not in cluster(text)
        rest[0]["cluster"] = dict((key, value) for key, value in rest[0]["cluster"].items() if key not in ("ca", "acceptedCAs"))
    assert rest == untouched
    assert config.patched(ca_rotation.DROP, old, new) == config.text
    fields = config.fields()
    assert list(fields.values())[1] == [] and list(fields.values())[0] == talos_pki.fingerprint(new.certificate)


def test_the_kubernetes_plan_proves_on_control_planes_and_names_the_document(bundle):
    rotation = ca_rotation.KubernetesCARotation(None, ["cp", "w"], None, "due", None)
    for node, machine_type in (("cp", "controlplane"), ("w", "worker")):
        text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version="v1.14")
        rotation.configs[node] = ca_rotation.NodeConfig(node, text, "v1.14.0", ca_rotation.KUBERNETES)

    class Files(object):
        in_progress, new, old = False, None, bundle.cas["k8s"]
    rotation.files = Files()
    plan = rotation.make_plan()
    assert [(entry["step"], entry["node"]) for entry in plan] == [
        ("accept", "cp"), ("accept", "w"), ("swap", "cp"), ("swap", "w"), ("prove", "cp"), ("drop", "cp"), ("drop", "w")]
    assert plan[2] == {"ca": "kubernetes", "step": "swap", "node": "cp", "document": "KubeAPIServerCAConfig",
                       "fields": ["KubeAPIServerCAConfig.issuingCA", "KubeAPIServerCAConfig.acceptedCAs"]}


def test_controller_files_of_the_kubernetes_ca_keep_the_bundle_alone(bundle, tmp_path):
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    secrets.write_text(bundle.to_yaml())
    talosconfig.write_text("context: prod\n")
    new = ca_rotation.new_authority_like(bundle.cas["k8s"], NOW)
    files = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod", ca_rotation.KUBERNETES)
    files.start(new)
    assert files.kept() == {"secrets": str(secrets) + ".previous", "talosconfig": None}
    again = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod", ca_rotation.KUBERNETES)
    assert again.in_progress and again.new.crt_pem == new.crt_pem and again.old.crt_pem == bundle.cas["k8s"].crt_pem
    assert again.bundle.os_ca.crt_pem == bundle.os_ca.crt_pem
    assert talos_pki.key_algorithm(new.key) == "ecdsa"
    # The Talos API CA's rotation sees none in progress: the previous bundle holds the same Talos API CA.
    assert not ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod").in_progress


# The talosconfig the rotation rewrites.

def _talosconfig_with(path, contexts, current):
    path.write_text(yaml.safe_dump({"context": current, "contexts": contexts}))


def _context(bundle, name="prod"):
    text, _issued, _crt = client_config.render_talosconfig(bundle, name, endpoints=["10.5.0.2"])
    return yaml.safe_load(text)["contexts"][name]


def test_a_talosconfig_of_another_cluster_is_refused_and_other_contexts_are_kept(bundle, new, tmp_path):
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    secrets.write_text(bundle.to_yaml())
    other = SecretsBundle.generate("v1.14", now=NOW)
    ours, theirs = _context(bundle), _context(other, "staging")
    _talosconfig_with(talosconfig, {"prod": ours, "staging": theirs}, "prod")
    ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod").check_talosconfig()

    refusals = {
        "staging": "trusts the Talos API CA O=talos (%s), not this cluster's: give the talosconfig of this cluster, whose "
                   "Talos API CA the secrets bundle %s holds (O=talos (%s)); the rotation rewrites that file." % (
                       talos_pki.fingerprint(other.os_ca.certificate), secrets, talos_pki.fingerprint(bundle.os_ca.certificate)),
        # This cluster's CA, another cluster's client certificate.
        "mixed": "holds a client certificate issued by O=talos, not by this cluster's Talos API CA: give",
        "empty": "has no usable Talos API CA and client certificate (ca is missing): give",
    }
    _talosconfig_with(talosconfig, {"prod": ours, "staging": theirs, "mixed": dict(theirs, ca=ours["ca"]),
                                    "empty": {"endpoints": ["10.5.0.2"]}}, "prod")
    before = talosconfig.read_text()
    for context, message in refusals.items():
        files = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), context)
        with pytest.raises(TalosConfigError) as raised:
            files.check_talosconfig()
        assert str(raised.value).startswith("The talosconfig %s (context %s) " % (talosconfig, context)), str(raised.value)
        assert message in str(raised.value)
        # Nor is such a context rewritten later in a run.
        files.start(new)
        with pytest.raises(TalosConfigError):
            files.trust_both(bundle.os_ca.crt_pem)
        with pytest.raises(TalosConfigError):
            files.finish_talosconfig(["os:admin"], datetime.timedelta(hours=1))
        assert talosconfig.read_text() == before
        secrets.write_text(bundle.to_yaml())
        os.unlink(str(tmp_path / "secrets.yaml.previous"))

    # The task's context is rewritten, every other context stays as it was.
    files = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod")
    files.start(new)
    assert files.trust_both(bundle.os_ca.crt_pem) is True
    files.finish_talosconfig(["os:admin"], datetime.timedelta(hours=1))
    after = yaml.safe_load(talosconfig.read_text())["contexts"]
    assert after["staging"] == theirs and after["empty"] == {"endpoints": ["10.5.0.2"]}
    assert after["prod"]["ca"] == talos_pki.b64_pem(new.crt_pem) and after["prod"]["endpoints"] == ours["endpoints"]


# Abandoning a rotation in progress.

def test_abandoning_swaps_the_roles_and_puts_the_files_back(bundle, new, tmp_path):
    secrets, talosconfig = tmp_path / "secrets.yaml", tmp_path / "talosconfig"
    secrets.write_text(bundle.to_yaml())
    _talosconfig_with(talosconfig, {"prod": _context(bundle)}, "prod")
    original_talosconfig = talosconfig.read_text()
    nothing = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod", abandon=True)
    assert not nothing.in_progress and nothing.new is None and nothing.old.crt_pem == bundle.os_ca.crt_pem

    files = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod")
    files.start(new)
    files.trust_both(bundle.os_ca.crt_pem)
    files.finish_talosconfig(["os:admin"], datetime.timedelta(hours=1))

    back = ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod", abandon=True)
    assert back.in_progress and back.old.crt_pem == new.crt_pem and back.new.crt_pem == bundle.os_ca.crt_pem
    # The talosconfig trusts the rotation's new CA alone: both, then the credentials it held before.
    assert back.trust_both(new.crt_pem) is True
    back.finish_talosconfig(["os:admin"], datetime.timedelta(hours=1))
    context = yaml.safe_load(talosconfig.read_text())["contexts"]["prod"]
    assert context == yaml.safe_load(original_talosconfig)["contexts"]["prod"]
    assert back.is_final(talos_pki.pem_from_b64(context["ca"], "ca"), talos_pki.pem_from_b64(context["crt"], "crt"))
    assert back.end() is True and back.kept() == {"secrets": None, "talosconfig": None}
    restored = SecretsBundle.load(str(secrets))
    assert restored.os_ca.crt_pem == bundle.os_ca.crt_pem and restored.os_ca.key_pem == bundle.os_ca.key_pem
    assert restored.cas["k8s"].crt_pem == bundle.cas["k8s"].crt_pem
    assert not ca_rotation.ControllerFiles(str(secrets), str(talosconfig), "prod").in_progress


class _Files(object):
    def __init__(self, old, new, abandon=False):
        self.old, self.new, self.abandon, self.in_progress = old, new, abandon, True


@pytest.mark.parametrize("kind", ["talos", "kubernetes"])
@pytest.mark.parametrize("version", ["v1.13", "v1.14"])
@pytest.mark.parametrize("stopped_after", [ca_rotation.ACCEPT, ca_rotation.SWAP, ca_rotation.DROP])
def test_a_rollback_from_any_phase_brings_every_node_back_to_the_old_ca(bundle, kind, version, stopped_after):
    name = "os" if kind == "talos" else "k8s"
    old = bundle.cas[name]
    new = ca_rotation.new_authority_like(old, NOW)
    nodes = {"cp": "controlplane", "w": "worker"}
    originals, configs = {}, {}
    for node, machine_type in nodes.items():
        text = config_generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version)
        config = originals[node] = ca_rotation.NodeConfig(node, text, "v1.14.0", ca_rotation.KINDS[kind])
        for step in ca_rotation.STEPS[:ca_rotation.STEPS.index(stopped_after) + 1]:
            if step != ca_rotation.PROVE:
                config = ca_rotation.NodeConfig(node, config.patched(step, old, new), config.version, config.kind)
        configs[node] = config
    rotation = (ca_rotation.TalosCARotation(None, list(nodes), _Files(new, old, abandon=True), None, None, None, None)
                if kind == "talos" else ca_rotation.KubernetesCARotation(None, list(nodes), _Files(new, old, abandon=True),
                                                                         None, None))
    rotation.configs = dict(configs)
    reported = {ca_rotation.ACCEPT: ca_rotation.ACCEPTED, ca_rotation.SWAP: ca_rotation.SWAPPED,
                ca_rotation.DROP: ca_rotation.DONE}[stopped_after]
    assert set(rotation.reported_phases().values()) == {reported}
    # The rollback's steps, as the rotation with the roles swapped plans them.
    for entry in rotation.make_plan():
        if entry["step"] != ca_rotation.PROVE:
            config = rotation.configs[entry["node"]]
            rotation.configs[entry["node"]] = ca_rotation.NodeConfig(
                config.node, config.patched(entry["step"], new, old), config.version, config.kind)
    for node in nodes:
        back = rotation.configs[node]
        assert back.phase(old.crt_pem, new.crt_pem) == ca_rotation.ORIGINAL
        assert back.fields() == originals[node].fields()
        assert new.crt_pem not in back.text and talos_pki.b64_pem(new.crt_pem) not in back.text
    assert set(rotation.reported_phases().values()) == {ca_rotation.ORIGINAL}


def test_a_talosconfig_trusting_both_cas_is_not_final_whichever_comes_first(bundle, new, tmp_path):
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(bundle.to_yaml())
    _talosconfig_with(tmp_path / "talosconfig", {"prod": _context(bundle)}, "prod")
    files = ca_rotation.ControllerFiles(str(secrets), str(tmp_path / "talosconfig"), "prod")
    files.start(new)
    certificate, _key = talos_pki.issue_client_certificate(new.certificate, new.key, ["os:admin"], NOW)
    crt = talos_pki.certificate_pem(certificate)
    assert files.is_final(new.crt_pem, crt)
    assert not files.is_final(new.crt_pem + bundle.os_ca.crt_pem, crt) and not files.is_final(bundle.os_ca.crt_pem + new.crt_pem, crt)


class _KubeAPI(object):
    """The Kubernetes API as the wait for a control plane's kube-apiserver reads it: each read of the pods is the next
    of ``_KubeAPI.script`` (a list of pods, or an error to raise)."""

    script = []

    def __init__(self, config):
        assert config == {"kubeconfig": "of the step"}

    def pods(self, namespace, label_selector):
        assert (namespace, label_selector) == ("kube-system", "k8s-app=kube-apiserver")
        answer = _KubeAPI.script.pop(0) if len(_KubeAPI.script) > 1 else _KubeAPI.script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        pass


def _apiserver_pod(secrets_version, ready, node_name="cp-1"):
    return {"name": "kube-apiserver-%s" % node_name, "node_name": node_name, "host_ip": "10.5.0.2", "ready": ready,
            "annotations": {"talos.dev/secrets-version": secrets_version, "talos.dev/config-version": "1"}, "images": []}


_SECRETS = "SecretStatuses.kubernetes.talos.dev"


def _secrets_status(version):
    return fake_talos.resource("controlplane", _SECRETS, "static-pods",
                               {"ready": True, "version": version})


def _apiserver_wait(monkeypatch, secrets_versions, pods, timeout=60):
    """A Kubernetes CA rotation's wait for control plane cp's kube-apiserver after a step that rendered secrets version
    3 before it: the node's SecretStatuses reports ``secrets_versions`` in turn, its mirror pods ``pods``."""
    nodename = fake_talos.resource("k8s", "Nodenames.kubernetes.talos.dev", "nodename", {"nodename": "cp-1"})
    versions = list(secrets_versions)

    def cosi_get(request, node):
        version = versions.pop(0) if len(versions) > 1 and request.type == _SECRETS else versions[0]
        return fake_talos.cosi_state(nodename, _secrets_status(version))(request, node)
    client = fake_talos.FakeTalos(answers={rpc.COSI_GET: cosi_get})
    monkeypatch.setattr(ca_rotation, "KubeAPI", _KubeAPI)
    monkeypatch.setattr(_KubeAPI, "script", list(pods))
    lines = []
    rotation = ca_rotation.KubernetesCARotation(client, ["cp"], None, None, lambda: Waiter(timeout, interval=1.0, progress=lines.append))
    return rotation, lines


def test_a_control_planes_kube_apiserver_is_waited_for_until_it_runs_the_secrets_of_the_step(clock, monkeypatch):
    # Talos renders the new secrets (version 3 -> 4); the old process answers, then the API server restarts.
    refused = KubernetesAPIError("The Kubernetes API at https://cp:6443 did not answer: connection refused.")
    pods = [[_apiserver_pod("3", True)], refused, [_apiserver_pod("4", False)], [_apiserver_pod("4", True)]]
    rotation, lines = _apiserver_wait(monkeypatch, ["3", "3", "4"], pods)
    started = clock["t"]
    pod = rotation._wait_apiserver("cp", "3", lambda: {"kubeconfig": "of the step"})
    assert pod["annotations"]["talos.dev/secrets-version"] == "4" and pod["ready"]
    assert clock["t"] - started == 5  # a poll a second: twice the old secrets, the old pod, refused, not ready
    assert lines[-1] == ("cp kube-apiserver: rendering the new CAs → secrets version 3 → kubernetesunreachable → not ready "
                         "→ ready (5 s)")


def test_a_kube_apiserver_that_keeps_its_old_secrets_times_out_naming_what_it_runs(clock, monkeypatch):
    rotation, _lines = _apiserver_wait(monkeypatch, ["4"], [[_apiserver_pod("3", True)]], timeout=30)
    with pytest.raises(WaitTimedOut) as timed_out:
        rotation._wait_apiserver("cp", "3", lambda: {"kubeconfig": "of the step"})
    assert timed_out.value.message == (
        "Timed out after 30 seconds waiting for the kube-apiserver of node cp to run the new CAs and be Ready; last "
        "observed: pod kube-apiserver-cp-1 runs secrets version 3, expected 4.")
