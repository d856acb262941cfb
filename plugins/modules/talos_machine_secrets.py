#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_machine_secrets
short_description: Create the secrets bundle of a Talos cluster on the controller
version_added: 1.0.0
description:
  - Creates the cluster's secrets bundle at O(path), in the layout C(talosctl gen secrets) writes
    (C(secrets.yaml)) - the etcd, Kubernetes, aggregator and Talos OS CAs with their keys, the service-account key,
    the bootstrap and machine tokens, the cluster id and secret and the secretbox encryption secret.
    A bundle written by C(talosctl) can be used here, and this one by C(talosctl --with-secrets).
  - An existing bundle is loaded and validated, never regenerated; the task then reports no change. A damaged or
    incomplete bundle fails the task with what is wrong, and is left as it is.
  - With O(from_controlplane_config), a new bundle is built from an existing cluster's control-plane machine config,
    as C(talosctl gen secrets --from-controlplane-config) does, so that the collection can adopt that cluster.
  - Runs on the controller and talks to no Talos node, so it takes none of the connection options and is not a
    member of the C(talos_linux.talos.talos) action group.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  path:
    description:
      - Path of the secrets bundle on the controller. Its directory must exist.
    type: path
    required: true
  talos_version:
    description:
      - Version contract of the bundle, the oldest Talos version the cluster runs, such as V(v1.13) or V(v1.14.1).
      - Versions V(v1.9) to V(v1.14) are supported. Every one of them gets a secretbox encryption secret and an
        RSA-4096 service-account key, as C(talosctl gen secrets) makes them.
      - Has no effect on an existing bundle.
    type: str
    default: v1.14
  state:
    description:
      - V(present) creates the bundle when there is none and validates an existing one.
      - V(absent) removes the file. The cluster's CA keys are lost unless a copy exists elsewhere.
    type: str
    choices: [present, absent]
    default: present
  from_controlplane_config:
    description:
      - Path of a control-plane machine config of an existing cluster (either layout, v1alpha1 fields or the v1.14
        documents). Its CAs, keys, tokens, cluster id and secret and encryption secret go into the new bundle; what the
        config does not carry is generated.
      - Used only when O(path) does not exist yet.
    type: path
  mode:
    description:
      - Permissions of the bundle file, as an octal string. An existing file with other permissions is corrected.
    type: str
    default: "0600"
extends_documentation_fragment:
  - talos_linux.talos.attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written or removed; the result says what would be done.
  diff_mode:
    support: partial
    details: The diff says whether the file comes or goes, never its contents.
  idempotent:
    support: full
    details: An existing bundle is never regenerated.
notes:
  - The bundle holds every key of the cluster. Keep it encrypted at rest, for example with Ansible Vault
    (C(ansible-vault encrypt secrets.yaml)) once it is created; see the provisioning guide in C(docs/provisioning.md).
  - All nodes of a cluster use the same bundle; a second bundle means a second cluster.
requirements:
  - PyYAML
  - cryptography
seealso:
  - module: talos_linux.talos.talos_machine_config
  - module: talos_linux.talos.talos_client_config
"""

EXAMPLES = r"""
- name: Create the cluster's secrets bundle once
  talos_linux.talos.talos_machine_secrets:
    path: "{{ playbook_dir }}/secrets.yaml"
    talos_version: v1.13

- name: Adopt a running cluster from one of its control-plane configs
  talos_linux.talos.talos_machine_secrets:
    path: "{{ playbook_dir }}/secrets.yaml"
    from_controlplane_config: ./controlplane.yaml
"""

RETURN = r"""
path:
  description: Absolute path of the secrets bundle.
  returned: always
  type: str
  sample: /home/ops/prod/secrets.yaml
talos_version:
  description: The version contract the bundle was checked against (or made for).
  returned: always
  type: str
  sample: v1.14
certificates:
  description:
    - Facts of the bundle's CA certificates, by bundle name (C(etcd), C(k8s), C(k8saggregator), C(os)); no keys.
    - Each has C(subject), C(not_before), C(not_after) (UTC, ISO 8601), C(key_algorithm) and C(fingerprint_sha256).
  returned: when O(state=present) and the bundle exists (or would in check mode when built from a config)
  type: dict
  sample:
    os:
      subject: O=talos
      not_before: "2026-01-01T00:00:00Z"
      not_after: "2035-12-30T00:00:00Z"
      key_algorithm: ed25519
      fingerprint_sha256: "3f:1c:..."
service_account_key_algorithm:
  description: Algorithm of the Kubernetes service-account key (C(rsa) or C(ecdsa)).
  returned: when the bundle exists
  type: str
  sample: rsa
encryption:
  description: Which encryption secret the bundle holds, C(secretbox) or the older C(aescbc).
  returned: when the bundle exists
  type: str
  sample: secretbox
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import contract_name, parse_contract
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import (
    destination_problem, ensure_mode, read_text_file, write_private,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

BUNDLE = "the secrets bundle"

SPEC = TaskSpec(
    argument_spec=dict(
        path=dict(type="path", required=True),
        talos_version=dict(type="str", default="v1.14"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        from_controlplane_config=dict(type="path"),
        mode=dict(type="str", default="0600"),
    ),
    connection=False,
)


def parse_mode(value):
    try:
        mode = int(str(value), 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise TalosConfigError("mode must be an octal permission string such as 0600, got %r." % value)
    return mode


def new_bundle(params, contract):
    source = params["from_controlplane_config"]
    if not source:
        return SecretsBundle.generate(contract_name(contract))
    text = read_text_file(source, "from_controlplane_config")
    return SecretsBundle.from_controlplane_config(text, source, contract_name(contract))


def run(task):
    params = task.params
    path = os.path.abspath(params["path"])
    contract = parse_contract(params["talos_version"])
    mode = parse_mode(params["mode"])
    result = {"changed": False, "path": path, "talos_version": contract_name(contract)}
    exists = os.path.exists(path)

    if params["state"] == "absent":
        if exists:
            result["changed"] = True
            result["diff"] = {"before": "secrets bundle present\n", "after": "", "before_header": path, "after_header": path}
            if not task.check_mode:
                os.unlink(path)
        return result

    problem = destination_problem(path, BUNDLE, "path")
    # In check mode the directory may be one an earlier task would have created.
    if problem and (os.path.isdir(path) or not task.check_mode):
        raise TalosConfigError(problem)
    if exists:
        bundle = SecretsBundle.load(path)
        result["changed"] = ensure_mode(path, BUNDLE, task.check_mode, mode)
    else:
        bundle = new_bundle(params, contract)
        result["changed"] = True
        result["diff"] = {"before": "", "after": "secrets bundle created (contents not shown)\n",
                          "before_header": path, "after_header": path}
        if not task.check_mode:
            write_private(path, bundle.to_yaml(), BUNDLE, mode)
    result.update(bundle.facts())
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
