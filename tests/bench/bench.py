# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection costs, as one table: `make bench`.

- Per task, through ansible-playbook: ansible.builtin.ping and
  ansible.builtin.debug (the references), talos_facts (gather_subset=min),
  talos_apply_config with an identical config (no change) and talos_bootstrap
  on a bootstrapped cluster, as seconds and as a ratio to ping. Every kind of
  task runs in the same playbook, interleaved round by round, so a busy machine
  slows them alike; the first round (Ansible builds each module's payload once)
  is left out and the median of the others kept. The playbook runs once per
  door: the controller door (the default: the module's ``run`` in the
  controller's worker) and the module door (``talos_door=module``: AnsiballZ on
  a local connection); ping and debug are measured in both runs, and each ratio
  is to the ping of the same run. The door a Talos task actually went through
  is read from the AnsiballZ payloads the run leaves (a module without an
  action plugin takes the module door whatever ``talos_door`` says).
- talos_facts (min) on 1, 10, 100 and 250 nodes in one task, through each
  door, and the ratio to one node.
- talos_facts (min) on 100 nodes in one task through the controller door
  against the same reads from the bare client: FactGatherer with a fresh
  TalosClient per round in one Python process (not this one, whose thread runs
  the emulator) against the same emulator and nodes, just before and just after
  the controller door's playbook. Both sides are compared by their best round,
  which a busy machine disturbs least (the medians are in the JSON).
- The same reads as bare grpclib (the generated messages over one channel,
  every call in flight at once up to max_concurrency, no client around them),
  the floor the 100-node goal is measured against.
- A no-op rerun of the cluster role on 3 control planes and 2 workers started
  in maintenance mode, as the wall time of ansible-playbook, against a
  playbook of the same hosts with as many ansible.builtin.ping tasks as the
  rerun ran (tasks that ran on at least one host); medians of runs taken in
  turns. Two untimed runs come first: one converges the nodes, the next counts
  the rerun's tasks and its module runs (the AnsiballZ payloads it leaves).
- The cold import of each module's call path (a fresh Python that has already
  imported ansible.module_utils.basic, as ping has: the module and the
  generated code of the services it calls), the best of a few runs, as wall
  time and as CPU time (which a busy machine inflates much less).
- The AnsiballZ payload of each module (the file Ansible runs on the host
  through the module door).
- What connecting costs (settings, TLS handshake, first Version) and client
  calls per second to one node directly and through an endpoint with
  ``node`` metadata (the emulator relays in-process, as apid does over the
  network).

The goals (GOALS: facts and apply against ping, the role rerun against its
ping playbook, 100 nodes against bare grpclib) are reported as met or missed.
Figures go to stdout and, as JSON, to .cache/bench/ (bench-<time>.json and
latest.json) so that runs can be compared. Nothing here asserts on speed;
``--smoke`` runs every step with small sizes (tests/run-all does; the role on
one control plane and one worker).
"""

from __future__ import absolute_import, division, print_function

import argparse
import collections
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = next((path for path in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep)
                    if path and os.path.isdir(os.path.join(path, "ansible_collections"))), os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "emulator"))
sys.path.insert(0, COLLECTIONS)

from talos_emulator import EmulatedCluster  # noqa: E402

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient  # noqa: E402
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings  # noqa: E402

PACKAGE = "ansible_collections.talos_linux.talos.plugins"
# The RPCs of each module's measured call path: their services' generated code is part of its cold import.
CALL_PATHS = {
    "talos_facts": ("cosi.resource.State/Get", "machine.MachineService/Version", "machine.MachineService/Hostname"),
    "talos_apply_config": ("machine.MachineService/ApplyConfiguration",),
    "talos_bootstrap": ("machine.MachineService/Bootstrap",),
}
VERSION = "machine.MachineService/Version"
DOORS = ("controller", "module")

IMPORT_PROBE = r"""
import sys, time
import ansible.module_utils.basic
started, cpu = time.perf_counter(), time.process_time()
import importlib
module = importlib.import_module(sys.argv[1])
from ansible_collections.talos_linux.talos.plugins.module_utils.client import client
for method in sys.argv[2:]:
    client.METHODS[method]
print(time.perf_counter() - started, time.process_time() - cpu)
"""
BASIC_PROBE = r"""
import time
started, cpu = time.perf_counter(), time.process_time()
import ansible.module_utils.basic
print(time.perf_counter() - started, time.process_time() - cpu)
"""

# talos_facts' reads with the module's own defaults, timed from the settings to the closed client (what a task does).
BARE_CLIENT_PROBE = r"""
import json, sys, time
from ansible_collections.talos_linux.talos.plugins.modules import talos_facts
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster.facts import FactGatherer, resolve_subsets
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings
talosconfig, nodes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
max_concurrency = talos_facts.SPEC.argument_spec["max_concurrency"]["default"]
seconds = []
for _round in range(rounds):
    started = time.perf_counter()
    client = TalosClient(ConnectionSettings.from_params(dict(talosconfig=talosconfig, nodes=nodes), environ={}))
    try:
        _facts, errors = FactGatherer(client, nodes, False, max_concurrency).gather(resolve_subsets(["min"]), [])
    finally:
        client.close()
    seconds.append(time.perf_counter() - started)
    if errors:
        raise SystemExit("; ".join("%s: %s" % (node, error.message) for node, error in sorted(errors.items())))
print(json.dumps(seconds))
"""

# The same reads (min: MachineStatus and MachineType, Version, Hostname on every node) as bare grpclib: the
# generated messages, one channel with the talosconfig's TLS context, every call in flight at once up to the module's
# max_concurrency, no client around them. Timed from the settings to the closed channel, like the probe above.
BARE_GRPCLIB_PROBE = r"""
import asyncio, json, sys, time
from google.protobuf import empty_pb2
from grpclib.client import Channel, UnaryUnaryMethod
from ansible_collections.talos_linux.talos.plugins.modules import talos_facts
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import ConnectionSettings, split_endpoint
talosconfig, nodes, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
max_concurrency = talos_facts.SPEC.argument_spec["max_concurrency"]["default"]
READS = [("/cosi.resource.State/Get", state_pb2.GetRequest(namespace=namespace, type=kind, id=name), state_pb2.GetResponse)
         for namespace, kind, name in (talos_node.MACHINE_STATUS, talos_node.MACHINE_TYPE)]
READS += [("/machine.MachineService/Version", empty_pb2.Empty(), machine_pb2.VersionResponse),
          ("/machine.MachineService/Hostname", empty_pb2.Empty(), machine_pb2.HostnameResponse)]

async def one_round():
    settings = ConnectionSettings.from_params(dict(talosconfig=talosconfig, nodes=nodes), environ={})
    host, port = split_endpoint(settings.endpoints[0])
    channel = Channel(host, port, ssl=settings.ssl_context())
    slots = asyncio.Semaphore(max_concurrency)

    async def read(path, request, reply_type, node):
        async with slots:
            return await UnaryUnaryMethod(channel, path, type(request), reply_type)(request, metadata=[("node", node)])

    try:
        replies = await asyncio.gather(*[read(path, request, reply_type, node)
                                         for path, request, reply_type in READS for node in nodes])
    finally:
        channel.close()
    assert len(replies) == len(READS) * len(nodes)

seconds = []
loop = asyncio.new_event_loop()
for _round in range(rounds):
    started = time.perf_counter()
    loop.run_until_complete(one_round())
    seconds.append(time.perf_counter() - started)
print(json.dumps(seconds))
"""

# The goals of the two-door design (issue: speed), each a ratio a figure must stay at or under. The benchmark reports
# each as met or missed; it never fails on one (a loaded machine moves every ratio).
GOALS = (
    ("talos_facts min, per task", "x ping", 0.15, lambda figures: figures["per_task_vs_ping"]["controller"]["facts"]),
    ("talos_apply_config no change, per task", "x ping", 0.20,
     lambda figures: figures["per_task_vs_ping"]["controller"]["apply_no_change"]),
    ("cluster role no-op rerun", "x ping playbook", 0.30, lambda figures: figures["cluster_role_rerun"]["ratio"]),
    ("talos_facts min, %s nodes in one task", "x bare grpclib", 1.3,
     lambda figures: figures["facts_vs_bare_grpclib"]["ratio"]),
)


def _best(command, runs, env=None):
    """Best of ``runs`` fresh interpreters: ``{"wall": s, "cpu": s}`` (CPU time barely depends on the machine's load)."""
    figures = [[float(value) for value in subprocess.run(command, check=True, capture_output=True, text=True,
                                                         env=env).stdout.split()] for _run in range(runs)]
    return {"wall": min(wall for wall, _cpu in figures), "cpu": min(cpu for _wall, cpu in figures)}


def cold_import(module, methods, runs):
    """The module and its services' generated code, imported after ansible.module_utils.basic."""
    command = [sys.executable, "-c", IMPORT_PROBE, "%s.modules.%s" % (PACKAGE, module)] + list(methods)
    return _best(command, runs, env=dict(os.environ, PYTHONPATH=COLLECTIONS))


def basic_import(runs):
    """ansible.module_utils.basic, what ping itself imports."""
    return _best([sys.executable, "-c", BASIC_PROBE], runs)


def _facts_kind(size):
    return "facts" if size == 1 else "facts_%d_nodes" % size


def task_kinds(cluster, sizes):
    node = cluster.controlplanes[0]
    addresses = [each.address for each in cluster.nodes]
    kinds = [
        ("ping", {"ansible.builtin.ping": {}}),
        ("debug", {"ansible.builtin.debug": {"msg": "bench"}}),
        ("facts", {"talos_linux.talos.talos_facts": {"node": node.address, "gather_subset": ["min"]}}),
        ("apply_no_change", {"talos_linux.talos.talos_apply_config": {"node": node.address, "config": node.config_text()}}),
        ("bootstrap_done", {"talos_linux.talos.talos_bootstrap": {"node": node.address}}),
    ]
    for size in sizes:
        if size > 1:
            kinds.append((_facts_kind(size), {"talos_linux.talos.talos_facts": {"nodes": addresses[:size], "gather_subset": ["min"]}}))
    return kinds


def ansible_playbook(work_dir, name, plays, inventory="localhost,", extra_vars=None, env=None):
    """One ansible-playbook run on a local connection: ``(wall seconds, task results)``; a failed run ends the bench.

    The task results are what callback_plugins/task_seconds.py records: one per
    task and host that ran (skipped ones are left out).
    """
    playbook = os.path.join(work_dir, name + ".yml")
    with open(playbook, "w") as output:
        yaml.safe_dump(plays, output, sort_keys=False)
    times_path = os.path.join(work_dir, name + "-times.json")
    run_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, TALOS_BENCH_TIMES=times_path,
                   ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "tests", "bench", "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="task_seconds", ANSIBLE_HOST_KEY_CHECKING="False",
                   ANSIBLE_RETRY_FILES_ENABLED="False", ANSIBLE_NOCOLOR="1", **(env or {}))
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, "-c", "local",
               "-e", "ansible_python_interpreter=" + sys.executable]
    if extra_vars:
        command += ["-e", json.dumps(extra_vars)]
    started = time.perf_counter()
    run = subprocess.run(command + [playbook], check=False, capture_output=True, text=True, env=run_env)
    seconds = time.perf_counter() - started
    results = []
    if os.path.exists(times_path):
        with open(times_path) as times_file:
            results = json.load(times_file)
    failed = [entry for entry in results if entry["status"] != "ok"]
    if failed:
        raise SystemExit("benchmark task %r failed: %s" % (failed[0]["task"], failed[0]["msg"]))
    if run.returncode != 0:
        raise SystemExit("ansible-playbook %s exited %d:\n%s\n%s" % (name, run.returncode, run.stdout[-3000:], run.stderr[-3000:]))
    return seconds, results


def per_task_playbook(work_dir, cluster, kinds, rounds, door):
    """Every kind of task ``rounds`` times, interleaved, in one run with ``talos_door=door``.

    Returns ``{kind: [seconds]}``, the door each kind of Talos task went
    through (``module`` when it left an AnsiballZ payload, as a module without
    an action plugin does whatever ``talos_door`` says) and the payload sizes.
    """
    tasks = []
    for index in range(rounds):
        for kind, task in kinds:
            tasks.append(dict(task, name="%s %d" % (kind, index)))
    play = [{"hosts": "localhost", "gather_facts": False,
             "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": cluster.talosconfig_path("admin")}},
             "tasks": tasks}]
    remote_tmp = os.path.join(work_dir, "remote-tmp-" + door)
    _wall, results = ansible_playbook(work_dir, "per-task-" + door, play, extra_vars={"talos_door": door},
                                      env={"ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_REMOTE_TMP": remote_tmp})
    seconds = {}
    for entry in results:
        kind, index = entry["task"].rsplit(" ", 1)
        if int(index) > 0 or rounds == 1:  # round 0 builds each module's payload
            seconds.setdefault(kind, []).append(entry["seconds"])
    payloads = dict((name, os.path.getsize(path)) for name, path in _ansiballz_payloads(remote_tmp))
    doors = dict((kind, "module" if action.rsplit(".", 1)[-1] in payloads else "controller")
                 for kind, task in kinds for action in task if action.startswith("talos_linux.talos."))
    return seconds, doors, payloads


def _ansiballz_payloads(remote_tmp):
    """``(module name, path)`` of every AnsiballZ payload kept in ``remote_tmp``: one per module run."""
    for path in glob.glob(os.path.join(remote_tmp, "*", "AnsiballZ_*.py")):
        yield os.path.basename(path)[len("AnsiballZ_"):-len(".py")], path


def bare_client_facts(cluster, nodes, rounds, probe=BARE_CLIENT_PROBE):
    """Seconds per round of talos_facts' reads (min) on ``nodes`` from the bare client (or bare grpclib with
    BARE_GRPCLIB_PROBE), in a fresh Python process.

    Not in this process: its emulator thread would share the interpreter lock
    with the client, which a task in Ansible's worker does not.
    """
    command = [sys.executable, "-c", probe, cluster.talosconfig_path("admin"), ",".join(nodes), str(rounds)]
    run = subprocess.run(command, check=False, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    if run.returncode != 0:
        raise SystemExit("the bare reads failed:\n%s" % run.stderr[-3000:])
    seconds = json.loads(run.stdout)
    return seconds[1:] if rounds > 1 else seconds  # round 0 pays the lazy imports of the first call


def beside_idle_ansible(work_dir, measure):
    """``measure()`` while an ansible-playbook waits in a task: its main process polls its workers' results all the
    while (internal_poll_interval), as it does around every talos_facts task, and takes its share of the cores."""
    playbook = os.path.join(work_dir, "idle.yml")
    with open(playbook, "w") as output:
        yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                         "tasks": [{"ansible.builtin.wait_for": {"timeout": 600}}]}], output, sort_keys=False)
    idle = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                             playbook], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS))
    try:
        time.sleep(3)  # the playbook has started and its worker waits
        return measure()
    finally:
        idle.kill()
        idle.wait()


def role_play(cluster, work_dir):
    """The cluster role from nothing on every node of ``cluster``, as docs/examples/demo.yml drives it."""
    return [{
        "hosts": "controlplane:workers",
        "gather_facts": False,
        "roles": [{"role": "talos_linux.talos.cluster", "vars": {
            "cluster_secrets": os.path.join(work_dir, "secrets.yaml"),
            "cluster_generated_dir": work_dir,
            "cluster_name": cluster.name,
            "cluster_endpoint": "https://%s:6443" % cluster.controlplanes[0].address,
            "cluster_talos_version": cluster.talos_version,
            "cluster_talosconfig_endpoints": [node.endpoint for node in cluster.controlplanes],
            "cluster_host_patches": [{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": None,
                                      "hostname": "{{ inventory_hostname }}"}],
            "cluster_maintenance_endpoint": "{{ ansible_host }}:{{ talos_port }}",
            "cluster_kubeconfig": os.path.join(work_dir, "kubeconfig"),
            "cluster_wait_timeout": 120,
        }}],
    }]


def cluster_role_rerun(work_dir, controlplanes, workers, runs):
    """A no-op rerun of the cluster role against a ping playbook of the same hosts and number of tasks, ``runs`` times in turns."""
    state_dir = os.path.join(work_dir, "role-cluster")
    generated_dir = os.path.join(work_dir, "role-generated")
    cluster = EmulatedCluster.start(state_dir, controlplanes=controlplanes, workers=workers, maintenance=True,
                                    reboot_seconds=0.1, name="bench-role")
    try:
        inventory = os.path.join(state_dir, "inventory.yml")
        plays = role_play(cluster, generated_dir)
        ansible_playbook(work_dir, "role-converge", plays, inventory=inventory)
        # An untimed first rerun counts its tasks and, from the payloads it keeps, its module runs (AnsiballZ):
        # what a rerun still pays a process for.
        remote_tmp = os.path.join(work_dir, "remote-tmp-role")
        _wall, results = ansible_playbook(work_dir, "role-rerun-counted", plays, inventory=inventory,
                                          env={"ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_REMOTE_TMP": remote_tmp})
        figures = {"door": "default", "controlplanes": controlplanes, "workers": workers,
                   "tasks": len(set(entry["id"] for entry in results)), "task_results": len(results),
                   "changed": sum(1 for entry in results if entry["changed"]),
                   "module_runs": dict(collections.Counter(name for name, _path in _ansiballz_payloads(remote_tmp))),
                   "rerun_seconds": [], "ping_playbook_seconds": []}
        pings = [{"hosts": "controlplane:workers", "gather_facts": False,
                  "tasks": [{"name": "ping %d" % index, "ansible.builtin.ping": {}} for index in range(figures["tasks"])]}]
        for _run in range(runs):
            figures["rerun_seconds"].append(ansible_playbook(work_dir, "role-rerun", plays, inventory=inventory)[0])
            figures["ping_playbook_seconds"].append(ansible_playbook(work_dir, "role-pings", pings, inventory=inventory)[0])
    finally:
        cluster.stop()
    figures["rerun_median"] = statistics.median(figures["rerun_seconds"])
    figures["ping_playbook_median"] = statistics.median(figures["ping_playbook_seconds"])
    figures["ratio"] = figures["rerun_median"] / figures["ping_playbook_median"]
    return figures


def client_rates(cluster, calls):
    """Version calls per second to one worker: straight to it, and through the first control plane with ``node``.

    Both clients stay connected and take turns, 10 calls at a time, so that a
    change in the machine's load hits both alike.
    """
    worker = cluster.workers[-1] if cluster.workers else cluster.nodes[-1]
    rates, clients, spent = {}, {}, {}
    try:
        for label, endpoint, node in (("direct", worker.endpoint, None), ("routed", cluster.endpoint, worker.address)):
            params = dict(talosconfig=cluster.talosconfig_path("admin"), endpoints=[endpoint], timeout=60)
            started = time.perf_counter()
            clients[label] = (TalosClient(ConnectionSettings.from_params(params, environ={})), node)
            clients[label][0].call(VERSION, node=node)
            rates["first_call_seconds_" + label] = time.perf_counter() - started
            spent[label] = 0.0
        for _turn in range(max(1, calls // 10)):
            for label, (client, node) in clients.items():
                started = time.perf_counter()
                for _call in range(10):
                    client.call(VERSION, node=node)
                spent[label] += time.perf_counter() - started
    finally:
        for client, _node in clients.values():
            client.close()
    for label, seconds in spent.items():
        rates[label] = max(1, calls // 10) * 10 / seconds
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of every task in the playbook, the first one left out (default 6)")
    parser.add_argument("--sizes", default="1,10,100,250", help="node counts for talos_facts in one task (default 1,10,100,250)")
    parser.add_argument("--bare-nodes", type=int, default=100, help="nodes of talos_facts against the bare client (default 100)")
    parser.add_argument("--role-nodes", default="3,2", help="control planes and workers of the cluster role rerun (default 3,2)")
    parser.add_argument("--role-runs", type=int, default=3, help="timed reruns of the cluster role, each with its ping playbook (default 3)")
    parser.add_argument("--import-runs", type=int, default=5, help="fresh interpreters per cold-import figure (default 5)")
    parser.add_argument("--calls", type=int, default=200, help="client calls per rate (default 200)")
    parser.add_argument("--smoke", action="store_true", help="small sizes, one of everything: proves the benchmark runs")
    parser.add_argument("--output-dir", default=os.path.join(ROOT, ".cache", "bench"))
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.sizes, args.bare_nodes, args.role_nodes, args.role_runs = 2, "1,3", 3, "1,1", 1
        args.import_runs, args.calls = 1, 10
    sizes = sorted(set(int(size) for size in args.sizes.split(",")) | {1, args.bare_nodes})
    role_controlplanes, role_workers = (int(count) for count in args.role_nodes.split(","))

    load_before = os.getloadavg()
    imports = dict((module, cold_import(module, methods, args.import_runs)) for module, methods in CALL_PATHS.items())
    imports["ansible.module_utils.basic (ping)"] = basic_import(args.import_runs)

    seconds, doors, payloads = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="talos-bench-") as work_dir:
        started = time.perf_counter()
        controlplanes = min(3, max(sizes))
        cluster = EmulatedCluster.start(os.path.join(work_dir, "cluster"), controlplanes=controlplanes,
                                        workers=max(sizes) - controlplanes, bootstrapped=True, reboot_seconds=0.1)
        emulator_start = time.perf_counter() - started
        try:
            rates = client_rates(cluster, args.calls)
            kinds = task_kinds(cluster, sizes)
            bare_nodes = [node.address for node in cluster.nodes[:args.bare_nodes]]
            bare_seconds = bare_client_facts(cluster, bare_nodes, args.rounds)
            grpclib_seconds = bare_client_facts(cluster, bare_nodes, args.rounds, BARE_GRPCLIB_PROBE)
            for run in DOORS:  # controller first: the bare reads run on both sides of the task they are compared with
                seconds[run], doors[run], payloads[run] = per_task_playbook(work_dir, cluster, kinds, args.rounds, run)
                if run == "controller":
                    bare_seconds += bare_client_facts(cluster, bare_nodes, args.rounds)
                    grpclib_seconds += bare_client_facts(cluster, bare_nodes, args.rounds, BARE_GRPCLIB_PROBE)
            grpclib_beside_ansible = beside_idle_ansible(
                work_dir, lambda: bare_client_facts(cluster, bare_nodes, args.rounds, BARE_GRPCLIB_PROBE))
        finally:
            cluster.stop()
        role = cluster_role_rerun(work_dir, role_controlplanes, role_workers, args.role_runs)

    # Per-task figures are keyed by the run (its talos_door); per_task_door says which door each Talos task went through.
    medians = dict((run, dict((kind, statistics.median(values)) for kind, values in by_kind.items()))
                   for run, by_kind in seconds.items())
    facts_by_nodes = dict((run, dict((size, by_kind[_facts_kind(size)]) for size in sizes))
                          for run, by_kind in medians.items())
    bare_task = seconds["controller"][_facts_kind(args.bare_nodes)]
    figures = {
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "talos_door_runs": list(DOORS),
        "per_task_seconds": medians,
        "per_task_door": doors,
        "per_task_vs_ping": dict((run, dict((kind, value / by_kind["ping"]) for kind, value in by_kind.items()))
                                 for run, by_kind in medians.items()),
        "facts_by_nodes_seconds": facts_by_nodes,
        "facts_by_nodes_vs_one": dict((run, dict((size, value / by_size[1]) for size, value in by_size.items()))
                                      for run, by_size in facts_by_nodes.items()),
        "facts_vs_bare_client": {"door": doors["controller"][_facts_kind(args.bare_nodes)], "nodes": args.bare_nodes,
                                 "task_best": min(bare_task), "bare_client_best": min(bare_seconds),
                                 "ratio": min(bare_task) / min(bare_seconds),
                                 "task_median": statistics.median(bare_task), "bare_client_median": statistics.median(bare_seconds),
                                 "median_ratio": statistics.median(bare_task) / statistics.median(bare_seconds)},
        "facts_vs_bare_grpclib": {"door": doors["controller"][_facts_kind(args.bare_nodes)], "nodes": args.bare_nodes,
                                  "task_best": min(bare_task), "bare_grpclib_best": min(grpclib_seconds),
                                  "ratio": min(bare_task) / min(grpclib_seconds),
                                  "bare_grpclib_median": statistics.median(grpclib_seconds),
                                  # The same replay while an idle ansible-playbook polls beside it: what the task's
                                  # reads compete with, so that the ratio to it is the task's own share.
                                  "bare_grpclib_beside_ansible_best": min(grpclib_beside_ansible),
                                  "ratio_beside_ansible": min(bare_task) / min(grpclib_beside_ansible)},
        "cluster_role_rerun": role,
        "cold_import_seconds": imports,
        "ansiballz_payload_bytes": payloads["module"],
        "emulator": {"nodes": max(sizes), "start_seconds": emulator_start},
        "client_calls_per_second": rates,
    }
    figures["goals"] = [{"figure": name % args.bare_nodes if "%s" in name else name, "unit": unit, "goal": goal,
                         "value": value(figures), "met": value(figures) <= goal} for name, unit, goal, value in GOALS]
    print_table(figures)
    os.makedirs(args.output_dir, exist_ok=True)
    name = "bench-%s.json" % figures["time"].replace(":", "")
    for path in (os.path.join(args.output_dir, name), os.path.join(args.output_dir, "latest.json")):
        with open(path, "w") as output:
            json.dump(figures, output, indent=2, sort_keys=True)
    print("figures written to %s" % os.path.join(args.output_dir, name))


def print_table(figures):
    # The door column: the door a Talos task went through; for ping and debug, the run (talos_door) they were measured in.
    rows = [("figure", "door", "value", "ratio")]
    for run in figures["talos_door_runs"]:
        doors = figures["per_task_door"][run]
        for kind, label in (("ping", "ansible.builtin.ping, per task"), ("debug", "ansible.builtin.debug, per task"),
                            ("facts", "talos_facts min, per task"),
                            ("apply_no_change", "talos_apply_config no change, per task"),
                            ("bootstrap_done", "talos_bootstrap already done, per task")):
            rows.append((label, doors.get(kind, "%s run" % run), "%.3f s" % figures["per_task_seconds"][run][kind],
                         "%.2fx ping" % figures["per_task_vs_ping"][run][kind]))
    for run in figures["talos_door_runs"]:
        for size, value in sorted(figures["facts_by_nodes_seconds"][run].items()):
            rows.append(("talos_facts min, %d node%s in one task" % (size, "" if size == 1 else "s"),
                         figures["per_task_door"][run][_facts_kind(size)], "%.3f s" % value,
                         "%.2fx 1 node" % figures["facts_by_nodes_vs_one"][run][size]))
    bare = figures["facts_vs_bare_client"]
    rows.append(("talos_facts min, %d nodes, bare client in one process, best" % bare["nodes"], "",
                 "%.3f s" % bare["bare_client_best"], ""))
    grpclib = figures["facts_vs_bare_grpclib"]
    rows.append(("talos_facts min, %d nodes, bare grpclib in one process, best" % grpclib["nodes"], "",
                 "%.3f s" % grpclib["bare_grpclib_best"], ""))
    rows.append(("talos_facts min, %d nodes, bare grpclib beside an idle ansible-playbook, best" % grpclib["nodes"], "",
                 "%.3f s" % grpclib["bare_grpclib_beside_ansible_best"], ""))
    rows.append(("talos_facts min, %d nodes in one task, best" % bare["nodes"], bare["door"], "%.3f s" % bare["task_best"],
                 "%.2fx bare client, %.2fx bare grpclib, %.2fx beside ansible" % (
                     bare["ratio"], grpclib["ratio"], grpclib["ratio_beside_ansible"])))
    role = figures["cluster_role_rerun"]
    hosts = role["controlplanes"] + role["workers"]
    rows.append(("ping playbook, %d hosts, %d tasks" % (hosts, role["tasks"]), "", "%.2f s" % role["ping_playbook_median"], ""))
    rows.append(("cluster role no-op rerun, %d nodes, %d tasks, %d changed" % (hosts, role["tasks"], role["changed"]), role["door"],
                 "%.2f s" % role["rerun_median"], "%.2fx ping playbook" % role["ratio"]))
    for module, value in sorted(figures["cold_import_seconds"].items()):
        rows.append(("cold import, %s" % module, "", "%.3f s" % value["wall"], "%.3f s CPU" % value["cpu"]))
    for module, size in sorted(figures["ansiballz_payload_bytes"].items()):
        rows.append(("AnsiballZ payload, %s" % module, "module", "%d KiB" % (size // 1024), ""))
    rates = figures["client_calls_per_second"]
    rows.append(("settings, TLS handshake and first Version", "", "%.1f ms" % (rates["first_call_seconds_direct"] * 1000), ""))
    rows.append(("Version calls/s, direct to a node", "", "%.0f" % rates["direct"], ""))
    rows.append(("Version calls/s, routed with node metadata", "", "%.0f" % rates["routed"],
                 "%.2fx direct" % (rates["routed"] / rates["direct"])))
    rows.append(("emulator start, %d nodes" % figures["emulator"]["nodes"], "", "%.1f s" % figures["emulator"]["start_seconds"], ""))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    load = figures["load_average"]
    print("talos_linux.talos benchmark, %s, %d CPUs, load average %.1f before / %.1f after, median of %d rounds"
          % (figures["time"], figures["cpus"], load["before"][0], load["after"][0], max(1, figures["rounds"] - 1)))
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) if column < 2 else cell.rjust(width) for column, (cell, width) in enumerate(zip(row, widths))))
        if index == 0:
            print("  ".join("-" * width for width in widths))
    print("goals (controller door): %s" % "; ".join(
        "%s %.2f%s (goal %.2f%s, %s)" % (goal["figure"], goal["value"], goal["unit"], goal["goal"], goal["unit"],
                                         "met" if goal["met"] else "missed") for goal in figures["goals"]))
    if role["module_runs"]:
        print("module runs (AnsiballZ) in one cluster role rerun: %s"
              % ", ".join("%s %d" % item for item in sorted(role["module_runs"].items())))


if __name__ == "__main__":
    main()
