#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_upgrade
short_description: Upgrade Talos Linux on one node
version_added: 0.1.0
description:
  - Upgrades the Talos Linux installation of one node to a target version and, by default, waits until the
    node has rebooted into it.
  - On Talos v1.13 and newer the installer image is pulled with C(ImageService.Pull) into the system
    containerd namespace, installed with C(LifecycleService.Upgrade) (whose output is returned in RV(progress)),
    and the node is rebooted. Older nodes answer C(Unimplemented) to that API; the module then uses the legacy
    C(MachineService.Upgrade), which installs and reboots on the node's own.
  - A node that already runs the target version is left alone and nothing is called that changes it.
  - On a control-plane node the module first checks etcd and refuses to start unless every etcd member is
    started, a voting member and healthy (its node answers C(EtcdStatus) without errors, which includes
    active alarms such as C(NOSPACE)), and the cluster has at least three members, so that etcd keeps its
    quorum while this node reboots. O(force=true) skips this check.
  - Upgrade one node per task. The M(talos_linux.talos.upgrade) role rolls an upgrade through a cluster.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.wait
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
  image:
    description:
      - Installer image reference with the target version as its tag, for example
        V(ghcr.io/siderolabs/installer:v1.14.0) or an Image Factory installer with extensions,
        V(factory.talos.dev/installer/<schematic>:v1.14.0).
      - The tag is the version the node must report afterwards.
      - Mutually exclusive with O(version); one of them is required.
    type: str
  version:
    description:
      - Target Talos version such as V(v1.14.0) (a leading V(v) is added when missing).
      - The installer image is O(image_repository) tagged with this version.
    type: str
  image_repository:
    description:
      - Installer image repository used with O(version).
    type: str
    default: ghcr.io/siderolabs/installer
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
  force:
    description:
      - Skip the etcd health check on control-plane nodes, here and, with the legacy API, on the node.
      - Needed to upgrade the control plane of a one- or two-member etcd cluster, which loses etcd
        while the node reboots.
    type: bool
    default: false
notes:
  - O(wait=true) waits until the node's boot ID has changed, the node reports stage C(running) and ready,
    and C(Version) returns the target version. A node that comes back on its previous version has rolled
    the upgrade back, and the module fails saying so.
  - Reading the boot ID needs the C(os:admin) role; with a lesser role the wait relies on the node's stage
    and version only.
  - The module does not drain the node's Kubernetes workloads; drain it beforehand when that matters.
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
    image: factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0
    reboot_mode: powercycle

- name: Upgrade a node that only offers the legacy API, staging the upgrade
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    version: v1.12.6
    api: legacy
    stage: true
    wait_timeout: 1200

- name: Check which nodes still need the upgrade
  talos_linux.talos.talos_upgrade:
    node: "{{ ansible_host }}"
    version: v1.14.0
  check_mode: true
  register: pending
"""

RETURN = r"""
previous_version:
  description: The Talos version the node ran before the task.
  returned: always
  type: str
  sample: v1.13.0
current_version:
  description:
    - The Talos version the node reports at the end. Without O(wait), or in check mode, the version it ran
      before the reboot.
  returned: always
  type: str
  sample: v1.14.0
target_version:
  description: The version the node was asked to run, from the image tag or O(version).
  returned: always
  type: str
  sample: v1.14.0
image:
  description: The installer image reference used.
  returned: always
  type: str
  sample: ghcr.io/siderolabs/installer:v1.14.0
rebooted:
  description: Whether the node was rebooted (or, without O(wait), asked to reboot) into the new version.
  returned: always
  type: bool
  sample: true
api_used:
  description:
    - The upgrade API used, V(lifecycle) or V(legacy); in check mode the one the module would try first;
      null when nothing had to be done.
  returned: always
  type: str
  sample: lifecycle
controlplane:
  description: Whether the node is a control plane (it answered the etcd member list); null when not checked.
  returned: always
  type: bool
  sample: true
etcd_gate_open:
  description:
    - Whether the etcd health gate let the upgrade through; false when it refused (a state that may pass, worth
      retrying), null when not checked (a worker, O(force=true), or a failure before the gate).
  returned: always
  type: bool
  sample: true
progress:
  description:
    - What happened, in order - the image pull, each line of installer output, the reboot and the wait.
  returned: always
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
  returned: failure
  type: str
  sample: install
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError, TalosUnimplementedError
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule
from ansible_collections.talos_linux.talos.plugins.module_utils import upgrade as upgrade_utils
from ansible_collections.talos_linux.talos.plugins.module_utils import waiters

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, lifecycle_pb2, machine_pb2
except ImportError:  # reported by TalosModule through missing_required_lib
    common_pb2 = image_pb2 = lifecycle_pb2 = machine_pb2 = None

VERSION = "machine.MachineService/Version"
REBOOT = "machine.MachineService/Reboot"
LEGACY_UPGRADE = "machine.MachineService/Upgrade"
IMAGE_PULL = "machine.ImageService/Pull"
LIFECYCLE_UPGRADE = "machine.LifecycleService/Upgrade"

# Installer lines kept in a failure message: enough to show the cause.
FAILURE_CONTEXT_LINES = 5


class UpgradeStepError(Exception):
    """A step of the upgrade failed; ``message`` also says in which state the node was left."""

    def __init__(self, step, message, cause=None):
        super(UpgradeStepError, self).__init__(message)
        self.step = step
        self.message = message
        self.cause = cause


class NodeUpgrade(object):
    """The mutating part of the upgrade of one node, step by step, recording progress."""

    def __init__(self, client, node, params, image, target, previous):
        self.client = client
        self.node = node
        self.params = params
        self.image = image
        self.target = target
        self.previous = previous
        self.label = node or "the endpoint node"
        self.progress = []
        self.api_used = None
        self.rebooted = False

    def run(self, api):
        """Upgrade with ``api`` (``lifecycle`` may turn into ``legacy``); return the final version."""
        boot_id = waiters.read_boot_id(self.client, self.node) if self.params["wait"] else None
        if api == "lifecycle":
            if not self._lifecycle_pull():
                api = "legacy"
        if api == "lifecycle":
            self.api_used = "lifecycle"
            self._lifecycle_install()
            self._reboot()
        else:
            self.api_used = "legacy"
            self._legacy_upgrade()
        if not self.params["wait"]:
            return self.previous
        return self._wait(boot_id)

    def _containerd(self):
        return common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_SYSTEM)

    def _lifecycle_pull(self):
        """Pull the installer image; False when the node has no ImageService and ``api`` allows the legacy API."""
        request = image_pb2.ImageServicePullRequest(containerd=self._containerd(), image_ref=self.image)
        try:
            frames = self.client.stream(IMAGE_PULL, request, node=self.node)
        except TalosUnimplementedError as err:
            if self.params["api"] == "auto":
                self.progress.append("node has no lifecycle API; using the legacy upgrade API")
                return False
            raise UpgradeStepError("pull", "Pulling installer image %s on node %s failed: %s The node was not changed "
                                   "and still runs %s; use api: legacy for Talos older than v1.13."
                                   % (self.image, self.label, err.message, self.previous), err)
        except TalosError as err:
            raise UpgradeStepError("pull", "Pulling installer image %s on node %s failed: %s The node was not changed "
                                   "and still runs %s." % (self.image, self.label, err.message, self.previous), err)
        names = [frame.name for frame in frames if frame.WhichOneof("response") == "name"]
        self.progress.append("pulled %s" % (names[-1] if names else self.image))
        return True

    def _lifecycle_install(self):
        request = lifecycle_pb2.LifecycleServiceUpgradeRequest(
            containerd=self._containerd(), source=lifecycle_pb2.InstallArtifactsSource(image_name=self.image))
        exit_codes = []

        def record(frame):
            kind = frame.progress.WhichOneof("response")
            if kind == "message":
                self.progress.append(frame.progress.message)
            elif kind == "exit_code":
                exit_codes.append(frame.progress.exit_code)
                self.progress.append("installer exited with code %d" % frame.progress.exit_code)

        try:
            self.client.stream(LIFECYCLE_UPGRADE, request, node=self.node, on_message=record)
        except TalosError as err:
            raise UpgradeStepError("install", "Installing %s on node %s failed: %s The node still runs %s and was not "
                                   "rebooted." % (self.image, self.label, err.message, self.previous), err)
        if not exit_codes or exit_codes[-1] != 0:
            outcome = "exited with code %d" % exit_codes[-1] if exit_codes else "ended without an exit code"
            lines = [line for line in self.progress if not line.startswith("installer exited")][-FAILURE_CONTEXT_LINES:]
            raise UpgradeStepError("install", "The installer for %s on node %s %s (last messages: %s); the node still runs "
                                   "%s and was not rebooted." % (self.image, self.label, outcome,
                                                                 " | ".join(lines) or "none", self.previous))

    def _reboot(self):
        mode = machine_pb2.RebootRequest.POWERCYCLE if self.params["reboot_mode"] == "powercycle" else machine_pb2.RebootRequest.DEFAULT
        try:
            self.client.call(REBOOT, machine_pb2.RebootRequest(mode=mode), node=self.node)
        except TalosError as err:
            raise UpgradeStepError("reboot", "Rebooting node %s into %s failed: %s Talos %s is installed but the node "
                                   "still runs %s until its next reboot." % (self.label, self.target, err.message,
                                                                             self.target, self.previous), err)
        self.rebooted = True
        self.progress.append("reboot requested")

    def _legacy_upgrade(self):
        reboot_mode = (machine_pb2.UpgradeRequest.POWERCYCLE if self.params["reboot_mode"] == "powercycle"
                       else machine_pb2.UpgradeRequest.DEFAULT)
        request = machine_pb2.UpgradeRequest(image=self.image, preserve=self.params["preserve"], stage=self.params["stage"],
                                             force=self.params["force"], reboot_mode=reboot_mode)
        try:
            items = self.client.call(LEGACY_UPGRADE, request, node=self.node)
        except TalosError as err:
            raise UpgradeStepError("upgrade", "Node %s refused the upgrade to %s: %s The node was not changed and still "
                                   "runs %s." % (self.label, self.image, err.message, self.previous), err)
        self.rebooted = True
        self.progress.append(items[0].ack if items and items[0].ack else "upgrade requested")

    def _wait(self, boot_id):
        try:
            waiters.wait_for_reboot(self.client, self.node, boot_id, timeout=self.params["wait_timeout"])
            current = self.client.call(VERSION, node=self.node)[0].version.tag
        except TalosError as err:
            raise UpgradeStepError("wait", "Node %s did not come back from the upgrade to %s: %s It was rebooting from "
                                   "%s into %s; check its console." % (self.label, self.target, err.message,
                                                                       self.previous, self.target), err)
        if current == self.target:
            self.progress.append("node is running %s" % current)
            return current
        if current == self.previous:
            raise UpgradeStepError("wait", "Node %s rebooted but came back on %s instead of %s: Talos rolled the upgrade "
                                   "back because the new version failed to boot; read the node's console or dmesg "
                                   "before trying again." % (self.label, current, self.target))
        raise UpgradeStepError("wait", "Node %s rebooted into %s, not the target %s: the installer image %s does not "
                               "hold that version." % (self.label, current, self.target, self.image))


def run(module):
    params = module.params
    try:
        image, target = upgrade_utils.resolve_target(params["image"], params["version"], params["image_repository"])
        api = upgrade_utils.choose_api(params["api"], stage=params["stage"], preserve=params["preserve"])
    except ValueError as err:
        module.fail_json(msg=str(err))

    node = module.single_node("upgrades one node per task")
    client = module.client
    previous = client.call(VERSION, node=node)[0].version.tag
    result = dict(changed=False, previous_version=previous, current_version=previous, target_version=target,
                  image=image, rebooted=False, api_used=None, controlplane=None, etcd_gate_open=None, progress=[])
    if previous == target:
        module.exit_json(**result)

    if not params["force"]:
        result["controlplane"], problem = upgrade_utils.etcd_gate(client, node)
        if result["controlplane"]:
            result["etcd_gate_open"] = not problem
        if problem:
            module.fail_json(msg="Refusing to upgrade control-plane node %s to %s: %s, so the cluster could lose its etcd "
                                 "quorum while the node reboots; fix etcd first, or set force: true to upgrade anyway."
                                 % (node or "the endpoint node", target, problem), **result)

    result["changed"] = True
    if module._diff:
        result["diff"] = dict(before={"version": previous}, after={"version": target})
    if module.check_mode:
        # The real run learns this from the node's answer; predict it from the version.
        falls_back = params["api"] == "auto" and upgrade_utils.has_lifecycle_api(previous) is False
        result["api_used"] = "legacy" if falls_back else api
        module.exit_json(**result)

    upgrade = NodeUpgrade(client, node, params, image, target, previous)
    try:
        result["current_version"] = upgrade.run(api)
    except UpgradeStepError as err:
        result.update(api_used=upgrade.api_used, rebooted=upgrade.rebooted, progress=upgrade.progress, step=err.step)
        if isinstance(err.cause, TalosError):
            result.update(err.cause.to_result())
        module.fail_json(msg=err.message, **result)
    result.update(api_used=upgrade.api_used, rebooted=upgrade.rebooted, progress=upgrade.progress)
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            image=dict(type="str"),
            version=dict(type="str"),
            image_repository=dict(type="str", default=upgrade_utils.DEFAULT_IMAGE_REPOSITORY),
            api=dict(type="str", default="auto", choices=["auto", "lifecycle", "legacy"]),
            reboot_mode=dict(type="str", default="default", choices=["default", "powercycle"]),
            preserve=dict(type="bool", default=False),
            stage=dict(type="bool", default=False),
            force=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("image", "version")],
        required_one_of=[("image", "version")],
        supports_check_mode=True,
        wait=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
