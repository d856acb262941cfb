# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The disaster-recovery drill through the roles etcd_backup and etcd_restore, on the emulator's real etcd members
with a real Kubernetes API server storing its objects in them, as on Talos.

Objects are made; the cluster is backed up; another object is made; etcd is lost on every control plane (EPHEMERAL
wiped); the restore brings the first objects back and not the later one.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from s3_store import S3Store, amazon_aws
from talos_emulator.pki import to_standard_pem
from test_robustness import assert_no_secret, cluster_secrets

pytestmark = pytest.mark.long

SECRET_VALUE = "drill-secret-value-4b1d"


def role_play(cluster, role, python=None, **variables):
    """A play of the role on localhost; ``python`` is the interpreter of its modules (the S3 store's)."""
    variables["%s_talosconfig" % role] = cluster.talosconfig_path("admin")
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False,
            "roles": [{"role": "talos_linux.talos." + role, "vars": variables}]}
    if python:
        play["vars"] = {"ansible_python_interpreter": python}
    return [play]


@pytest.fixture
def s3_store(tmp_path):
    store = S3Store.start(str(tmp_path))
    yield store
    store.stop()


def s3_env(store):
    """The environment of a run whose roles copy through amazon.aws.s3_object to ``store``."""
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".collections")
    # amazon.aws warns of what it does that newer ansible-core deprecates; the collection's own warnings are held to
    # none by every other run.
    return dict(store.credentials, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([collections, amazon_aws()]),
                ANSIBLE_DEPRECATION_WARNINGS="False")


def kubernetes_api(cluster, kube_apiserver_factory):
    """A Kubernetes API server of the cluster's CA that stores its objects in the control planes' etcd, and its client."""
    secrets = cluster.secrets
    server = kube_apiserver_factory(secrets.k8s_ca.crt_pem, secrets.k8s_ca.key_pem, secrets.service_account_key_pem,
                                    etcd=(cluster.etcd.client_urls(), secrets.etcd_ca.crt_pem,
                                          to_standard_pem(secrets.etcd_ca.key_pem)))
    return server, kube_client.CoreV1Api(kube_config.new_client_from_config(config_file=server.kubeconfig_path))


# A snapshot of real etcd v3.7 (the unit tests' vector): what a backup directory holds.
VECTOR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit", "plugins", "module_utils", "data",
                      "etcd-v3.7.snapshot")


@pytest.fixture(scope="module")
def etcd_model(module_emulator):
    """A healthy cluster on the emulator's etcd model, shared: nothing here changes it."""
    return module_emulator(controlplanes=3, bootstrapped=True, name="roles-etcd-model")


def test_the_backup_roles_variables_fail_by_their_names_before_the_cluster_is_asked(etcd_model, run_playbook, tmp_path):
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "a-file").write_text("")
    cases = [
        # A required variable has no default: a misspelt one fails the argument spec's check, naming the one expected.
        (dict(etcd_backup_dir=str(backups)), "missing required arguments: etcd_backup_directory"),
        (dict(etcd_backup_directory=str(backups / "missing")), "Cannot write etcd backups to %s: it does not exist; create it or "
         "set etcd_backup_directory to an existing directory." % (backups / "missing")),
        (dict(etcd_backup_directory=str(backups / "a-file")), "Cannot write etcd backups to %s: it is not a directory; set "
         "etcd_backup_directory to a directory." % (backups / "a-file")),
        (dict(etcd_backup_directory=str(backups), etcd_backup_prefix="../up"), "etcd_backup_prefix must start with a letter or "
         "digit and hold only letters, digits, '.', '_' and '-' (it names files in the backup directory), not '../up'."),
        (dict(etcd_backup_directory=str(backups), etcd_backup_keep=0), "etcd_backup_keep must be 1 or more (the new backup is "
         "kept), not 0."),
        (dict(etcd_backup_directory=str(backups), etcd_backup_max_age="a month"), "etcd_backup_max_age must be a duration such "
         "as 720h, 1h30m or 30d, or empty, not 'a month'."),
        (dict(etcd_backup_directory=str(backups), etcd_backup_max_age="2w"), "etcd_backup_max_age must be a duration such "
         "as 720h, 1h30m or 30d, or empty, not '2w'."),
    ]
    # One run a mode: each case includes the role in a block whose rescue records the failure.
    play = role_play(etcd_model, "etcd_backup")[0]
    talosconfig = play.pop("roles")[0]["vars"]
    play["tasks"] = [{"name": "case %d" % number, "block": [{
        "name": "Include the role", "ansible.builtin.include_role": {"name": "talos_linux.talos.etcd_backup"},
        "vars": dict(talosconfig, **variables)}],
        "rescue": [{"name": "failed in case %d" % number, "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}]}
        for number, (variables, unused_message) in enumerate(cases)]
    for check in (True, False):
        run = run_playbook([play], check=check)
        for number, (variables, message) in enumerate(cases):
            failure = run.task("failed in case %d" % number)["result"]["msg"]
            assert failure == message or (number == 0 and message in failure), (variables, failure)
        assert run.tasks("talos_linux.talos.etcd_backup : Take an etcd snapshot") == []
    assert os.listdir(str(backups)) == ["a-file"]


@pytest.mark.parametrize("check", [True, False], ids=["check-mode", "run"])
def test_the_backup_role_on_the_etcd_model_fails_at_once_saying_how_to_get_real_members(etcd_model, run_playbook, tmp_path,
                                                                                        check):
    backups = tmp_path / "backups"
    backups.mkdir()
    run = run_playbook(role_play(etcd_model, "etcd_backup", etcd_backup_directory=str(backups)), check=check, expect_rc=2)
    failed = run.task("talos_linux.talos.etcd_backup : Take an etcd snapshot")
    assert "the emulator's etcd model cannot make a snapshot; start real etcd members to take one" in failed["result"]["msg"]
    assert run.tasks("talos_linux.talos.etcd_backup : Say what was backed up") == [] and os.listdir(str(backups)) == []


def test_verifying_a_backup_on_a_healthy_cluster_takes_the_inventorys_control_plane_group(etcd_model, run_playbook,
                                                                                          tmp_path):
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "prod-20261127T020000Z-r4.snapshot").write_bytes(open(VECTOR, "rb").read())
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"localhost": {"ansible_connection": "local"}},
        "children": {"masters": {"hosts": {node.name: {"ansible_host": node.address} for node in etcd_model.controlplanes}}}}}))
    run = run_playbook(role_play(etcd_model, "etcd_restore", etcd_restore_controlplane_group="masters",
                                 etcd_restore_directory=str(backups), etcd_restore_prefix="prod"), inventory=str(inventory),
                       check=True)
    plan = run.task("talos_linux.talos.etcd_restore : Show the plan")["result"]["msg"]
    addresses = [node.address for node in etcd_model.controlplanes]
    assert plan[0].startswith("refuse, since etcd still has quorum (%s answer with leader " % ", ".join(addresses))
    assert plan[1] == "wipe etcd on %s (reset of EPHEMERAL, not graceful, reboot)" % ", ".join(addresses)
    assert etcd_model.audit() == [] and sorted(os.listdir(str(backups))) == ["prod-20261127T020000Z-r4.snapshot"]


def test_backup_lose_etcd_everywhere_restore(emulator, run_playbook, kube_apiserver_factory, tmp_path):
    cluster = emulator(controlplanes=3, workers=1, bootstrapped=True, etcd="real", reboot_seconds=0.1)
    nodes = [node.address for node in cluster.controlplanes]
    server, core = kubernetes_api(cluster, kube_apiserver_factory)
    core.create_namespace(kube_client.V1Namespace(metadata=kube_client.V1ObjectMeta(name="drill")))
    core.create_namespaced_config_map("drill", kube_client.V1ConfigMap(
        metadata=kube_client.V1ObjectMeta(name="before"), data={"made": "before the backup"}))
    core.create_namespaced_secret("drill", kube_client.V1Secret(
        metadata=kube_client.V1ObjectMeta(name="credentials"), string_data={"password": SECRET_VALUE}))

    backups = tmp_path / "backups"
    backups.mkdir()
    backup = run_playbook(role_play(cluster, "etcd_backup", etcd_backup_directory=str(backups), etcd_backup_prefix="drill",
                                    etcd_backup_keep=3), verbosity=3)
    snapshot = backup.task("talos_linux.talos.etcd_backup : Take an etcd snapshot")["result"]
    assert snapshot["changed"] is True and os.listdir(str(backups)) == [os.path.basename(snapshot["dest"])]
    assert SECRET_VALUE.encode() in open(snapshot["dest"], "rb").read()
    core.create_namespaced_config_map("drill", kube_client.V1ConfigMap(
        metadata=kube_client.V1ObjectMeta(name="after"), data={"made": "after the backup"}))

    # The worst day: etcd is gone on every control plane (the API server goes down with it).
    server.stop()
    for node in cluster.controlplanes:
        cluster.wipe_etcd(node)

    variables = dict(etcd_restore_nodes=nodes, etcd_restore_directory=str(backups), etcd_restore_prefix="drill",
                     etcd_restore_wait_timeout=180)
    plan = run_playbook(role_play(cluster, "etcd_restore", **variables), check=True).task("talos_linux.talos.etcd_restore : Show the plan")["result"]["msg"]
    assert plan == ["upload the snapshot (revision %d) to %s and bootstrap etcd from it" % (snapshot["revision"], nodes[0]),
                    "wait until %s, %s joined the restored etcd as voting members" % (nodes[1], nodes[2])]
    assert cluster.audit() == []

    restore = run_playbook(role_play(cluster, "etcd_restore", **variables), verbosity=3)
    restored = restore.task("talos_linux.talos.etcd_restore : Restore etcd on the control planes")["result"]
    assert restored["changed"] is True and restored["snapshot"]["path"] == snapshot["dest"]
    assert sorted(member["hostname"] for member in restored["members"]) == ["controlplane-1", "controlplane-2", "controlplane-3"]
    assert restore.task("talos_linux.talos.etcd_restore : Check the cluster's health")["status"] == "ok"
    for run in (backup, restore):
        assert SECRET_VALUE not in run.stdout + run.stderr
        assert_no_secret(run.stdout + run.stderr, cluster_secrets(cluster))

    # The API server comes back (as its static pod does after the control plane's reboot) and reads the backup's state.
    server, core = kubernetes_api(cluster, kube_apiserver_factory)
    try:
        assert core.read_namespaced_config_map("before", "drill").data == {"made": "before the backup"}
        assert core.read_namespaced_secret("credentials", "drill").data["password"] is not None
        with pytest.raises(ApiException) as missing:
            core.read_namespaced_config_map("after", "drill")
        assert missing.value.status == 404
    finally:
        server.stop()

    again = run_playbook(role_play(cluster, "etcd_restore", **variables))
    assert again.task("talos_linux.talos.etcd_restore : Restore etcd on the control planes")["status"] == "ok"
    assert [(entry["method"].rsplit("/", 1)[1], entry["node"]) for entry in cluster.audit()] == [
        ("EtcdRecover", cluster.controlplanes[0].name), ("Bootstrap", cluster.controlplanes[0].name)]


@pytest.mark.once
def test_backups_are_copied_to_s3_encrypted_and_a_restore_takes_an_object(emulator, run_playbook, s3_store, tmp_path):
    cluster = emulator(controlplanes=1, bootstrapped=True, etcd="real", reboot_seconds=0.1)
    cp1 = cluster.controlplanes[0]
    s3_store.call("create_bucket", Bucket="etcd-backups")
    env = s3_env(s3_store)
    s3 = dict(etcd_backup_s3_bucket="etcd-backups", etcd_backup_s3_prefix="talos/",
              etcd_backup_s3_endpoint_url=s3_store.endpoint_url)
    cluster.run(cluster.etcd.kv(cp1, "put", key="/registry/secrets/drill/kept", value=SECRET_VALUE))
    backups = tmp_path / "backups"
    backups.mkdir()

    backup = run_playbook(role_play(cluster, "etcd_backup", python=s3_store.python, etcd_backup_directory=str(backups), **s3),
                          env=env, verbosity=3)
    snapshot = backup.task("talos_linux.talos.etcd_backup : Take an etcd snapshot")["result"]
    key = "talos/" + os.path.basename(snapshot["dest"])
    head = s3_store.call("head_object", Bucket="etcd-backups", Key=key)
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == snapshot["size"]
    with open(snapshot["dest"], "rb") as saved:
        assert bytes.fromhex(s3_store.call("get_object", Bucket="etcd-backups", Key=key)["Body"]) == saved.read()
    assert SECRET_VALUE not in backup.stdout + backup.stderr
    assert_no_secret(backup.stdout + backup.stderr, cluster_secrets(cluster))

    cluster.run(cluster.etcd.kv(cp1, "put", key="/registry/secrets/drill/later", value="later"))
    cluster.wipe_etcd(cp1)
    work = tmp_path / "restore"
    work.mkdir()
    variables = dict(etcd_restore_nodes=[cp1.address], etcd_restore_s3_bucket="etcd-backups",
                     etcd_restore_s3_endpoint_url=s3_store.endpoint_url, etcd_restore_work_dir=str(work),
                     etcd_restore_wait_timeout=120)
    missing = run_playbook(role_play(cluster, "etcd_restore", python=s3_store.python, etcd_restore_s3_object="talos/none",
                                     **variables), env=env, expect_rc=2)
    failed = missing.task("talos_linux.talos.etcd_restore : Fetch the backup from S3")
    assert failed["status"] == "failed" and "talos/none" in failed["result"]["msg"] and cluster.audit() == []

    restore = run_playbook(role_play(cluster, "etcd_restore", python=s3_store.python, etcd_restore_s3_object=key,
                                     **variables), env=env, verbosity=3)
    assert restore.task("talos_linux.talos.etcd_restore : Restore etcd on the control planes")["status"] == "changed"
    assert cluster.run(cluster.etcd.kv(cp1, "get", key="/registry/secrets/drill/kept"))["value"] == SECRET_VALUE
    assert cluster.run(cluster.etcd.kv(cp1, "get", key="/registry/secrets/drill/later"))["value"] is None
    assert SECRET_VALUE not in restore.stdout + restore.stderr
