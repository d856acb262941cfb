#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_image
short_description: Pull and remove container images on Talos nodes
version_added: 1.0.0
description:
  - Pulls an image into a containerd namespace of the targeted nodes (O(state=present)) or removes it
    (O(state=absent)), like C(talosctl image pull) and C(talosctl image remove).
    M(talos_linux.talos.talos_image_info) lists the images of a namespace.
  - The V(system) namespace holds the images Talos itself runs, such as the installer an upgrade needs; the V(cri)
    namespace holds Kubernetes' images. Pulling an installer into the system namespace before a disruptive step lets
    a slow download happen while the node still runs.
  - O(installer_version) pulls the installer M(talos_linux.talos.talos_upgrade) would choose for that version on
    each node - from the node's Image Factory schematic (so that its system extensions survive), its platform and
    secure boot - so one task pre-pulls the right installer on nodes that differ. O(installer_image) pulls one
    installer everywhere, checked as M(talos_linux.talos.talos_upgrade) checks its O(talos_linux.talos.talos_upgrade#module:installer_image).
  - Image references are normalized as containerd stores them (V(nginx) is V(docker.io/library/nginx:latest)). An
    image that is already there is not pulled again, and one that is not there is not removed, so the task reports
    no change.
  - Uses C(ImageService) (Talos v1.13 and later); older nodes are served by the legacy C(MachineService)
    C(ImagePull) and C(ImageList), which cannot remove images.
  - With several O(nodes) the nodes are handled concurrently and the result is given per node; the task fails when
    any node fails.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  name:
    description:
      - The image reference, for example V(registry.k8s.io/pause:3.10) or V(ghcr.io/org/app@sha256:...).
      - Required with O(state=absent); with O(state=present) one of O(name), O(installer_version) and
        O(installer_image) is required.
    type: str
  installer_version:
    description:
      - Instead of O(name), the Talos version whose installer to pull on each node, chosen as
        M(talos_linux.talos.talos_upgrade) chooses it.
      - A Talos release the collection supports, as O(talos_linux.talos.talos_upgrade#module:version) takes it; anything
        else fails before anything is pulled.
    type: str
  installer_image:
    description:
      - Instead of O(name), an installer image whose tag is a Talos release the collection supports, as
        M(talos_linux.talos.talos_upgrade) takes it; a reference without such a tag fails before anything is pulled.
    type: str
  installer_repository:
    description:
      - With O(installer_version), the installer repository to tag with the version instead of the derived one.
    type: str
  image_factory_url:
    description:
      - With O(installer_version), the Image Factory whose installers to pull. By default the factory that built the
        node (its schematic says which), else V(https://factory.talos.dev).
    type: str
  namespace:
    description:
      - The containerd namespace. Defaults to V(system) for installers and to V(cri) otherwise, as
        C(talosctl image).
    type: str
    choices: [system, cri]
  state:
    description:
      - V(present) pulls the image where it is missing, V(absent) removes it where it is.
      - V(absent) removes the name and, when no other tag names the same image, its digest names
        (C(name@sha256:...) and C(sha256:...)) that containerd keeps beside it.
    type: str
    choices: [present, absent]
    default: present
  pull_timeout:
    description: Seconds a pull may take on one node (Talos's own pulls give up after 20 minutes).
    type: int
    default: 1200
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.several_nodes
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: Reads the images and reports what would be pulled or removed.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - Pulling needs the C(os:operator) role and removing C(os:admin).
  - A pull's progress is shown while it lasts when the task runs in the controller (the default); the module door
    shows it only at the end.
seealso:
  - module: talos_linux.talos.talos_image_info
  - module: talos_linux.talos.talos_upgrade
  - module: talos_linux.talos.talos_image_factory_info
  - name: Talos images
    description: The collection's guide to the Image Factory, installers and images on nodes.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/images.md
"""

EXAMPLES = r"""
- name: Pre-pull the pause image on every node
  talos_linux.talos.talos_image:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'ansible_host') | list }}"
    name: registry.k8s.io/pause:3.10
  run_once: true

- name: Pull the v1.14.1 installer each node will upgrade with, before the upgrade
  talos_linux.talos.talos_image:
    node: "{{ ansible_host }}"
    installer_version: v1.14.1

- name: Remove an image Kubernetes no longer needs
  talos_linux.talos.talos_image:
    node: "{{ ansible_host }}"
    name: ghcr.io/org/app:v1.0.0
    state: absent
"""

RETURN = r"""
nodes:
  description:
    - The outcome on each node, keyed by node, with the keys below.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.3:
      image: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1
      namespace: system
      changed: true
      pulled: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba@sha256:1f0d5b...
      api: image_service
      image_reason: the node has no Image Factory schematic ...
image:
  description: The image as containerd names it (a single node).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: registry.k8s.io/pause:3.10
pulled:
  description: The pulled image pinned to its digest, as the node named it; null when nothing was pulled.
  returned: with one node (O(node), the host's own node or the endpoint itself) and O(state=present)
  type: str
removed:
  description: The names removed (or, in check mode, that would be).
  returned: with one node (O(node), the host's own node or the endpoint itself) and O(state=absent)
  type: list
  elements: str
image_reason:
  description: With O(installer_version) or O(installer_image), why this installer was chosen for the node.
  returned: with one node (O(node), the host's own node or the endpoint itself) and O(installer_version) or O(installer_image) is set
  type: str
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.images import store as images
from ansible_collections.talos_linux.talos.plugins.module_utils.images import reference as image_reference
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import choose_installers, resolve_target
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        name=dict(type="str"),
        installer_version=dict(type="str"),
        installer_image=dict(type="str"),
        installer_repository=dict(type="str"),
        image_factory_url=dict(type="str"),
        namespace=dict(type="str", choices=["system", "cri"]),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        pull_timeout=dict(type="int", default=images.PULL_TIMEOUT),
    ),
    ranges=dict(pull_timeout=(1, None)),
    mutually_exclusive=[("name", "installer_version", "installer_image")],
    required_if=[("state", "absent", ("name",))],
    required_by=dict(installer_repository="installer_version", image_factory_url="installer_version"),
    several_nodes=True,
)


def run(task):
    params = task.params
    installer = params["installer_version"] or params["installer_image"]
    if params["state"] == "present" and not (params["name"] or installer):
        raise TalosConfigError("state=present needs name (the image to pull), installer_version or installer_image.")
    if installer and params["state"] != "present":
        raise TalosConfigError("installer_version and installer_image pull an installer: they go with state=present only.")
    if installer:
        # The target as talos_upgrade checks it, before anything is pulled.
        image, target = resolve_target(params["installer_image"], params["installer_version"],
                                       image_option="installer_image", version_option="installer_version")
    nodes = task.target_nodes
    namespace = params["namespace"] or ("system" if installer else "cri")
    store = images.NodeImages(task.client, namespace, params["max_concurrency"], progress=task.progress)

    choices, failures = {}, {}
    if params["state"] == "absent":
        outcomes = store.ensure_absent(params["name"], nodes, check_mode=task.check_mode)
    else:
        if installer:
            choices = choose_installers(task.client, nodes, target, image=image, repository=params["installer_repository"],
                                        factory_url=params["image_factory_url"], max_concurrency=params["max_concurrency"])
            failures = dict((node, choice) for node, choice in choices.items() if isinstance(choice, TalosError))
            wanted = dict((node, choice.image) for node, choice in choices.items() if node not in failures)
        else:
            image_reference.parse_reference(params["name"])
            wanted = dict((node, params["name"]) for node in nodes)
        outcomes = store.ensure_present(wanted, check_mode=task.check_mode, timeout=params["pull_timeout"]) if wanted else {}
        outcomes.update(failures)

    for node, choice in choices.items():
        if not isinstance(outcomes[node], TalosError):
            outcomes[node]["image_reason"] = choice.reason
    return several_nodes.result(outcomes, nodes, task.settings)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
