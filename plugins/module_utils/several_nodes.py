# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several nodes in one task: one read or action run on each node, and the one result shape they share.

``run`` runs ``act(client, node)`` on every node, concurrently and bounded;
``result`` builds the task's result from each node's outcome (a result dict or
a TalosError), for modules whose reads already fan out through the client
(``call_many``/``stream_many``). Both give every multi-node module the shape
docs/architecture.md describes ("Several nodes in one task"). Actions that take
a node down pass ``in_turn`` (lifecycle.ControlPlaneTurns) so that control
planes go one at a time.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.talos_linux.talos.plugins.module_utils.client import DEFAULT_MAX_CONCURRENCY
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import ActionFailed, TalosError

# The option of every module that takes several nodes (doc fragment talos_linux.talos.several_nodes):
# TaskSpec(shared_options=[several_nodes.CONCURRENCY_OPTIONS]).
CONCURRENCY_OPTIONS = (dict(max_concurrency=dict(type="int", default=DEFAULT_MAX_CONCURRENCY)),
                       dict(max_concurrency=(1, None)))


def run(client, nodes, act, max_concurrency, in_turn=None, lone_node_keyed=False):
    """Run ``act(client, node)`` - one node's read or action, returning its result dict - on ``nodes``.

    One node runs on ``client``. Several run concurrently, at most
    ``max_concurrency`` at once, each in a thread with a client of its own (a
    TalosClient runs one asyncio loop: it cannot serve two threads); with
    ``in_turn``, each node runs as ``in_turn(client, node, act)``. Returns
    ``result`` of their outcomes. ``lone_node_keyed`` puts one node's result
    under ``nodes`` as well: an action's, whose ``changed`` a task's
    ``changed_when`` may overwrite at the top (a read returns its data once).
    """
    endpoint = client.settings.endpoints[0]
    if len(nodes) == 1:
        outcome = act(client, nodes[0])
        return dict(outcome, nodes={nodes[0] or endpoint: outcome}) if lone_node_keyed else dict(outcome)

    def one(node):
        node_client = client.with_settings()
        try:
            return in_turn(node_client, node, act) if in_turn is not None else act(node_client, node)
        except TalosError as error:
            return error
        finally:
            node_client.close()

    with ThreadPoolExecutor(max_workers=min(max_concurrency, len(nodes))) as pool:
        outcomes = dict(zip(nodes, pool.map(one, nodes)))
    return result(outcomes, nodes, endpoint)


def result(outcomes, nodes, endpoint):
    """The task's result from ``outcomes`` (``{node: result dict or TalosError}``) of ``nodes``.

    One node's result is the task's, and its failure is raised as it is.
    With several, ``nodes`` holds each node's result keyed by node
    (``endpoint`` for None), a failed node's with ``failed`` and ``msg``;
    ``changed`` says whether any changed and their diffs make one
    (``combined_diff``). When some failed, ActionFailed names them with the
    first failure and carries the whole result.
    """
    if len(nodes) == 1:
        outcome = outcomes[nodes[0]]
        if isinstance(outcome, TalosError):
            raise outcome
        return dict(outcome)
    results, failed = {}, []
    for node in nodes:
        outcome, key = outcomes[node], node or endpoint
        if isinstance(outcome, TalosError):
            failed.append(key)
            outcome = dict(outcome.to_result(), failed=True, msg=outcome.message)
        results[key] = outcome
    combined = dict(changed=any(outcome.get("changed") for outcome in results.values()), nodes=results)
    diffs = [(node, outcome["diff"]) for node, outcome in results.items() if outcome.get("diff")]
    if diffs:
        combined["diff"] = combined_diff(diffs)
    if failed:
        first = next(outcomes[node] for node in nodes if isinstance(outcomes[node], TalosError))
        raise ActionFailed(failed_message(failed, len(nodes), first), combined)
    return combined


def combined_diff(diffs):
    """One diff of several nodes' ``[(node, diff)]``: text diffs, whose headers name their node, stay a list (Ansible
    shows each); data diffs merge into one, keyed by node."""
    if all(isinstance(diff.get("before"), str) and "before_header" in diff for _node, diff in diffs):
        return [diff for _node, diff in diffs]
    return dict((side, dict((node, diff[side]) for node, diff in diffs)) for side in ("before", "after"))


def failed_message(failed, total, first):
    """One sentence for ``failed`` (node names) of ``total`` nodes, with the first failure's message."""
    return "%d of %d nodes failed (%s): %s" % (len(failed), total, ", ".join(failed), first.message)
