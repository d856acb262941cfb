# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Upgrading Kubernetes on a Talos cluster, as ``talosctl upgrade-k8s`` does it and in its order.

0. Find each Talos node's Kubernetes Node (by the Node's name, any address it
   reports, or the nodename Talos registers): every wait looks at what
   Kubernetes reports of that Node.
1. Check the versions: first what needs no node, then every node's Talos
   support before the Kubernetes API is asked, then the path from the lowest
   version the control plane runs (one minor at a time), and for a minor
   upgrade what the target removes that is still used: flags, feature gates and
   admission plugins the components are started with (as Talos renders them),
   objects of removed API resources, requests to removed APIs.
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
6. Sync Talos's bootstrap manifests to the API server (kubernetes_manifests: server-side apply in stages, the
   inventory and its policy, pruning, the wait until what was written is ready).

``upgrade_kubernetes`` is the whole task: the admin kubeconfig from one control plane (its secrets hidden at once),
the Kubernetes API it reaches, the upgrade, its message and diff.

Every step reads what the node runs before it acts (a node's config is read
again right before it is patched), so a rerun at the target changes nothing,
a rerun after an interruption finishes the job, and an edit made meanwhile is
kept. Check mode
returns the plan and the manifest changes, having only asked the nodes to
validate the patched configs (dry run).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import components
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosConfigError,
    TalosError,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.images.store import NodeImages
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubeAPI, is_retryable
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.kubeconfig import fetch_kubeconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.manifests import (
    DEFAULT_INVENTORY_POLICY,
    DEFAULT_RECONCILE_TIMEOUT,
    ManifestSync,
    SyncOptions,
    inventoried,
    manifest_secrets,
    read_manifests,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import (
    ConfigApplier,
    load_config,
    parse_yaml_stream,
    read_active_config,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import parse_version, read_version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter

SYSTEM_NAMESPACE = components.SYSTEM_NAMESPACE
KUBE_PROXY_DAEMONSET = "kube-proxy"
# The COSI type of the static pods Talos renders (one per component, by its name).
STATIC_POD_RESOURCE = ("k8s", "StaticPods.kubernetes.talos.dev")
# Seconds between two looks at a pod, a node or a rollout.
POLL_SECONDS = 0.5


def _spec_image(resource):
    spec = resource.get("spec") if isinstance(resource.get("spec"), dict) else {}
    return spec.get("image")


def _minor(version):
    return parse_version("v" + version)[:2]


class NodeState:
    """What one node runs: its address, Talos version, active config, each component's image and the kubelet's
    command line and feature gates (its KubeletSpec)."""

    def __init__(self, node, talos_version, config_text, images, kubelet_spec):
        self.node = node
        self.talos_version = talos_version
        self.config_text = config_text
        self.documents = parse_yaml_stream(config_text, "the active machine config of %s" % label(node))
        self.images = images
        self.kubelet_args = [str(arg) for arg in kubelet_spec.get("args") or ()]
        config = kubelet_spec.get("config") if isinstance(kubelet_spec.get("config"), dict) else {}
        self.kubelet_feature_gates = [str(gate) for gate in (config.get("featureGates") or {})]


def read_node_state(client, node, control_plane, talos_version):
    """The NodeState of ``node``: its config and what Talos's resources report it runs."""
    images = {}
    kubelet_spec = {}
    wanted = (components.STATIC_PODS if control_plane else ()) + (components.KUBELET,)
    for component in wanted:
        namespace, resource_type, resource_id = component.resource
        resource = client.get_resource(namespace, resource_type, resource_id, node=node)
        images[component.name] = _spec_image(resource)
        if component is components.KUBELET and isinstance(resource.get("spec"), dict):
            kubelet_spec = resource["spec"]
    return NodeState(node, talos_version, read_active_config(client, node), images, kubelet_spec)


def static_pod_command(client, node, component):
    """The command line Talos renders for ``component``'s static pod on ``node`` (its StaticPod resource: the
    container's command and args), or None when the node renders none (a component the config disables)."""
    try:
        pod = client.get_resource(STATIC_POD_RESOURCE[0], STATIC_POD_RESOURCE[1], component.name, node=node).get("spec") or {}
    except TalosError as error:
        if error.code == "NotFound":
            return None
        raise
    containers = ((pod.get("spec") or {}).get("containers") or []) if isinstance(pod, dict) else []
    container = next((item for item in containers if item.get("name") == component.name), containers[0] if containers else {})
    return [str(arg) for arg in (container.get("command") or []) + (container.get("args") or [])]


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


def requested_versions(to_version, from_version=None):
    """``(to_version, from_version)`` as Kubernetes spells them (``from_version`` None when not given).

    Raises TalosConfigError, before anything is asked of the cluster, for a
    version that is none, a target no Talos release supports, or a given
    ``from_version`` the path refuses.
    """
    to_version = components.kubernetes_version(to_version, "to_version")
    from_version = components.kubernetes_version(from_version, "from_version") if from_version else None
    problem = components.unsupported_everywhere_problem(to_version)
    if problem is None and from_version:
        problem = components.upgrade_path_problem(from_version, to_version)
    if problem:
        raise TalosConfigError(problem)
    return to_version, from_version


def requested_repositories(images):
    """``{component name: repository}`` from the image options (``{option: value or None}``, options named in
    IMAGE_OPTIONS); raises TalosConfigError naming the option for a value that is no repository."""
    return dict((IMAGE_OPTIONS[option].name, components.image_repository(value, option))
                for option, value in images.items() if value is not None)


# The module's image options (talosctl's --apiserver-image, ...): the repository each component moves to.
IMAGE_OPTIONS = {
    "apiserver_image": components.KUBE_APISERVER,
    "controller_manager_image": components.KUBE_CONTROLLER_MANAGER,
    "scheduler_image": components.KUBE_SCHEDULER,
    "proxy_image": components.KUBE_PROXY,
    "kubelet_image": components.KUBELET,
}


class KubernetesUpgrade:
    """One Kubernetes upgrade of a cluster, through ``client`` (Talos) and ``kube`` (a KubeAPI; asked nothing before
    the checks that need only Talos).

    ``control_planes`` and ``workers`` are Talos nodes as the Talos API reaches them (an address or a name; None:
    the InternalIPs of the Nodes the API server lists). ``issuer`` is the node that issues the kubeconfig.
    ``repositories`` (``requested_repositories``) moves components to other repositories. ``progress`` hears each
    step and the long waits.
    """

    def __init__(self, client, kube, to_version, from_version=None, control_planes=None, workers=None, pre_pull=True,
                 upgrade_kubelet=True, sync_manifests=True, check_deprecated_apis=True, wait_timeout=600,
                 check_mode=False, progress=None, manifest_options=None, issuer=None, repositories=None, hide=None):
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
        self.manifest_sync = ManifestSync(kube, manifest_options, check_mode=check_mode, progress=self.progress)
        self.issuer = issuer
        self.repositories = dict(repositories or {})
        self.talos_versions = {}
        # Talos node -> the name of its Kubernetes Node.
        self.kube_names = {}
        self.states = {}
        self.plan = []
        self.done = []
        self.result = {}
        self.proxy_enabled = False
        # For the module: the manifest changes as diffs. ``hide`` hears the secret values the manifests hold as
        # soon as they are read, so that a failure after them masks them too.
        self.diffs = []
        self.hide = hide or (lambda values: None)

    # -- what to do -------------------------------------------------------------------

    def _nodes(self):
        return self.control_planes + (self.workers if self.upgrade_kubelet else [])

    def _check_talos_support(self, nodes):
        """Refuse, naming the node, a target some node's Talos does not support (its Version read once)."""
        for node in nodes:
            if node in self.talos_versions:
                continue
            self.talos_versions[node] = read_version_tag(self.client, node)
            problem = components.talos_support_problem(self.talos_versions[node], self.to_version, label(node))
            if problem:
                raise TalosConfigError(problem)

    def _find_nodes(self):
        """The node lists not given, from the Nodes the API server lists (their InternalIP, as talosctl reaches
        them); then each Talos node's Kubernetes Node, by its name or any address the Node reports, else by the
        nodename Talos registered it with. A node that has none is refused before anything changes."""
        listed = self.kube.nodes()
        given = [("controlplane_nodes", node) for node in self.control_planes] + [
            ("worker_nodes", node) for node in (self.workers if self.upgrade_kubelet else ())]
        if not self.control_planes or not self.workers:
            self.control_planes = self.control_planes or [item["address"] for item in listed if item["control_plane"]]
            self.workers = self.workers or [item["address"] for item in listed if not item["control_plane"]]
        if not self.control_planes:
            raise TalosConfigError("No control-plane node was found: the API server lists no Node labelled "
                                   "node-role.kubernetes.io/control-plane; set controlplane_nodes.")
        by_name = dict((item["name"], item) for item in listed)
        unknown = []
        named = [node for _option, node in given]
        for option, node in given + [(None, node) for node in self._nodes() if node not in named]:
            found = [item for item in listed if node == item["name"] or node in item["addresses"]]
            if not found:
                nodename = self._talos_nodename(node)
                found = [by_name[nodename]] if nodename in by_name else []
            if found:
                self.kube_names[node] = found[0]["name"]
            else:
                unknown.append("%s entry %s" % (option, node) if option else "node %s" % node)
        if unknown:
            raise TalosConfigError("No Kubernetes Node matches %s (by the Node's name, an address it reports, or the "
                                   "nodename Talos registers the node with); the API server lists %s; nothing was "
                                   "changed." % (", ".join(unknown), ", ".join(
                                       "%s (%s)" % (item["name"], ", ".join(item["addresses"])) for item in listed) or "no Node"))
        self.result["kubernetes_nodes"] = dict(self.kube_names)

    def _talos_nodename(self, node):
        try:
            return components.read_nodename(self.client, node)
        except TalosError as error:
            if error.code == "NotFound":
                return None
            raise

    def _read_states(self):
        for node in self.control_planes:
            self.states[node] = read_node_state(self.client, node, True, self.talos_versions[node])
        for node in (self.workers if self.upgrade_kubelet else ()):
            self.states[node] = read_node_state(self.client, node, False, self.talos_versions[node])
        self.proxy_enabled = all(components.kube_proxy_enabled(self.states[node].documents) for node in self.control_planes)

    def _detect_from_version(self):
        """The lowest version of kube-apiserver, kube-controller-manager, kube-scheduler (on every control plane)
        and kube-proxy (its DaemonSet), as talosctl detects it: after an interrupted upgrade the component left
        behind still says where the cluster is."""
        versions = []
        for node in self.control_planes:
            for component in components.STATIC_PODS:
                image = self.states[node].images[component.name]
                version = components.image_version(image)
                if version is None:
                    raise TalosConfigError("The %s image of %s (%s) has no version tag: set from_version."
                                           % (component.name, label(node), image))
                versions.append(version)
        if self.proxy_enabled:
            rollout = self.kube.daemonset_rollout(SYSTEM_NAMESPACE, KUBE_PROXY_DAEMONSET, retry=True)
            for image in (rollout or {}).get("images", ()):
                if components.image_version(image):
                    versions.append(components.image_version(image))
        return min(versions, key=lambda version: parse_version("v" + version))

    def _check_path(self):
        problem = components.upgrade_path_problem(self.from_version, self.to_version)
        if problem:
            raise TalosConfigError(problem)

    def _check_removed_arguments(self):
        """Refuse a minor upgrade while a component is started with a flag, feature gate or admission plugin the
        target removed (what Talos renders: the static pods' command lines, the kubelet's arguments and feature
        gates), as talosctl does: the component would not start on the new version."""
        path = components.upgrade_path(self.from_version, self.to_version)
        if path is None:
            return
        found = []
        for node in self.control_planes:
            for component in components.STATIC_PODS:
                args = static_pod_command(self.client, node, component)
                for item in components.removed_arguments(component.name, args or (), path):
                    found.append("%s of %s on %s" % (item, component.name, label(node)))
        for node in self._nodes():
            state = self.states[node]
            for item in components.removed_arguments(components.KUBELET.name, state.kubelet_args, path,
                                                     feature_gates=state.kubelet_feature_gates):
                found.append("%s of kubelet on %s" % (item, label(node)))
        if found:
            raise TalosConfigError("Kubernetes %s removed what the components are still started with: %s; remove them "
                                   "from the machine config (extraArgs, or the kubelet's extraConfig) first."
                                   % (self.to_version, "; ".join(found)))

    def _check_removed_api_resources(self):
        """Refuse a minor upgrade while the API server holds objects of an API resource the target removed."""
        path = components.upgrade_path(self.from_version, self.to_version)
        held = []
        for group, version, resource in components.removed_api_resources(path) if path else ():
            count = self.kube.object_count(group, version, resource)
            if count:
                held.append("%s.%s%s (%d object%s)" % (resource, version, "." + group if group else "", count,
                                                       "" if count == 1 else "s"))
        if held:
            raise TalosConfigError("Kubernetes %s no longer serves API resources the cluster still holds objects of: %s; "
                                   "migrate or delete them first." % (self.to_version, ", ".join(held)))

    def _check_deprecated_apis(self):
        removed = []
        if self.check_deprecated_apis and _minor(self.to_version) > _minor(self.from_version):
            removed = components.removed_apis(self.kube.deprecated_api_requests(), self.to_version)
        self.result["deprecated_apis"] = removed
        problem = components.removed_apis_problem(removed, self.to_version)
        if problem:
            raise TalosConfigError(problem)

    def _target(self, component, image):
        return components.retagged(image, self.to_version, component.repository, self.repositories.get(component.name))

    def _change(self, node, component, running):
        state = self.states[node]
        home = components.config_home(state.documents, component)
        target = self._target(component, running or home.image)
        if running == target:
            return None
        return Change(node, component, home, running, target)

    def _make_plan(self):
        for component in components.STATIC_PODS:
            for node in self.control_planes:
                self._add(self._change(node, component, self.states[node].images[component.name]))
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
        # Talos's support first: it needs no Kubernetes API.
        self._check_talos_support([self.issuer] + self.control_planes + self.workers)
        self._find_nodes()
        self._check_talos_support(self._nodes())
        self._read_states()
        if self.from_version is None:
            self.from_version = self._detect_from_version()
        self.result.update(from_version=self.from_version, to_version=self.to_version,
                           controlplane_nodes=self.control_planes, worker_nodes=self.workers if self.upgrade_kubelet else [])
        self._check_path()
        self._check_removed_arguments()
        self._check_removed_api_resources()
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
        # The sync's lists fill as it writes, so that a failure reports what it wrote too.
        self.result["manifests"] = self.manifest_sync.changes
        self.result["manifests_inventory"] = self.manifest_sync.inventory
        if self.sync_manifests:
            self._sync_manifests()
        self.result["changed"] = bool(self.plan or self.manifest_sync.changes or self.manifest_sync.inventory["added"]
                                      or self.manifest_sync.inventory["removed"]) or self._wrote()
        return self.result

    def _wrote(self):
        """Whether the task wrote anything: a machine config, or anything in the Kubernetes API (the kube-proxy
        manifest, the manifest sync, the inventory ConfigMap: every write the KubeAPI counted)."""
        return bool(self.done) or bool(self.kube.writes)

    def _failed(self, what, error):
        self.result["done"] = [change.as_dict() for change in self.done]
        made = ["%d of %d planned changes were made" % (len(self.done), len(self.plan))] if self.done else []
        if self.kube.writes:
            made.append("%d write(s) were made in the Kubernetes API" % self.kube.writes)
        left = " and ".join(made) or "nothing was changed"
        raise ActionFailed("%s: %s; %s, rerun the task to finish the upgrade." % (what, error.message.rstrip("."), left),
                           dict(self.result, changed=self._wrote()), error)

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
        """Patch ``change`` into the node's config as the node has it now (read again: an edit made during a long
        upgrade is kept), and apply it without a reboot."""
        node = change.node
        try:
            text = read_active_config(self.client, node)
            documents = parse_yaml_stream(text, "the active machine config of %s" % label(node))
            home = components.config_home(documents, change.component)
            patched = home.image != change.image_to
            if patched:
                text = components.config_with_image(text, documents, home, change.image_to)
                documents = parse_yaml_stream(text, "the patched machine config of %s" % label(node))
                ConfigApplier(self.client, load_config(config=text), mode="no_reboot").apply(node)
                self.done.append(change)
        except TalosError as error:
            self._failed("%s on %s, %s" % (change.component.name, label(node), step), error)
        self.states[node].config_text, self.states[node].documents = text, documents
        self.progress("%s on %s: machine config %s (%s -> %s)" % (
            change.component.name, label(node), "patched" if patched else "already set", change.image_from or "Talos default",
            change.image_to))

    def _changes(self, component):
        return [change for change in self.plan if change.component is component]

    def _rendered(self, node, component):
        """``(version, image)`` of the config resource Talos renders ``component``'s static pod from."""
        namespace, resource_type, resource_id = component.resource
        resource = self.client.get_resource(namespace, resource_type, resource_id, node=node)
        return resource["metadata"]["version"], _spec_image(resource)

    def _upgrade_static_pods(self):
        for component in components.STATIC_PODS:
            changes = dict((change.node, change) for change in self._changes(component))
            if changes:
                self.progress("updating %s to %s" % (component.name, self.to_version))
            for node in self.control_planes if changes else ():
                change = changes.get(node)
                step = "reading its static pod's config version"
                try:
                    version, image = self._rendered(node, component)
                    # Rendered with the new image already (the config was patched meanwhile): nothing to wait for
                    # but the pod.
                    if change is not None and image != change.image_to:
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
        name = self.kube_names[node]

        def poll():
            return components.mirror_pod_seen(self.kube, component.name, name, components.CONFIG_VERSION_ANNOTATION,
                                              config_version)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "the %s pod on %s to run config version %s and be Ready" % (component.name, label(node), config_version),
            "%s %s" % (short_label(node), component.name), tolerate=is_retryable)

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
            for objects in read_manifests(self.client, node):
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
            poll, "DaemonSet %s/%s to roll out" % (SYSTEM_NAMESPACE, name), "daemonset %s" % name, tolerate=is_retryable)

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
        name = self.kube_names[node]

        def poll():
            found = [item for item in self.kube.nodes(retry=False) if item["name"] == name]
            if not found:
                return Seen("no Node", detail="the API server lists no Node %s" % name)
            item = found[0]
            if item["kubelet_version"] != wanted:
                return Seen("kubelet %s" % item["kubelet_version"], detail="Node %s reports kubelet %s"
                            % (item["name"], item["kubelet_version"]))
            if not item["ready"]:
                return Seen("not ready", detail="Node %s is not Ready" % item["name"])
            return Seen("ready", done=True, value=item)

        return Waiter(self.wait_timeout, POLL_SECONDS, self.progress).until(
            poll, "the Node of %s to report kubelet %s and be Ready" % (label(node), wanted),
            "%s kubelet" % short_label(node), tolerate=is_retryable)

    # -- bootstrap manifests ---------------------------------------------------------------

    def _sync_manifests(self):
        node = self.control_planes[0]
        try:
            objects = [obj for group in read_manifests(self.client, node) for obj in group]
        except TalosError as error:
            self._failed("Reading the bootstrap manifests from %s" % label(node), error)
        self.hide(manifest_secrets(objects))
        try:
            self.manifest_sync.run(objects)
        except TalosError as error:
            self._failed("Syncing the bootstrap manifests, %s" % self.manifest_sync.step, error)
        self.diffs.extend(self.manifest_sync.diffs)


# -- the task ------------------------------------------------------------------------------


def upgrade_kubernetes(client, node, to_version, from_version=None, server=None, repositories=None, control_planes=None,
                       workers=None, pre_pull=True, upgrade_kubelet=True, sync_manifests=True, prune=True,
                       inventory_policy=DEFAULT_INVENTORY_POLICY, recreate_immutable=False,
                       reconcile_timeout=DEFAULT_RECONCILE_TIMEOUT, check_deprecated_apis=True, wait_timeout=600,
                       check_mode=False, diff=False, hide=None, progress=None):
    """Upgrade Kubernetes to ``to_version`` (or in check mode plan it) with the admin kubeconfig ``node`` issues;
    returns the whole result: KubernetesUpgrade.run's with ``msg`` and, with ``diff``, ``diff``.

    ``hide(values)`` hears the kubeconfig's secrets as soon as it is read, and
    the manifests' as they are, so that no result, message or failure shows
    them. ``server`` is the API server to reach instead of the kubeconfig's
    (kube_api.api_server_url); ``repositories`` as requested_repositories
    returns them; ``prune``, ``inventory_policy``, ``recreate_immutable`` and
    ``reconcile_timeout`` are the manifest sync's (SyncOptions). Raises
    ActionFailed with the result so far; the API connection is closed either way.
    """
    hide = hide or (lambda values: None)
    _text, kubeconfig = fetch_kubeconfig(client, node)
    hide(secret_values(kubeconfig))
    kube = KubeAPI(kubeconfig, server=server, retry_seconds=wait_timeout)
    try:
        upgrade = KubernetesUpgrade(
            client, kube, to_version, from_version=from_version, issuer=node, repositories=repositories,
            control_planes=control_planes, workers=workers, pre_pull=pre_pull, upgrade_kubelet=upgrade_kubelet,
            sync_manifests=sync_manifests, check_deprecated_apis=check_deprecated_apis, wait_timeout=wait_timeout,
            check_mode=check_mode, progress=progress, hide=hide,
            manifest_options=SyncOptions(prune=prune, inventory_policy=inventory_policy, recreate=recreate_immutable,
                                         reconcile_timeout=reconcile_timeout))
        result = upgrade.run()
    finally:
        kube.close()
    result["msg"] = upgrade_message(result, check_mode)
    if diff:
        result["diff"] = upgrade_diff(upgrade)
    return result


def upgrade_message(result, check_mode):
    """The task's one sentence for ``result`` (KubernetesUpgrade.run's)."""
    if not result["changed"]:
        return "Kubernetes %s runs on every node and the bootstrap manifests are in sync: nothing to do." % result["to_version"]
    return "%s Kubernetes from %s to %s: %d image change(s), %d manifest object(s) %s." % (
        "Would upgrade" if check_mode else "Upgraded", result["from_version"], result["to_version"], len(result["plan"]),
        len(result["manifests"]), "to sync" if check_mode else "synced")


def upgrade_diff(upgrade):
    """The task's diff of a run ``upgrade``: the images each node runs before and after, then each manifest object
    the sync changed (live against Talos's manifest, its secrets redacted by the sync)."""
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
