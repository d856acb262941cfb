# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rebuilding a cluster's etcd from a snapshot, as Talos's disaster recovery does it.

The steps, each only where it is still needed, so that a rerun continues
where a run stopped:

1. check the snapshot as etcd's restore will (etcd_snapshot.check), before
   any node is touched;
2. read every control plane's etcd: its service, and its member's status (a
   member that knows a leader means etcd still has quorum);
3. refuse while etcd has quorum - a restore rolls the whole cluster back to
   the snapshot - unless the caller allows it, or this controller's record
   says the cluster running is this snapshot's restore already; check mode,
   which verifies a backup on a healthy cluster, returns the plan instead,
   saying that a run would be refused;
4. wipe etcd (Reset of EPHEMERAL, not graceful, reboot) on the control planes
   whose etcd still holds data, so that every etcd service waits to join;
5. upload the snapshot to one control plane and Bootstrap it with
   ``recover_etcd`` (etcd_bootstrap.bootstrap), wait for its one-member cluster, and
   write the record;
6. wait until every other control plane joined it as a voting member.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import json
import os

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import members as etcd
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import status as etcd_status
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import bootstrap as etcd_bootstrap
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import membership as etcd_membership
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import snapshot as etcd_snapshot
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConfigError,
    TalosError,
    failing_as,
    label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import write_private
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.reset import (
    reset_plan,
    reset_request,
    wait_for_reset_reboot,
)

# The etcd service state of a control plane whose data directory is empty: it waits to join a cluster or for
# Bootstrap (Talos's etcd service in its pre state).
WAITING_STATE = "Preparing"
# What the wipe of etcd resets on a control plane (talosctl reset --graceful=false --reboot
# --system-labels-to-wipe=EPHEMERAL, as Talos's disaster recovery guide does it).
WIPE_PLAN = reset_plan("system_disk", ["EPHEMERAL"], None, then_reboot=True)


def record_path(snapshot):
    """Where the record of a restore from ``snapshot`` is kept by default: beside it."""
    return snapshot + ".restored.json"


def _read_record(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def survey(client, nodes, probe_seconds=etcd.HEALTH_PROBE_SECONDS):
    """Each control plane's etcd, in the order of ``nodes``: ``{node, reachable, service, member_id, leader, error}``."""
    services = client.call_many(rpc.SERVICE_LIST, nodes=nodes, deadline=probe_seconds)
    statuses = client.call_many(rpc.ETCD_STATUS, nodes=nodes, deadline=probe_seconds)
    surveyed = []
    for node in nodes:
        entry = {"node": node, "reachable": True, "service": None, "member_id": None, "leader": None, "error": None}
        listed = services.get(node)
        if isinstance(listed, TalosError):
            entry.update(reachable=False, error=listed.message)
            surveyed.append(entry)
            continue
        service = talos_node.services_by_id(listed).get("etcd")
        entry["service"] = service.state if service is not None else None
        status = statuses.get(node)
        if isinstance(status, TalosError):
            entry["error"] = status.message
        else:
            status = etcd_status.status_to_dict(status[0].member_status)
            entry.update(member_id=status["member_id"], leader=status["leader"])
        surveyed.append(entry)
    return surveyed


def _holds_data(entry):
    """Whether a control plane's etcd still has a data directory to wipe before the restore."""
    return entry["reachable"] and entry["service"] not in (None, WAITING_STATE)


def restore(client, nodes, snapshot=None, directory=None, prefix="etcd", skip_hash_check=False, allow_quorum=False,
            bootstrap_node=None, record=None, wait_timeout=600, check_mode=False, warn=None, progress=None):
    """Restore etcd on the control planes ``nodes`` from the file ``snapshot``, or from the newest backup of ``prefix``
    in ``directory`` that checks out; returns the task's result."""
    if snapshot is not None:
        facts = etcd_snapshot.check(os.path.abspath(os.path.expanduser(snapshot)), skip_hash_check)
    else:
        facts, skipped = etcd_snapshot.newest_backup(os.path.abspath(os.path.expanduser(directory)), prefix, skip_hash_check)
        for problem in skipped:
            if warn:
                warn("Skipped a newer backup: %s" % problem)
    record = record or record_path(facts["path"])
    nodes = list(nodes)
    if bootstrap_node is not None and bootstrap_node not in nodes:
        raise TalosConfigError("bootstrap_node %s is not one of the control planes in nodes (%s)." % (bootstrap_node, ", ".join(nodes)))
    surveyed = survey(client, nodes)
    result = {"changed": False, "snapshot": {key: facts[key] for key in ("path", "sha256", "revision", "size")},
              "bootstrap_node": None, "wiped": [], "joined": [], "left_out": [entry["node"] for entry in surveyed if not entry["reachable"]],
              "record": record, "members": [], "plan": []}
    reachable = [entry["node"] for entry in surveyed if entry["reachable"]]
    if not reachable:
        raise ActionFailed("Cannot restore etcd: no control plane in nodes answers (%s)."
                           % "; ".join("%s: %s" % (entry["node"], entry["error"].rstrip(".")) for entry in surveyed), result)
    for node in result["left_out"]:
        if warn:
            warn("%s does not answer and is left out of the restore; once it is back, wipe its EPHEMERAL volume "
                 "(talos_linux.talos.talos_reset) so that it joins the restored etcd." % label(node, start=True))
    bootstrap_node = bootstrap_node or reachable[0]
    result["bootstrap_node"] = bootstrap_node
    leaders = [entry for entry in surveyed if entry["leader"]]
    restored = _restored_already(_read_record(record), facts, surveyed)
    others = [node for node in reachable if node != bootstrap_node]
    result["plan"] = _plan(restored, [entry["node"] for entry in surveyed if _holds_data(entry)], bootstrap_node, others,
                           facts["revision"])
    if leaders and not restored and not allow_quorum:
        quorum = "still has quorum (%s answer with leader %s), and a restore rolls the whole cluster back to revision " \
                 "%d of the snapshot" % (", ".join(entry["node"] for entry in leaders), leaders[0]["leader"], facts["revision"])
        if check_mode:
            # Verifying a backup on a healthy cluster: the plan, and what a run would do first - refuse.
            result["plan"].insert(0, "refuse, since etcd %s; with allow_quorum=true a run goes on with the steps below"
                                  % quorum)
            return result
        raise ActionFailed("Refusing to restore etcd: it %s; set allow_quorum=true to wipe etcd on every control plane "
                           "and restore anyway." % quorum, result)
    if restored:
        if progress:
            progress("etcd already runs restored from this snapshot; waiting for the other control planes to join")
    else:
        result["changed"] = True
        result["wiped"] = [entry["node"] for entry in surveyed if _holds_data(entry)]
        if check_mode:
            result["joined"] = others
            return result
        if result["wiped"]:
            with _stopping(result, "wiping etcd on %s" % _listed(result["wiped"]),
                           "the control planes that answered were asked to wipe etcd, some may still hold it"):
                _wipe(client, result["wiped"], wait_timeout, progress)
        with _stopping(result, "recovering etcd on %s from the snapshot" % label(bootstrap_node),
                       "etcd is wiped on every control plane and waits for Bootstrap"):
            if progress:
                progress("uploading the snapshot to %s and bootstrapping etcd from it" % label(bootstrap_node))
            bootstrapped = etcd_bootstrap.bootstrap(client, bootstrap_node, recover_from=facts["path"], skip_hash_check=skip_hash_check,
                                                    wait_timeout=wait_timeout, progress=progress)
            if not bootstrapped["recovered"]:
                raise TalosError("its etcd holds data again (it rejoined a cluster that still ran), so it refused to "
                                 "bootstrap from the snapshot", node=bootstrap_node)
            member = etcd_status.member_status(client, bootstrap_node)
        write_private(record, json.dumps({
            "sha256": facts["sha256"], "revision": facts["revision"], "bootstrap_node": bootstrap_node,
            "member_id": member["member_id"], "restored_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }, indent=2, sort_keys=True) + "\n", "the record of the etcd restore")
    for node in others:
        with _stopping(result, "waiting for %s to join the restored etcd" % label(node),
                       "etcd runs restored on %s; %s joined" % (label(bootstrap_node), _listed(result["joined"]))):
            name = etcd.own_member_name(client, node)
            etcd_membership.await_voter(client, bootstrap_node, name, None if check_mode else wait_timeout, check_mode, warn, progress)
            result["joined"].append(node)
    result["members"] = etcd.list_members(client, bootstrap_node) if not check_mode or restored else []
    return result


def _wipe(client, nodes, wait_timeout, progress):
    """Wipe etcd on every one of ``nodes`` at once, then wait until each is back: one by one, a wiped node would
    rejoin the etcd that the others still run."""
    markers = dict((node, waits.read_boot_marker(client, node)) for node in nodes)
    request = reset_request(WIPE_PLAN, "system_disk", graceful=False)
    for node in nodes:
        if progress:
            progress("wiping etcd on %s (reset of EPHEMERAL, reboot)" % label(node))
        client.call(rpc.RESET, request, node=node)
    for node in nodes:
        state = wait_for_reset_reboot(client, node, markers[node], Waiter(wait_timeout, progress=progress))[0]
        if state != "configured":
            raise TalosError("%s came back %s after the wipe, not configured" % (label(node, start=True), state),
                             node=node)


def _plan(restored, holding_data, bootstrap_node, others, revision):
    """The steps of the restore that are still to come, as sentences (what check mode shows)."""
    steps = []
    if not restored:
        if holding_data:
            steps.append("wipe etcd on %s (reset of EPHEMERAL, not graceful, reboot)" % ", ".join(holding_data))
        steps.append("upload the snapshot (revision %d) to %s and bootstrap etcd from it" % (revision, bootstrap_node))
    if others:
        steps.append("wait until %s joined the restored etcd as voting members" % ", ".join(others))
    return steps


def _restored_already(record, facts, surveyed):
    """Whether the record says the etcd running is this snapshot's restore: same snapshot, and the member that
    bootstrapped from it still a member that answers."""
    if not record or record.get("sha256") != facts["sha256"]:
        return False
    return any(entry["member_id"] == record.get("member_id") and entry["leader"] for entry in surveyed)


def _listed(nodes):
    return ", ".join(nodes) if nodes else "none"


def _stopping(result, step, state):
    """Where the restore stopped if ``step`` fails, and the cluster's state then."""
    return failing_as("The etcd restore stopped while %s" % step, result,
                      "so far %s - run the restore again to continue." % state)
