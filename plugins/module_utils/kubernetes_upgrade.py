# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Upgrading Kubernetes on a Talos cluster, as ``talosctl upgrade-k8s`` does it and in its order.

1. Check the path (one minor at a time, and a Kubernetes every node's Talos
   supports) and the deprecated APIs clients still ask for that the target
   removes.
2. Pre-pull every new image on every node that will run it; a pull that fails
   stops the upgrade before anything changed.
3. For kube-apiserver, then kube-controller-manager, then kube-scheduler, on
   each control plane in turn: patch the image in the machine config (the home
   the config already uses, the one line changed), apply it without a reboot,
   and wait until Talos has rendered the new static pod and its mirror pod runs
   that config version and is Ready.
4. kube-proxy: the image on every control plane, then its bootstrap manifest
   applied and the DaemonSet rolled out.
5. The kubelet on every node in turn: patch, then wait for the Node to report
   the new version and be Ready.
6. Sync Talos's bootstrap manifests to the API server with server-side apply.

Every step reads what the node runs before it acts, so a rerun at the target
changes nothing and a rerun after an interruption finishes the job. Check mode
returns the plan and the manifest changes, having only asked the nodes to
validate the patched configs (dry run).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy

from ansible_collections.talos_linux.talos.plugins.module_utils import kubernetes_components as components
from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images import NodeImages
from ansible_collections.talos_linux.talos.plugins.module_utils.kube_api import object_label, strip_volatile
from ansible_collections.talos_linux.talos.plugins.module_utils.lifecycle import ActionFailed
from ansible_collections.talos_linux.talos.plugins.module_utils.machine_config import (
    ConfigApplier,
    load_config,
    parse_yaml_stream,
    read_active_config,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.node import label, parse_version, read_version_tag, short_label
from ansible_collections.talos_linux.talos.plugins.module_utils.redaction import REDACTED, redact, secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.waits import Seen, Waiter

SYSTEM_NAMESPACE = "kube-system"
# The annotation of a mirror pod naming the version of the Talos resource it was rendered from.
CONFIG_VERSION_ANNOTATION = "talos.dev/config-version"
MANIFESTS = ("controlplane", "Manifests.kubernetes.talos.dev")
KUBE_PROXY_DAEMONSET = "kube-proxy"
# Talos (v1.13 and later) records the bootstrap manifests it applied in an inventory ConfigMap and marks each object
# with the annotation naming it; talosctl updates only objects that carry it, so every object applied here does.
INVENTORY = ("kube-system", "talos-bootstrap-manifests-inventory")
INVENTORY_ANNOTATION = "config.k8s.io/owning-inventory"
# Seconds between two looks at a pod, a node or a rollout.
POLL_SECONDS = 0.5


def _spec_image(resource):
    spec = resource.get("spec") if isinstance(resource.get("spec"), dict) else {}
    return spec.get("image")


def _minor(version):
    return parse_version("v" + version)[:2]


class NodeState:
    """What one node runs: its address, Talos version, active config and each component's image."""

    def __init__(self, node, talos_version, config_text, images):
        self.node = node
        self.talos_version = talos_version
        self.config_text = config_text
        self.documents = parse_yaml_stream(config_text, "the active machine config of %s" % label(node))
        self.images = images


def read_node_state(client, node, control_plane):
    """The NodeState of ``node``: its config and the images Talos's resources report."""
    images = {}
    wanted = (components.STATIC_PODS if control_plane else ()) + (components.KUBELET,)
    for component in wanted:
        namespace, resource_type, resource_id = component.resource
        images[component.name] = _spec_image(client.get_resource(namespace, resource_type, resource_id, node=node))
    return NodeState(node, read_version_tag(client, node), read_active_config(client, node), images)


class Change:
    """One planned change: ``component`` on ``node`` from ``image_from`` to ``image_to``, in its config ``home``."""

    def __init__(self, node, component, home, image_from, image_to):
        self.node = node
        self.component = component
        self.home = home
        self.image_from = image_from
        self.image_to = image_to

    def as_dict(self):
        return {
            "node": self.node,
            "component": self.component.name,
            "from": components.image_version(self.image_from) if self.image_from else None,
            "to": components.image_version(self.image_to),
            "image_from": self.image_from,
            "image_to": self.image_to,
            "document": self.home.document,
            "field": self.home.field,
        }

    def line(self):
        return "%s on %s: %s -> %s (%s %s)" % (
            self.component.name, label(self.node), self.image_from or "Talos default", self.image_to, self.home.document,
            self.home.field)


def inventoried(obj):
    """``obj`` marked as an object of Talos's bootstrap-manifest inventory."""
    obj = copy.deepcopy(obj)
    metadata = obj.setdefault("metadata", {})
    metadata["annotations"] = dict(metadata.get("annotations") or {}, **{INVENTORY_ANNOTATION: INVENTORY[1]})
    return obj


def inventory_key(obj):
    """How the inventory names an object: ``namespace_name_group_kind`` (``:`` in a name written ``__``)."""
    api_version = obj.get("apiVersion") or ""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    metadata = obj.get("metadata") or {}
    return "%s_%s_%s_%s" % (metadata.get("namespace") or "", str(metadata.get("name")).replace(":", "__"), group,
                            obj.get("kind"))


def redacted_object(obj):
    """A Kubernetes object for a diff or a result: a Secret's values and every secret-named field redacted."""
    if obj is None:
        return None
    obj = redact(copy.deepcopy(obj))
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(obj.get(field), dict):
                obj[field] = dict((key, REDACTED) for key in obj[field])
    return obj


def requested_versions(to_version, from_version=None):
    """``(to_version, from_version)`` as Kubernetes spells them (``from_version`` None when not given).

    Raises TalosConfigError, before anything is asked of the cluster, for a
    version that is none or a given ``from_version`` the path refuses.
    """
    to_version = components.kubernetes_version(to_version, "to_version")
    from_version = components.kubernetes_version(from_version, "from_version") if from_version else None
    problem = components.upgrade_path_problem(from_version, to_version) if from_version else None
    if problem:
        raise TalosConfigError(problem)
    return to_version, from_version


class KubernetesUpgrade:
    """One Kubernetes upgrade of a cluster, through ``client`` (Talos) and ``kube`` (a KubeAPI).

    ``control_planes`` and ``workers`` are node addresses (None: the Nodes the
    API server lists). ``progress`` hears each step and the long waits.
    """

    def __init__(self, client, kube, to_version, from_version=None, control_planes=None, workers=None, pre_pull=True,
                 upgrade_kubelet=True, sync_manifests=True, check_deprecated_apis=True, wait_timeout=600,
                 check_mode=False, progress=None):
        self.client = client
        self.kube = kube
        self.to_version, self.from_version = requested_versions(to_version, from_version)
        self.control_planes = list(control_planes or ())
        self.workers = list(workers or ())
        self.pre_pull = pre_pull
        self.upgrade_kubelet = upgrade_kubelet
        self.sync_manifests = sync_manifests
        self.check_deprecated_apis = check_deprecated_apis
        self.wait_timeout = wait_timeout
        self.check_mode = check_mode
        self.progress = progress or (lambda line: None)
        self.states = {}
        self.plan = []
        self.done = []
        self.result = {}
        self.proxy_enabled = False
        # For the module: the manifest changes as diffs, and the secret values the manifests hold.
        self.diffs = []
        self.secrets = set()

    # -- what to do -------------------------------------------------------------------

    def _discover(self):
        """The node lists not given: the Nodes the API server lists, by their control-plane label."""
        if not self.control_planes or not self.workers:
            listed = self.kube.nodes()
            self.control_planes = self.control_planes or [item["address"] for item in listed if item["control_plane"]]
            self.workers = self.workers or [item["address"] for item in listed if not item["control_plane"]]
        if not self.control_planes:
            raise TalosConfigError("No control-plane node was found: the API server lists no Node labelled "
                                   "node-role.kubernetes.io/control-plane; set control_plane_nodes.")

    def _read_states(self):
        for node in self.control_planes:
            self.states[node] = read_node_state(self.client, node, True)
        for node in (self.workers if self.upgrade_kubelet else ()):
            self.states[node] = read_node_state(self.client, node, False)

    def _detect_from_version(self):
        versions = []
        for node in self.control_planes:
            version = components.image_version(self.states[node].images[components.KUBE_APISERVER.name])
            if version is None:
                raise TalosConfigError("The kube-apiserver image of %s (%s) has no version tag: set from_version."
                                       % (label(node), self.states[node].images[components.KUBE_APISERVER.name]))
            versions.append(version)
        return min(versions, key=lambda version: parse_version("v" + version))

    def _check_path(self):
        problem = components.upgrade_path_problem(self.from_version, self.to_version)
        if problem:
            raise TalosConfigError(problem)
        for node, state in self.states.items():
            problem = components.talos_support_problem(state.talos_version, self.to_version, label(node))
            if problem:
                raise TalosConfigError(problem)

    def _check_removed_arguments(self):
        """Refuse a minor upgrade while a config gives a component a flag, feature gate or admission plugin the
        target removed: the component would not start on the new version."""
        if _minor(self.to_version) <= _minor(self.from_version):
            return
        found = []
        for node, state in self.states.items():
            wanted = (components.STATIC_PODS + (components.KUBE_PROXY,) if node in self.control_planes else ()) + (
                components.KUBELET,)
            for component in wanted:
                for item in components.removed_arguments(component, components.extra_args(state.documents, component),
                                                         self.to_version):
                    found.append("%s of %s on %s" % (item, component.name, label(node)))
        if found:
            raise TalosConfigError("Kubernetes %s removed what the machine config still gives its components: %s; "
                                   "remove them from the config's extraArgs first." % (self.to_version, "; ".join(found)))

    def _check_deprecated_apis(self):
        removed = []
        if self.check_deprecated_apis and _minor(self.to_version) > _minor(self.from_version):
            removed = components.removed_apis(self.kube.deprecated_api_requests(), self.to_version)
        self.result["deprecated_apis"] = removed
        problem = components.removed_apis_problem(removed, self.to_version)
        if problem:
            raise TalosConfigError(problem)

    def _change(self, node, component, running):
        state = self.states[node]
        home = components.config_home(state.documents, component)
        target = components.retagged(running or home.image, self.to_version, component.repository)
        if running == target:
            return None
        return Change(node, component, home, running, target)

    def _make_plan(self):
        for component in components.STATIC_PODS:
            for node in self.control_planes:
                self._add(self._change(node, component, self.states[node].images[component.name]))
        self.proxy_enabled = all(components.kube_proxy_enabled(self.states[node].documents) for node in self.control_planes)
        if self.proxy_enabled:
            for node in self.control_planes:
                home = components.config_home(self.states[node].documents, components.KUBE_PROXY)
                self._add(self._change(node, components.KUBE_PROXY, home.image))
        if self.upgrade_kubelet:
            for node in self.control_planes + self.workers:
                self._add(self._change(node, components.KUBELET, self.states[node].images[components.KUBELET.name]))

    def _add(self, change):
        if change is not None:
            self.plan.append(change)

    # -- doing it ----------------------------------------------------------------------

    def run(self):
        """Upgrade, or in check mode plan; returns the result (raises ActionFailed with the result so far)."""
        self._discover()
        self._read_states()
        if self.from_version is None:
            self.from_version = self._detect_from_version()
        self.result.update(from_version=self.from_version, to_version=self.to_version,
                           control_plane_nodes=self.control_planes, worker_nodes=self.workers if self.upgrade_kubelet else [])
        self._check_path()
        self._check_removed_arguments()
        self._check_deprecated_apis()
        self._make_plan()
        self.result["plan"] = [change.as_dict() for change in self.plan]
        self.result["pre_pulled"] = []
        if self.check_mode:
            for change in self.plan:
                self.progress("plan: %s" % change.line())
            self._validate_plan()
        else:
            if self.pre_pull:
                self._pre_pull()
            self._upgrade_static_pods()
            self._upgrade_kube_proxy()
            self._upgrade_kubelets()
        self.result["manifests"] = self._sync_manifests() if self.sync_manifests else []
        self.result["changed"] = bool(self.plan or self.result["manifests"])
        return self.result

    def _failed(self, what, error):
        self.result["done"] = [change.as_dict() for change in self.done]
        left = "nothing was changed" if not self.done else "%d of %d planned changes were made" % (len(self.done), len(self.plan))
        raise ActionFailed("%s: %s; %s, rerun the task to finish the upgrade." % (what, error.message.rstrip("."), left),
                           dict(self.result, changed=bool(self.done)), error)

    def _patched_text(self, node, changes):
        state = self.states[node]
        text, documents = state.config_text, state.documents
        for change in changes:
            home = components.config_home(documents, change.component)
            text = components.config_with_image(text, documents, home, change.image_to)
            documents = parse_yaml_stream(text, "the patched machine config of %s" % label(node))
        return text, documents

    def _validate_plan(self):
        """Check mode: each node checks its patched config in a dry run."""
        for node in self.control_planes + self.workers:
            changes = [change for change in self.plan if change.node == node]
            if not changes:
                continue
            text, _documents = self._patched_text(node, changes)
            try:
                ConfigApplier(self.client, load_config(config=text), mode="no_reboot", check_mode=True).apply(node)
            except TalosError as error:
                self._failed("%s refused the patched machine config in a dry run" % label(node), error)

    def _pre_pull(self):
        wanted = []  # (containerd namespace, {node: image}) in the order talosctl pulls
        for component in components.STATIC_PODS + (components.KUBE_PROXY,):
            images = dict((change.node, change.image_to) for change in self.plan if change.component is component)
            if images:
                wanted.append(("cri", images))
        if any(change.component is components.KUBE_PROXY for change in self.plan):
            proxy = next(change.image_to for change in self.plan if change.component is components.KUBE_PROXY)
            wanted.append(("cri", dict((node, proxy) for node in self.workers)))
        kubelets = dict((change.node, change.image_to) for change in self.plan if change.component is components.KUBELET)
        if kubelets:
            wanted.append(("system", kubelets))
        for namespace, images in wanted:
            if not images:
                continue
            outcomes = NodeImages(self.client, namespace, progress=self.progress).ensure_present(images)
            for node, outcome in outcomes.items():
                if isinstance(outcome, TalosError):
                    self._failed("Pre-pulling %s on %s failed" % (images[node], label(node)), outcome)
                self.result["pre_pulled"].append({"node": node, "image": images[node], "namespace": namespace,
                                                  "pulled": bool(outcome["changed"])})

    def _apply(self, change, step):
        text, documents = self._patched_text(change.node, [change])
        try:
            ConfigApplier(self.client, load_config(config=text), mode="no_reboot").apply(change.node)
        except TalosError as error:
            self._failed("%s on %s, %s" % (change.component.name, label(change.node), step), error)
        self.states[change.node].config_text, self.states[change.node].documents = text, documents
        self.done.append(change)
        self.progress("%s on %s: machine config patched (%s -> %s)" % (
            change.component.name, label(change.node), change.image_from or "Talos default", change.image_to))

    def _changes(self, component):
        return [change for change in self.plan if change.component is component]

    def _resource_version(self, node, component):
        namespace, resource_type, resource_id = component.resource
        return self.client.get_resource(namespace, resource_type, resource_id, node=node)["metadata"]["version"]

    def _upgrade_static_pods(self):
        for component in components.STATIC_PODS:
            changes = dict((change.node, change) for change in self._changes(component))
            if changes:
                self.progress("updating %s to %s" % (component.name, self.to_version))
            for node in self.control_planes if changes else ():
                change = changes.get(node)
                step = "reading its static pod's config version"
                try:
                    version = self._resource_version(node, component)
                    if change is not None:
                        step = "patching the machine config"
                        self._apply(change, step)
                        step = "waiting for Talos to render the new static pod"
                        version = self._wait_config_rendered(node, component, change.image_to, version)
                    # A node already patched (a rerun after an interruption) is waited for too: the next node
                    # only goes once this one serves again.
                    step = "waiting for the mirror pod to run the new version and be Ready"
                    self._wait_static_pod(node, component, version)
                except ActionFailed:
                    raise
                except TalosError as error:
                    self._failed("%s on %s, %s" % (component.name, label(node), step), error)

    def _wait_config_rendered(self, node, component, image, before):
        namespace, resource_type, resource_id = component.resource

        def poll():
            resource = self.client.get_resource(namespace, resource_type, resource_id, node=node)
            version = resource["metadata"]["version"]
            if _spec_image(resource) == image and version != before:
                return Seen("rendered", done=True, value=version)
            return Seen("config version %s" % version, detail="%s still has image %s" % (resource_type, _spec_image(resource)))

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "Talos on %s to render %s with %s" % (label(node), component.name, image),
            "%s %s" % (short_label(node), component.name))

    def _wait_static_pod(self, node, component, config_version):
        def poll():
            pods = [pod for pod in self.kube.pods(SYSTEM_NAMESPACE, "k8s-app=%s" % component.name) if pod["host_ip"] == node]
            if not pods:
                return Seen("no mirror pod", detail="no %s pod on %s in kube-system" % (component.name, node))
            pod = pods[0]
            seen = pod["annotations"].get(CONFIG_VERSION_ANNOTATION)
            if seen != config_version:
                return Seen("config version %s" % seen, detail="pod %s runs config version %s, expected %s"
                            % (pod["name"], seen, config_version))
            if not pod["ready"]:
                return Seen("not ready", detail="pod %s is not Ready" % pod["name"])
            return Seen("ready", done=True, value=pod)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "the %s pod on %s to run config version %s and be Ready" % (component.name, label(node), config_version),
            "%s %s" % (short_label(node), component.name), tolerate=lambda error: getattr(error, "status", None) is None)

    def _upgrade_kube_proxy(self):
        changes = self._changes(components.KUBE_PROXY)
        if not changes:
            return
        self.progress("updating kube-proxy to %s" % self.to_version)
        for change in changes:
            self._apply(change, "patching the machine config")
        image = changes[0].image_to
        step = "waiting for Talos to render the kube-proxy manifest"
        try:
            objects = self._wait_manifest_image(self.control_planes[0], KUBE_PROXY_DAEMONSET, image)
            step = "applying the kube-proxy manifest"
            for obj in objects:
                self.kube.apply(inventoried(obj))
            step = "waiting for the kube-proxy DaemonSet to roll out"
            self._wait_rollout(KUBE_PROXY_DAEMONSET)
        except TalosError as error:
            self._failed("kube-proxy, %s" % step, error)

    def _wait_manifest_image(self, node, daemonset, image):
        def poll():
            for objects in self._manifests(node):
                for obj in objects:
                    if obj.get("kind") == "DaemonSet" and (obj.get("metadata") or {}).get("name") == daemonset:
                        images = [container.get("image") for container in
                                  (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or ()]
                        if image in images:
                            return Seen("rendered", done=True, value=objects)
                        return Seen("image %s" % ", ".join(images))
            return Seen("no manifest", detail="no Talos manifest holds DaemonSet %s" % daemonset)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "Talos on %s to render the %s manifest with %s" % (label(node), daemonset, image),
            "%s manifests" % short_label(node))

    def _wait_rollout(self, name):
        def poll():
            status = self.kube.daemonset_rollout(SYSTEM_NAMESPACE, name)
            if status is None:
                return Seen("absent", detail="DaemonSet %s/%s does not exist" % (SYSTEM_NAMESPACE, name))
            state = "%d/%d updated, %d available" % (status["updated"], status["desired"], status["available"])
            done = (status["observed"] >= status["generation"] and status["updated"] >= status["desired"]
                    and status["available"] >= status["desired"])
            return Seen(state, done=done, value=status)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "DaemonSet %s/%s to roll out" % (SYSTEM_NAMESPACE, name), "daemonset %s" % name,
            tolerate=lambda error: getattr(error, "status", None) is None)

    def _upgrade_kubelets(self):
        changes = dict((change.node, change) for change in self._changes(components.KUBELET))
        if changes:
            self.progress("updating kubelet to %s" % self.to_version)
        for node in self.control_planes + self.workers if changes else ():
            change = changes.get(node)
            if change is not None:
                self._apply(change, "patching the machine config")
            try:
                self._wait_kubelet(node)
            except TalosError as error:
                self._failed("kubelet on %s, waiting for the Node to report %s and be Ready" % (label(node), self.to_version),
                             error)

    def _wait_kubelet(self, node):
        wanted = "v" + self.to_version

        def poll():
            found = [item for item in self.kube.nodes() if item["address"] == node]
            if not found:
                return Seen("no Node", detail="the API server lists no Node with address %s" % node)
            item = found[0]
            if item["kubelet_version"] != wanted:
                return Seen("kubelet %s" % item["kubelet_version"], detail="Node %s reports kubelet %s"
                            % (item["name"], item["kubelet_version"]))
            if not item["ready"]:
                return Seen("not ready", detail="Node %s is not Ready" % item["name"])
            return Seen("ready", done=True, value=item)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "the Node of %s to report kubelet %s and be Ready" % (label(node), wanted),
            "%s kubelet" % short_label(node), tolerate=lambda error: getattr(error, "status", None) is None)

    # -- bootstrap manifests ---------------------------------------------------------------

    def _manifests(self, node):
        """Each Talos Manifest resource's objects, in the resources' order (their IDs sort as Talos applies them)."""
        resources = self.client.list_resources(MANIFESTS[0], MANIFESTS[1], node=node)
        # A Manifest's spec is the list of its objects (ManifestSpec marshals as its items).
        return [[obj for obj in (resource.get("spec") if isinstance(resource.get("spec"), list) else [resource.get("spec")])
                 if isinstance(obj, dict)]
                for resource in sorted(resources, key=lambda resource: resource["metadata"]["id"])]

    def _sync_manifests(self):
        """Server-side apply every bootstrap manifest that differs from what the API server has."""
        node = self.control_planes[0]
        changes = []
        try:
            objects = [inventoried(obj) for group in self._manifests(node) for obj in group]
        except TalosError as error:
            self._failed("Reading the bootstrap manifests from %s" % label(node), error)
        for obj in objects:
            self.secrets.update(secret_values(obj) if obj.get("kind") != "Secret" else
                                set(str(value) for field in ("data", "stringData")
                                    for value in (obj.get(field) or {}).values()))
        for obj in objects:
            what = object_label(obj)
            try:
                live = self.kube.live(obj)
                applied = self.kube.apply(obj, dry_run=True)
            except TalosError as error:
                self._failed("Syncing the bootstrap manifests, %s" % what, error)
            if live is not None and strip_volatile(live) == strip_volatile(applied):
                continue
            action = "created" if live is None else "updated"
            changes.append({"object": what, "action": action})
            self.diffs.append({
                "before": redacted_object(strip_volatile(live)) if live is not None else None,
                "after": redacted_object(strip_volatile(applied)),
                "object": what,
            })
            self.progress("manifest %s: %s%s" % (what, action, " (check mode)" if self.check_mode else ""))
            if not self.check_mode:
                try:
                    self.kube.apply(obj)
                except TalosError as error:
                    self._failed("Syncing the bootstrap manifests, applying %s" % what, error)
        if not self.check_mode and objects:
            try:
                self.kube.add_config_map_keys(INVENTORY[0], INVENTORY[1], [inventory_key(obj) for obj in objects])
            except TalosError as error:
                self._failed("Recording the bootstrap manifests in ConfigMap %s/%s" % INVENTORY, error)
        return changes
