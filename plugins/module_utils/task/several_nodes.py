# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several nodes in one task: one read or action run on each node, and the one result shape they share.

``run`` runs ``act(client, node)`` on every node, concurrently and bounded;
``result`` builds the task's result from each node's outcome (a result dict or
a TalosError), for modules whose reads already fan out through the client
(``call_many``/``stream_many``). Both give every module that declares
``TaskSpec(several_nodes=True)`` the shape docs/architecture.md describes
("Several nodes in one task"), with the nodes keyed by ``node_key``. Actions
that take a node down pass ``in_turn`` (lifecycle.ControlPlaneTurns) so that
control planes go one at a time.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import DEFAULT_MAX_CONCURRENCY
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import split_endpoint

# The option of every module that takes several nodes (doc fragment talos_linux.talos.several_nodes), added by
# TaskSpec(several_nodes=True).
CONCURRENCY_OPTIONS = (dict(max_concurrency=dict(type="int", default=DEFAULT_MAX_CONCURRENCY)),
                       dict(max_concurrency=(1, None)))


def node_key(node, settings):
    """The name of ``node`` in a result's ``nodes``, in a directory or an archive: the node as targeted, or for the
    endpoint answering itself (None) its host, without the port."""
    return node if node else split_endpoint(settings.endpoints[0])[0]


def run(client, nodes, act, max_concurrency, in_turn=None, task_keys=None):
    """Run ``act(client, node)`` - one node's read or action, returning its result dict - on ``nodes``.

    A lone node runs on ``client``. Several run concurrently, at most
    ``max_concurrency`` at once, each in a thread with a client of its own (a
    TalosClient runs one asyncio loop: it cannot serve two threads); with
    ``in_turn``, each node runs as ``in_turn(client, node, act)``. Returns
    ``result`` of their outcomes, with ``task_keys``.
    """
    if len(nodes) == 1:
        try:
            outcomes = {nodes[0]: act(client, nodes[0])}
        except TalosError as error:
            outcomes = {nodes[0]: error}
        return result(outcomes, nodes, client.settings, task_keys)

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
    return result(outcomes, nodes, client.settings, task_keys)


def result(outcomes, nodes, settings, task_keys=None):
    """The task's result from ``outcomes`` (``{node: result dict or TalosError}``) of ``nodes``.

    The shape follows the option (``settings.nodes_listed``), never the count:
    one node (the node option, the host's node, the endpoint itself) gives its
    result at the top and its failure raised as it is; a list of nodes (the
    nodes option, the talosconfig context's nodes), even of one, gives
    ``nodes``, each node's result keyed by ``node_key``, a failed node's with
    ``failed`` and ``msg``, and nothing of a node at the top: ``changed`` says
    whether any changed and their diffs make one (``combined_diff``), taken out
    of the entries so that nothing is returned twice. When some failed,
    ActionFailed names them with the first failure and carries the whole result.
    ``task_keys`` (the task's own keys, beside the nodes': a file written
    whatever a node did) are in the result and in a failure's, the failed
    node's own keys with them; a callable makes them from the results of the
    nodes that answered, keyed by ``node_key`` (what they found), once every
    node is done.
    """
    answered = dict((node_key(node, settings), outcomes[node]) for node in nodes
                    if not isinstance(outcomes[node], TalosError))
    task_keys = (task_keys(answered) if callable(task_keys) else task_keys) or {}
    if not settings.nodes_listed:
        outcome = outcomes[nodes[0]]
        if isinstance(outcome, TalosError):
            if task_keys:
                raise ActionFailed(outcome.message, dict(outcome.to_result(), **task_keys), cause=outcome)
            raise outcome
        return dict(outcome, **task_keys)
    results, failed, diffs = {}, [], []
    for node in nodes:
        outcome, key = outcomes[node], node_key(node, settings)
        if isinstance(outcome, TalosError):
            failed.append(key)
            outcome = dict(outcome.to_result(), failed=True, msg=outcome.message)
        else:
            outcome = dict(outcome)
            if outcome.get("diff"):
                diffs.append((key, outcome["diff"]))
            outcome.pop("diff", None)
        results[key] = outcome
    combined = dict(changed=any(outcome.get("changed") for outcome in results.values()), nodes=results)
    if diffs:
        combined["diff"] = combined_diff(diffs)
    combined.update(task_keys)
    if failed:
        first = next(outcomes[node] for node in nodes if isinstance(outcomes[node], TalosError))
        raise ActionFailed(failed_message(failed, len(nodes), first), combined)
    return combined


def node_results(result, nodes, settings):
    """``{node: its entry}`` of a task's ``result`` (from ``run`` or ``result``), whatever its shape: the entries of
    ``nodes``, or for one node the result itself; for a module that goes on with what every node gave."""
    if settings.nodes_listed:
        return dict((node, result["nodes"][node_key(node, settings)]) for node in nodes)
    return {nodes[0]: result}


def combined_diff(diffs):
    """One diff of several nodes' ``[(node, diff)]``: text diffs, whose headers name their node, stay a list (Ansible
    shows each); data diffs merge into one, keyed by node."""
    if all(isinstance(diff.get("before"), str) and "before_header" in diff for _node, diff in diffs):
        return [diff for _node, diff in diffs]
    return dict((side, dict((node, diff[side]) for node, diff in diffs)) for side in ("before", "after"))


def failed_message(failed, total, first):
    """One sentence for ``failed`` (node names) of ``total`` nodes, with the first failure's message; a list of one
    node's is that node's own."""
    if total == 1:
        return first.message
    return "%d of %d nodes failed (%s): %s" % (len(failed), total, ", ".join(failed), first.message)
