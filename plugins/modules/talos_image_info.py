#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_image_info
short_description: List the container images on Talos nodes
version_added: 1.0.0
description:
  - Lists the images of a containerd namespace on the targeted nodes, like C(talosctl image list).
  - The V(system) namespace holds the images Talos itself runs, such as the installer an upgrade needs; the V(cri)
    namespace holds Kubernetes' images.
  - Uses C(ImageService) (Talos v1.13 and later); older nodes are served by the legacy C(MachineService)
    C(ImageList).
  - With several O(nodes) the nodes are read concurrently and the result is given per node; the task fails when
    any node fails.
  - Read-only; never changes a node. M(talos_linux.talos.talos_image) pulls and removes images.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  namespace:
    description:
      - The containerd namespace.
    type: str
    choices: [system, cri]
    default: cri
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
  - talos_linux.talos.attributes.read_only
notes:
  - Needs the C(os:reader) role or more.
seealso:
  - module: talos_linux.talos.talos_image
  - name: Talos images
    description: The collection's guide to the Image Factory, installers and images on nodes.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/images.md
"""

EXAMPLES = r"""
- name: What is in the system namespace?
  talos_linux.talos.talos_image_info:
    node: "{{ ansible_host }}"
    namespace: system
  register: system_images

- name: Is the pause image on every node?
  talos_linux.talos.talos_image_info:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'ansible_host') | list }}"
  register: cri_images
  run_once: true
"""

RETURN = r"""
nodes:
  description:
    - The images on each node (RV(namespace) and RV(images)), keyed by node.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.3:
      namespace: cri
      images:
        - name: registry.k8s.io/pause:3.10
          digest: sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a
          size: 320368
          created_at: "2026-05-01T10:00:00Z"
          labels: {io.cri-containerd.image: managed}
namespace:
  description: The containerd namespace listed (a single node).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: cri
images:
  description: The images of the namespace (name, digest, size in bytes, created_at, labels) (a single node).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: dict
  sample:
    - name: registry.k8s.io/pause:3.10
      digest: sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a
      size: 320368
      created_at: "2026-05-01T10:00:00Z"
      labels: {io.cri-containerd.image: managed}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.images import store as images
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        namespace=dict(type="str", default="cri", choices=["system", "cri"]),
    ),
    several_nodes=True,
)


def run(task):
    namespace = task.params["namespace"]
    store = images.NodeImages(task.client, namespace, task.params["max_concurrency"])
    outcomes = dict((node, listed if isinstance(listed, TalosError) else {"namespace": namespace, "images": listed})
                    for node, listed in store.list(task.target_nodes).items())
    return several_nodes.result(outcomes, task.target_nodes, task.settings)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
