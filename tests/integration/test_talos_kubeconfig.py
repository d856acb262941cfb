# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""talos_kubeconfig through ansible-playbook against the emulator."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat

import yaml

from module_plays import module_play


def kubeconfig_play(emulated, node, role="admin", no_log=False, **options):
    keywords = {"register": "fetched"}
    if no_log:
        keywords["no_log"] = True
    return module_play(emulated, "talos_kubeconfig", options, node, "kubeconfig", role=role, **keywords)


def test_writes_0600_and_a_second_run_keeps_the_file(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1)
    node = cluster.controlplanes[0]
    dest = tmp_path / "kube" / "config"
    dest.parent.mkdir()

    run = run_playbook(kubeconfig_play(cluster, node.address, dest=str(dest)), diff=True)
    result = run.task("kubeconfig")
    assert result["status"] == "changed" and "kubeconfig" not in result["result"]
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    config = yaml.safe_load(dest.read_text())
    assert config["clusters"][0]["cluster"]["server"] == result["result"]["server"]
    assert config["users"][0]["user"]["client-key-data"]
    assert config["users"][0]["user"]["client-key-data"] not in run.stdout
    content = dest.read_bytes()

    run = run_playbook(kubeconfig_play(cluster, node.address, dest=str(dest)))
    assert run.task("kubeconfig")["status"] == "ok"
    assert dest.read_bytes() == content and os.listdir(str(dest.parent)) == ["config"]
    assert cluster.audit() == []


def test_server_and_names_are_rewritten(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1)
    dest = tmp_path / "kubeconfig"
    options = dict(dest=str(dest), server="https://k8s.example.com:6443", context_name="prod", cluster_name="prod-cluster")
    run = run_playbook(kubeconfig_play(cluster, cluster.controlplanes[0].address, **options))
    result = run.task("kubeconfig")["result"]
    assert (result["server"], result["context"], result["cluster"]) == ("https://k8s.example.com:6443", "prod", "prod-cluster")
    config = yaml.safe_load(dest.read_text())
    assert config["current-context"] == "prod"
    assert config["contexts"][0]["context"]["cluster"] == "prod-cluster"
    assert config["clusters"][0]["cluster"]["server"] == "https://k8s.example.com:6443"

    run = run_playbook(kubeconfig_play(cluster, cluster.controlplanes[0].address, **options))
    assert run.task("kubeconfig")["status"] == "ok"
    # Another server address is a real change.
    options["server"] = "https://10.0.0.1:6443"
    run = run_playbook(kubeconfig_play(cluster, cluster.controlplanes[0].address, **options))
    assert run.task("kubeconfig")["status"] == "changed"
    assert yaml.safe_load(dest.read_text())["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"


def test_check_mode_writes_nothing(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1)
    dest = tmp_path / "kubeconfig"
    run = run_playbook(kubeconfig_play(cluster, cluster.controlplanes[0].address, dest=str(dest)), check=True)
    assert run.task("kubeconfig")["status"] == "changed" and not dest.exists()


def test_without_dest_the_kubeconfig_is_returned(emulator, run_playbook):
    cluster = emulator(controlplanes=1)
    play = kubeconfig_play(cluster, cluster.controlplanes[0].address, no_log=True)
    play["tasks"].append({"name": "parse", "ansible.builtin.set_fact": {"parsed": "{{ fetched.kubeconfig | from_yaml }}"}})
    play["tasks"].append({"name": "show", "ansible.builtin.debug": {"msg": "{{ parsed['current-context'] }}"}})
    run = run_playbook(play)
    assert run.task("kubeconfig")["status"] == "ok"
    assert run.task("show")["result"]["msg"] == "admin@%s" % cluster.name
    assert "client-key-data" not in run.stdout


def test_worker_and_non_admin_certificates_are_refused(emulator, run_playbook, tmp_path):
    cluster = emulator(controlplanes=1, workers=1)
    dest = tmp_path / "kubeconfig"
    run = run_playbook(kubeconfig_play(cluster, cluster.workers[0].address, dest=str(dest)), expect_rc=2)
    result = run.task("kubeconfig")["result"]
    assert result["code"] == "Unimplemented" and "kubeconfig is only available on control plane nodes" in result["msg"]

    for role in ("operator", "reader"):
        run = run_playbook(kubeconfig_play(cluster, cluster.controlplanes[0].address, role=role, dest=str(dest)), expect_rc=2)
        assert ("it needs role os:admin and the client certificate carries role os:%s" % role
                in run.task("kubeconfig")["result"]["msg"])
    assert not dest.exists()
