#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_certificate_info
short_description: Report what expires when - the Talos and Kubernetes CAs and the certificates of nodes and client files
version_added: 1.0.0
description:
  - Reads, for every targeted node, the Talos API CA the node issues from and the ones it accepts (C(machine.ca),
    C(machine.acceptedCAs)), its Kubernetes CAs (C(cluster.ca) and C(cluster.acceptedCAs), or the
    C(KubeAPIServerCAConfig) document of the v1.14 config form), all from its active machine config, and the
    serving certificate of its Talos API (apid) as a TLS handshake with the node shows it.
  - Reads, on the controller, the talosconfig context the task connects with (its CA and client certificate), the
    secrets bundle O(secrets) (the Talos, Kubernetes, etcd and aggregator CAs) and the admin kubeconfig
    O(kubeconfig) (its CAs, its client certificate and the serving certificate of the Kubernetes API server it
    names).
  - Every certificate is reported with its subject, issuer, C(not_before), C(not_after), C(days_left), key algorithm
    and SHA-256 fingerprint. No key is read from a node or returned.
  - A certificate that expires within O(warn_before) is listed in RV(expiring) and gives a warning.
  - With O(node) (or the host's own node, or the endpoint itself) the node's certificates are at the top of the
    result; with O(nodes) (or the talosconfig context's nodes) the nodes are read concurrently, at most
    O(max_concurrency) at a time, and each node's certificates are in RV(nodes), keyed by node.
  - A node that cannot be read (it does not answer, its config cannot be parsed) fails the task, once every node is
    read; its entry in RV(nodes) has C(failed) and C(msg), and the others, RV(files) and RV(expiring) are still
    returned.
  - Read-only; never changes a node or a file.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
options:
  secrets:
    description:
      - Path of the cluster's secrets bundle (see M(talos_linux.talos.talos_machine_secrets)) whose CAs to report.
      - Only the certificates are reported; the bundle's keys and tokens stay out of the result.
    type: path
  kubeconfig:
    description:
      - Path of the admin kubeconfig (see M(talos_linux.talos.talos_kubeconfig)) whose certificates to report.
      - The Kubernetes API server it names is reached for a TLS handshake to read its serving certificate; one that
        cannot be reached gets C(server_error) instead.
    type: path
  warn_before:
    description:
      - A certificate that expires within this duration (or has expired) is listed in RV(expiring) and gives a
        warning.
      - A duration as talosctl takes one (V(720h), V(1h30m)) or in days (V(30d)).
    type: str
    default: 720h
  api_port:
    description:
      - Port of the Talos API on the nodes, for the TLS handshake that reads apid's serving certificate.
      - Defaults to the port of the first endpoint (Talos's 50000 unless the endpoints say otherwise).
    type: int
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Reading a node's CAs needs the C(os:admin) role (the machine config is sensitive). With a weaker role each node
    entry has C(config_error) and only apid's serving certificate is reported.
  - The client certificate of a talosconfig is renewed by M(talos_linux.talos.talos_client_config)
    (O(talos_linux.talos.talos_client_config#module:renew_before)), that of the admin kubeconfig by
    M(talos_linux.talos.talos_kubeconfig). The Talos API CA is replaced by M(talos_linux.talos.talos_rotate_ca).
seealso:
  - module: talos_linux.talos.talos_client_config
  - module: talos_linux.talos.talos_kubeconfig
  - module: talos_linux.talos.talos_rotate_ca
  - name: Certificates and CA rotation
    description: When to rotate which certificate, and how to watch expiry from AWX.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/security.md
"""

EXAMPLES = r"""
- name: Report every certificate of the cluster and warn 60 days ahead
  talos_linux.talos.talos_certificate_info:
    nodes: "{{ (groups['controlplane'] + groups['workers']) | map('extract', hostvars, 'ansible_host') | list }}"
    secrets: "{{ playbook_dir }}/secrets.yaml"
    kubeconfig: "{{ playbook_dir }}/kubeconfig"
    warn_before: 60d
  register: certificates

- name: Fail when a certificate expires within 60 days
  ansible.builtin.assert:
    that: certificates.expiring | length == 0
    fail_msg: "{{ certificates.expiring | map(attribute='name') | join(', ') }} expire soon"
"""

RETURN = r"""
config_form:
  description: V(v1alpha1), or V(documents) when the Kubernetes CAs live in a C(KubeAPIServerCAConfig) document.
  returned: with O(node), the host's own node or the endpoint itself
  type: str
talos_ca:
  description: The Talos API CA the node's config names (C(machine.ca)); null when it names none.
  returned: with O(node), the host's own node or the endpoint itself
  type: dict
talos_accepted_cas:
  description: The further Talos API CAs the node accepts client certificates from (C(machine.acceptedCAs)).
  returned: with O(node), the host's own node or the endpoint itself
  type: list
  elements: dict
kubernetes_ca:
  description: The Kubernetes CA the node's config names; null when it names none.
  returned: with O(node), the host's own node or the endpoint itself
  type: dict
kubernetes_accepted_cas:
  description: The further Kubernetes CAs the node's config accepts.
  returned: with O(node), the host's own node or the endpoint itself
  type: list
  elements: dict
apid:
  description:
    - The serving certificate of the node's Talos API, with C(trusted) telling whether the CA of the talosconfig
      in use signed it; null when no TLS handshake completed.
  returned: with O(node), the host's own node or the endpoint itself
  type: dict
config_error:
  description: Why the node's CAs could not be read (a weaker role than C(os:admin)); absent otherwise.
  returned: with O(node), the host's own node or the endpoint itself
  type: str
apid_error:
  description: Why no TLS handshake with the node's Talos API completed (see O(api_port)); absent otherwise.
  returned: with O(node), the host's own node or the endpoint itself
  type: str
nodes:
  description:
    - The certificates of each node (the keys above), keyed by node.
    - Each certificate is a dict of C(subject), C(issuer) (RFC 4514), C(not_before), C(not_after) (UTC, ISO 8601),
      C(days_left) (whole days, negative once expired), C(key_algorithm) and C(fingerprint_sha256).
    - A node that could not be read has C(failed=true), C(msg), C(code) and C(node) instead, and fails the task.
    - With O(nodes), even of one node, nothing of a node is at the top of the result; the shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.2:
      config_form: v1alpha1
      talos_ca: {subject: O=talos, issuer: O=talos, not_before: "2026-01-01T00:00:00Z",
                 not_after: "2035-12-30T00:00:00Z", days_left: 3320, key_algorithm: ed25519,
                 fingerprint_sha256: "3a:..."}
      talos_accepted_cas: []
      kubernetes_ca: {subject: O=kubernetes, days_left: 3320}
      kubernetes_accepted_cas: []
      apid: {subject: CN=cp-1, issuer: O=talos, days_left: 364, trusted: true}
    10.5.0.3: {node: 10.5.0.3, failed: true, code: Unavailable, msg: "Talos endpoint 10.5.0.2:50000 is unreachable ..."}
files:
  description: The certificates of the controller's files.
  returned: always
  type: dict
  contains:
    talosconfig:
      description:
        - The talosconfig context the task connects with - C(path) (null when the connection options gave the
          credentials), C(context), C(cas) (the CAs it trusts) and C(client) (its client certificate, with C(roles)
          and C(trusted), whether one of C(cas) signed it); null with O(talos_linux.talos.talos_certificate_info#module:insecure).
      type: dict
    secrets:
      description: The secrets bundle - C(path), C(talos_ca), C(kubernetes_ca), C(etcd_ca), C(aggregator_ca); null without O(secrets).
      type: dict
    kubeconfig:
      description:
        - The admin kubeconfig - C(path); C(clusters), each with C(name), C(server), C(cas), C(server_certificate)
          (with C(trusted)) or C(server_error); C(users), each with C(name) and C(client). Null without O(kubeconfig).
      type: dict
expiring:
  description: Every certificate that expires within O(warn_before), soonest first.
  returned: always
  type: list
  elements: dict
  contains:
    where:
      description: The node (C(node 10.5.0.2)) or file (C(talosconfig /path)) that holds it.
      type: str
    name:
      description: Its place in the node's certificates or in RV(files), such as C(apid) or C(client).
      type: str
    subject:
      description: Its subject.
      type: str
    not_after:
      description: When it expires (UTC, ISO 8601).
      type: str
    days_left:
      description: Whole days left, negative once expired.
      type: int
  sample:
    - {where: talosconfig /home/ops/prod/talosconfig, name: client, subject: O=os:admin, not_after: "2026-12-01T00:00:00Z",
       days_left: 12}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.certificates import expiry as certificates
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        secrets=dict(type="path"),
        kubeconfig=dict(type="path"),
        warn_before=dict(type="str", default=certificates.DEFAULT_WARN_BEFORE),
        api_port=dict(type="int"),
    ),
    ranges=dict(api_port=(1, 65535)),
    several_nodes=True,
)


def run(task):
    params = task.params
    return certificates.read_certificates(task.client, task.target_nodes, secrets=params["secrets"], kubeconfig=params["kubeconfig"],
                                          warn_before=params["warn_before"], api_port=params["api_port"],
                                          max_concurrency=params["max_concurrency"], warn=task.warn)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
