# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A user's own talosctl against the demo's cluster: upstream talosctl (tests/talosctl, built from Go modules) runs
the commands users run day to day, and the tests check their output, or that they fail exactly as on real Talos. The
same questions asked through talosctl and through the collection's modules get the same answers (etcd snapshot,
support bundle, health, the Kubernetes upgrade plan, the CA rotation).

The tests and fixtures live here; ``test_talosctl.py`` (the demo's Kubernetes switch off) and
``test_talosctl_kubernetes.py`` (on) run them, each on one cluster (module scope) that its ``kubernetes`` fixture
chooses, so that the two clusters run on both test workers. Independent commands run concurrently. What the emulator
does not do is named where a test meets it (docs/emulator.md, "What talosctl proves").
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import concurrent.futures
import datetime
import functools
import json
import os
import re
import subprocess
import zipfile

import pytest
import yaml

import talosctl
from demo_cluster import demo_cluster
from playbook_runner import run_playbook_in

COMMAND_TIMEOUT = 120


class Talosctl:
    """Runs talosctl with a talosconfig (the demo cluster's)."""

    def __init__(self, talosconfig, workdir):
        self.talosconfig = talosconfig
        self.workdir = workdir
        self.binary = talosctl.binary()

    def __call__(self, *args, talosconfig=None, timeout=COMMAND_TIMEOUT):
        env = dict(os.environ, TALOSCONFIG=talosconfig or self.talosconfig)
        result = subprocess.run([self.binary] + [str(arg) for arg in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, env=env, cwd=str(self.workdir), timeout=timeout, check=False)
        # talosctl v1.14.1 warns that the emulated nodes run v1.14.0: not part of any answer.
        result.stderr = "\n".join(line for line in result.stderr.splitlines()
                                  if "is older than client version" not in line)
        return result

    def ok(self, *args, **options):
        result = self(*args, **options)
        assert result.returncode == 0, "talosctl %s exited %d:\n%s%s" % (
            " ".join(map(str, args)), result.returncode, result.stdout[-3000:], result.stderr[-3000:])
        return result.stdout

    def many(self, commands):
        """Run independent commands concurrently: {name: CompletedProcess}."""
        return concurrently({name: (self,) + tuple(args) for name, args in commands.items()})


def concurrently(calls):
    """``{name: (function, *args)}`` called at once: ``{name: result}``."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futures = {name: pool.submit(*call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def demo(kubernetes, tmp_path_factory):
    """The demo's cluster with the Kubernetes switch the test module's ``kubernetes`` fixture gives."""
    with demo_cluster(tmp_path_factory.mktemp("demo"), kubernetes=kubernetes) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def run(demo, tmp_path_factory):
    return Talosctl(demo.talosconfig, tmp_path_factory.mktemp("talosctl"))


def _rows(output):
    """A talosctl table as dicts keyed by its header."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[1:]]


def _play(demo, tasks, check=False):
    return [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": demo.talosconfig,
                                                                   "node": demo.controlplanes[0][1]}},
             "tasks": tasks}]


def _endpoints(demo):
    with open(demo.talosconfig) as handle:
        config = yaml.safe_load(handle)
    return config["contexts"][config["context"]]["endpoints"]


def _module(demo, workdir, name, module, args, check=False, expect_rc=0):
    """The result of one task of ``module``; with ``expect_rc=None`` it may fail (its result then has ``failed``)."""
    run = run_playbook_in(workdir, name, _play(demo, [{"name": name, "talos_linux.talos." + module: args}]), check=check)
    if expect_rc is not None:
        assert run.rc == expect_rc, run.stdout[-4000:] + run.stderr[-2000:]
    task = run.task(name)
    return dict(task["result"], failed=task["status"] == "failed")


def test_everyday_reads_answer_as_talos_does(demo, run):
    cp1, cp2 = demo.controlplanes[0][1], demo.controlplanes[1][1]
    worker = demo.workers[0][1]
    every = ",".join(address for _name, address in demo.controlplanes + demo.workers)
    out = run.many({
        "version": ("-n", every, "version"),
        "service": ("-n", cp1, "service"),
        "service etcd": ("-n", cp1, "service", "etcd"),
        "logs": ("-n", cp1, "logs", "etcd", "--tail", "3"),
        "dmesg": ("-n", worker, "dmesg"),
        "ls": ("-n", cp1, "ls", "/etc"),
        "read": ("-n", cp1, "read", "/proc/cpuinfo"),
        "usage": ("-n", cp1, "usage", "/var/log"),
        "containers": ("-n", cp1, "containers"),
        "containers k8s": ("-n", cp1, "containers", "--namespace", "cri"),
        "memory": ("-n", every, "memory"),
        "processes": ("-n", cp1, "processes"),
        "mounts": ("-n", worker, "mounts"),
        "time": ("-n", every, "time"),
        "stats": ("-n", cp1, "stats"),
        "netstat": ("-n", cp1, "netstat", "--listening", "--programs", "--tcp", "--udp"),
        "image list": ("-n", cp1, "image", "list"),
        "image list system": ("-n", worker, "image", "list", "--namespace", "system"),
        "config info": ("config", "info"),
        "unimplemented": ("-n", cp1, "etcd", "downgrade", "validate", "3.6"),
    })
    failed = {name: result.stderr for name, result in out.items() if result.returncode != 0 and name != "unimplemented"}
    assert not failed, failed

    version = out["version"].stdout
    assert version.count("Tag:         v1.14.0") == 5 and version.count("Enabled:     RBAC") == 5
    assert "Client:\n\tTag:         v1.14.1" in version
    services = {row["SERVICE"]: row for row in _rows(out["service"].stdout)}
    assert {"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd", "udevd"} <= set(services)
    assert all(row["STATE"] == "Running" for row in services.values())
    # Health-checked services end on their check; the dashboard has none.
    assert services["etcd"]["HEALTH"] == "OK" and services["etcd"]["LAST EVENT"] == "Health check successful"
    assert services["dashboard"]["HEALTH"] == "?" and services["dashboard"]["LAST EVENT"].startswith('Process Process(["/sbin/dashboard"])')
    assert "STATE    Running" in out["service etcd"].stdout and "Started task etcd" in out["service etcd"].stdout
    assert len(out["logs"].stdout.splitlines()) == 3 and out["logs"].stdout.splitlines()[-1].endswith("Health check successful")
    assert all(line.startswith("%s: kern:" % worker) for line in out["dmesg"].stdout.splitlines())
    assert {"hostname", "hosts", "os-release", "resolv.conf"} <= set(out["ls"].stdout.split())
    assert out["read"].stdout.count("model name\t: ") == 2 and out["read"].stdout.startswith("processor\t: 0\n")
    assert out["usage"].stdout.splitlines()[0].split() == ["SIZE", "NAME"]
    containers = {row["ID"]: row for row in _rows(out["containers"].stdout)}
    assert set(containers) == {"apid", "etcd", "kubelet", "trustd"} and containers["etcd"]["IMAGE"].startswith("registry.k8s.io/etcd:")
    assert {row["ID"].split("/")[-1] for row in _rows(out["containers k8s"].stdout)} >= {"kube-apiserver-%s" % demo.controlplanes[0][0]}
    memory = _rows(out["memory"].stdout)
    assert len(memory) == 5 and all(int(row["TOTAL"]) > 1000 for row in memory)
    processes = out["processes"].stdout.splitlines()
    assert processes[1].split()[1] == "1" and any("/etcd --" in line for line in processes)
    assert {row["MOUNTED ON"] for row in _rows(out["mounts"].stdout)} == {"/system/state", "/var"}
    times = _rows(out["time"].stdout)
    assert len(times) == 5 and {row["NTP-SERVER"] for row in times} == {"time.cloudflare.com"}
    assert {row["ID"].split()[-1] for row in _rows(out["stats"].stdout)} == {"apid", "etcd", "kubelet", "trustd"}
    listening = {(row["Local Address"], row.get("PID/Program name", "")) for row in _rows(out["netstat"].stdout)}
    assert any(address == ":::50000" and program.endswith("/apid") for address, program in listening)
    images = [row["IMAGE"] for row in _rows(out["image list"].stdout)]
    assert any(image.startswith("registry.k8s.io/kube-apiserver:") for image in images)
    assert {row["IMAGE"] for row in _rows(out["image list system"].stdout) if "@" not in row["IMAGE"]
            and not row["IMAGE"].startswith("sha256:")} == {next(iter(containers["kubelet"]["IMAGE"].split()))}
    info = out["config info"].stdout
    assert "Roles:               os:admin" in info and "Endpoints:" in info
    # An RPC the emulator does not serve answers Unimplemented as grpc-go does, not a malformed response.
    unimplemented = out["unimplemented"]
    assert unimplemented.returncode != 0
    assert "code = Unimplemented desc = unknown method EtcdDowngradeValidate for service machine.MachineService" in unimplemented.stderr
    assert "malformed header" not in unimplemented.stderr


def test_get_reads_every_type_the_collection_and_support_read(demo, run):
    cp1 = demo.controlplanes[0][1]
    types = ("machinestatus", "machineconfig", "machinetype", "hostname", "hostnamespec", "nodename", "members", "nodeaddress",
             "services", "volumestatus", "disks", "systemdisk", "discoveredvolumes", "links", "addresses", "osrootsecret",
             "extensions", "securitystate", "kubeletconfig", "staticpodstatus", "etcdspec", "rd")
    out = run.many({name: ("-n", cp1, "get", name, "-o", "yaml") for name in types})
    failed = {name: result.stderr for name, result in out.items() if result.returncode != 0}
    assert not failed, failed
    documents = {name: [doc for doc in yaml.safe_load_all(result.stdout) if doc] for name, result in out.items()}
    assert documents["machinestatus"][0]["spec"]["stage"] == "running"
    assert len(documents["members"]) == 5
    ephemeral = next(doc for doc in documents["volumestatus"] if doc["metadata"]["id"] == "EPHEMERAL")["spec"]
    assert ephemeral["size"] > 4 * 1024 ** 3 and ephemeral["prettySize"].endswith("GB") and ephemeral["location"] == "/dev/sda4"
    assert {doc["metadata"]["id"] for doc in documents["disks"]} == {"sda", "sdb"}
    assert documents["systemdisk"][0]["spec"]["devPath"] == "/dev/sda"
    assert {doc["spec"]["linkName"] for doc in documents["addresses"]} == {"lo", "eth0"}
    assert documents["hostnamespec"][0]["spec"]["hostname"] == demo.controlplanes[0][0]
    assert documents["osrootsecret"][0]["spec"]["issuingCA"]["crt"]
    # The collection's own reader certificate is refused the OS root, as Talos refuses os:reader a sensitive type.
    reader = run("-n", cp1, "get", "osrootsecret", talosconfig=_reader_talosconfig(demo, run))
    assert reader.returncode != 0 and "PermissionDenied" in reader.stderr


def _reader_talosconfig(demo, run):
    """A talosconfig with an os:reader certificate, made by the collection from the demo's bundle."""
    path = run.workdir / "talosconfig-reader"
    if not path.exists():
        _module(demo, run.workdir, "reader talosconfig", "talos_client_config",
                {"secrets": demo.secrets, "dest": str(path), "roles": ["os:reader"], "cluster_name": demo.name,
                 "endpoints": _endpoints(demo)})
    return str(path)


def test_events_are_xids_and_tail_counts_back(demo, run):
    cp1 = demo.controlplanes[0][1]
    rows = []
    # talosctl events follows the stream: read what it prints of the history, then stop it.
    process = subprocess.Popen([run.binary, "-n", cp1, "events", "--tail", "5"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               universal_newlines=True, env=dict(os.environ, TALOSCONFIG=demo.talosconfig))
    try:
        for line in process.stdout:
            if line.startswith(cp1):
                rows.append(line.split()[1])
            if len(rows) == 5:
                break
    finally:
        process.kill()
        process.wait()
    assert len(rows) == 5
    # xids: 20 characters of base32hex, sorting by time.
    assert all(re.match(r"^[0-9a-v]{20}$", event_id) for event_id in rows) and rows == sorted(rows)


def test_etcd_commands_and_snapshot_match_the_collection(demo, run):
    cp1, worker = demo.controlplanes[0][1], demo.workers[0][1]
    reader = functools.partial(run, talosconfig=_reader_talosconfig(demo, run))
    out = concurrently({
        "members": (run, "-n", cp1, "etcd", "members"),
        "status": (run, "-n", ",".join(address for _name, address in demo.controlplanes), "etcd", "status"),
        "alarms": (run, "-n", cp1, "etcd", "alarm", "list"),
        "worker": (run, "-n", worker, "etcd", "members"),
        "snapshot": (run, "-n", cp1, "etcd", "snapshot", run.workdir / "talosctl.snapshot"),
        "reader": (reader, "-n", cp1, "etcd", "snapshot", run.workdir / "reader.snapshot"),
        "ours": (_module, demo, run.workdir, "snapshot", "talos_etcd_snapshot", {"dest": str(run.workdir / "module.snapshot")}),
    })
    members = _rows(out["members"].stdout)
    assert sorted(row["HOSTNAME"] for row in members) == sorted(name for name, _address in demo.controlplanes)
    assert len(_rows(out["status"].stdout)) == 3
    assert out["alarms"].returncode == 0 and out["alarms"].stdout == ""
    # A worker has no etcd, as on Talos.
    assert out["worker"].returncode != 0
    assert "code = Unimplemented desc = member list is only available on control plane nodes" in out["worker"].stderr
    assert out["snapshot"].returncode == 0, out["snapshot"].stderr
    info = re.search(r"revision (\d+), total keys (\d+)", out["snapshot"].stdout)
    assert info, out["snapshot"].stdout
    # A reader may not take a snapshot.
    refused = out["reader"]
    assert refused.returncode != 0 and "code = PermissionDenied desc = not authorized" in refused.stderr

    ours = out["ours"]
    assert ours["hash_appended"] is True
    if not demo.kubernetes:
        # Nothing writes to etcd without Kubernetes: both snapshots hold the same revision and keys.
        assert (ours["revision"], ours["total_keys"]) == (int(info.group(1)), int(info.group(2)))
    statuses = [json.loads(subprocess.run([_etcd_member(), "--snapshot-status", str(path)], stdout=subprocess.PIPE,
                                          universal_newlines=True, check=True).stdout)
                for path in (run.workdir / "talosctl.snapshot", run.workdir / "module.snapshot")]
    assert statuses[0]["total_keys"] == int(info.group(2)) and statuses[1]["total_keys"] == ours["total_keys"]
    assert statuses[0]["total_keys"] > 0 if demo.kubernetes else statuses[0]["total_keys"] == statuses[1]["total_keys"]


def _etcd_member():
    from talos_emulator.real_etcd import build_member
    return build_member()


def test_health_matches_talos_health(demo, run):
    cp1 = demo.controlplanes[0][1]
    every = [address for _name, address in demo.controlplanes + demo.workers]
    answers = concurrently({
        "client": (run, "-n", cp1, "health", "--server=false", "--wait-timeout", "15s"),
        "server": (run, "-n", cp1, "health", "--wait-timeout", "15s"),
        "talos": (_module, demo, run.workdir, "health", "talos_health", {"wait_timeout": 60}),
        "all": (_module, demo, run.workdir, "health all", "talos_health", {"checks": "all", "wait_timeout": 15}, False, None),
    })
    client, server, ours, everything = answers["client"], answers["server"], answers["talos"], answers["all"]
    # The Talos checks pass either way; talos_health's client-side checks say so too, on the same nodes.
    for output in (client.stderr, server.stderr):
        assert "waiting for all nodes to finish boot sequence: OK" in output
    assert {check["description"] for check in ours["checks"]} >= {"etcd to be healthy", "all nodes to finish boot sequence"}
    assert all(check["state"] == "passed" for check in ours["checks"])
    assert sorted(ours["controlplane_nodes"] + ours["worker_nodes"]) == sorted(every)
    assert server.stderr.splitlines()[0] == "discovered nodes: [%s]" % " ".join('"%s"' % address for address in sorted(every))
    if demo.kubernetes:
        assert server.returncode == 0 and "waiting for all k8s nodes to report schedulable: OK" in server.stderr
        assert not everything["failed"], everything
        # Client-side, talosctl asks the API itself: the kubelet shim runs no DaemonSet pods (docs/emulator.md).
        assert "waiting for all k8s nodes to report ready: OK" in client.stderr
        assert client.returncode != 0 and ('waiting for kube-proxy to report ready: no pods found for namespace "kube-system" and '
                                           'label selector "k8s-app=kube-proxy"') in client.stderr
    else:
        # Without a Kubernetes API both stop at the first Kubernetes check, as on Talos, and talos_health names it.
        for result in (client, server):
            assert result.returncode != 0 and 'waiting for all k8s nodes to report: Get "https://' in result.stderr
        assert everything["failed"] and everything["failed_check"] == "all_k8s_nodes_to_report"


@pytest.fixture(scope="module")
def support_bundles(demo, run):
    """``(talosctl support's result, its file names, talos_support_bundle's file names)`` for every node."""
    nodes = [address for _name, address in demo.controlplanes + demo.workers]
    answers = concurrently({
        "theirs": (run, "-n", ",".join(nodes), "support", "--no-encryption", "-O", run.workdir / "talosctl-support.zip"),
        "ours": (_module, demo, run.workdir, "support", "talos_support_bundle",
                 {"dest": str(run.workdir / "module-support.zip"), "nodes": nodes, "node": "{{ omit }}", "kubernetes": demo.kubernetes}),
    })
    theirs, ours = answers["theirs"], answers["ours"]
    with zipfile.ZipFile(str(run.workdir / "talosctl-support.zip")) as archive:
        theirs_names = set(archive.namelist())
    with zipfile.ZipFile(ours["dest"]) as archive:
        ours_names = set(archive.namelist())
    return theirs, theirs_names, ours_names, nodes


def _per_node(names, node):
    return {name[len(node) + 1:] for name in names if name.startswith(node + "/")}


def test_support_bundle_holds_what_talos_support_bundle_holds(demo, support_bundles):
    theirs, theirs_names, ours_names, nodes = support_bundles
    assert "Support bundle is written to" in theirs.stderr
    if demo.kubernetes:
        assert theirs.returncode == 0, theirs.stderr
        assert {"kubernetesResources/nodes.yaml", "kubernetesResources/systemPods.yaml"} <= theirs_names
    else:
        # talosctl support asks the Kubernetes API for its cluster section and exits 1 when it cannot reach it; every
        # node's section is collected all the same.
        assert theirs.returncode == 1 and "failed to create kubernetes client" in theirs.stderr
    # The same files per node, named as talosctl names them: the sensitive resource types included, their specs
    # redacted, and the static pods' logs named by their pod.
    for node in nodes:
        theirs_files, ours_files = _per_node(theirs_names, node), _per_node(ours_names, node)
        assert "resources/osrootsecrets.secrets.talos.dev.yaml" in theirs_files
        assert theirs_files == ours_files


def test_rotate_ca_dry_run_reads_the_os_ca(demo, run):
    cp1 = demo.controlplanes[0][1]
    planes = ",".join(address for _name, address in demo.controlplanes)
    workers = ",".join(address for _name, address in demo.workers)
    out = run("-n", cp1, "rotate-ca", "--dry-run", "--control-plane-nodes", planes, "--worker-nodes", workers,
              "--kubernetes=%s" % ("true" if demo.kubernetes else "false"))
    assert out.returncode == 0, out.stderr
    assert "> Current Talos CA:" in out.stdout and "> Dry-run mode enabled, no changes were made to the cluster" in out.stdout
    bundle = yaml.safe_load(open(demo.secrets))
    assert bundle["certs"]["os"]["crt"] in out.stdout


def test_upgrade_k8s_dry_run_plans_what_talos_kubernetes_upgrade_plans(demo, run):
    cp1 = demo.controlplanes[0][1]
    # The demo's Talos v1.14 runs Kubernetes 1.37.0 (what its configs are generated with); the guide's target.
    out = run("-n", cp1, "upgrade-k8s", "--dry-run", "--to", "1.37.2", timeout=300)
    ours = _module(demo, run.workdir, "upgrade plan", "talos_kubernetes_upgrade", {"to_version": "1.37.2"}, check=True,
                   expect_rc=None)
    if not demo.kubernetes:
        # Both need the Kubernetes API, which does not run: both fail, neither changes anything.
        assert out.returncode != 0 and ours["failed"]
        return
    assert out.returncode == 0, out.stderr + out.stdout
    # talosctl's plan: every component it would update on each node ("updating X", then "> "node": starting update").
    theirs, component = set(), None
    for line in out.stdout.splitlines():
        updating = re.match(r'^updating "?([a-z-]+)"? to version', line)
        if updating:
            component = updating.group(1)
        starting = re.match(r'^ > "([^"]+)": starting update', line)
        if starting:
            theirs.add((component, starting.group(1)))
    assert ours["from_version"] == "1.37.0" and ours["to_version"] == "1.37.2"
    assert {(step["component"], step["node"]) for step in ours["plan"]} == theirs and len(theirs) == 17
    # Neither would change a bootstrap manifest: the cluster runs the ones Talos renders.
    manifests = out.stdout.split("updating manifests (dry run)", 1)[1].strip().splitlines()
    assert manifests and all(line.strip().startswith("< unchanged ") for line in manifests)
    assert ours["manifests"] == []


def test_node_names_resolve_as_the_config_says(demo, run):
    cp1 = demo.controlplanes[0][1]
    name = demo.controlplanes[1][0]
    # Through the first control plane (the named node's own apid would resolve its own name, /etc/hosts).
    endpoint = next(endpoint for endpoint in _endpoints(demo) if endpoint.startswith(cp1 + ":"))
    refused = run("-e", endpoint, "-n", name, "version")
    # Member names do not resolve by default (host DNS answers them only with resolveMemberNames).
    assert refused.returncode != 0 and "lookup %s: no such host" % name in refused.stderr
    patch = run.workdir / "resolve-member-names.yaml"
    patch.write_text("apiVersion: v1alpha1\nkind: ResolverConfig\nhostDNS:\n  resolveMemberNames: true\n")
    run.ok("-n", cp1, "patch", "machineconfig", "--mode", "no-reboot", "--patch", "@%s" % patch)
    resolved = run.ok("-e", endpoint, "-n", name, "version")
    assert "NODE:        %s" % name in resolved and "Tag:         v1.14.0" in resolved


def test_insecure_talks_to_a_node_in_maintenance_mode(emulator, tmp_path):
    cluster = emulator(maintenance=True)
    node = cluster.controlplanes[0]
    run = Talosctl(cluster.talosconfig_path(), tmp_path)
    fingerprint = node.server.maintenance_fingerprint
    # talosctl --insecure dials the node's port 50000, where the node listens while that port of its address is free on
    # the machine (another process's cluster may hold it on a shared machine: then its own port, named).
    target = node.address if node.server.on_api_port else node.endpoint
    out = run("get", "disks", "--insecure", "-n", target, "--cert-fingerprint", fingerprint)
    assert out.returncode == 0, out.stderr
    assert {row["ID"] for row in _rows(out.stdout)} == {"sda", "sdb"}
    version = run("version", "--insecure", "-n", target, "--cert-fingerprint", fingerprint)
    assert version.returncode == 0 and "Tag:         v1.14.0" in version.stdout
    # Everyone is os:reader in maintenance mode: a sensitive type is refused, as on Talos.
    refused = run("get", "machineconfig", "--insecure", "-n", target, "--cert-fingerprint", fingerprint)
    assert refused.returncode != 0 and "PermissionDenied" in refused.stderr


def test_a_ca_rotated_by_either_is_accepted_by_the_other(demo, run):
    """Last of each cluster's tests: it changes the Talos API CA. The collection rotates and talosctl works with the
    talosconfig it wrote; then talosctl rotates and the collection works with the talosconfig talosctl wrote."""
    nodes = [address for _name, address in demo.controlplanes + demo.workers]
    before = run.ok("-n", nodes[0], "get", "osrootsecret", "-o", "yaml")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rotated = _module(demo, run.workdir, "rotate", "talos_rotate_ca",
                      {"nodes": nodes, "node": "{{ omit }}", "secrets": demo.secrets, "issued_after": now})
    assert rotated["changed"] and {"accept", "swap"} <= {step["step"] for step in rotated["done"]}, rotated
    # The talosconfig the collection rewrote (its new certificate) is what talosctl connects with, on every node.
    version = run.ok("-n", ",".join(nodes), "version")
    assert version.count("Tag:         v1.14.0") == len(nodes)
    after = run.ok("-n", nodes[0], "get", "osrootsecret", "-o", "yaml")
    assert yaml.safe_load(after)["spec"]["issuingCA"]["crt"] != yaml.safe_load(before)["spec"]["issuingCA"]["crt"]

    planes = ",".join(address for _name, address in demo.controlplanes)
    workers = ",".join(address for _name, address in demo.workers)
    output = run.workdir / "talosctl-rotated-talosconfig"
    rotation = run.ok("-n", nodes[0], "rotate-ca", "--dry-run=false", "--kubernetes=false", "--control-plane-nodes", planes,
                      "--worker-nodes", workers, "-o", output, timeout=300)
    assert "> Writing new talosconfig to" in rotation
    # The collection's client takes talosctl's talosconfig; the collection's own (the previous CA's) is refused.
    facts = _module(demo, run.workdir, "facts after talosctl", "talos_facts", {"gather_subset": ["min"], "talosconfig": str(output)})
    assert facts["ansible_facts"]["talos"]["version"]["tag"] == "v1.14.0"
    refused = _module(demo, run.workdir, "facts with the old", "talos_facts", {"gather_subset": ["min"]}, expect_rc=None)
    assert refused["failed"]
