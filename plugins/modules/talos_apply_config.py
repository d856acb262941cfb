#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_apply_config
short_description: Apply a machine configuration to Talos nodes
version_added: 1.0.0
description:
  - Applies a Talos machine configuration to one or more nodes with the ApplyConfiguration RPC, the way
    C(talosctl apply-config) does, including to nodes in maintenance mode that have no configuration yet.
  - The configuration comes from O(config) or O(config_file); O(config_patches) are applied to it on the controller,
    in order, before anything is sent.
  - Idempotent by dry run. The module first sends the configuration with C(dry_run); when the node answers that the
    configuration has no changes, nothing is applied and the task reports C(changed=false). In check mode the
    module stops after the dry run and reports what would change.
  - With C(--diff), the before and after texts come from the dry run's configuration diff. Secret values (keys,
    tokens, secrets, passwords, the private parts of certificates) are replaced by C(<redacted>) unless
    O(show_secrets=true). The configuration itself is never returned and never logged.
  - Before anything is sent, the configuration is checked against the Talos version each node runs - when it holds a
    document kind or field that not every supported Talos release knows. A node whose release does not know one is
    refused with one sentence naming the document, the release that introduced it and the node's version. Every node
    of the task is checked before any is sent anything, so a configuration one of them cannot take changes none of
    them; RV(valid_for) says which releases the configuration is valid for.
  - The module never reboots a node unless O(mode=reboot) asks for it (or a Talos release before v1.14 chooses to
    reboot for the change). Before a control plane reboots, the module runs the etcd quorum guard, as
    M(talos_linux.talos.talos_reboot) does, and refuses when etcd would lose its quorum while the node is down - when
    fewer of the other voting members are healthy than quorum needs, which includes a one-member cluster;
    O(quorum_wait_timeout) waits for the guard to let the node go, O(force_quorum_loss=true) reboots anyway. Nothing is
    applied to a node the guard refuses.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  config:
    description:
      - The machine configuration as YAML text; several documents (C(---)) are allowed, as Talos accepts them.
      - Mutually exclusive with O(config_file); one of them is required.
    type: str
  config_file:
    description:
      - Path of a machine configuration file (for example C(controlplane.yaml) from C(talosctl gen config)) on the
        host that runs the module (the controller, with C(connection=local)).
      - Mutually exclusive with O(config).
    type: path
  config_patches:
    description:
      - Patches applied in order to the configuration before it is sent, as mappings or YAML text.
      - A mapping is a strategic merge patch - a JSON merge patch (RFC 7386) of the v1alpha1 document (C(machine),
        C(cluster), ...) where nested mappings merge, lists and scalars replace and C(null) deletes. A mapping with
        C(kind) (and C(name) for named documents) patches the document of that kind instead, adds it when the
        configuration has none, and removes it when it holds C($patch) set to C(delete).
      - A list of operations (C(op), C(path), C(value)) is a JSON patch (RFC 6902) of the v1alpha1 document. As in
        Talos, it only applies to a single-document configuration - a configuration with other documents (as Talos
        v1.12 and later write them) makes the task fail before anything is sent; use a mapping there.
      - YAML text may hold several patch documents, applied in order.
      - Treated as secret (C(no_log)), since patches often carry keys or tokens; once the options are validated only
        the secret fields of the patches stay masked, so that messages naming an operation or a path stay readable.
    type: list
    elements: raw
  mode:
    description:
      - How the node takes the configuration.
      - V(auto) lets Talos decide; since Talos v1.14 it applies without a reboot.
      - V(no_reboot) applies immediately without a reboot.
      - V(staged) stores the configuration to be applied at the next reboot.
      - V(try) applies it and rolls it back after O(try_timeout) seconds unless it is applied again with another mode.
      - V(reboot) applies the configuration, then reboots the node and (with O(wait=true)) waits until it is back
        with a new boot ID. Talos v1.14 refuses the REBOOT apply mode on configured nodes, so the module applies
        with V(no_reboot) and calls Reboot itself; older versions reboot in the apply.
      - In maintenance mode the node installs the configuration and restarts by itself, whatever the mode.
    type: str
    choices: [auto, no_reboot, reboot, staged, try]
    default: auto
  try_timeout:
    description:
      - Seconds after which a configuration applied with O(mode=try) is rolled back.
    type: int
    default: 60
  force_quorum_loss:
    description:
      - Apply a configuration that reboots a control plane even when etcd loses its quorum while the node is down.
    type: bool
    default: false
  keep_newer_installer:
    description:
      - When the configuration names an installer image of an older Talos release than the node's active configuration
        does (M(talos_linux.talos.talos_upgrade) points it at the release it upgraded the node to), apply the
        configuration with the installer's tag set to the node's release instead, so that the installer reference
        never moves back - a later reinstall or reset would install the older release. The configuration's own
        repository is kept. RV(installer_kept) says when that happened.
      - The P(talos_linux.talos.cluster#role) role sets it, so that rerunning the provisioning after an upgrade changes
        nothing. Not used in maintenance mode, where the node has no configuration yet.
    type: bool
    default: false
  show_secrets:
    description:
      - Show secret values in the C(--diff) output instead of C(<redacted>).
      - The task output then holds the cluster's keys and tokens; do not use it where output is kept.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.wait
  - talos_linux.talos.quorum_wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The node validates the configuration in a dry run and the etcd quorum guard runs; nothing is applied.
  diff_mode:
    support: full
    details: Before and after come from the dry run's configuration diff, with secrets redacted.
  idempotent:
    support: full
notes:
  - ApplyConfiguration needs the C(os:admin) role on a configured node; a node in maintenance mode accepts it over
    an insecure connection (O(insecure=true)).
  - In maintenance mode (O(insecure=true)) the task always reports a change, since the node has no configuration to
    compare with. With O(wait=true) the module then waits until the node serves its API over mutual TLS with the
    CA and client certificate of the talosconfig (or O(ca), O(crt), O(key)), so that the next task can use them.
  - A configuration that would lock the task's own credentials out of the nodes is refused before any node is sent
    anything, in check mode too - its Talos CA (C(machine.ca)) is not one the talosconfig trusts, or the
    talosconfig's client certificate was issued by neither that CA nor one of C(machine.acceptedCAs). The usual cause
    is a configuration rendered before a CA rotation (M(talos_linux.talos.talos_rotate_ca)). A maintenance-mode apply
    without O(wait) is not checked; nothing reaches the node with these credentials afterwards.
  - A node in maintenance mode does not forward calls to other nodes; reach it through itself as the only
    endpoint, one task per node (O(endpoints) set to the node's own address, with O(insecure=true)).
  - When another apply is in progress on the node (C(FailedPrecondition)), the apply is retried with backoff until
    O(timeout) seconds have passed.
  - With several O(nodes), each node gets its own dry run and apply, at most O(max_concurrency) at a time; control
    planes go one at a time, workers at once. Each node's outcome is in RV(nodes); a failed node fails the task once
    the others are done. When the configuration reboots a control plane, set O(wait=true) to take several in one
    task - without it the task refuses a second control plane after one that rebooted.
seealso:
  - module: talos_linux.talos.talos_facts
  - name: Talos machine configuration reference
    description: Every option of the v1alpha1 machine configuration and the other configuration documents.
    link: https://www.talos.dev/latest/reference/configuration/
"""

EXAMPLES = r"""
- name: Install a control plane that is in maintenance mode
  talos_linux.talos.talos_apply_config:
    talosconfig: ./talosconfig
    endpoints: ["{{ ansible_host }}"]
    node: "{{ ansible_host }}"
    insecure: true
    config_file: ./controlplane.yaml
    config_patches:
      - machine:
          network:
            hostname: "{{ inventory_hostname }}"

- name: Change a setting on every node, one node at a time
  talos_linux.talos.talos_apply_config:
    node: "{{ ansible_host }}"
    config: "{{ lookup('ansible.builtin.file', 'worker.yaml') }}"
    config_patches:
      - |
        machine:
          sysctls:
            vm.max_map_count: "262144"
  throttle: 1

- name: Add a certificate SAN with a JSON patch (single-document configurations only)
  talos_linux.talos.talos_apply_config:
    node: 10.5.0.2
    config_file: ./controlplane-v1.11.yaml
    config_patches:
      - - op: add
          path: /machine/certSANs/-
          value: api.example.com

- name: Apply a configuration that needs a reboot and wait for the node
  talos_linux.talos.talos_apply_config:
    node: 10.5.0.3
    config_file: ./worker.yaml
    mode: reboot
    wait_timeout: 900

- name: Apply a configuration to a control plane with a reboot once etcd can spare it
  talos_linux.talos.talos_apply_config:
    node: 10.5.0.2
    config_file: ./controlplane.yaml
    mode: reboot
    quorum_wait_timeout: 300

- name: Show what would change, secrets redacted
  talos_linux.talos.talos_apply_config:
    node: 10.5.0.2
    config_file: ./controlplane.yaml
  check_mode: true
  diff: true
"""

RETURN = r"""
node:
  description: The node the configuration was applied to (null when the endpoint answered for itself).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 10.5.0.2
mode:
  description:
    - The mode the node applied the configuration in (for an unchanged configuration or in check mode, the mode the
      dry run reported), one of V(reboot), V(auto), V(no_reboot), V(staged), V(try).
    - Talos v1.14 answers V(no_reboot) for O(mode=auto), and for O(mode=reboot), which the module completes with a
      reboot (see RV(rebooted)).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: no_reboot
mode_details:
  description: The node's description of what it did (or, for a dry run, would do), with secret values redacted.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: "Applied configuration without a reboot"
rebooted:
  description:
    - True when the node rebooted to take the configuration - O(mode=reboot), a node in maintenance mode (which
      installs the configuration and restarts into it), or a Talos version before v1.14 that chose to reboot.
    - With several nodes, true when any of them did.
  returned: always
  type: bool
  sample: false
etcd_gate_open:
  description:
    - When the configuration reboots the node, whether the etcd quorum guard lets it go - true when etcd keeps its
      quorum without it, or when there is nothing to guard (a worker); false when etcd would lose its quorum (the task
      then fails, unless O(force_quorum_loss=true)).
  returned: when the configuration reboots the node; at the top with one node (O(node)), else in each node's entry of RV(nodes)
  type: bool
  sample: true
quorum:
  description: When the configuration reboots a control plane that is an etcd member, the etcd quorum check made.
  returned: when the configuration reboots the node; at the top with one node (O(node)), else in each node's entry of RV(nodes)
  type: dict
  sample: {safe: true, voters_after: 3, quorum_after: 2, healthy_after: 2, unhealthy: []}
installer_kept:
  description:
    - With O(keep_newer_installer=true), when the configuration named an installer of an older release than the node's
      active configuration, the installer image the configuration named (C(given)) and the one applied instead
      (C(applied)).
  returned: when the installer was kept; at the top with one node (O(node)), else in each node's entry of RV(nodes)
  type: dict
  sample:
    given: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0
    applied: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1
warnings:
  description: The node's warnings about the configuration; they are shown as task warnings too.
  returned: at the top with one node (O(node)), else in each node's entry of RV(nodes)
  type: list
  elements: str
  sample: []
valid_for:
  description:
    - The Talos releases the configuration (with O(config_patches) applied) is valid for, as far as its document kinds
      and fields go - what a node decodes before it validates the values; the same as
      RV(talos_linux.talos.talos_machine_config#module:valid_for).
    - A configuration that holds a document or field that the node's Talos does not know is refused before anything is
      sent to the node, with one sentence naming the document, the release that introduced it and the node's version.
  returned: when the configuration could be read
  type: dict
  contains:
    min:
      description: The oldest supported Talos release that takes the configuration.
      type: str
      sample: v1.14.0
    releases:
      description: Per supported minor release, the first patch release that takes the configuration; a minor release
        none of whose patches takes it is left out.
      type: dict
      sample: {v1.14: v1.14.0}
  sample: {min: v1.14.0, releases: {v1.14: v1.14.0}}
nodes:
  description:
    - The result of each node, keyed by node, with the keys above (C(changed), C(node), C(mode), C(mode_details),
      C(warnings), C(rebooted)).
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.3: {changed: true, node: 10.5.0.3, mode: no_reboot, mode_details: "Applied configuration without a reboot",
               warnings: [], rebooted: false}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import label
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
    ConfigApplier,
    check_nodes_fit,
    load_config,
    patch_secret_values,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import maskable_literals
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec
from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import trust

SPEC = TaskSpec(
    argument_spec=dict(
        config=dict(type="str", no_log=True),
        config_file=dict(type="path"),
        config_patches=dict(type="list", elements="raw", no_log=True),
        mode=dict(type="str", default="auto", choices=["auto", "no_reboot", "reboot", "staged", "try"]),
        try_timeout=dict(type="int", default=60),
        show_secrets=dict(type="bool", default=False),
        force_quorum_loss=dict(type="bool", default=False),
        keep_newer_installer=dict(type="bool", default=False),
    ),
    wait=True,
    quorum_wait=True,
    ranges=dict(try_timeout=(1, None)),
    mutually_exclusive=[("config", "config_file")],
    required_one_of=[("config", "config_file")],
    several_nodes=True,
)


def run(task):
    params = task.params
    # Masking every word of the patches would garble messages that name an operation or a path.
    task.mask_only("config_patches", patch_secret_values(params["config_patches"]))
    config = load_config(params["config"], params["config_file"], params["config_patches"])
    if not params["show_secrets"]:
        # Messages and diffs hold no secret by construction; masking long literals is a second line of defence.
        task.hide(maskable_literals(config.secret_values()))

    def apply_node(client, node):
        applier = ConfigApplier(client, config, params["mode"], params["try_timeout"], maintenance=params["insecure"],
                                wait_timeout=params["wait_timeout"] if params["wait"] else None,
                                show_secrets=params["show_secrets"], check_mode=task.check_mode, progress=task.progress,
                                force_quorum_loss=params["force_quorum_loss"],
                                quorum_wait_timeout=params["quorum_wait_timeout"],
                                keep_newer_installer=params["keep_newer_installer"], versions=versions)
        result, diff = applier.apply(node)
        # Task-wide, whether the task ends well or not: whether any node rebooted, and each node's warnings.
        task.result["rebooted"] = task.result["rebooted"] or bool(result.get("rebooted"))
        for warning in result.get("warnings", ()):
            task.warn("%s: %s" % (label(node, start=True), warning))
        return dict(result, diff=diff) if diff is not None and task.diff else result

    task.result["rebooted"] = False
    task.result["valid_for"] = config.valid_for()
    # A config that would lock the task's own credentials out of the nodes is refused before any node is touched
    # (once a maintenance node installed it, the wait reaches it with them).
    if not params["insecure"] or params["wait"]:
        trust.check_apply_keeps_access(task.client, config.documents, task.target_nodes,
                                       "config_file" if params["config_file"] else "config")
    # Every node's Talos is checked before any node is touched: a config one of them cannot decode changes none.
    versions = check_nodes_fit(task.client, config, task.target_nodes, maintenance=params["insecure"],
                               max_concurrency=params["max_concurrency"])
    output = lifecycle.on_nodes(task.client, task.target_nodes, apply_node, params["max_concurrency"],
                                waited=params["wait"] or task.check_mode, progress=task.progress)
    output.pop("warnings", None)  # one node's keys at the top: its warnings are the task's
    return output


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
