#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_apply_config
short_description: Apply a machine configuration to Talos nodes
version_added: 0.1.0
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
  - The module never reboots a node unless O(mode=reboot) asks for it.
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
      - A mapping is a JSON merge patch (RFC 7386) of the v1alpha1 document (C(machine), C(cluster), ...) - nested
        mappings merge, lists and scalars replace, C(null) deletes. A mapping with C(kind) (and C(name) for named
        documents) patches the document of that kind instead, adds it when the configuration has none, and removes
        it when it holds C($patch) set to C(delete).
      - A list of operations (C(op), C(path), C(value)) is a JSON patch (RFC 6902) of the v1alpha1 document.
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
  show_secrets:
    description:
      - Show secret values in the C(--diff) output instead of C(<redacted>).
      - The task output then holds the cluster's keys and tokens; do not use it where output is kept.
    type: bool
    default: false
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.wait
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The node validates the configuration in a dry run; nothing is applied.
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
  - A node in maintenance mode does not forward calls to other nodes; reach it through itself as the only
    endpoint, one task per node (O(endpoints) set to the node's own address, with O(insecure=true)).
  - When another apply is in progress on the node (C(FailedPrecondition)), the apply is retried with backoff until
    O(timeout) seconds have passed.
  - With several O(nodes), they are handled one after the other, and the task stops at the first node that fails.
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
      - - op: add
          path: /machine/certSANs/-
          value: api.example.com
  throttle: 1

- name: Apply a configuration that needs a reboot and wait for the node
  talos_linux.talos.talos_apply_config:
    node: 10.5.0.3
    config_file: ./worker.yaml
    mode: reboot
    wait_timeout: 900

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
  returned: when the task targets one node
  type: str
  sample: 10.5.0.2
mode:
  description:
    - The mode the node applied the configuration in (for an unchanged configuration or in check mode, the mode the
      dry run reported), one of V(reboot), V(auto), V(no_reboot), V(staged), V(try).
    - Talos v1.14 answers V(no_reboot) for O(mode=auto), and for O(mode=reboot), which the module completes with a
      reboot (see RV(rebooted)).
  returned: when the task targets one node
  type: str
  sample: no_reboot
mode_details:
  description: The node's description of what it did (or, for a dry run, would do), with secret values redacted.
  returned: when the task targets one node
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
results:
  description: One entry per node when the task targets several nodes, in the order they were handled.
  returned: when the task targets several nodes
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
      sample: 10.5.0.3
    changed:
      description: Whether the configuration of this node changed (or would change, in check mode).
      type: bool
      sample: true
    mode:
      description: As RV(mode), for this node.
      type: str
      sample: no_reboot
    mode_details:
      description: As RV(mode_details), for this node.
      type: str
      sample: "Applied configuration without a reboot"
    warnings:
      description: The node's warnings about the configuration (they are also shown as task warnings).
      type: list
      elements: str
      sample: []
    rebooted:
      description: As RV(rebooted), for this node.
      type: bool
      sample: false
"""

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.machine_config import (
    HAS_JSONPATCH,
    JSONPATCH_IMPORT_ERROR,
    dry_run_diff,
    dry_run_has_no_changes,
    load_config,
    patch_secret_values,
    redact_mode_details,
    redact_text,
    split_unified_diff,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.redaction import maskable_literals
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule
from ansible_collections.talos_linux.talos.plugins.module_utils.waiters import read_boot_id, wait_for_reboot, wait_for_secure_api

try:
    from google.protobuf.duration_pb2 import Duration
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    machine_pb2 = None

APPLY = "machine.MachineService/ApplyConfiguration"
VERSION = "machine.MachineService/Version"
REBOOT = "machine.MachineService/Reboot"

# The only FailedPrecondition ApplyConfiguration answers: "another apply configuration is already in progress".
APPLY_RETRY_CODES = ("FailedPrecondition",)

# Talos v1.14 refuses the REBOOT apply mode outside maintenance mode.
REBOOT_MODE_REFUSED_SINCE = (1, 14)


def parse_version(tag):
    """``(major, minor)`` of a Talos version tag such as ``v1.14.0-rc.1``, or None."""
    parts = (tag or "").lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def request_mode(mode, maintenance, version):
    """The ApplyConfiguration mode to send for the module's ``mode``.

    ``reboot`` is sent as REBOOT where Talos still accepts it (maintenance mode,
    where Talos turns it into no_reboot itself, and versions before v1.14);
    elsewhere the module applies with no_reboot and reboots the node itself.
    """
    if mode != "reboot" or maintenance:
        return mode
    if version is not None and version < REBOOT_MODE_REFUSED_SINCE:
        return "reboot"
    return "no_reboot"


def mode_name(value):
    """``ApplyConfigurationRequest.Mode`` number -> the module's spelling (``NO_REBOOT`` -> ``no_reboot``)."""
    return machine_pb2.ApplyConfigurationRequest.Mode.Name(value).lower()


def build_request(data, mode, try_timeout, dry_run):
    request = machine_pb2.ApplyConfigurationRequest(
        data=data, mode=machine_pb2.ApplyConfigurationRequest.Mode.Value(mode.upper()), dry_run=dry_run)
    if mode == "try":
        request.try_mode_timeout.CopyFrom(Duration(seconds=try_timeout))
    return request


def build_diff(node, mode_details, config, known_secrets, show_secrets):
    """Before/after texts for --diff from a dry run's config diff (the whole config when there is nothing to compare)."""
    text = dry_run_diff(mode_details)
    if text and not show_secrets:
        text = redact_text(text, known_secrets, diff=True)
    sides = split_unified_diff(text) if text else None
    if sides is None:
        sides = ("", config.data.decode("utf-8") if show_secrets else redact_text(config.data.decode("utf-8"), known_secrets))
    label = "node %s" % node if node else "the endpoint"
    return {
        "before": sides[0],
        "after": sides[1],
        "before_header": "%s: active machine configuration" % label,
        "after_header": "%s: machine configuration to apply" % label,
    }


class ConfigApplier:
    """The apply flow for one task: dry run, decision, apply, reboot or wait."""

    def __init__(self, module, config, known_secrets):
        self.module = module
        self.client = module.client
        self.params = module.params
        self.config = config
        self.known_secrets = known_secrets
        self.maintenance = module.params["insecure"]

    def _call_apply(self, node, mode, dry_run):
        request = build_request(self.config.data, mode, self.params["try_timeout"], dry_run)
        return self.client.call(APPLY, request, node=node, retry_codes=APPLY_RETRY_CODES)[0]

    def _version(self, node):
        return parse_version(self.client.call(VERSION, node=node)[0].version.tag)

    def apply(self, node):
        """Apply the configuration to ``node``; returns ``(result, diff)``."""
        requested = self.params["mode"]
        version = self._version(node) if requested == "reboot" and not self.maintenance else None
        mode = request_mode(requested, self.maintenance, version)

        dry_run = self._call_apply(node, mode, dry_run=True)
        result = {
            "node": node,
            "changed": False,
            "mode": mode_name(dry_run.mode),
            "mode_details": redact_mode_details(dry_run.mode_details, self.known_secrets),
            "warnings": [],
            "rebooted": False,
        }
        # A node in maintenance mode has no configuration: applying is always a change.
        if not self.maintenance and dry_run_has_no_changes(dry_run.mode_details):
            return result, None
        result["changed"] = True
        diff = build_diff(node, dry_run.mode_details, self.config, self.known_secrets, self.params["show_secrets"])
        if self.module.check_mode:
            return result, diff

        # Talos reboots by itself in REBOOT mode: sent before v1.14, or chosen there by AUTO for some changes.
        rebooting = requested == "reboot" or dry_run.mode == machine_pb2.ApplyConfigurationRequest.REBOOT
        boot_id = read_boot_id(self.client, node) if rebooting and not self.maintenance else None

        applied = self._call_apply(node, mode, dry_run=False)
        result.update(mode=mode_name(applied.mode), mode_details=redact_mode_details(applied.mode_details, self.known_secrets),
                      warnings=[redact_text(warning, self.known_secrets) for warning in applied.warnings])

        if self.maintenance:
            # The node installs the configuration and restarts into it by itself.
            result["rebooted"] = True
            if self.params["wait"]:
                with self.client.with_settings(insecure=False) as secure_client:
                    wait_for_secure_api(secure_client, node, self.params["wait_timeout"])
        elif requested == "reboot" or applied.mode == machine_pb2.ApplyConfigurationRequest.REBOOT:
            if applied.mode != machine_pb2.ApplyConfigurationRequest.REBOOT:
                self.client.call(REBOOT, machine_pb2.RebootRequest(), node=node)
            result["rebooted"] = True
            if self.params["wait"]:
                wait_for_reboot(self.client, node, boot_id, self.params["wait_timeout"])
        return result, diff


def run(module):
    if module.params["config_patches"] and not HAS_JSONPATCH:
        module.fail_json(msg=missing_required_lib("jsonpatch"), exception=JSONPATCH_IMPORT_ERROR)

    # Masking every word of the patches would garble messages that name an operation or a path.
    module.mask_only("config_patches", patch_secret_values(module.params["config_patches"]))
    config = load_config(module.params["config"], module.params["config_file"], module.params["config_patches"])
    known_secrets = config.secret_values()
    if not module.params["show_secrets"]:
        # Messages and diffs hold no secret by construction; masking long literals is a second line of defence.
        module.no_log_values.update(maskable_literals(known_secrets))

    applier = ConfigApplier(module, config, known_secrets)
    nodes = module.target_nodes
    results, diffs = [], []
    for node in nodes:
        try:
            result, diff = applier.apply(node)
        except TalosError as error:
            if len(nodes) == 1:
                raise
            module.fail_from_error(error, changed=any(r["changed"] for r in results), results=results,
                                   rebooted=any(r["rebooted"] for r in results))
        results.append(result)
        if diff is not None:
            diffs.append(diff)
        for warning in result["warnings"]:
            module.warn("%s: %s" % ("Node %s" % node if node else "The endpoint", warning))

    output = {"changed": any(r["changed"] for r in results), "rebooted": any(r["rebooted"] for r in results)}
    if len(nodes) == 1:
        output.update((key, results[0][key]) for key in ("node", "mode", "mode_details"))
    else:
        output["results"] = results
    if module._diff and diffs:
        output["diff"] = diffs[0] if len(nodes) == 1 else diffs
    module.exit_json(**output)


def main():
    module = TalosModule(
        argument_spec=dict(
            config=dict(type="str", no_log=True),
            config_file=dict(type="path"),
            config_patches=dict(type="list", elements="raw", no_log=True),
            mode=dict(type="str", default="auto", choices=["auto", "no_reboot", "reboot", "staged", "try"]),
            try_timeout=dict(type="int", default=60),
            show_secrets=dict(type="bool", default=False),
        ),
        wait=True,
        ranges=dict(try_timeout=(1, None)),
        mutually_exclusive=[("config", "config_file")],
        required_one_of=[("config", "config_file")],
        supports_check_mode=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
