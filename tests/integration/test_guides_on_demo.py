# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every guide's playbook (docs/examples/, each included verbatim in its guide) runs as written on the cluster that
``make demo`` starts: tests/run-demo itself starts it (same script, same switches, same inventory, in this test's
Python environment), and the examples run in the order a user follows the guides, the destructive ones included
(back up, lose etcd on every control plane, restore, find the data of the backup back and not what came after).

The examples run as a user runs them, through the controller door, and the demo's two switches are proven on the two
stacks that run the playbook tests (tests/run-all): on the oldest the plain demo, real etcd members without
Kubernetes; on the newest (``TALOS_TEST_DEMO=kubernetes``) ``make demo KUBERNETES=1``, with the guides that need
Kubernetes (the Kubernetes upgrade and CA rotation, the support bundle's Kubernetes part).

A wiring test holds the guides to the files: every YAML block of docs/*.md and roles/*/README.md that holds a play
is one of the example files, verbatim.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import glob
import http.client
import io
import json
import os
import re
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from playbook_runner import run_playbook_in

from demo_cluster import demo_environment, started_demo
from harness_files import issue_certificate
from talos_emulator.audit import method_matches
from talos_emulator.pki import to_standard_pem

pytestmark = pytest.mark.long

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
EXAMPLES = os.path.join(REPO, "docs", "examples")
# The newest stack's run (tests/run-all) proves the Kubernetes switch; the oldest stack's the plain demo.
KUBERNETES = os.environ.get("TALOS_TEST_DEMO") == "kubernetes"

# Each example and the guides that show it as a whole YAML block.
GUIDES = {
    "inventory.yml": ["docs/getting-started.md"],
    "site.yml": ["docs/getting-started.md"],
    "discovered-nodes.yml": ["docs/getting-started.md"],
    "provision-configs.yml": ["docs/provisioning.md", "roles/cluster/README.md"],
    "provision.yml": ["docs/provisioning.md", "roles/cluster/README.md"],
    "provision-vaulted.yml": ["docs/provisioning.md", "docs/awx.md"],
    "cluster.yml": ["docs/awx.md", "docs/adopting.md"],
    "adopt.yml": ["docs/adopting.md", "roles/adopt/README.md"],
    "rolling-restart.yml": ["docs/lifecycle.md"],
    "node-remove.yml": ["docs/lifecycle.md", "roles/node_remove/README.md"],
    "node-replace.yml": ["docs/lifecycle.md"],
    "upgrade.yml": ["docs/upgrading.md", "roles/upgrade/README.md"],
    "kubernetes-upgrade.yml": ["docs/upgrading.md"],
    "images.yml": ["docs/images.md"],
    "image-factory.yml": ["docs/images.md"],
    "etcd-backup.yml": ["docs/etcd.md", "roles/etcd_backup/README.md"],
    "etcd-backup-s3.yml": ["docs/etcd.md", "roles/etcd_backup/README.md"],
    "etcd-verify-backup.yml": ["docs/etcd.md"],
    "etcd-lose.yml": ["docs/etcd.md"],
    "etcd-restore.yml": ["docs/etcd.md", "roles/etcd_restore/README.md"],
    "etcd-maintenance.yml": ["docs/etcd.md"],
    "certificates.yml": ["docs/security.md"],
    "rotate-talos-ca.yml": ["docs/security.md"],
    "rotate-kubernetes-ca.yml": ["docs/security.md"],
    "support-bundle.yml": ["docs/troubleshooting.md"],
    "node-files.yml": ["docs/troubleshooting.md"],
    "upgrade-or-bundle.yml": ["docs/troubleshooting.md"],
}
# The guides that need Kubernetes say so in their first lines (the example's header) and name the switch.
NEEDS_KUBERNETES = ["kubernetes-upgrade.yml", "rotate-kubernetes-ca.yml"]


def _read(path):
    with open(path) as handle:
        return handle.read()


def _guide_plays(path):
    """``(play name, block text)`` of every YAML block of the guide that holds a play (an item with ``hosts``)."""
    text = _read(os.path.join(REPO, path))
    for indent, body in re.findall(r"^( *)```ya?ml\n(.*?)^\1```", text, re.S | re.M):
        body = "".join(line[len(indent):] + "\n" for line in body.splitlines())
        try:
            document = yaml.safe_load(body)
        except yaml.YAMLError:
            continue
        if isinstance(document, list) and any(isinstance(item, dict) and "hosts" in item for item in document):
            yield document[0].get("name"), body


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_each_example_is_in_its_guides_verbatim(name):
    example = _read(os.path.join(EXAMPLES, name))
    for guide in GUIDES[name]:
        assert example in [body for _name, body in _guide_plays(guide)] or (
            name == "inventory.yml" and "```yaml\n%s```" % example in _read(os.path.join(REPO, guide))), (
            "%s does not show docs/examples/%s as it is" % (guide, name))
    if name in NEEDS_KUBERNETES:
        assert "make demo KUBERNETES=1" in example.split("\n- name:")[0], name


def test_every_play_in_a_guide_is_an_example_file():
    examples = dict((_read(path), os.path.basename(path)) for path in glob.glob(os.path.join(EXAMPLES, "*.yml")))
    guides = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")) + glob.glob(os.path.join(REPO, "roles", "*", "README.md")))
    inline = []
    for guide in (os.path.relpath(path, REPO) for path in guides):
        for name, body in _guide_plays(guide):
            if body in examples:
                assert guide in GUIDES.get(examples[body], []), "%s shows %s: list it in GUIDES" % (guide, examples[body])
            else:
                inline.append("%s: %r" % (guide, name))
    assert not inline, "plays in the guides that are not files of docs/examples/ (include the file verbatim): %s" % inline


def test_no_example_plays_on_localhost():
    """localhost stands for no node and has no inventory_dir (docs/getting-started.md)."""
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.yml"))):
        plays = yaml.safe_load(_read(path))
        if isinstance(plays, list):
            assert not [play for play in plays if play.get("hosts") == "localhost"], path


@pytest.mark.once
@pytest.mark.parametrize("arguments, without_go, message", [
    (["--etcd", "model", "--kubernetes"], False, "Kubernetes in the demo stores its objects in real etcd members"),
    (["--etcd", "real"], True, "the real etcd members are built from Go modules, and no Go toolchain is on PATH"),
    (["--kubernetes"], True, "Kubernetes and the real etcd members are built from Go modules"),
    (["--etcd", "etcd3"], False, "--etcd (make demo ETCD=...) is real or model, got 'etcd3'"),
])
def test_the_demo_refuses_at_once_what_it_cannot_run(tmp_path, arguments, without_go, message):
    env = dict(os.environ)
    if without_go:
        env["PATH"] = os.pathsep.join(path for path in env["PATH"].split(os.pathsep)
                                      if not os.path.exists(os.path.join(path, "go")))
    state_dir = tmp_path / "demo"
    refused = subprocess.run([os.path.join(TESTS, "run-demo"), "--current-python", "--state-dir", str(state_dir)] + arguments,
                             capture_output=True, text=True, env=env, timeout=60, check=False, cwd=REPO)
    assert refused.returncode == 2 and message in refused.stderr, refused.stdout + refused.stderr
    assert not os.path.exists(str(state_dir / "emulator")), "nothing is started"


# The sequence.

class Demo(object):
    """The cluster tests/run-demo started under ``state_dir``: its directory (prod/), the emulator's files, and the
    guides' examples run on it as a user runs them (``ansible-playbook -i prod/inventory.yml docs/examples/X``)."""

    def __init__(self, state_dir, workdir, env):
        self.state_dir = state_dir
        self.cluster_dir = os.path.join(state_dir, "prod")
        self.emulator_dir = os.path.join(state_dir, "emulator")
        self.inventory = os.path.join(self.cluster_dir, "inventory.yml")
        self.workdir = workdir
        self.env = env
        self.runs = 0

    def run(self, example, check=False, diff=False, expect_rc=0, env=None, extra_vars=None, inventory=None):
        self.runs += 1
        run = run_playbook_in(self.workdir, "%d-%s" % (self.runs, example), os.path.join(EXAMPLES, example),
                              inventory=inventory or self.inventory, check=check, diff=diff, extra_vars=extra_vars,
                              env=dict({"ANSIBLE_COLLECTIONS_PATH": self.env["ANSIBLE_COLLECTIONS_PATH"],
                                        "TALOS_TEST_DOOR": ""}, **(env or {})))
        assert expect_rc is None or run.rc == expect_rc, "%s exited %d, expected %s\n%s\n%s" % (
            example, run.rc, expect_rc, run.stdout[-6000:], run.stderr[-3000:])
        return run

    def emulator(self, *arguments):
        done = subprocess.run([sys.executable, os.path.join(TESTS, "talos-emulator")] + list(arguments[:1])
                              + ["--state-dir", self.emulator_dir] + list(arguments[1:]),
                              capture_output=True, text=True, env=self.env, check=False, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def audit(self, method, node=None):
        with open(os.path.join(self.emulator_dir, "audit.jsonl")) as log:
            entries = [json.loads(line) for line in log if line.strip()]
        return [entry for entry in entries if method_matches(entry["method"], method) and entry["code"] == "OK"
                and not entry["dry_run"] and (node is None or entry["node"] == node)]

    def file(self, name):
        return os.path.join(self.cluster_dir, name)

    def bundle(self):
        return yaml.safe_load(_read(self.file("secrets.yaml")))

    def addresses(self):
        """Each host's node address, as the inventory has it."""
        groups = yaml.safe_load(_read(self.inventory))["all"]["children"]
        return dict((name, host["ansible_host"]) for group in groups.values() for name, host in group["hosts"].items())

    def applied(self):
        """How many configurations the nodes have taken (dry runs aside)."""
        return len(self.audit("ApplyConfiguration"))


class Etcd(object):
    """The control planes' real etcd, as a client of its keyspace sees it (etcd's JSON gateway, a client certificate of
    the cluster's etcd CA): the drill's data."""

    def __init__(self, client_urls, bundle, directory):
        ca = bundle["certs"]["etcd"]
        ca_pem, ca_key = base64.b64decode(ca["crt"]), to_standard_pem(base64.b64decode(ca["key"]))
        cert, key = issue_certificate(ca_pem, ca_key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "drill")]),
                                      [ExtendedKeyUsageOID.CLIENT_AUTH])
        paths = []
        for name, data in (("ca.crt", ca_pem), ("client.crt", cert), ("client.key", key)):
            paths.append(os.path.join(directory, name))
            with open(paths[-1], "wb") as handle:
                handle.write(data)
        self.context = ssl.create_default_context(cafile=paths[0])
        self.context.check_hostname = False
        self.context.load_cert_chain(paths[1], paths[2])
        self.client_urls = client_urls

    def _call(self, path, body):
        error = None
        for url in self.client_urls:
            host, port = url.split("://")[1].rsplit(":", 1)
            connection = http.client.HTTPSConnection(host, int(port), context=self.context, timeout=10)
            try:
                connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = json.loads(response.read())
                if response.status == 200:
                    return answer
                error = answer
            except OSError as failure:
                error = failure
            finally:
                connection.close()
        raise AssertionError("no etcd member answered %s: %s" % (path, error))

    def put(self, key, value):
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def get(self, key):
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def _recap_changes(run):
    lines = [line for line in run.stdout.split("PLAY RECAP", 1)[1].splitlines() if " : ok=" in line]
    return dict((line.split()[0], int(line.split("changed=")[1].split()[0])) for line in lines)


@pytest.fixture
def demo(tmp_path):
    state_dir, env = tmp_path / "demo", demo_environment(tmp_path)
    with started_demo(state_dir, env, kubernetes=KUBERNETES) as closing:
        yield Demo(str(state_dir), tmp_path, env), closing


def test_every_guide_runs_as_written_on_make_demo(demo, s3_store, image_factory, tmp_path):
    demo, closing = demo
    nodes = ["controlplane-1", "controlplane-2", "controlplane-3", "worker-1", "worker-2"]
    s3 = _s3_options(demo, s3_store)
    examples = _files(EXAMPLES)
    # What make demo leaves: the cluster's directory, as getting-started lays it out; the emulator's files apart.
    made = ["controlplane.yaml", "host_vars", "inventory.yml", "kubeconfig", "secrets.yaml", "talosconfig", "worker.yaml"]
    assert sorted(os.listdir(demo.cluster_dir)) == made
    assert sorted(os.listdir(demo.file("host_vars"))) == ["%s.yml" % name for name in nodes]
    assert sorted(os.listdir(demo.state_dir)) == ["emulator", "prod"]
    assert not os.path.exists(os.path.join(demo.emulator_dir, "inventory.yml")), "it names a talosconfig the cluster does not trust"
    assert yaml.safe_load(_read(demo.inventory))["all"]["vars"]["talosconfig"] == "{{ inventory_dir }}/talosconfig"
    assert demo.emulator("status").count("listening") == 5
    assert "Stop the cluster with: make demo-stop" in closing and "/tmp/demo" not in closing
    assert ("make demo KUBERNETES=1" in closing) is not KUBERNETES
    # The ad-hoc command the demo prints works as printed, each host reading its own node (no -e, no node=).
    command = closing[closing.index("  ansible -i"):].split("\n")[0]
    assert " -e " not in command and "node=" not in command
    ad_hoc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=demo.env, check=False, cwd=REPO)
    assert ad_hoc.returncode == 0 and ad_hoc.stdout.count("SUCCESS") == 5, ad_hoc.stdout + ad_hoc.stderr
    for name in ("controlplane-2", "worker-1"):
        assert re.search(r"^%s \| SUCCESS => \{.*?\"hostname\": \"%s\"" % (name, name), ad_hoc.stdout, re.S | re.M)

    # Getting started.
    site = demo.run("site.yml")
    facts = dict((name, site.task("Gather Talos facts", name)["result"]["ansible_facts"]["talos"]) for name in nodes)
    assert [facts[name]["hostname"] for name in nodes] == nodes
    members = facts["controlplane-1"]["etcd"]["members"]
    assert sorted(member["hostname"] for member in members) == nodes[:3]
    kubernetes = _kubernetes(demo) if KUBERNETES else None
    if KUBERNETES:
        assert _node_names(kubernetes) == nodes
    # The inventory plugin's hosts, with its file in the cluster's directory.
    with open(demo.file("cluster.talos.yml"), "w") as source:
        yaml.safe_dump({"plugin": "talos_linux.talos.talos", "talosconfig": demo.file("talosconfig")}, source)
    discovered = demo.run("discovered-nodes.yml", inventory=demo.file("cluster.talos.yml"))
    assert sorted((result["host"], result["result"]["ansible_facts"]["talos"]["hostname"])
                  for result in discovered.tasks("Gather Talos facts")) == [(name, name) for name in nodes]

    # Provisioning: the role with the configs next to the inventory previewed with --check --diff (the groups'
    # patches, nothing applied); the bundle kept only in Vault, as the role's input, and the AWX cluster template's
    # playbook with its survey's answers: both find every node as it is.
    applied = demo.applied()
    preview = demo.run("provision-configs.yml", check=True, diff=True)
    for name in nodes:
        change = preview.task("talos_linux.talos.cluster : Apply the machine configuration", name)["result"]
        patched = "rotate-server-certificates" if name.startswith("worker") else "allowSchedulingOnControlPlanes"
        assert change["changed"] and patched in json.dumps(change["diff"]), (name, change)
    assert demo.applied() == applied, "check mode applies nothing"
    password = os.path.join(str(tmp_path), "vault-password")
    with open(password, "w") as handle:
        handle.write("demo vault password\n")
    vault = dict(demo.env, ANSIBLE_VAULT_PASSWORD_FILE=password)
    encrypted = subprocess.run(["ansible-vault", "encrypt", demo.file("secrets.yaml"), "--output", demo.file("secrets.vault.yaml")],
                               capture_output=True, text=True, env=vault, check=False)
    assert encrypted.returncode == 0, encrypted.stderr
    inventory_vars = yaml.safe_load(_read(demo.inventory))["all"]["vars"]
    # The demo's own answers to what provision.yml names (demo.yml's): its name, endpoint, Talos version and disk.
    site = dict(cluster_name=inventory_vars["talos_cluster_name"], cluster_endpoint=inventory_vars["cluster_endpoint"],
                cluster_talos_version="v1.14.0", cluster_install_disk="/dev/sda")
    vaulted = demo.run("provision-vaulted.yml", env={"ANSIBLE_VAULT_PASSWORD_FILE": password}, extra_vars=site)
    work = vaulted.task("Private directory for the bundle and the generated files")["result"]["path"]
    assert not os.path.exists(work), "the decrypted bundle outlives the run"
    assert demo.applied() == applied, "the configs rendered from the vaulted bundle are the nodes' own"
    assert not [value for value in _secret_values(demo.bundle()) if value in vaulted.stdout + vaulted.stderr]
    survey = dict(cluster_controlplane_config_file=demo.file("controlplane.yaml"), cluster_worker_config_file=demo.file("worker.yaml"),
                  cluster_kubeconfig="", cluster_wait_timeout=600, cluster_gather_subset=["version", "machine", "etcd"])
    template = demo.run("cluster.yml", extra_vars=survey)
    assert _recap_changes(template) == dict((name, 0) for name in nodes) and demo.applied() == applied

    # Adopting: the cluster taken over from its talosconfig alone (the inventory plugin's hosts), first in check mode;
    # the adopted directory holds the demo's own bundle and host patches, and the cluster role on it changes nothing.
    adopted = demo.file("adopted")
    demo.run("adopt.yml", check=True, inventory=demo.file("cluster.talos.yml"))
    assert not os.path.exists(adopted) and demo.applied() == applied
    demo.run("adopt.yml", inventory=demo.file("cluster.talos.yml"))
    assert sorted(os.listdir(adopted)) == ["config-backup", "controlplane.yaml", "group_vars", "host_vars", "inventory.yml",
                                           "kubeconfig", "secrets.yaml", "talosconfig", "worker.yaml"]
    assert _read(os.path.join(adopted, "secrets.yaml")) == _read(demo.file("secrets.yaml"))
    # The demo's host patches (host_vars/ of prod/), split into what every node shares and each host's hostname.
    hostname = {"apiVersion": "v1alpha1", "kind": "HostnameConfig"}
    settings = yaml.safe_load(_read(os.path.join(adopted, "group_vars", "all.yml")))
    assert settings["cluster_controlplane_patches"] == settings["cluster_worker_patches"] == [dict(hostname, auto=None)]
    for name in nodes:
        assert yaml.safe_load(_read(os.path.join(adopted, "host_vars", name + ".yml"))) == {
            "cluster_host_patches": [dict(hostname, hostname=name)]}, name
    taken_over = demo.run("cluster.yml", inventory=os.path.join(adopted, "inventory.yml"))
    assert _recap_changes(taken_over) == dict((name, 0) for name in nodes) and demo.applied() == applied

    # Lifecycle: a rolling restart, a node removed, a new machine in its place.
    restarted = demo.run("rolling-restart.yml")
    assert sorted(entry["node"] for entry in demo.audit("Reboot")) == nodes
    assert _recap_changes(restarted) == dict((name, 1) for name in nodes)
    demo.run("node-remove.yml")
    assert [entry["node"] for entry in demo.audit("Reset")] == ["worker-2"]
    replaced = demo.run("node-replace.yml")
    applied = demo.audit("ApplyConfiguration", "worker-2")
    assert applied and applied[-1]["time"] > demo.audit("Reset")[-1]["time"], "the replacement got the cluster's config"
    assert [entry["node"] for entry in demo.audit("ApplyConfiguration") if entry["time"] > demo.audit("Reset")[-1]["time"]] == [
        "worker-2"], "the other nodes keep their configs"
    assert dict((name, changes) for name, changes in _recap_changes(replaced).items() if changes) == {"worker-2": 1}

    # Upgrading: Talos, then (with Kubernetes) Kubernetes.
    demo.run("upgrade.yml")
    assert sorted(entry["node"] for entry in demo.audit("Upgrade")) == nodes
    if KUBERNETES:
        upgraded = demo.run("kubernetes-upgrade.yml")
        assert upgraded.task("talos_linux.talos.upgrade : Upgrade Kubernetes")["status"] == "changed"
        assert set(node.status.node_info.kubelet_version for node in kubernetes.list_node().items) == {"v1.37.2"}

    images = demo.run("images.yml")
    for name in nodes:
        listed = images.task("List the system namespace", name)["result"]
        assert any(image["name"].endswith(":v1.14.1") for image in listed["images"]), listed
    # The factory modules against the tests' Image Factory, as docs/images.md's offline section has it, over TLS.
    factory = image_factory(tls=True)
    made = demo.run("image-factory.yml", env={"TALOS_IMAGE_FACTORY_URL": factory.url, "REQUESTS_CA_BUNDLE": factory.ca_path})
    schematic = made.task("Schematic for Proxmox VMs with iSCSI storage")["result"]
    assert schematic["changed"] and list(factory.schematics) == [schematic["id"]]
    media = made.task("Its installer and boot media")["result"]
    assert media["installer"] == "%s/nocloud-installer/%s:v1.14.0" % (factory.url.split("://", 1)[1], schematic["id"])

    # Security: what expires when, then both CAs rotated.
    report = demo.run("certificates.yml").task("Read the certificates of every node and of the controller's files")["result"]
    assert sorted(entry["hostname"] for entry in report["nodes"] if "hostname" in entry) in ([], nodes) and report["expiring"] == []
    assert len(report["nodes"]) == 5
    talos_ca = demo.bundle()["certs"]["os"]["crt"]
    now = {"leaked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    demo.run("rotate-talos-ca.yml", extra_vars=now)
    assert demo.bundle()["certs"]["os"]["crt"] != talos_ca
    assert yaml.safe_load(_read(demo.file("talosconfig")))["contexts"] and not os.path.exists(demo.file("secrets.yaml.previous"))
    demo.run("site.yml")  # the rotated talosconfig next to the inventory reaches every node
    if KUBERNETES:
        kubernetes_ca = demo.bundle()["certs"]["k8s"]["crt"]
        demo.run("rotate-kubernetes-ca.yml", extra_vars=now)
        assert demo.bundle()["certs"]["k8s"]["crt"] != kubernetes_ca
        kubernetes = _kubernetes(demo)  # the kubeconfig of the new CA, fetched next to the inventory
        assert _node_names(kubernetes) == nodes  # at once: the rotation waited for the API server's restart

    # Troubleshooting: a support bundle, and files of the nodes.
    bundle = demo.run("support-bundle.yml").task("Every node's logs, state and resources, and the cluster's Nodes and pods")["result"]
    assert stat.S_IMODE(os.stat(demo.file("support.zip")).st_mode) == 0o600
    with zipfile.ZipFile(demo.file("support.zip")) as archive:
        names = archive.namelist()
    assert len(bundle["nodes"]) == 5 and all(entry["reached"] for entry in bundle["nodes"].values())
    assert any(name.startswith("kubernetesResources/") for name in names) is KUBERNETES
    demo.run("node-files.yml")
    for name in nodes[:3]:
        assert os.listdir(demo.file(os.path.join("node-files", name))), name
    # An AWX job's rescue: the first node's installer fails, the bundle is made, encrypted, and the job fails naming it.
    import pyrage
    identity = pyrage.x25519.Identity.generate()
    support_dir = os.path.join(str(tmp_path), "support")
    os.mkdir(support_dir)
    upgrades = len(demo.audit("Upgrade"))
    demo.emulator("fault", "fail_installer", "node=controlplane-1")
    failed = demo.run("upgrade-or-bundle.yml", expect_rc=2,
                      extra_vars={"support_dir": support_dir, "support_age_recipient": str(identity.to_public())})
    rescued = os.path.join(support_dir, "manual-support.zip.age")
    assert rescued in failed.task("Fail the job, naming the bundle", "controlplane-1")["result"]["msg"]
    assert [entry["node"] for entry in demo.audit("Upgrade")[upgrades:]] == ["controlplane-1"], "the job stops at the failed node"
    with zipfile.ZipFile(io.BytesIO(pyrage.decrypt(_read_bytes(rescued), [identity]))) as archive:
        assert set(name.split("/")[0] for name in archive.namelist()) >= set(demo.addresses().values())

    # etcd: backups (to a directory, to S3), a check, the maintenance, and the drill.
    etcd = Etcd([url for member in members for url in member["client_urls"]], demo.bundle(), tempfile.mkdtemp(dir=str(tmp_path)))
    etcd.put("/drill/before", "made before the backup")
    backup = demo.run("etcd-backup.yml").task("talos_linux.talos.etcd_backup : Take an etcd snapshot")["result"]
    assert os.listdir(demo.file("etcd-backups")) == [os.path.basename(backup["dest"])]
    assert b"made before the backup" in open(backup["dest"], "rb").read()
    # With a copy in S3, as AWX's etcd backup template runs it: the backup directory a volume (an extra variable).
    volume = os.path.join(str(tmp_path), "backup-volume")
    s3_backup = demo.run("etcd-backup-s3.yml", env=s3["env"], extra_vars=dict(s3["extra_vars"], etcd_backup_directory=volume)).task(
        "talos_linux.talos.etcd_backup : Take an etcd snapshot")["result"]
    assert os.listdir(volume) == [os.path.basename(s3_backup["dest"])] and stat.S_IMODE(os.stat(volume).st_mode) == 0o700
    s3_key = "talos/" + os.path.basename(s3_backup["dest"])
    head = s3_store.call("head_object", Bucket="prod-etcd-backups", Key=s3_key)
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == os.path.getsize(s3_backup["dest"])
    etcd.put("/drill/after", "made after the backup")
    newest = backup["dest"]
    assert os.listdir(demo.file("etcd-backups")) == [os.path.basename(newest)]
    plan = demo.run("etcd-verify-backup.yml").task("Check the newest backup and plan a restore from it")["result"]
    assert plan["snapshot"]["path"] == newest and plan["snapshot"]["revision"] >= backup["revision"]
    assert not demo.audit("Reset", "controlplane-1"), "a check touches no node"
    restores_before = len(demo.audit("EtcdRecover"))

    demo.emulator("fault", "raise_etcd_alarm", "controlplane-2")
    demo.run("etcd-maintenance.yml", check=True)
    assert not demo.audit("EtcdAlarmDisarm"), "check mode disarms nothing"
    demo.run("etcd-maintenance.yml")
    assert demo.audit("EtcdAlarmDisarm")

    demo.run("etcd-lose.yml")
    assert sorted(entry["node"] for entry in demo.audit("Reset") if entry["node"] != "worker-2") == nodes[:3]
    demo.run("etcd-restore.yml", check=True)
    # The restore's other source, as its commented lines say: the S3 object, fetched onto the controller and checked.
    work_dir = os.path.join(str(tmp_path), "restore")
    os.mkdir(work_dir)
    from_s3 = dict(s3, extra_vars=dict(s3["extra_vars"], etcd_restore_directory="", etcd_restore_s3_bucket="prod-etcd-backups",
                                       etcd_restore_s3_object=s3_key, etcd_restore_work_dir=work_dir))
    fetched = demo.run("etcd-restore.yml", check=True, **from_s3).task(
        "talos_linux.talos.etcd_restore : Restore etcd on the control planes")["result"]
    assert fetched["snapshot"]["path"] == os.path.join(work_dir, os.path.basename(s3_backup["dest"]))
    assert _read_bytes(fetched["snapshot"]["path"]) == _read_bytes(s3_backup["dest"])
    assert len(demo.audit("EtcdRecover")) == restores_before
    restored = demo.run("etcd-restore.yml").task("talos_linux.talos.etcd_restore : Restore etcd on the control planes")["result"]
    assert restored["changed"] and sorted(member["hostname"] for member in restored["members"]) == nodes[:3]
    assert restored["snapshot"]["path"] == newest
    assert etcd.get("/drill/before") == "made before the backup"
    assert etcd.get("/drill/after") is None, "the restore rolls etcd back to the backup"
    # Every file the examples made is next to the inventory: none beside them (playbook_dir), to be committed.
    assert _files(EXAMPLES) == examples


def _files(directory):
    return sorted(os.path.relpath(os.path.join(parent, name), directory)
                  for parent, _dirs, names in os.walk(directory) for name in names)


def _secret_values(bundle):
    """The keys, tokens and secrets of a secrets bundle (its certificates are public)."""
    if isinstance(bundle, dict):
        return [value for key, item in bundle.items() if key != "crt" for value in _secret_values(item)]
    return [bundle] if isinstance(bundle, str) and len(bundle) >= 16 else []


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


@pytest.fixture
def s3_store(tmp_path):
    """moto's S3 server with the demo's bucket for etcd-backup-s3.yml."""
    from s3_store import S3Store
    store = S3Store.start(str(tmp_path))
    try:
        store.call("create_bucket", Bucket="prod-etcd-backups")
        yield store
    finally:
        store.stop()


def _s3_options(demo, store):
    """How an AWS user runs the S3 examples, against moto's S3 server: boto3 takes the endpoint and the credentials
    from the environment; amazon.aws and boto3 come from the S3 store's venv, the controller's Python for the copy."""
    from s3_store import amazon_aws
    env = dict(store.credentials, AWS_ENDPOINT_URL_S3=store.endpoint_url, ANSIBLE_DEPRECATION_WARNINGS="False",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([demo.env["ANSIBLE_COLLECTIONS_PATH"], amazon_aws()]))
    return dict(env=env, extra_vars={"ansible_python_interpreter": store.python})


def _kubernetes(demo):
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    return kube_client.CoreV1Api(kube_config.new_client_from_config(config_file=demo.file("kubeconfig")))


def _node_names(api):
    return sorted(node.metadata.name for node in api.list_node(_request_timeout=10).items)
