#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_kubernetes_upgrade
short_description: Upgrade Kubernetes on a Talos cluster, as talosctl upgrade-k8s does
version_added: 1.0.0
description:
  - Upgrades the Kubernetes components Talos runs - kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
    and the kubelets - and syncs Talos's bootstrap manifests, in the order C(talosctl upgrade-k8s) follows.
  - 1. Checks the versions - first what needs no node (the target is a version some Talos release supports; a given
    O(from_version) is one minor release away at most), then, before the Kubernetes API is asked anything, that the
    Talos of every node named supports the target (a Talos release the module does not know is refused), then the
    path from the detected version. For a minor upgrade it refuses a flag, feature gate or admission plugin the
    target removed that a component is still started with (what Talos renders - the static pods' command lines, the
    kubelet's arguments and feature gates - checked against C(talosctl upgrade-k8s)'s list), objects of an API
    resource the target removed, and requests of clients to an API the target removes (the API server's
    C(apiserver_requested_deprecated_apis) metric).
  - 2. Pre-pulls every new image on every node that will run it (O(pre_pull_images)); a pull that fails stops the task
    before anything changed.
  - 3. For kube-apiserver, then kube-controller-manager, then kube-scheduler, on each control plane in turn - patches
    the image in the machine config, applies it without a reboot and waits until Talos renders the new static pod and
    its mirror pod runs that config version and is Ready.
  - 4. kube-proxy (unless the config disables it - C(.cluster.proxy.disabled), or C(enabled) V(false) in a
    C(KubeProxyConfig) document) - patches the image on every control plane, applies its bootstrap
    manifest and waits for the DaemonSet to roll out.
  - 5. The kubelet on every node in turn (O(upgrade_kubelet)) - patches its image and waits for the Node to report the
    new version and be Ready.
  - 6. Syncs Talos's bootstrap manifests (its C(Manifests) resources) to the API server with server-side apply, as
    Talos's field manager (O(sync_manifests)), as C(talosctl upgrade-k8s) and the Terraform provider do - every object
    compared in a dry run first, then applied in stages (CRDs, Namespaces and ClusterRoles, waited for until ready;
    C(*Class) kinds, waited for; ConfigMaps and Secrets; the rest), recorded in Talos's inventory (the ConfigMap
    C(kube-system/talos-bootstrap-manifests-inventory)); then the inventory's objects Talos no longer renders deleted
    (O(prune)), and what was written waited for until ready (O(reconcile_timeout)).
  - Each image is patched where the node's config already sets it - the v1alpha1 field (C(.cluster.apiServer.image),
    C(.machine.kubelet.image), ...) or, on Talos v1.14, the component's document (C(KubeAPIServerConfig),
    C(KubeletConfig), ...) when the config has one - changing only the line that names the old image. The repository
    is kept (a mirror stays a mirror); the tag becomes C(v<to_version>).
  - Each node's config is read again right before it is patched, so an edit made during a long upgrade is kept.
  - Every step looks at what the nodes run before it acts, so a rerun at the target changes nothing, and a rerun after
    an interruption finishes the upgrade.
  - The Kubernetes API is reached with the admin kubeconfig the control plane issues (the C(Kubeconfig) RPC), kept in
    memory and never written.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
requirements:
  - kubernetes >= 30.1 (the official Kubernetes Python client), on the controller - or, with the module door, where the task
    runs
options:
  to_version:
    description:
      - The Kubernetes version to upgrade to, such as V(1.37.2) (a leading C(v) is accepted).
    type: str
    required: true
  from_version:
    description:
      - The Kubernetes version the cluster runs. By default the lowest version of kube-apiserver,
        kube-controller-manager and kube-scheduler on every control plane and of the kube-proxy DaemonSet, as
        C(talosctl upgrade-k8s) detects it - so after an interrupted upgrade a component left behind still refuses
        a minor jump.
    type: str
  controlplane_nodes:
    description:
      - The control-plane nodes, as the Talos API reaches them - an address or a name (an inventory's C(ansible_host)
        or hostname). By default the Nodes the API server lists with the C(node-role.kubernetes.io/control-plane)
        label, by their InternalIP.
      - Each node is matched to its Kubernetes Node - by the Node's name, by any address the Node reports, or by the
        nodename Talos registers the node with - before anything changes; a node that matches none fails the task,
        naming it.
    type: list
    elements: str
  worker_nodes:
    description:
      - The worker nodes whose kubelet to upgrade, as for O(controlplane_nodes). By default the other Nodes the API
        server lists, by their InternalIP.
    type: list
    elements: str
  kubernetes_endpoint:
    description:
      - The URL of the Kubernetes API server to use, such as V(https://10.5.0.2:6443) (C(talosctl upgrade-k8s
        --endpoint)). By default the cluster's control-plane endpoint, as the kubeconfig the control plane issues
        names it.
    type: str
  apiserver_image:
    description:
      - The repository to move kube-apiserver to, such as V(registry.example.com/kube-apiserver), without a tag (the
        tag is C(v<to_version>)). By default each node keeps the repository its config uses.
    type: str
  controller_manager_image:
    description:
      - The repository to move kube-controller-manager to, as for O(apiserver_image).
    type: str
  scheduler_image:
    description:
      - The repository to move kube-scheduler to, as for O(apiserver_image).
    type: str
  proxy_image:
    description:
      - The repository to move kube-proxy to, as for O(apiserver_image).
    type: str
  kubelet_image:
    description:
      - The repository to move the kubelet to, as for O(apiserver_image); a flavour the node's kubelet tag has
        (C(-fat)) is kept.
    type: str
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
  prune:
    description:
      - Delete the objects of Talos's bootstrap-manifest inventory that Talos no longer renders (kube-proxy once the
        config disables it, an extra manifest removed from the config), after every rendered object was applied, and
        remove them from the inventory.
      - V(false) applies and records only, leaving such objects in the cluster (C(talosctl upgrade-k8s
        --manifests-no-prune)).
      - Each object to delete must pass O(inventory_policy).
    type: bool
    default: true
  inventory_policy:
    description:
      - Which existing objects the manifest sync may change or prune, by the C(config.k8s.io/owning-inventory)
        annotation they carry, as C(talosctl upgrade-k8s --manifests-inventory-policy).
      - V(MustMatch) - only objects of Talos's inventory.
      - V(AdoptIfNoInventory) - also objects of no inventory, which then join Talos's.
      - V(AdoptAll) - any object, also one another inventory owns.
      - An object the policy does not allow fails the task before anything is written.
    type: str
    choices: [MustMatch, AdoptIfNoInventory, AdoptAll]
    default: AdoptIfNoInventory
  recreate_immutable:
    description:
      - When the API server refuses to change a manifest object in place because a field it changes cannot change
        (a Deployment's selector, a binding's C(roleRef)), delete the object and create it again (C(talosctl
        upgrade-k8s --manifests-force)).
      - V(false) fails the task naming the object, before anything is written.
    type: bool
    default: false
  reconcile_timeout:
    description:
      - Seconds to wait, after the manifest sync wrote, until every object it created, updated or recreated is ready
        (rolled out, available, established), as C(talosctl upgrade-k8s --manifests-reconcile-timeout). An object that
        fails (a Deployment past its progress deadline, a crash-looping Pod) fails the task at once.
      - V(0) skips that wait. The CRDs, Namespaces, ClusterRoles and C(*Class) objects are waited for before the
        objects that use them whatever the value, for this long or 60 seconds when it is V(0).
    type: int
    default: 300
  check_deprecated_apis:
    description:
      - Before a minor upgrade, fail when the API server reports requests to APIs the target version removes.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds each wait may take - Talos rendering a static pod and its mirror pod becoming Ready, the kube-proxy
        rollout, a Node reporting its new kubelet - not the whole upgrade.
      - Also how long a request the Kubernetes API answers with 429 or 5xx, or does not answer once it has answered
        (it restarts during the upgrade), is tried again, with backoff.
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
      - Returns the plan in RV(plan) and the manifest changes in RV(manifests) (what would be created, updated,
        recreated or pruned) and RV(manifests_inventory), after the nodes validated the patched configs in a dry run
        and the API server the manifests in a dry-run apply. Nothing changes.
  diff_mode:
    support: full
    details: The image changes, and each manifest object before and after (a pruned one after as nothing), with the
      values of Secrets redacted.
  idempotent:
    support: full
notes:
  - The task addresses one control plane (O(node), or the endpoint itself), which issues the kubeconfig; the other
    nodes are reached through it as usual.
  - The manifest sync follows Talos v1.13's server-side apply sync on every Talos release the module supports; on
    clusters that Talos v1.12 or older bootstrapped, the inventory holds only what this module recorded, so only that
    is ever pruned.
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

- name: Upgrade nodes an inventory names by DNS name, moving kube-apiserver and the kubelet to a mirror
  talos_linux.talos.talos_kubernetes_upgrade:
    node: cp1.example.com
    to_version: 1.37.2
    controlplane_nodes: [cp1.example.com, cp2.example.com, cp3.example.com]
    worker_nodes: [worker1.example.com]
    kubernetes_endpoint: https://10.5.0.2:6443
    apiserver_image: registry.example.com/k8s/kube-apiserver
    kubelet_image: registry.example.com/siderolabs/kubelet

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
controlplane_nodes:
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
kubernetes_nodes:
  description: The Kubernetes Node of each node upgraded (Talos node as given or discovered -> Node name).
  returned: when the nodes were read
  type: dict
  sample: {cp1.example.com: cp1, 10.5.0.5: worker-1}
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
  description:
    - The bootstrap manifest objects written (in check mode, that would be), in the order written, each with
      C(object) (C(Kind namespace/name)) and C(action) - V(created), V(updated), V(recreated) (deleted and created
      again, O(recreate_immutable)) or V(pruned) (O(prune)); V(deleted) for an object a failure left deleted before it
      was created again.
    - On failure, what was written before it.
  returned: once the upgrade reached the manifest sync (empty with O(sync_manifests=false)), also when the sync failed
  type: list
  elements: dict
  sample:
    - object: DaemonSet kube-system/kube-proxy
      action: updated
    - object: ConfigMap kube-system/kube-proxy-extra
      action: pruned
manifests_inventory:
  description:
    - The entries added to and removed from Talos's bootstrap-manifest inventory (the ConfigMap
      C(kube-system/talos-bootstrap-manifests-inventory)), C(added) and C(removed), each a list of its keys
      (C(namespace_name_group_kind)); in check mode, what would be.
  returned: once the upgrade reached the manifest sync (empty with O(sync_manifests=false)), also when the sync failed
  type: dict
  sample:
    added: []
    removed: [kube-system_kube-proxy-extra__ConfigMap]
deprecated_apis:
  description: The deprecated APIs clients asked for that the target removes (C(group), C(version), C(resource), C(removed_release)).
  returned: when the nodes were read
  type: list
  elements: dict
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import manifests as kubernetes_manifests
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.upgrade import (
    IMAGE_OPTIONS,
    requested_repositories,
    requested_versions,
    upgrade_kubernetes,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.task.module_door import run_module
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import CLIENT_LIBRARIES, TaskSpec

SPEC = TaskSpec(
    argument_spec=dict(
        to_version=dict(type="str", required=True),
        from_version=dict(type="str"),
        controlplane_nodes=dict(type="list", elements="str"),
        worker_nodes=dict(type="list", elements="str"),
        pre_pull_images=dict(type="bool", default=True),
        upgrade_kubelet=dict(type="bool", default=True),
        sync_manifests=dict(type="bool", default=True),
        prune=dict(type="bool", default=True),
        inventory_policy=dict(type="str", choices=list(kubernetes_manifests.INVENTORY_POLICIES),
                              default=kubernetes_manifests.DEFAULT_INVENTORY_POLICY),
        recreate_immutable=dict(type="bool", default=False),
        reconcile_timeout=dict(type="int", default=kubernetes_manifests.DEFAULT_RECONCILE_TIMEOUT),
        check_deprecated_apis=dict(type="bool", default=True),
        kubernetes_endpoint=dict(type="str"),
        apiserver_image=dict(type="str"),
        controller_manager_image=dict(type="str"),
        scheduler_image=dict(type="str"),
        proxy_image=dict(type="str"),
        kubelet_image=dict(type="str"),
    ),
    wait="timeout",
    ranges=dict(reconcile_timeout=(0, None)),
    libraries=CLIENT_LIBRARIES + (kube_api.LIBRARY,),
)


def run(task):
    params = task.params
    # Every check that needs no node comes first.
    to_version, from_version = requested_versions(params["to_version"], params["from_version"])
    repositories = requested_repositories(dict((option, params[option]) for option in IMAGE_OPTIONS))
    server = kube_api.api_server_url(params["kubernetes_endpoint"], "kubernetes_endpoint") if params["kubernetes_endpoint"] else None
    node = task.single_node("reads the admin kubeconfig from one control-plane node")
    return upgrade_kubernetes(
        task.client, node, to_version, from_version=from_version, server=server, repositories=repositories,
        control_planes=params["controlplane_nodes"], workers=params["worker_nodes"], pre_pull=params["pre_pull_images"],
        upgrade_kubelet=params["upgrade_kubelet"], sync_manifests=params["sync_manifests"], prune=params["prune"],
        inventory_policy=params["inventory_policy"], recreate_immutable=params["recreate_immutable"],
        reconcile_timeout=params["reconcile_timeout"], check_deprecated_apis=params["check_deprecated_apis"],
        wait_timeout=params["wait_timeout"], check_mode=task.check_mode, diff=task.diff, hide=task.hide,
        progress=task.progress)


def main():
    run_module(SPEC, run)


if __name__ == "__main__":
    main()
