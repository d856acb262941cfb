#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_kubernetes_upgrade
short_description: Upgrade Kubernetes on a Talos cluster, as talosctl upgrade-k8s does
version_added: 0.1.0
description:
  - Upgrades the Kubernetes components Talos runs - kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
    and the kubelets - and syncs Talos's bootstrap manifests, in the order C(talosctl upgrade-k8s) follows.
  - 1. Checks the path (Kubernetes moves one minor release at a time; every node's Talos must support the target) and,
    for a minor upgrade, that no machine config gives a component a flag, feature gate or admission plugin the target
    removed (its C(extraArgs)) and that no client still asks for an API the target removes (the API server's
    C(apiserver_requested_deprecated_apis) metric).
  - 2. Pre-pulls every new image on every node that will run it (O(pre_pull_images)); a pull that fails stops the task
    before anything changed.
  - 3. For kube-apiserver, then kube-controller-manager, then kube-scheduler, on each control plane in turn - patches
    the image in the machine config, applies it without a reboot and waits until Talos renders the new static pod and
    its mirror pod runs that config version and is Ready.
  - 4. kube-proxy (unless the config disables it) - patches the image on every control plane, applies its bootstrap
    manifest and waits for the DaemonSet to roll out.
  - 5. The kubelet on every node in turn (O(upgrade_kubelet)) - patches its image and waits for the Node to report the
    new version and be Ready.
  - 6. Syncs Talos's bootstrap manifests (its C(Manifests) resources) to the API server with server-side apply, as
    Talos's field manager (O(sync_manifests)).
  - Each image is patched where the node's config already sets it - the v1alpha1 field (C(.cluster.apiServer.image),
    C(.machine.kubelet.image), ...) or, on Talos v1.14, the component's document (C(KubeAPIServerConfig),
    C(KubeletConfig), ...) when the config has one - changing only the line that names the old image. The repository
    is kept (a mirror stays a mirror); the tag becomes C(v<to_version>).
  - Every step looks at what the nodes run before it acts, so a rerun at the target changes nothing, and a rerun after
    an interruption finishes the upgrade.
  - The Kubernetes API is reached with the admin kubeconfig the control plane issues (the C(Kubeconfig) RPC), kept in
    memory and never written.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
requirements:
  - kubernetes (the official Kubernetes Python client), on the controller - or, with the module door, where the task
    runs
options:
  to_version:
    description:
      - The Kubernetes version to upgrade to, such as V(1.37.2) (a leading C(v) is accepted).
    type: str
    required: true
  from_version:
    description:
      - The Kubernetes version the cluster runs. By default the lowest version of the control planes' kube-apiserver
        images.
    type: str
  control_plane_nodes:
    description:
      - The control-plane nodes, as the Talos API addresses them. By default the Nodes the API server lists with the
        C(node-role.kubernetes.io/control-plane) label, by their InternalIP.
    type: list
    elements: str
  worker_nodes:
    description:
      - The worker nodes whose kubelet to upgrade. By default the other Nodes the API server lists, by their
        InternalIP.
    type: list
    elements: str
  pre_pull_images:
    description:
      - Pull the new images on every node before changing anything.
    type: bool
    default: true
  upgrade_kubelet:
    description:
      - Upgrade the kubelet of every node.
    type: bool
    default: true
  sync_manifests:
    description:
      - Sync Talos's bootstrap manifests to the API server (server-side apply), reporting what changed.
    type: bool
    default: true
  check_deprecated_apis:
    description:
      - Before a minor upgrade, fail when the API server reports requests to APIs the target version removes.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds each wait may take - Talos rendering a static pod and its mirror pod becoming Ready, the kube-proxy
        rollout, a Node reporting its new kubelet - not the whole upgrade.
    type: int
    default: 600
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details:
      - Returns the plan in RV(plan) and the manifest changes in RV(manifests), after the nodes validated the patched
        configs in a dry run and the API server the manifests in a dry-run apply. Nothing changes.
  diff_mode:
    support: full
    details: The image changes, and each manifest object before and after, with the values of Secrets redacted.
  idempotent:
    support: full
notes:
  - The task addresses one control plane (O(node), or the endpoint itself), which issues the kubeconfig; the other
    nodes are reached through it as usual.
  - Talos's manifests are applied, never pruned - an object that a newer Talos no longer renders stays in the cluster.
seealso:
  - module: talos_linux.talos.talos_upgrade
  - module: talos_linux.talos.talos_kubeconfig
  - name: Upgrading a cluster with this collection
    description: Talos and Kubernetes upgrades, the upgrade role and its Kubernetes step.
    link: https://github.com/talos-linux-ansible/talos/blob/main/docs/upgrading.md
"""

EXAMPLES = r"""
- name: Upgrade Kubernetes to 1.37.2
  talos_linux.talos.talos_kubernetes_upgrade:
    node: "{{ hostvars[groups['controlplane'][0]].ansible_host }}"
    to_version: 1.37.2
  run_once: true

- name: Show what an upgrade would change
  talos_linux.talos.talos_kubernetes_upgrade:
    node: 10.5.0.2
    to_version: 1.37.2
  check_mode: true
  diff: true
  register: k8s_plan

- name: Upgrade the control plane now, the kubelets in a later window
  talos_linux.talos.talos_kubernetes_upgrade:
    node: 10.5.0.2
    to_version: 1.37.2
    upgrade_kubelet: false
"""

RETURN = r"""
from_version:
  description: The Kubernetes version the cluster ran (O(from_version), or detected).
  returned: when the nodes were read
  type: str
  sample: 1.36.3
to_version:
  description: The target version, without its C(v).
  returned: when the nodes were read
  type: str
  sample: 1.37.2
control_plane_nodes:
  description: The control-plane nodes upgraded.
  returned: when the nodes were read
  type: list
  elements: str
  sample: [10.5.0.2, 10.5.0.3, 10.5.0.4]
worker_nodes:
  description: The worker nodes whose kubelet was upgraded.
  returned: when the nodes were read
  type: list
  elements: str
  sample: [10.5.0.5]
plan:
  description:
    - Every image change, in the order made (in check mode, would be made) - C(node), C(component), C(from) and C(to)
      (versions), C(image_from) (null when the config left the image to Talos), C(image_to), and where it is set -
      C(document) (V(v1alpha1) or a document kind) and C(field).
    - Empty when every node already runs the target.
  returned: when the nodes were read
  type: list
  elements: dict
  sample:
    - node: 10.5.0.2
      component: kube-apiserver
      from: 1.36.3
      to: 1.37.2
      image_from: registry.k8s.io/kube-apiserver:v1.36.3
      image_to: registry.k8s.io/kube-apiserver:v1.37.2
      document: KubeAPIServerConfig
      field: image
done:
  description: On failure, the changes of RV(plan) that were made before it.
  returned: on failure after a change
  type: list
  elements: dict
pre_pulled:
  description:
    - The images pre-pulled, each with C(node), C(image), C(namespace) (containerd) and C(pulled) (false when the node
      had it already). Empty in check mode and with O(pre_pull_images=false).
  returned: when the nodes were read
  type: list
  elements: dict
manifests:
  description: The bootstrap manifest objects created or updated (in check mode, that would be), with C(object) and C(action).
  returned: success
  type: list
  elements: dict
  sample:
    - object: DaemonSet kube-system/kube-proxy
      action: updated
deprecated_apis:
  description: The deprecated APIs clients asked for that the target removes (C(group), C(version), C(resource), C(removed_release)).
  returned: when the nodes were read
  type: list
  elements: dict
"""

from ansible_collections.talos_linux.talos.plugins.module_utils import kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.kubeconfig import fetch_kubeconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes_upgrade import KubernetesUpgrade, requested_versions
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import ActionFailed
from ansible_collections.talos_linux.talos.plugins.module_utils.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.redaction import secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.task import CLIENT_LIBRARIES, TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        to_version=dict(type="str", required=True),
        from_version=dict(type="str"),
        control_plane_nodes=dict(type="list", elements="str"),
        worker_nodes=dict(type="list", elements="str"),
        pre_pull_images=dict(type="bool", default=True),
        upgrade_kubelet=dict(type="bool", default=True),
        sync_manifests=dict(type="bool", default=True),
        check_deprecated_apis=dict(type="bool", default=True),
    ),
    wait="timeout",
    libraries=CLIENT_LIBRARIES + (kube_api.LIBRARY,),
)


def _diff(upgrade):
    import yaml

    def text(obj):
        return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) if obj is not None else ""

    diffs = []
    if upgrade.plan:
        diffs.append({
            "before_header": "images the nodes run",
            "after_header": "images after the upgrade",
            "before": "".join("%s %s: %s\n" % (change.node, change.component.name, change.image_from or "Talos default")
                              for change in upgrade.plan),
            "after": "".join("%s %s: %s\n" % (change.node, change.component.name, change.image_to)
                             for change in upgrade.plan),
        })
    for item in upgrade.diffs:
        diffs.append({"before_header": "%s (live)" % item["object"], "after_header": "%s (Talos manifest)" % item["object"],
                      "before": text(item["before"]), "after": text(item["after"])})
    return diffs


def _message(result, check_mode):
    if not result["changed"]:
        return "Kubernetes %s runs on every node and the bootstrap manifests are in sync: nothing to do." % result["to_version"]
    return "%s Kubernetes from %s to %s: %d image change(s), %d manifest object(s) %s." % (
        "Would upgrade" if check_mode else "Upgraded", result["from_version"], result["to_version"], len(result["plan"]),
        len(result["manifests"]), "to sync" if check_mode else "synced")


def run(task):
    params = task.params
    to_version, from_version = requested_versions(params["to_version"], params["from_version"])
    node = task.single_node("reads the admin kubeconfig from one control-plane node")
    _text, kubeconfig = fetch_kubeconfig(task.client, node)
    task.hide(secret_values(kubeconfig))
    kube = kube_api.KubeAPI(kubeconfig)
    upgrade = KubernetesUpgrade(
        task.client, kube, to_version, from_version=from_version,
        control_planes=params["control_plane_nodes"], workers=params["worker_nodes"],
        pre_pull=params["pre_pull_images"], upgrade_kubelet=params["upgrade_kubelet"],
        sync_manifests=params["sync_manifests"], check_deprecated_apis=params["check_deprecated_apis"],
        wait_timeout=params["wait_timeout"], check_mode=task.check_mode, progress=task.progress)
    try:
        result = upgrade.run()
    except ActionFailed:
        task.hide(upgrade.secrets)
        raise
    finally:
        kube.close()
    task.hide(upgrade.secrets)
    result["msg"] = _message(result, task.check_mode)
    if task.diff:
        result["diff"] = _diff(upgrade)
    return result


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
