#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_machine_config
short_description: Render a Talos machine configuration from the cluster's secrets bundle
version_added: 1.0.0
description:
  - Renders the machine configuration of a control plane or a worker from the secrets bundle O(secrets), as
    C(talosctl gen config --with-secrets) does, for the version contract O(talos_version), then applies
    O(config_patches), and writes it to O(dest) (mode C(0600)) or returns it.
  - The same inputs always give byte-identical output (no timestamps, key order of Talos's own encoder), so the file
    is rewritten only when its content would change and a second run reports no change.
  - Contracts V(v1.9) to V(v1.11) give one v1alpha1 document; V(v1.12) and V(v1.13) add a C(HostnameConfig)
    document; V(v1.14) gives the multi-document layout of Talos 1.14 (Kubernetes settings in C(Kube*) documents,
    C(UnattendedInstallConfig), C(DiscoveryIdentityConfig), ...).
  - The installer image and the install disk go in the v1alpha1 C(.machine.install) section or, from V(v1.14), in
    the C(UnattendedInstallConfig) document, as O(install_home) chooses.
  - A worker configuration carries no CA private key; a control-plane configuration carries the CA keys, the
    service-account key and the encryption secret a control plane needs.
  - Runs on the controller and talks to no Talos node, so it takes none of the connection options and is not a
    member of the C(talos_linux.talos.talos) action group.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  secrets:
    description: Path of the cluster's secrets bundle (see M(talos_linux.talos.talos_machine_secrets)).
    type: path
    required: true
  machine_type:
    description: The kind of node the configuration is for.
    type: str
    choices: [controlplane, worker]
    required: true
  cluster_name:
    description: Name of the cluster.
    type: str
    required: true
  cluster_endpoint:
    description:
      - URL of the Kubernetes API, C(https://host[:port]), usually a load balancer or a shared address of the control
        planes on port 6443. Checked as C(talosctl gen config) checks it (https scheme, a host, IPv6 in brackets,
        a valid port).
    type: str
    required: true
  talos_version:
    description:
      - The version contract, the oldest Talos version the nodes run, such as V(v1.13) or V(v1.14.1). It chooses the
        document layout and must not be newer than the nodes, which refuse fields they do not know.
      - A version with a patch level (V(v1.14.1)) is also the default tag of O(install_image); V(v1.13) means V(v1.13.0).
      - O(config_patches) that add a document kind or field this Talos version does not know (a C(KubeletConfig)
        document on V(v1.13), C(OOMConfig) C(strictCgroupClassOrdering) before V(v1.13.4)) fail the task before
        anything is written, naming the document and the release that introduced it; RV(valid_for) says which
        releases the configuration is valid for.
    type: str
    default: v1.14.1
  kubernetes_version:
    description:
      - Kubernetes version of the control-plane and kubelet images, with or without the leading C(v).
      - Defaults to what that Talos version ships with (V(1.37.0) for v1.14, V(1.36.3) for v1.13, V(1.35.4) for v1.12,
        V(1.34.1) for v1.11, V(1.33.6) for v1.10, V(1.32.4) for v1.9).
    type: str
  install_disk:
    description:
      - Disk Talos installs to. Set to an empty string to leave the install disk out (a config for nodes installed
        otherwise).
      - In C(.machine.install) it is C(disk); in the C(UnattendedInstallConfig) document it becomes the disk selector
        C(provisioning.diskSelector.match) (C(disk.dev_path == "/dev/sda")). That document needs a disk selector, so
        with O(install_disk) empty and O(install_home=unattended) no such document, and no installer image, is written.
      - To select the disk otherwise, patch the home in use with O(config_patches) (C(machine.install.diskSelector),
        or the C(UnattendedInstallConfig) document's C(provisioning.diskSelector.match), a CEL expression).
    type: str
    default: /dev/sda
  install_home:
    description:
      - Where the configuration puts the installer image (O(install_image)) and the install disk (O(install_disk)).
      - V(machine) is the v1alpha1 C(.machine.install) section (C(image), C(disk)), which every supported Talos
        version reads; Talos v1.14 deprecates it but still installs from it.
      - V(unattended) is the C(UnattendedInstallConfig) document of Talos v1.14 (C(installer.image) and
        C(provisioning.diskSelector)); it needs O(talos_version) V(v1.14) or later, older contracts refuse it.
      - Defaults to where C(talosctl gen config) of that release puts them, V(unattended) for V(v1.14) and
        V(machine) before. Talos refuses a configuration with both, so a O(config_patches) entry that adds the other
        home fails the task.
    type: str
    choices: [machine, unattended]
  install_image:
    description:
      - Installer image. Defaults to C(ghcr.io/siderolabs/installer:<talos_version>) for contracts up to v1.13 and to the
        Image Factory's C(factory.talos.dev/metal-installer/<empty schematic>:<talos_version>) for v1.14, as talosctl.
    type: str
  additional_sans:
    description: Extra names and addresses for the Talos API and Kubernetes API server certificates.
    type: list
    elements: str
    default: []
  config_patches:
    description:
      - Patches applied in order after rendering, with the same forms and code as
        O(talos_linux.talos.talos_apply_config#module:config_patches) - a mapping (strategic merge patch; a JSON merge
        patch of the v1alpha1 document, or of the document whose C(kind) and C(name) it names), a list of RFC 6902
        operations on the v1alpha1 document, or YAML text of either.
      - For per-node settings such as the hostname on contracts v1.12 and later, patch the C(HostnameConfig)
        document (see the examples) - C(auto) set to null removes the generated C(auto=stable).
      - A list of RFC 6902 operations only applies to the single-document configurations of contracts V(v1.9) to
        V(v1.11). From V(v1.12) on the configuration has other documents, and such a patch fails the task before
        anything is written, as C(talosctl) refuses it; use a mapping there.
    type: list
    elements: raw
    default: []
  with_docs:
    description:
      - Write a YAML comment above each generated document and field saying what it is for, as
        C(talosctl gen config --with-docs) does (the wording is the collection's own).
      - Comments never change what the configuration parses to and never hold a secret; nodes ignore them.
      - Fields added by O(config_patches) are not described.
    type: bool
    default: false
  with_examples:
    description:
      - Write commented examples of settings users often add (static addresses and routes, extra kernel arguments,
        kernel parameters, registry mirrors, KubeSpan, another CNI), in the form the chosen O(talos_version) expects,
        as C(talosctl gen config --with-examples) does.
    type: bool
    default: false
  dest:
    description:
      - Where to write the configuration on the controller. Its directory must exist.
      - When not set the configuration is returned in RV(config).
    type: path
extends_documentation_fragment:
  - talos_linux.talos.attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written; the result says whether the file would change.
  diff_mode:
    support: full
    details: The diff shows the configuration with every key, token and secret replaced by C(<redacted>).
  idempotent:
    support: full
    details: Output is byte-deterministic, so a second run changes nothing.
notes:
  - Without O(dest), RV(config) holds the cluster's keys (a control-plane configuration holds every CA key). Set
    C(no_log=true) on such tasks.
  - C(talosctl gen config) writes documentation comments and examples by default; this module writes them only with
    O(with_docs) and O(with_examples), so by default the file holds the configuration alone.
requirements:
  - PyYAML
  - cryptography
  - jsonpatch (only for RFC 6902 patches)
seealso:
  - module: talos_linux.talos.talos_machine_secrets
  - module: talos_linux.talos.talos_client_config
  - module: talos_linux.talos.talos_apply_config
"""

EXAMPLES = r"""
- name: Render the control-plane and worker configs of the cluster
  talos_linux.talos.talos_machine_config:
    secrets: "{{ playbook_dir }}/secrets.yaml"
    machine_type: "{{ item }}"
    cluster_name: prod
    cluster_endpoint: https://k8s.example.com:6443
    talos_version: v1.13.4
    dest: "{{ playbook_dir }}/{{ item }}.yaml"
  loop: [controlplane, worker]

- name: Render one node's config with its hostname and hand it to the next task
  talos_linux.talos.talos_machine_config:
    secrets: "{{ playbook_dir }}/secrets.yaml"
    machine_type: worker
    cluster_name: prod
    cluster_endpoint: https://k8s.example.com:6443
    config_patches:
      - apiVersion: v1alpha1
        kind: HostnameConfig
        auto: null
        hostname: "{{ inventory_hostname }}"
  register: rendered
  no_log: true

- name: Render a commented worker config to read and edit by hand
  talos_linux.talos.talos_machine_config:
    secrets: "{{ playbook_dir }}/secrets.yaml"
    machine_type: worker
    cluster_name: prod
    cluster_endpoint: https://k8s.example.com:6443
    with_docs: true
    with_examples: true
    dest: "{{ playbook_dir }}/worker.yaml"

- name: Render a v1.14 worker config that keeps the installer in .machine.install
  talos_linux.talos.talos_machine_config:
    secrets: "{{ playbook_dir }}/secrets.yaml"
    machine_type: worker
    cluster_name: prod
    cluster_endpoint: https://k8s.example.com:6443
    talos_version: v1.14.1
    install_home: machine
    install_disk: /dev/nvme0n1
    dest: "{{ playbook_dir }}/worker.yaml"
"""

RETURN = r"""
dest:
  description: Absolute path of the written configuration.
  returned: when O(dest) is set
  type: str
  sample: /home/ops/prod/controlplane.yaml
config:
  description:
    - The machine configuration (YAML text). It holds the cluster's secrets; use C(no_log) on the task.
    - Secret values that come from O(config_patches) (a registry password, say) are masked as C(********) here,
      because Ansible masks them in every returned value; set O(dest) to get a usable file for such configs.
  returned: when O(dest) is not set
  type: str
talos_version:
  description: The version contract the configuration follows.
  returned: always
  type: str
  sample: v1.14
kubernetes_version:
  description: The Kubernetes version of the images.
  returned: always
  type: str
  sample: 1.37.0
documents:
  description: The configuration's documents, C(v1alpha1) then C(kind) (with C(/name) for named ones).
  returned: always
  type: list
  elements: str
  sample: [v1alpha1, HostnameConfig]
sha256:
  description: SHA-256 of the configuration text, to compare renderings without reading them.
  returned: always
  type: str
valid_for:
  description:
    - The Talos releases the configuration is valid for, as far as its document kinds and fields go - what a node
      decodes before it validates the values. Upstream's document registry and the fields each release added are the
      facts.
    - A configuration that holds a document or field that Talos O(talos_version) does not know is refused before
      anything is written, with one sentence naming the document, the release that introduced it and
      O(talos_version).
  returned: always
  type: dict
  contains:
    min:
      description: The oldest supported Talos release that takes the configuration.
      type: str
      sample: v1.12.0
    releases:
      description:
        - Per supported minor release, the first patch release that takes the configuration. A minor release none of
          whose patches takes it is left out; a patch gate can leave out early patches of one minor release and not of
          the next (C(OOMConfig) C(strictCgroupClassOrdering) came with v1.12.9 and v1.13.4).
      type: dict
      sample: {v1.12: v1.12.0, v1.13: v1.13.0, v1.14: v1.14.0}
  sample: {min: v1.12.0, releases: {v1.12: v1.12.0, v1.13: v1.13.0, v1.14: v1.14.0}}
"""

import hashlib
import os

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents as config_documents
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import INSTALL_HOMES, contract_name
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import check_destination, read_text, update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import config_summary, file_diff, patch_secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        secrets=dict(type="path", required=True),
        machine_type=dict(type="str", choices=list(config_generation.MACHINE_TYPES), required=True),
        cluster_name=dict(type="str", required=True),
        cluster_endpoint=dict(type="str", required=True),
        talos_version=dict(type="str", default="v1.14.1"),
        kubernetes_version=dict(type="str"),
        install_disk=dict(type="str", default=config_generation.DEFAULT_INSTALL_DISK),
        install_image=dict(type="str"),
        install_home=dict(type="str", choices=list(INSTALL_HOMES)),
        additional_sans=dict(type="list", elements="str", default=[]),
        config_patches=dict(type="list", elements="raw", default=[], no_log=True),
        with_docs=dict(type="bool", default=False),
        with_examples=dict(type="bool", default=False),
        dest=dict(type="path"),
    ),
    connection=False,
    may_be_empty=("install_disk",),
)


def run(task):
    params = task.params
    task.mask_only("config_patches", patch_secret_values(params["config_patches"]))
    dest = os.path.abspath(params["dest"]) if params["dest"] else None
    if dest:
        check_destination(dest, "the machine config", "dest")
    bundle = SecretsBundle.load(os.path.abspath(params["secrets"]))
    gen = config_generation.GenerationInput(
        bundle, params["machine_type"], params["cluster_name"], params["cluster_endpoint"],
        talos_version=params["talos_version"], kubernetes_version=params["kubernetes_version"],
        install_disk=params["install_disk"], install_image=params["install_image"],
        install_home=params["install_home"], additional_sans=params["additional_sans"])
    if bundle.aescbc_secret and gen.contract >= (1, 14):
        task.warn("The secrets bundle holds an aescbc encryption secret (made by talosctl before v1.3); the v1.14 "
                  "contract moves it into KubeEtcdEncryptionConfig, so prefer talos_version v1.13 for this cluster.")
    text = config_generation.render(gen, params["config_patches"], with_docs=params["with_docs"],
                                    with_examples=params["with_examples"])
    result = {
        "changed": False,
        "talos_version": contract_name(gen.contract),
        "kubernetes_version": gen.kubernetes_version,
        "documents": config_summary(text)["documents"],
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "valid_for": config_documents.valid_for(go_yaml.load_all(text)),
    }
    if not dest:
        result["config"] = text
        return result

    current = read_text(dest)
    result.update(dest=dest, changed=update_private(dest, text, "the machine config", task.check_mode, keep=current == text))
    if result["changed"]:
        secrets = bundle.secret_values() | patch_secret_values(params["config_patches"])
        result["diff"] = file_diff(current, text, secrets, dest)
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
