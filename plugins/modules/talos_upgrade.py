#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_upgrade
short_description: Upgrade Talos Linux on nodes
version_added: 1.0.0
description:
  - Upgrades the Talos Linux installation of a node, or of several O(nodes) concurrently, to a target version and,
    by default, waits until each node has rebooted into it.
  - On Talos v1.13 and newer the installer image is pulled with C(ImageService.Pull) into the system
    containerd namespace, installed with C(LifecycleService.Upgrade) (whose output is returned in RV(progress)),
    and the node is rebooted. The installer has O(wait_timeout) seconds to finish (1200 without O(wait)), not the
    connection's O(timeout), since it writes the new boot assets for minutes on a real node. Older nodes answer
    C(Unimplemented) to that API; the module then uses the legacy C(MachineService.Upgrade), which installs and
    reboots on the node's own.
  - A node that already runs the target version is not upgraded; only an installer reference in its machine config
    that names another version is updated (see the notes), and RV(upgraded) says so.
  - On a control-plane node the module first runs the etcd quorum guard and refuses to start when etcd would lose
    its quorum while the node reboots - when fewer of the other voting members are healthy (their node answers
    C(EtcdStatus) without etcd errors of its own, and no active alarm such as C(NOSPACE) names them) than quorum
    needs, which includes every one- or two-member cluster. O(quorum_wait_timeout) waits for the guard to let the node go;
    O(force_quorum_loss=true) upgrades anyway.
  - With several O(nodes), each node is upgraded on its own (guard, installer, reboot, wait), at most
    O(max_concurrency) at a time; control planes go one at a time, each once the one before is back (without
    O(wait), the task refuses to take a second control plane down). The result
    has each node's outcome in RV(nodes) and reports a change only when some node changed; a failed node fails the
    task once the others are done.
  - The P(talos_linux.talos.upgrade#role) role rolls an upgrade through a cluster.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
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
    details: Reads the version and the etcd state and reports whether the node would be upgraded.
  diff_mode:
    support: full
    details: Shows the running version before and the target version after.
  idempotent:
    support: full
options:
  installer_image:
    description:
      - Installer image reference with the target version as its tag, for example an Image Factory installer
        V(factory.talos.dev/metal-installer/<schematic>:v1.14.0). It always wins over the default installer.
      - The tag is the version the node must report afterwards, a Talos release as O(version) takes it.
      - Mutually exclusive with O(version); one of them is required.
    type: str
  version:
    description:
      - Target Talos version such as V(v1.14.0) (a leading V(v) is added when missing).
      - A release of a Talos minor release the collection supports - v1.9 to v1.14, any patch or pre-release of
        them, newer patches included. Anything else (V(latest), a typo such as V(v1.99.0), a newer minor release) is
        refused before any node is asked to pull it; a newer minor release needs a release of the collection that
        supports it.
      - The installer is O(installer_repository) tagged with this version when it is set; otherwise the node's own
        installer - the Image Factory installer of the node's schematic, platform and secure boot, so that its
        system extensions survive (see RV(image_reason) and the collection's docs/images.md). A node without a
        schematic gets the factory installer of the empty schematic for Talos v1.14 and later (Talos publishes no
        other), and V(ghcr.io/siderolabs/installer) before.
    type: str
  installer_repository:
    description:
      - Installer image repository to tag with O(version) instead of the node's own installer.
    type: str
  image_factory_url:
    description:
      - The Image Factory whose installers the default installer comes from. By default the factory that built the
        node (its schematic says which), else V(https://factory.talos.dev); its host is the installer's registry.
    type: str
  api:
    description:
      - Which upgrade API to use.
      - V(auto) uses the lifecycle API and falls back to the legacy one when the node does not implement it
        (Talos older than v1.13), or uses the legacy API directly when O(stage) or O(preserve) is set.
      - V(lifecycle) uses only C(ImageService.Pull), C(LifecycleService.Upgrade) and C(Reboot) (Talos v1.13+).
      - V(legacy) uses only C(MachineService.Upgrade), deprecated since Talos v1.13.
    type: str
    choices: [auto, lifecycle, legacy]
    default: auto
  reboot_mode:
    description:
      - How the node reboots into the new version. V(powercycle) skips kexec and reboots through the firmware.
    type: str
    choices: [default, powercycle]
    default: default
  preserve:
    description:
      - Legacy API only. Keep the ephemeral partition and its data through the upgrade.
    type: bool
    default: false
  stage:
    description:
      - Legacy API only. Stage the upgrade and perform it on the next boot, after the node reboots itself;
        useful when files in use block an in-place upgrade.
    type: bool
    default: false
  force_quorum_loss:
    description:
      - Upgrade a control plane even when etcd loses its quorum while it reboots; with the legacy API this also
        skips the node's own etcd checks.
      - Needed to upgrade the control plane of a one- or two-member etcd cluster, which loses etcd while the node
        reboots.
    type: bool
    default: false
  pull_timeout:
    description:
      - Seconds the installer image's pull may take on a node (lifecycle API), as
        O(talos_linux.talos.talos_image#module:pull_timeout).
    type: int
    default: 1200
notes:
  - O(wait=true) waits until the node's boot ID has changed, the node reports stage C(running) and ready,
    and C(Version) returns the target version. A node that comes back on its previous version has rolled
    the upgrade back, and the module fails saying so.
  - Reading the boot ID needs the C(os:admin) role; with a lesser role the wait relies on the node's stage
    and version only.
  - The module does not drain the node's Kubernetes workloads; drain it beforehand when that matters.
  - Once the node runs the target version, its installer reference in the machine config (C(.machine.install.image),
    or the C(UnattendedInstallConfig) document's C(installer.image)) is pointed at the installer when it names another
    version, without a reboot, so that a later reinstall or reset does not bring the old version back (with
    O(wait=false) at the next run). A config that sets both is refused before anything changes. Reading the config
    needs the C(os:admin) role.
seealso:
  - module: talos_linux.talos.talos_facts
  - module: talos_linux.talos.talos_etcd_member
  - name: Upgrading Talos
    description: The collection's upgrade guide, with the rolling upgrade role.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/upgrading.md
"""

EXAMPLES = r"""
- name: Upgrade this node to Talos v1.14.0
  talos_linux.talos.talos_upgrade:
    talosconfig: "{{ playbook_dir }}/talosconfig"
    node: "{{ ansible_host }}"
    version: v1.14.0

- name: Upgrade to an Image Factory installer carrying system extensions
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    installer_image: factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0
    reboot_mode: powercycle

- name: Upgrade a node that only offers the legacy API, staging the upgrade
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    version: v1.12.6
    api: legacy
    stage: true
    wait_timeout: 1200

- name: Upgrade a batch of workers concurrently, waiting for each to run the new version
  talos_linux.talos.talos_upgrade:
    nodes: [10.5.0.5, 10.5.0.6, 10.5.0.7]
    version: v1.14.0
  register: batch

- name: Upgrade a control plane once etcd can spare it, waiting up to five minutes for that
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    version: v1.14.0
    quorum_wait_timeout: 300

- name: Check which nodes still need the upgrade
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    version: v1.14.0
  check_mode: true
  register: pending
"""

RETURN = r"""
upgraded:
  description:
    - Whether the node was upgraded to the target version (in check mode, would be) - it ran another version before.
    - False for a node that already ran the target; the task may still report it changed when only its installer
      reference was updated (RV(installer_reference)), which reboots nothing.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
from_version:
  description: The Talos version the node ran before the task.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: v1.13.0
current_version:
  description:
    - The Talos version the node reports at the end. Without O(wait), or in check mode, the version it ran
      before the reboot.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: v1.14.0
to_version:
  description: The version the node was asked to run, from the image tag or O(version).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: v1.14.0
image:
  description: The installer image reference used.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0
image_reason:
  description: Why this installer - the option that names it, or what the node runs.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: the node runs Image Factory schematic ce4c98... on platform nocloud, so its system extensions (qemu-guest-agent) are kept
installer_reference:
  description:
    - The installer reference in the node's machine config - C(home) (V(.machine.install.image), V(UnattendedInstallConfig
      installer.image), or null when the config names no installer), C(before) and C(after) the task, and whether it
      C(changed).
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample:
    home: .machine.install.image
    before: ghcr.io/siderolabs/installer:v1.13.5
    after: factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0
    changed: true
rebooted:
  description: Whether the node was rebooted (or, without O(wait), asked to reboot) into the new version.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
api_used:
  description:
    - The upgrade API used, V(lifecycle) or V(legacy); in check mode the one the module would try first;
      null when nothing had to be done.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: lifecycle
controlplane:
  description:
    - Whether the node is a control plane (it answered the etcd member list); null when nothing had to be done.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
etcd_gate_open:
  description:
    - Whether the etcd quorum guard lets the node go - true when etcd keeps its quorum without it, or when there is
      nothing to guard (a worker, a node that is no etcd member).
    - False when etcd would lose its quorum (a state that may pass, see O(quorum_wait_timeout)); the task then fails,
      unless O(force_quorum_loss=true).
    - Null when nothing had to be done.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: bool
  sample: true
quorum:
  description: The etcd quorum check made on a control plane that is an etcd member; null otherwise.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: dict
  sample: {safe: true, voters_after: 3, quorum_after: 2, healthy_after: 2, unhealthy: []}
progress:
  description:
    - What happened, in order - the image pull, each line of installer output, the reboot and the wait.
  returned: with one node (O(node), the host's own node or the endpoint itself)
  type: list
  elements: str
  sample:
    - "pulled ghcr.io/siderolabs/installer:v1.14.0"
    - "installing Talos v1.14.0"
    - "installer exited with code 0"
    - "reboot requested"
    - "node is running v1.14.0"
step:
  description:
    - On failure, the step that failed - V(pull), V(install), V(reboot), V(upgrade) (legacy API) or V(wait).
  returned: on failure, with one node (O(node), the host's own node or the endpoint itself)
  type: str
  sample: install
nodes:
  description:
    - Each node's result, keyed by node, with the keys above.
    - A node that failed has C(failed), C(msg), C(code) and C(node) instead, and fails the task once every node is
      done.
    - With O(nodes), even of one node, the result holds this key and nothing of a node at the top; with O(node) (or
      the host's own node) it holds that node's keys at the top and not this key. The shape of every module that
      takes several nodes (docs/architecture.md, "Several nodes in one task").
  returned: with O(nodes) or the talosconfig context's nodes
  type: dict
  sample:
    10.5.0.5: {changed: true, upgraded: true, from_version: v1.13.0, current_version: v1.14.0, rebooted: true}
    10.5.0.6: {changed: false, upgraded: false, from_version: v1.14.0, current_version: v1.14.0, rebooted: false}
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.images import store as images
from ansible_collections.talos_linux.talos.plugins.module_utils.images import installer
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import actions as lifecycle
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle.upgrade import upgrade_node
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        installer_image=dict(type="str"),
        version=dict(type="str"),
        installer_repository=dict(type="str"),
        image_factory_url=dict(type="str"),
        api=dict(type="str", default="auto", choices=["auto", "lifecycle", "legacy"]),
        reboot_mode=dict(type="str", default="default", choices=["default", "powercycle"]),
        preserve=dict(type="bool", default=False),
        stage=dict(type="bool", default=False),
        force_quorum_loss=dict(type="bool", default=False),
        pull_timeout=dict(type="int", default=images.PULL_TIMEOUT),
    ),
    wait=True,
    ranges=dict(pull_timeout=(1, None)),
    mutually_exclusive=[("installer_image", "version")],
    required_one_of=[("installer_image", "version")],
    required_by=dict(installer_repository="version", image_factory_url="version"),
    quorum_wait=True,
    several_nodes=True,
)


def run(task):
    params = task.params
    image, target = installer.resolve_target(params["installer_image"], params["version"])
    api = installer.choose_api(params["api"], stage=params["stage"], preserve=params["preserve"])

    def upgrade(client, node):
        return upgrade_node(client, node, target, api, image=image, repository=params["installer_repository"],
                            factory_url=params["image_factory_url"], fall_back=params["api"] == "auto",
                            reboot_mode=params["reboot_mode"], preserve=params["preserve"], stage=params["stage"],
                            force_quorum_loss=params["force_quorum_loss"], quorum_wait_timeout=params["quorum_wait_timeout"],
                            pull_timeout=params["pull_timeout"], wait_timeout=params["wait_timeout"] if params["wait"] else None,
                            check_mode=task.check_mode, diff=task.diff, progress=task.progress, warn=task.warn)

    return lifecycle.on_nodes(task.client, task.target_nodes, upgrade, params["max_concurrency"],
                              waited=params["wait"] or task.check_mode, progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
