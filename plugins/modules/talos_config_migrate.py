#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_config_migrate
short_description: Move a machine configuration's deprecated v1alpha1 fields to the Talos v1.14 documents
version_added: 1.1.0
description:
  - Talos v1.14 reads most of the v1alpha1 document's settings from documents of their own (C(HostnameConfig),
    C(ResolverConfig), C(KubeletConfig), C(KubeAPIServerConfig), C(UnattendedInstallConfig), ...). It still reads the
    deprecated v1alpha1 fields, but refuses a configuration that sets one of them next to the document that replaces it.
    This module plans the move of every deprecated field a configuration sets to its document, shows the plan and a
    diff, and applies or writes the migrated configuration.
  - On a node (neither O(config) nor O(config_file) given), the module reads the node's active configuration, plans
    the migration and applies the migrated configuration through the path M(talos_linux.talos.talos_apply_config)
    uses - a dry run first, check mode and C(--diff) from the node's own comparison, the version check that refuses a
    node older than Talos v1.14 before anything is sent. A node with nothing left to migrate is not sent anything.
  - With O(config) or O(config_file), the module migrates that configuration on the controller, without any node,
    and writes the result to O(dest) (without O(dest) it only plans). Loop over the task to migrate a set of
    configurations.
  - The migration keeps what the v1alpha1 path adds on its own, which the documents leave to the configuration - the
    secretbox encryption key keeps its name C(key2) (and an aescbc key stays aescbc), so that kube-apiserver still
    decrypts what it stored; the C(Node) and C(RBAC) authorizers come first, then the configuration's own; a control
    plane's C(node-role.kubernetes.io/control-plane) label, and its C(NoSchedule) taint unless scheduling on control
    planes is allowed, are written out; the installer does not wipe the disk unless the configuration said so; the
    service account issuer is the cluster endpoint; a control plane without a CNI setting gets Flannel.
  - The task fails, with nothing applied or written, when the configuration sets a field both in the v1alpha1
    document and in the document that replaces it (Talos refuses that even for equal values), sets a value that a
    document it merges with sets otherwise, or sets a field that has no home in the v1.14 documents (for example
    C(cluster.apiServer.extraVolumes), C(machine.kubelet.extraMounts), C(machine.install.extraKernelArgs)) unless
    O(accept_dropped) names it. The failure's RV(plan) lists every problem.
  - System disk encryption (C(machine.systemDiskEncryption)) moves to the C(encryption) of the C(STATE) and
    C(EPHEMERAL) C(VolumeConfig) documents with the same fields; a C(VolumeConfig) that encrypts the volume already is
    a conflict.
  - A file of C(machine.files) that overwrites one under C(/etc) moves to an C(EtcFileConfig) named by its path below
    C(/etc); C(/etc/cri/conf.d/20-customization.part) moves to the C(CRICustomizationConfig) C(customization-v1alpha1).
    A file outside C(/etc), one appended to or created under C(/etc), one Talos manages and one without permissions have
    no home; O(accept_dropped) names them as C(machine.files.<path>).
  - A network interface named by C(interface) moves as Talos's v1alpha1 path reads it - its addresses (one without a
    prefix length a host address), routes, MTU and DHCP (IPv4 unless told otherwise, no client identifier; a DHCPv6
    C(duidv6) as C(clientIdentifier=duid) and C(duidRaw)) to C(LinkConfig) (C(BridgeConfig) for a bridge, with the
    bridge ports naming it in its C(links); C(BondConfig) for a bond, its options under their C(BondConfig) names;
    C(WireguardConfig) for a WireGuard link; C(DummyLinkConfig) for a dummy link), C(DHCPv4Config) and
    C(DHCPv6Config), its VLANs to C(VLANConfig), its VIP to C(Layer2VIPConfig) or C(HCloudVIPConfig).
  - What Talos v1.14 would configure otherwise from a document stays in the v1alpha1 document, which Talos v1.14
    still reads beside the documents, and RV(plan) lists it in C(kept) with why - an interface picked by
    C(deviceSelector) (Talos configures every link it matches, a C(LinkAliasConfig) only a physical link it matches
    alone), an ignored one, an Equinix Metal VIP, a bond with C(primary) (C(BondConfig) has none) or C(arpIPTarget)
    (which Talos never applied), a WireGuard peer whose endpoint is a host name, a bridge port whose bridge stays.
    With the first link document Talos stops the DHCP it runs by default on links no configuration names, and the
    task warns so.
  - C(machine.disks) stays in the v1alpha1 document, which Talos v1.14 still honours, and RV(plan) lists it in
    C(kept) - Talos finds a C(UserVolumeConfig)'s partition by its label C(u-<name>), which the partitions it made for
    C(machine.disks) do not carry, so it would create a new one and mount it under C(/var/mnt/<name>). Talos v1.14's new
    defaults (C(VolumeConfig) C(EPHEMERAL), C(FilesystemTrimConfig), C(SecurityProfileConfig)) are not added - they
    would change what the node runs.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  config:
    description:
      - A machine configuration as YAML text to migrate on the controller, without any node.
      - Mutually exclusive with O(config_file).
    type: str
  config_file:
    description:
      - Path of a machine configuration file to migrate on the controller, without any node.
      - Mutually exclusive with O(config).
    type: path
  dest:
    description:
      - Where to write the migrated configuration (mode C(0600)) when O(config) or O(config_file) is given; rewritten
        only when its content changes. A configuration with nothing to migrate is written as it was given.
      - Without it the module only plans.
    type: path
  accept_dropped:
    description:
      - Fields without a home in the Talos v1.14 documents to drop from the migrated configuration, as dotted paths in
        the v1alpha1 document, for example V(cluster.apiServer.extraVolumes) or V(machine.install.extraKernelArgs).
      - A path that names no such field of the configuration is refused, so that nothing is dropped by mistake.
    type: list
    elements: str
    default: []
  mode:
    description:
      - How a node takes the migrated configuration, as in M(talos_linux.talos.talos_apply_config). Talos v1.14
        applies a migration without a reboot. A staged or tried configuration would leave the v1alpha1 fields active
        and the next run migrating again, so neither is offered.
    type: str
    choices: [auto, no_reboot]
    default: auto
  show_secrets:
    description:
      - Show secret values in the C(--diff) output instead of C(<redacted>).
      - The task output then holds the cluster's keys and tokens; do not use it where output is kept.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: On a node, the node validates the migrated configuration in a dry run and nothing is applied; with
      O(dest), nothing is written.
  diff_mode:
    support: full
    details: On a node, the dry run's configuration diff; on the controller, the given configuration against the
      migrated one. Secrets are redacted.
  idempotent:
    support: full
notes:
  - Reading a node's active configuration and applying one need the C(os:admin) role.
  - With O(config) or O(config_file), the connection options, O(node) and O(nodes) are not used.
seealso:
  - module: talos_linux.talos.talos_apply_config
  - module: talos_linux.talos.talos_machine_config
  - name: Talos configuration document map
    description: Which document replaces which v1alpha1 field.
    link: https://docs.siderolabs.com/talos/v1.14/reference/configuration/document-map
"""

EXAMPLES = r"""
- name: Show what the migration of a node's configuration would change
  talos_linux.talos.talos_config_migrate:
    node: 10.5.0.2
  check_mode: true
  diff: true

- name: Migrate every node's configuration to the v1.14 documents
  talos_linux.talos.talos_config_migrate:
  throttle: 1

- name: Migrate the configs kept in the inventory, dropping the apiserver's extra volumes
  talos_linux.talos.talos_config_migrate:
    config_file: "{{ inventory_dir }}/{{ item }}.yaml"
    dest: "{{ inventory_dir }}/{{ item }}.yaml"
    accept_dropped:
      - cluster.apiServer.extraVolumes
  loop: [controlplane, worker]
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
plan:
  description:
    - What the migration moves and what stands in its way; secret values are redacted.
  returned: always, also when the task fails for a conflict or a field without a home; at the top with one node or
    on the controller, else in each node's entry of RV(nodes)
  type: dict
  contains:
    steps:
      description: One move per field - C(from) (the v1alpha1 field), C(to) (the document, C(Kind/name) for a named
        one), C(field) in that document (null for several fields at once), C(value) as the document takes it, and
        a C(note) where the migration keeps something the v1alpha1 path did on its own.
      type: list
      elements: dict
    conflicts:
      description: Sentences naming both places of each field set in the v1alpha1 document and in its document.
      type: list
      elements: str
    homeless:
      description: Sentences naming each field without a home in the v1.14 documents that O(accept_dropped) does not
        name.
      type: list
      elements: str
    dropped:
      description: Fields dropped from the migrated configuration and why (Talos ignores them, a default says the
        same, or O(accept_dropped) names them).
      type: list
      elements: str
    kept:
      description: Deprecated sections left in the v1alpha1 document, which Talos v1.14 still honours, each with why
        (C(machine.disks), a network interface picked by C(deviceSelector) or a bond with a primary link, for example).
      type: list
      elements: str
    warnings:
      description: What the migrated configuration changes on the node beyond the moved fields, also issued as task
        warnings - the first link document stops the DHCP Talos runs by default on links no configuration names.
      type: list
      elements: str
  sample:
    steps:
      - {from: .machine.network.hostname, to: HostnameConfig, field: hostname, value: node-1}
      - {from: .cluster.secretboxEncryptionSecret, to: KubeEtcdEncryptionConfig, field: config,
         value: {resources: [{providers: [{secretbox: {keys: [{name: key2, secret: <redacted>}]}}, {identity: {}}],
                 resources: [secrets]}]},
         note: "key names as the legacy path renders them, so that kube-apiserver still decrypts what it stored"}
    conflicts: []
    homeless: []
    dropped: [".machine.kubelet.disableManifestsDirectory: Talos v1.14 always disables it"]
    kept: []
    warnings: []
node:
  description: The node whose configuration was migrated.
  returned: on a node, with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: 10.5.0.2
mode:
  description: The mode the node applied the migrated configuration in (the dry run's, in check mode).
  returned: on a node with something to migrate, with one node
  type: str
  sample: no_reboot
mode_details:
  description: The node's description of what it did or would do, with secret values redacted.
  returned: on a node with something to migrate, with one node
  type: str
  sample: "Applied configuration without a reboot"
dest:
  description: The file the migrated configuration was written to.
  returned: with O(dest)
  type: str
  sample: /srv/prod/controlplane.yaml
valid_for:
  description: The Talos releases the migrated configuration is valid for, as
    RV(talos_linux.talos.talos_apply_config#module:valid_for) says.
  returned: when there is something to migrate; at the top with one node or on the controller, else in each node's
    entry of RV(nodes)
  type: dict
  sample: {min: v1.14.0, releases: {v1.14: v1.14.0}}
nodes:
  description:
    - The result of each node, keyed by node, with the keys above; a node that failed has C(failed), C(msg),
      C(code) and C(node) instead (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import check_destination, read_text, read_text_file, update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import maskable_literals, secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.config import migration
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import ConfigApplier, file_diff
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        config=dict(type="str", no_log=True),
        config_file=dict(type="path"),
        dest=dict(type="path"),
        accept_dropped=dict(type="list", elements="str", default=[]),
        mode=dict(type="str", default="auto", choices=["auto", "no_reboot"]),
        show_secrets=dict(type="bool", default=False),
    ),
    mutually_exclusive=[("config", "config_file")],
    several_nodes=True,
)


def _refuse(plan, result, node=None):
    refusal = plan.refusal()
    if refusal:
        raise ActionFailed(refusal, result, node=node)


def _hide_secrets(task, documents):
    if not task.params["show_secrets"]:
        task.hide(maskable_literals(secret_values(documents)))


def migrate_file(task):
    """A configuration on the controller: plan, and write the migrated one to dest."""
    params = task.params
    dest = os.path.abspath(params["dest"]) if params["dest"] else None
    if dest:
        check_destination(dest, "the migrated machine config", "dest")
    if params["config_file"] is not None:
        text, parameter = read_text_file(params["config_file"], "config_file"), "config_file"
    else:
        text, parameter = params["config"], "config"
    plan = migration.plan_text(text, parameter, params["accept_dropped"])
    result = {"changed": False, "plan": plan.as_dict()}
    _refuse(plan, result)
    for warning in plan.warnings:
        task.warn(warning)
    if plan.changes:
        migrated = migration.migrated_config(plan)
        _hide_secrets(task, plan.documents)
        after = migrated.data.decode("utf-8")
        result["valid_for"] = migrated.valid_for()
        if task.diff:
            result["diff"] = file_diff(text, after, migrated.secret_values(), dest or parameter)
    else:
        after = text
    if dest:
        current = read_text(dest)
        result.update(dest=dest, changed=update_private(dest, after, "the migrated machine config", task.check_mode,
                                                        keep=current == after))
    return result


def migrate_node(task, client, node):
    """A node's active configuration: plan, then apply the migrated one as talos_apply_config does."""
    params = task.params
    plan = migration.plan_node(client, node, params["accept_dropped"])
    result = {"node": node, "changed": False, "plan": plan.as_dict()}
    _refuse(plan, result, node)
    if not plan.changes:
        return result
    for warning in plan.warnings:
        task.warn("%s: %s" % (label(node, start=True), warning))
    migrated = migration.migrated_config(plan)
    _hide_secrets(task, plan.documents)
    result["valid_for"] = migrated.valid_for()
    applier = ConfigApplier(client, migrated, params["mode"], show_secrets=params["show_secrets"],
                            check_mode=task.check_mode, progress=task.progress)
    try:
        applied, diff = applier.apply(node)
    except TalosError as error:
        # The version check or the node refused: the plan still says what the migration would have moved.
        raise ActionFailed(error.message, result, cause=error)
    result.update((key, applied[key]) for key in ("changed", "mode", "mode_details"))
    for warning in applied["warnings"]:
        task.warn("%s: %s" % (label(node, start=True), warning))
    if diff is not None and task.diff:
        result["diff"] = diff
    return result


def run(task):
    if task.params["config"] is not None or task.params["config_file"] is not None:
        return migrate_file(task)
    return several_nodes.run(task.client, task.target_nodes, lambda client, node: migrate_node(task, client, node),
                             task.params["max_concurrency"])


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
