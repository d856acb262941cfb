# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection costs, as one table: `make bench`.

- Per task, through ansible-playbook: ansible.builtin.ping, talos_facts
  (gather_subset=min), talos_apply_config with an identical config (no change)
  and talos_bootstrap on a bootstrapped cluster, as seconds and as a ratio to
  ping. Every kind of task runs in the same playbook, interleaved round by
  round, so a busy machine slows them alike; the first round (Ansible builds
  each module's payload once) is left out and the median of the others kept.
- talos_facts (min) on 1, 10, 100 and 250 nodes in one task, and the ratio to
  one node.
- The cold import of each module's call path (a fresh Python that has already
  imported ansible.module_utils.basic, as ping has: the module and the
  generated code of the services it calls), the best of a few runs, as wall
  time and as CPU time (which a busy machine inflates much less).
- The AnsiballZ payload of each module (the file Ansible runs on the host).
- What connecting costs (settings, TLS handshake, first Version) and client
  calls per second to one node directly and through an endpoint with
  ``node`` metadata (the emulator relays in-process, as apid does over the
  network).

Figures go to stdout and, as JSON, to .cache/bench/ (bench-<time>.json and
latest.json) so that runs can be compared. Nothing here asserts on speed;
``--smoke`` runs every step with small sizes (tests/run-all does).
"""

from __future__ import absolute_import, division, print_function

import argparse
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

from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient  # noqa: E402
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import ConnectionSettings  # noqa: E402

PACKAGE = "ansible_collections.talos_linux.talos.plugins"
# The RPCs of each module's measured call path: their services' generated code is part of its cold import.
CALL_PATHS = {
    "talos_facts": ("cosi.resource.State/Get", "machine.MachineService/Version", "machine.MachineService/Hostname"),
    "talos_apply_config": ("machine.MachineService/ApplyConfiguration",),
    "talos_bootstrap": ("machine.MachineService/Bootstrap",),
}
VERSION = "machine.MachineService/Version"

IMPORT_PROBE = r"""
import sys, time
import ansible.module_utils.basic
started, cpu = time.perf_counter(), time.process_time()
import importlib
module = importlib.import_module(sys.argv[1])
from ansible_collections.talos_linux.talos.plugins.module_utils import client
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


def task_kinds(cluster, sizes):
    node = cluster.controlplanes[0]
    addresses = [each.address for each in cluster.nodes]
    kinds = [
        ("ping", {"ansible.builtin.ping": {}}),
        ("facts", {"talos_linux.talos.talos_facts": {"node": node.address, "gather_subset": ["min"]}}),
        ("apply_no_change", {"talos_linux.talos.talos_apply_config": {"node": node.address, "config": node.config_text()}}),
        ("bootstrap_done", {"talos_linux.talos.talos_bootstrap": {"node": node.address}}),
    ]
    for size in sizes:
        if size > 1:
            kinds.append(("facts_%d_nodes" % size, {"talos_linux.talos.talos_facts": {"nodes": addresses[:size], "gather_subset": ["min"]}}))
    return kinds


def run_playbook(work_dir, cluster, kinds, rounds):
    """Every kind of task ``rounds`` times, interleaved, in one ansible-playbook run: ``{kind: [seconds]}`` and payload sizes."""
    tasks = []
    for index in range(rounds):
        for kind, task in kinds:
            tasks.append(dict(task, name="%s %d" % (kind, index)))
    play = [{"hosts": "localhost", "gather_facts": False,
             "module_defaults": {"group/talos_linux.talos.talos": {"talosconfig": cluster.talosconfig_path("admin")}},
             "tasks": tasks}]
    playbook = os.path.join(work_dir, "bench.yml")
    with open(playbook, "w") as output:
        yaml.safe_dump(play, output)
    remote_tmp = os.path.join(work_dir, "remote-tmp")
    times_path = os.path.join(work_dir, "times.json")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, TALOS_BENCH_TIMES=times_path,
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "tests", "bench", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="task_seconds", ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=remote_tmp)
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                    "-e", "ansible_python_interpreter=" + sys.executable, playbook],
                   check=False, stdout=subprocess.DEVNULL, env=env)
    with open(times_path) as times_file:
        times = json.load(times_file)
    failed = [entry for entry in times if entry["status"] != "ok"]
    if failed:
        raise SystemExit("benchmark task %r failed: %s" % (failed[0]["task"], failed[0]["msg"]))
    seconds = {}
    for entry in times:
        kind, index = entry["task"].rsplit(" ", 1)
        if int(index) > 0 or rounds == 1:  # round 0 builds each module's payload
            seconds.setdefault(kind, []).append(entry["seconds"])
    payloads = {}
    for path in glob.glob(os.path.join(remote_tmp, "*", "AnsiballZ_*.py")):
        name = os.path.basename(path)[len("AnsiballZ_"):-len(".py")]
        payloads[name] = os.path.getsize(path)
    return seconds, payloads


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
    parser.add_argument("--import-runs", type=int, default=5, help="fresh interpreters per cold-import figure (default 5)")
    parser.add_argument("--calls", type=int, default=200, help="client calls per rate (default 200)")
    parser.add_argument("--smoke", action="store_true", help="small sizes, one of everything: proves the benchmark runs")
    parser.add_argument("--output-dir", default=os.path.join(ROOT, ".cache", "bench"))
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.sizes, args.import_runs, args.calls = 2, "1,3", 1, 10
    sizes = sorted(set(int(size) for size in args.sizes.split(",")) | {1})

    load_before = os.getloadavg()
    imports = dict((module, cold_import(module, methods, args.import_runs)) for module, methods in CALL_PATHS.items())
    imports["ansible.module_utils.basic (ping)"] = basic_import(args.import_runs)

    with tempfile.TemporaryDirectory(prefix="talos-bench-") as work_dir:
        started = time.perf_counter()
        controlplanes = min(3, max(sizes))
        cluster = EmulatedCluster.start(os.path.join(work_dir, "cluster"), controlplanes=controlplanes,
                                        workers=max(sizes) - controlplanes, bootstrapped=True, reboot_seconds=0.1)
        emulator_start = time.perf_counter() - started
        try:
            rates = client_rates(cluster, args.calls)
            seconds, payloads = run_playbook(work_dir, cluster, task_kinds(cluster, sizes), args.rounds)
        finally:
            cluster.stop()

    medians = dict((kind, statistics.median(values)) for kind, values in seconds.items())
    ping = medians["ping"]
    figures = {
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "per_task_seconds": medians,
        "per_task_vs_ping": dict((kind, value / ping) for kind, value in medians.items()),
        "facts_by_nodes_seconds": dict((size, medians["facts" if size == 1 else "facts_%d_nodes" % size]) for size in sizes),
        "cold_import_seconds": imports,
        "ansiballz_payload_bytes": payloads,
        "emulator": {"nodes": max(sizes), "start_seconds": emulator_start},
        "client_calls_per_second": rates,
    }
    figures["facts_by_nodes_vs_one"] = dict((size, value / figures["facts_by_nodes_seconds"][1])
                                            for size, value in figures["facts_by_nodes_seconds"].items())
    print_table(figures)
    os.makedirs(args.output_dir, exist_ok=True)
    name = "bench-%s.json" % figures["time"].replace(":", "")
    for path in (os.path.join(args.output_dir, name), os.path.join(args.output_dir, "latest.json")):
        with open(path, "w") as output:
            json.dump(figures, output, indent=2, sort_keys=True)
    print("figures written to %s" % os.path.join(args.output_dir, name))


def print_table(figures):
    rows = [("figure", "value", "ratio")]
    for kind, label in (("ping", "ansible.builtin.ping, per task"), ("facts", "talos_facts min, per task"),
                        ("apply_no_change", "talos_apply_config no change, per task"),
                        ("bootstrap_done", "talos_bootstrap already done, per task")):
        rows.append((label, "%.3f s" % figures["per_task_seconds"][kind], "%.2fx ping" % figures["per_task_vs_ping"][kind]))
    for size, value in sorted(figures["facts_by_nodes_seconds"].items()):
        rows.append(("talos_facts min, %d node%s in one task" % (size, "" if size == 1 else "s"), "%.3f s" % value,
                     "%.2fx 1 node" % figures["facts_by_nodes_vs_one"][size]))
    for module, value in sorted(figures["cold_import_seconds"].items()):
        rows.append(("cold import, %s" % module, "%.3f s" % value["wall"], "%.3f s CPU" % value["cpu"]))
    for module, size in sorted(figures["ansiballz_payload_bytes"].items()):
        rows.append(("AnsiballZ payload, %s" % module, "%d KiB" % (size // 1024), ""))
    rates = figures["client_calls_per_second"]
    rows.append(("settings, TLS handshake and first Version", "%.1f ms" % (rates["first_call_seconds_direct"] * 1000), ""))
    rows.append(("Version calls/s, direct to a node", "%.0f" % rates["direct"], ""))
    rows.append(("Version calls/s, routed with node metadata", "%.0f" % rates["routed"], "%.2fx direct" % (rates["routed"] / rates["direct"])))
    rows.append(("emulator start, %d nodes" % figures["emulator"]["nodes"], "%.1f s" % figures["emulator"]["start_seconds"], ""))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    load = figures["load_average"]
    print("talos_linux.talos benchmark, %s, %d CPUs, load average %.1f before / %.1f after, median of %d rounds"
          % (figures["time"], figures["cpus"], load["before"][0], load["after"][0], max(1, figures["rounds"] - 1)))
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) if column == 0 else cell.rjust(width) for column, (cell, width) in enumerate(zip(row, widths))))
        if index == 0:
            print("  ".join("-" * width for width in widths))


if __name__ == "__main__":
    main()
