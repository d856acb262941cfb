# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""From nothing to a cluster: talos_machine_secrets, talos_machine_config and talos_client_config
through ansible-playbook, then provisioning an emulated cluster in maintenance mode with what they made."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os
import stat

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle


def generation_tasks(workdir, cluster_name, endpoint, talosconfig_endpoints, talos_version="v1.14.0"):
    common = {"secrets": "%s/secrets.yaml" % workdir, "cluster_name": cluster_name, "cluster_endpoint": endpoint,
              "talos_version": talos_version}
    return [
        {"name": "bundle", "talos_linux.talos.talos_machine_secrets": {"path": "%s/secrets.yaml" % workdir},
         "register": "bundle"},
        {"name": "controlplane config", "talos_linux.talos.talos_machine_config": dict(
            common, machine_type="controlplane", dest="%s/controlplane.yaml" % workdir)},
        {"name": "worker config", "talos_linux.talos.talos_machine_config": dict(
            common, machine_type="worker", dest="%s/worker.yaml" % workdir,
            config_patches=[{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None, "hostname": "w-1"}])},
        {"name": "talosconfig", "talos_linux.talos.talos_client_config": {
            "dest": "%s/talosconfig" % workdir, "secrets": "%s/secrets.yaml" % workdir, "cluster_name": cluster_name,
            "endpoints": talosconfig_endpoints}},
    ]


def local_play(tasks):
    return {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}


def bundle_secrets(path):
    """Every secret of the bundle, and base64 forms, to look for in output."""
    bundle = SecretsBundle.load(str(path))
    values = set(bundle.secret_values())
    for value in list(values):
        for line in value.splitlines():
            if len(line) > 20 and not line.startswith("-----"):
                values.add(line)
    return values


def test_from_nothing_to_a_bootstrapped_cluster(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, reboot_seconds=0.1)
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    workdir = tmp_path / "generated"
    workdir.mkdir()
    tasks = generation_tasks(workdir, "from-nothing", "https://%s:6443" % controlplane.address, [controlplane.endpoint])
    talosconfig = "%s/talosconfig" % workdir
    tasks += [
        {"name": "install control plane", "talos_linux.talos.talos_apply_config": {
            "talosconfig": talosconfig, "endpoints": [controlplane.endpoint], "node": controlplane.address,
            "insecure": True, "config_file": "%s/controlplane.yaml" % workdir, "wait_timeout": 60}},
        {"name": "install worker", "talos_linux.talos.talos_apply_config": {
            "talosconfig": talosconfig, "endpoints": [worker.endpoint], "node": worker.address,
            "insecure": True, "config_file": "%s/worker.yaml" % workdir, "wait_timeout": 60}},
        {"name": "bootstrap", "talos_linux.talos.talos_bootstrap": {
            "talosconfig": talosconfig, "node": controlplane.address, "wait_timeout": 60}},
        {"name": "facts", "talos_linux.talos.talos_facts": {
            "talosconfig": talosconfig, "nodes": [controlplane.address, worker.address],
            "gather_subset": ["min", "etcd", "config"]}},
    ]
    run = run_playbook(local_play(tasks), env={"ANSIBLE_VERBOSITY": "3"})

    for name in ("bundle", "controlplane config", "worker config", "talosconfig", "install control plane",
                 "install worker", "bootstrap"):
        assert run.task(name)["status"] == "changed", name
    for name in ("secrets.yaml", "controlplane.yaml", "worker.yaml", "talosconfig"):
        assert stat.S_IMODE(os.stat(str(workdir / name)).st_mode) == 0o600, name
    facts = run.task("facts")["result"]["nodes"]
    assert facts[controlplane.address]["machine"]["type"] == "controlplane"
    assert facts[worker.address]["machine"]["type"] == "worker"
    assert cluster.etcd.bootstrapped and [m.node for m in cluster.etcd.members] == [controlplane]
    # The nodes run the configs the collection made.
    assert controlplane.config_bytes == (workdir / "controlplane.yaml").read_bytes()
    assert worker.config_bytes == (workdir / "worker.yaml").read_bytes()
    bundle = SecretsBundle.load(str(workdir / "secrets.yaml"))
    assert controlplane.config["machine"]["ca"]["crt"] == base64.b64encode(bundle.os_ca.crt_pem.encode()).decode()

    secrets = bundle_secrets(workdir / "secrets.yaml")
    output = run.stdout + run.stderr + repr(run.results)
    leaked = [secret for secret in secrets if secret in output]
    assert not leaked, "%d secrets of the bundle appear in the -vvv output" % len(leaked)
    talosconfig_key = yaml.safe_load((workdir / "talosconfig").read_text())["contexts"]["from-nothing"]["key"]
    assert talosconfig_key not in output


def test_installer_in_either_home_on_v114_nodes(emulator, run_playbook, tmp_path):
    """install_home puts the installer and its disk in the UnattendedInstallConfig document or in .machine.install;
    v1.14 nodes take either home, and refuse a config with both."""
    cluster = emulator(controlplanes=1, workers=1, maintenance=True, reboot_seconds=0.1)
    controlplane, worker = cluster.controlplanes[0], cluster.workers[0]
    workdir = tmp_path / "generated"
    workdir.mkdir()
    tasks = generation_tasks(workdir, "homes", "https://%s:6443" % controlplane.address, [controlplane.endpoint])
    tasks[1]["talos_linux.talos.talos_machine_config"].update(install_home="unattended", install_disk="/dev/nvme0n1")
    tasks[2]["talos_linux.talos.talos_machine_config"].update(install_home="machine", install_disk="/dev/vda")
    run_playbook(local_play(tasks))
    controlplane_docs = list(yaml.safe_load_all((workdir / "controlplane.yaml").read_text()))
    [unattended] = [document for document in controlplane_docs if document.get("kind") == "UnattendedInstallConfig"]
    assert unattended["provisioning"]["diskSelector"]["match"] == 'disk.dev_path == "/dev/nvme0n1"'
    assert "install" not in controlplane_docs[0]["machine"]
    worker_docs = list(yaml.safe_load_all((workdir / "worker.yaml").read_text()))
    assert worker_docs[0]["machine"]["install"]["disk"] == "/dev/vda"
    assert "UnattendedInstallConfig" not in [document.get("kind") for document in worker_docs]
    # The worker's config with the controlplane's UnattendedInstallConfig document added: both homes.
    both = workdir / "both.yaml"
    both.write_text((workdir / "worker.yaml").read_text() + "---\n" + yaml.safe_dump(unattended, sort_keys=False))

    talosconfig = "%s/talosconfig" % workdir

    def apply(name, node, config_file, **options):
        task = {"name": name, "talos_linux.talos.talos_apply_config": dict(
            talosconfig=talosconfig, endpoints=[node.endpoint], node=node.address, insecure=True,
            config_file=str(config_file), wait_timeout=60)}
        task.update(options)
        return task

    run = run_playbook(local_play([
        apply("both homes", worker, both, ignore_errors=True),
        apply("unattended home", controlplane, workdir / "controlplane.yaml"),
        apply("machine home", worker, workdir / "worker.yaml"),
    ]))
    refused = run.task("both homes")
    assert refused["status"] == "failed"
    assert "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)" in refused["result"]["msg"]
    assert run.task("unattended home")["status"] == "changed" and run.task("machine home")["status"] == "changed"
    assert controlplane.config_bytes == (workdir / "controlplane.yaml").read_bytes()
    assert worker.config_bytes == (workdir / "worker.yaml").read_bytes()
    assert worker.config["machine"]["install"]["disk"] == "/dev/vda"


def test_check_mode_creates_no_bundle(run_playbook, tmp_path):
    play = local_play(generation_tasks(tmp_path, "check", "https://10.5.0.2:6443", [])[:1])
    run = run_playbook(play, check=True, diff=True)
    assert run.task("bundle")["status"] == "changed"
    assert os.listdir(str(tmp_path)) == [name for name in os.listdir(str(tmp_path)) if name != "secrets.yaml"]
    assert not (tmp_path / "secrets.yaml").exists()


def test_second_run_changes_nothing(run_playbook, tmp_path):
    workdir = tmp_path / "generated"
    workdir.mkdir()
    play = local_play(generation_tasks(workdir, "idem", "https://10.5.0.2:6443", ["10.5.0.2"]))
    first = run_playbook(play, diff=True)
    assert first.changed_count == 4
    contents = dict((name, (workdir / name).read_bytes()) for name in os.listdir(str(workdir)))
    second = run_playbook(play, diff=True)
    assert second.changed_count == 0
    assert contents == dict((name, (workdir / name).read_bytes()) for name in os.listdir(str(workdir)))
    results = dict((name, second.task(name)["result"]) for name in ("controlplane config", "talosconfig"))
    assert results["talosconfig"]["issued"] is False
    assert "config" not in results["controlplane config"]

    # Check mode on an existing set writes nothing, even when a change is due.
    (workdir / "talosconfig").chmod(0o644)
    play["tasks"][3]["talos_linux.talos.talos_client_config"]["endpoints"] = ["10.5.0.3"]
    play["tasks"][1]["talos_linux.talos.talos_machine_config"]["cluster_endpoint"] = "https://10.5.0.9:6443"
    checked = run_playbook(play, check=True, diff=True)
    assert checked.task("talosconfig")["status"] == "changed"
    assert (workdir / "talosconfig").read_bytes() == contents["talosconfig"]
    diff = checked.task("controlplane config")["result"]["diff"]
    assert "https://10.5.0.9:6443" in diff["after"] and "<redacted>" in diff["after"]
    assert (workdir / "controlplane.yaml").read_bytes() == contents["controlplane.yaml"]
    for secret in bundle_secrets(workdir / "secrets.yaml"):
        assert secret not in checked.stdout and secret not in repr(checked.results)
    play["tasks"][1]["talos_linux.talos.talos_machine_config"]["cluster_endpoint"] = "https://10.5.0.2:6443"

    # New endpoints rewrite the context but keep its certificate.
    rewritten = run_playbook(play)
    assert rewritten.task("talosconfig")["result"]["issued"] is False
    before = yaml.safe_load(contents["talosconfig"])["contexts"]["idem"]
    after = yaml.safe_load((workdir / "talosconfig").read_text())["contexts"]["idem"]
    assert after["endpoints"] == ["10.5.0.3"] and (after["crt"], after["key"]) == (before["crt"], before["key"])

    # Other roles need a new certificate.
    play["tasks"][3]["talos_linux.talos.talos_client_config"]["roles"] = ["os:reader"]
    reissued = run_playbook(play)
    assert reissued.task("talosconfig")["result"]["issued"] is True
    assert reissued.task("talosconfig")["result"]["certificate"]["roles"] == ["os:reader"]


def test_commented_config_is_written_once(run_playbook, tmp_path):
    tasks = generation_tasks(tmp_path, "commented", "https://10.5.0.2:6443", [], talos_version="v1.13")[:2]
    tasks.append({"name": "commented config", "talos_linux.talos.talos_machine_config": dict(
        tasks[1]["talos_linux.talos.talos_machine_config"], dest="%s/commented.yaml" % tmp_path,
        with_docs=True, with_examples=True)})
    play = local_play(tasks)
    first = run_playbook(play, diff=True)
    assert first.task("commented config")["status"] == "changed"
    commented = (tmp_path / "commented.yaml").read_text()
    assert "\n    # Role of the node: controlplane runs etcd" in commented
    assert "\n    # Example, a static address, a default route and resolvers:\n" in commented
    assert "#     kind: KubeSpanConfig\n" in commented
    plain = (tmp_path / "controlplane.yaml").read_text()
    assert "#" not in plain
    assert list(yaml.safe_load_all(commented)) == list(yaml.safe_load_all(plain))
    second = run_playbook(play, diff=True)
    assert second.task("commented config")["status"] == "ok" and second.changed_count == 0
    assert (tmp_path / "commented.yaml").read_text() == commented


@pytest.mark.parametrize("options,message", [
    ({"cluster_endpoint": "http://10.5.0.2:6443"}, "must use https"),
    ({"talos_version": "v1.8"}, "talos_version v1.8 is not supported"),
    ({"talos_version": "v1.13.4", "install_home": "unattended"},
     "install_home unattended needs talos_version v1.14 or later: Talos v1.13 has no UnattendedInstallConfig document"),
    ({"config_patches": [[{"op": "add", "path": "/machine/certSANs/-", "value": "api.example.com"}]]},
     "config_patches[0] is a JSON patch (RFC 6902), which cannot be applied to a multi-document machine config"),
])
def test_bad_input_names_the_parameter(run_playbook, tmp_path, options, message):
    workdir = tmp_path / "generated"
    workdir.mkdir()
    tasks = generation_tasks(workdir, "bad", "https://10.5.0.2:6443", [])
    tasks[1]["talos_linux.talos.talos_machine_config"].update(options)
    tasks[1]["ignore_errors"] = True
    run = run_playbook(local_play(tasks[:2]))
    result = run.task("controlplane config")
    assert result["status"] == "failed" and message in result["result"]["msg"]
    assert not (workdir / "controlplane.yaml").exists()


def test_talosconfig_roles_from_an_existing_bundle(emulator, run_playbook, tmp_path):
    """A bundle the collection did not make (the emulated cluster's) gives talosconfigs whose roles the nodes enforce."""
    cluster = emulator(controlplanes=1)
    node = cluster.controlplanes[0]
    secrets = os.path.join(cluster.state_dir, "secrets.yaml")
    tasks = []
    for role in ("os:admin", "os:reader"):
        tasks.append({"name": "talosconfig %s" % role, "talos_linux.talos.talos_client_config": {
            "dest": str(tmp_path / role.replace(":", "-")), "secrets": secrets, "cluster_name": cluster.name,
            "endpoints": [node.endpoint], "nodes": [node.address], "roles": [role]}})
    tasks += [
        {"name": "reader reads", "talos_linux.talos.talos_facts": {
            "talosconfig": str(tmp_path / "os-reader"), "gather_subset": ["min"]}},
        {"name": "reader may not apply", "ignore_errors": True, "talos_linux.talos.talos_apply_config": {
            "talosconfig": str(tmp_path / "os-reader"), "config_file": os.path.join(cluster.state_dir, "controlplane.yaml")}},
        {"name": "admin reads the sensitive config", "talos_linux.talos.talos_facts": {
            "talosconfig": str(tmp_path / "os-admin"), "gather_subset": ["config"]}},
    ]
    run = run_playbook(local_play(tasks))
    assert run.task("reader reads")["status"] == "ok"
    # The contexts list the node: each result is keyed by it, as with the nodes option.
    refused = run.task("reader may not apply")
    assert refused["status"] == "failed" and refused["result"]["nodes"][node.address]["code"] == "PermissionDenied"
    assert run.task("admin reads the sensitive config")["result"]["nodes"][node.address]["config"]["hash"]
    assert cluster.audit(method="ApplyConfiguration", include_failed=False) == []
