#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_client_config
short_description: Write a talosconfig with a client certificate issued from the cluster's secrets bundle
version_added: 1.0.0
description:
  - Writes a talosconfig file at O(dest) (mode C(0600)) whose context O(cluster_name) holds O(endpoints),
    O(nodes), the cluster's Talos OS CA and a new Ed25519 client certificate signed by that CA, with the Talos
    O(roles) as its Subject Organization values, as C(talosctl gen config) makes it. The key is written under
    Talos's C(ED25519 PRIVATE KEY) label.
  - The certificate of an existing context is kept while it is valid, signed by the bundle's CA, carries exactly
    O(roles) and does not expire within O(renew_before); the task then reports no change. Otherwise a new
    certificate is issued. A change of O(endpoints) or O(nodes) rewrites only those fields.
  - Other contexts of an existing file are kept; the file's current context becomes O(cluster_name).
  - The file works with every module of this collection (O(talos_linux.talos.talos_facts#module:talosconfig)) and
    with C(talosctl --talosconfig).
  - Runs on the controller and talks to no Talos node, so it takes none of the connection options and is not a
    member of the C(talos_linux.talos.talos) action group.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  dest:
    description: Path of the talosconfig to write. Its directory must exist.
    type: path
    required: true
  secrets:
    description: Path of the cluster's secrets bundle (see M(talos_linux.talos.talos_machine_secrets)).
    type: path
    required: true
  cluster_name:
    description: Name of the talosconfig context (C(talosctl) names it after the cluster).
    type: str
    required: true
  endpoints:
    description:
      - Talos API endpoints of the context, the control-plane nodes (or a load balancer in front of them).
      - Empty leaves the context without endpoints, as C(talosctl gen config) does; then every task must set
        O(talos_linux.talos.talos_facts#module:endpoints).
    type: list
    elements: str
    default: []
  nodes:
    description: Default target nodes of the context.
    type: list
    elements: str
    default: []
  roles:
    description:
      - Talos roles of the client certificate; several may be combined.
    type: list
    elements: str
    choices: [os:admin, os:operator, os:reader, os:etcd:backup]
    default: [os:admin]
  ttl:
    description:
      - Validity of a newly issued certificate, a duration as C(talosctl --crt-ttl) takes it (V(8760h) is one year) or
        in days (V(365d)).
      - Changing it does not replace a certificate that is still kept.
    type: str
    default: 8760h
  renew_before:
    description:
      - A kept certificate that expires within this duration (V(720h), V(30d)) is replaced. Must be shorter than O(ttl).
    type: str
    default: 720h
extends_documentation_fragment:
  - talos_linux.talos.attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written; the result says whether the file would change and whether a certificate would be issued.
  diff_mode:
    support: full
    details: The diff shows the talosconfig with the client key replaced by C(<redacted>).
  idempotent:
    support: full
    details: A still valid certificate with the same roles is kept, so a second run changes nothing.
notes:
  - The talosconfig grants the O(roles) on every node of the cluster. Keep it private; the module writes it with mode
    C(0600) and never returns the key.
requirements:
  - PyYAML
  - cryptography
seealso:
  - module: talos_linux.talos.talos_machine_secrets
  - module: talos_linux.talos.talos_machine_config
"""

EXAMPLES = r"""
- name: Write the admin talosconfig for the cluster
  talos_linux.talos.talos_client_config:
    dest: "{{ playbook_dir }}/talosconfig"
    secrets: "{{ playbook_dir }}/secrets.yaml"
    cluster_name: prod
    endpoints: "{{ groups['controlplane'] | map('extract', hostvars, 'ansible_host') | list }}"

- name: A read-only talosconfig for monitoring, valid for 30 days
  talos_linux.talos.talos_client_config:
    dest: /etc/monitoring/talosconfig
    secrets: "{{ playbook_dir }}/secrets.yaml"
    cluster_name: prod-reader
    endpoints: [10.5.0.2]
    roles: [os:reader]
    ttl: 720h
    renew_before: 168h
"""

RETURN = r"""
dest:
  description: Absolute path of the talosconfig.
  returned: always
  type: str
  sample: /home/ops/prod/talosconfig
context:
  description: The context written (O(cluster_name)).
  returned: always
  type: str
  sample: prod
endpoints:
  description: The context's endpoints.
  returned: always
  type: list
  elements: str
  sample: [10.5.0.2]
context_nodes:
  description: The context's nodes (O(nodes)), the default target nodes of a task that uses the context.
  returned: always
  type: list
  elements: str
  sample: []
issued:
  description: Whether a new client certificate was issued (or would be, in check mode).
  returned: always
  type: bool
  sample: false
certificate:
  description:
    - The context's client certificate (no key) - C(subject), C(roles), C(not_before), C(not_after) (UTC, ISO 8601),
      C(key_algorithm), C(fingerprint_sha256).
  returned: always
  type: dict
  sample:
    roles: [os:admin]
    not_after: "2027-03-01T12:00:00Z"
"""

import os

from ansible_collections.talos_linux.talos.plugins.module_utils.config import client_config
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import check_destination, update_private
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import read_talosconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        dest=dict(type="path", required=True),
        secrets=dict(type="path", required=True),
        cluster_name=dict(type="str", required=True),
        endpoints=dict(type="list", elements="str", default=[]),
        nodes=dict(type="list", elements="str", default=[]),
        roles=dict(type="list", elements="str", default=["os:admin"], choices=list(client_config.ROLES)),
        ttl=dict(type="str", default=client_config.DEFAULT_TTL),
        renew_before=dict(type="str", default=client_config.DEFAULT_RENEW_BEFORE),
    ),
    connection=False,
)


def run(task):
    params = task.params
    path = os.path.abspath(params["dest"])
    check_destination(path, "the talosconfig", "dest")
    bundle = SecretsBundle.load(os.path.abspath(params["secrets"]))
    existing = read_talosconfig(path) if os.path.isfile(path) else None
    text, issued, crt_b64 = client_config.render_talosconfig(
        bundle, params["cluster_name"], endpoints=params["endpoints"], nodes=params["nodes"], roles=params["roles"],
        ttl=params["ttl"], renew_before=params["renew_before"], existing=existing)
    result = {
        "changed": update_private(path, text, "the talosconfig", task.check_mode),
        "dest": path,
        "context": params["cluster_name"],
        "endpoints": list(params["endpoints"]),
        "context_nodes": list(params["nodes"]),
        "issued": issued,
        "certificate": client_config.certificate_facts(crt_b64),
    }
    if result["changed"]:
        result["diff"] = client_config.file_diff(existing, text, path)
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
