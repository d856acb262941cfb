# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Client figures against the emulator: connection setup, Version calls per second.

Prints numbers only; nothing here asserts on speed. Run with `make bench`.
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "emulator"))
for collections_path in (os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) + [os.path.join(ROOT, ".collections")]):
    if collections_path and os.path.isdir(os.path.join(collections_path, "ansible_collections")):
        sys.path.insert(0, collections_path)
        break

from talos_emulator import EmulatedCluster  # noqa: E402

from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient  # noqa: E402
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import ConnectionSettings  # noqa: E402

VERSION = "machine.MachineService/Version"


def settings(cluster):
    params = dict(talosconfig=cluster.talosconfig_path(role="admin"), endpoints=[cluster.endpoint], timeout=60)
    return ConnectionSettings.from_params(params, environ={})


def rate(count, seconds):
    return count / seconds if seconds else float("inf")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="Version calls per measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="talos-bench-") as state_dir:
        cluster = EmulatedCluster.start(state_dir, controlplanes=1, workers=4)
        try:
            addresses = [node.address for node in cluster.nodes]

            started = time.perf_counter()
            with TalosClient(settings(cluster)) as client:
                client.call(VERSION)
                setup = time.perf_counter() - started

                started = time.perf_counter()
                for _call in range(args.calls):
                    client.call(VERSION, node=addresses[0])
                one_node = time.perf_counter() - started

                rounds = max(1, args.calls // len(addresses))
                started = time.perf_counter()
                for _round in range(rounds):
                    results = client.call_many(VERSION, nodes=addresses)
                    failed = [node for node, result in results.items() if isinstance(result, Exception)]
                    if failed:
                        raise SystemExit("Version failed on %s" % ", ".join(failed))
                five_nodes = time.perf_counter() - started
        finally:
            cluster.stop()

    print("connection setup (TLS handshake + first Version): %.1f ms" % (setup * 1000))
    print("Version to 1 node, sequential: %.0f calls/s (%d calls)" % (rate(args.calls, one_node), args.calls))
    print("Version to %d nodes concurrently: %.0f calls/s (%d rounds, %.1f ms per round)"
          % (len(addresses), rate(rounds * len(addresses), five_nodes), rounds, five_nodes / rounds * 1000))


if __name__ == "__main__":
    main()
