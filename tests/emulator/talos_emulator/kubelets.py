# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The emulated nodes as the kubelets of a real Kubernetes API server (``tests/kube_apiserver``).

``EmulatedCluster.run_kubelets()`` starts a thread that, every ``interval``
once etcd is bootstrapped, writes into the API server what a Talos cluster's
kubelets and control plane would show there:

- a ``Node`` per node whose kubelet runs (registered once its kubelet first
  became ready), with Talos's labels, the control-plane taint, InternalIP = the
  node's address, ``kubeletVersion`` = the tag of the running kubelet image and
  a Ready condition (False while the kubelet restarts or cannot pull its image,
  Unknown while the node or its kubelet service is off, as the node lifecycle
  controller would mark it);
- Talos's bootstrap manifests, once per cluster, each object created when it
  is missing (server-side apply as ``talos``) and listed in the
  ``talos-bootstrap-manifests-inventory`` ConfigMap, never updated (Talos's
  manifest-apply controller);
- a mirror pod per static pod of each control plane (``kube-system/<component>-<hostname>``)
  with the ``talos.dev/config-version`` of its ``*Configs`` resource and the
  ``talos.dev/secrets-version`` of the static pods' secrets (SecretStatuses
  ``static-pods``), recreated when the static pod changes, and its status;
- the status of DaemonSets and Deployments whose generation changed, written
  ``ROLLOUT_SECONDS`` later as their controllers would once every pod was
  replaced (a DaemonSet whose image the registry lacks keeps one pod unavailable).

It talks to the API server with an admin certificate of the control planes'
Kubernetes CA (``kubernetes.admin_kubeconfig``, the Kubeconfig RPC's) at the
configs' control-plane endpoint or ``api_url``. Node state is read on the
cluster's loop; the HTTP calls run on this thread.
"""

import copy
import os
import threading
import time
import traceback

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from . import kubernetes
from .services.cosi import resource_version, static_pod_secrets_version

ROLLOUT_SECONDS = 0.3
_MERGE = "application/merge-patch+json"
_TIMEOUT = 10
# The node lifecycle controller's taint for each Ready status but True (TaintNodesByCondition).
CONDITION_TAINTS = (("node.kubernetes.io/not-ready", "False"), ("node.kubernetes.io/unreachable", "Unknown"))


def _node_view(node):
    """What the shim needs of one configured node, read on the loop."""
    config = kubernetes.settings(node.config_bytes)
    kubelet_service = node.services.get("kubelet")
    running = node.powered and kubelet_service is not None and kubelet_service.running
    labels = {"kubernetes.io/hostname": node.hostname, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update(config["node_labels"])
    taints = []
    if node.is_control_plane:
        labels[kubernetes.CONTROL_PLANE_LABEL] = ""
        if not config["schedule_on_control_planes"]:
            taints.append({"key": kubernetes.CONTROL_PLANE_LABEL, "effect": "NoSchedule"})
    static_pods = []
    for component, state in (node.kubernetes.static_pods() if node.powered else []):
        status = kubernetes.pod_status(node, component, state)
        status.pop("qosClass")  # set by the API server when the pod is created
        static_pods.append({
            "component": component, "image": state["image"], "status": status,
            "config_version": resource_version(node, kubernetes.CONFIG_TYPES[component], component),
            "secrets_version": static_pod_secrets_version(node),
        })
    return {
        "hostname": node.hostname, "address": node.address, "labels": labels, "taints": taints,
        "os_image": "Talos (%s)" % node.talos_version, "boot_id": node.boot_id or "",
        "kubelet": node.kubernetes.state("kubelet") if running else None,
        "static_pods": static_pods,
    }


def _snapshot(model):
    """The cluster as the API server should show it (None before the bootstrap)."""
    if not model.etcd.bootstrapped:
        return None
    credentials = manifests = None
    nodes = []
    for node in model.nodes:
        if node.config_bytes is None:
            continue
        config = kubernetes.settings(node.config_bytes)
        if node.is_control_plane and credentials is None and config["ca_key"]:
            credentials = dict((key, config[key])
                               for key in ("cluster_name", "endpoint", "ca_crt", "ca_key", "accepted_crts"))
            manifests = kubernetes.bootstrap_manifests(node.config_bytes)
        nodes.append(_node_view(node))
    return {"credentials": credentials, "manifests": manifests, "nodes": nodes}


def _merge_patch(patch, *args):
    """``patch(*args)`` as a JSON merge patch where the client lets the caller choose (``_content_type``, newer
    clients); older ones send a mapping as a strategic merge patch, which for the whole lists the shim writes
    (conditions, addresses, container statuses) comes to the same."""
    try:
        return patch(*args, _content_type=_MERGE, _request_timeout=_TIMEOUT)
    except TypeError as error:
        if "_content_type" not in str(error):
            raise
    return patch(*args, _request_timeout=_TIMEOUT)


def _now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Kubelets:
    """The shim's thread; ``errors`` lists the tracebacks of failed passes (tests assert it stays empty)."""

    def __init__(self, cluster, api_url=None, interval=0.2):
        self._cluster = cluster
        self.api_url = api_url
        self.interval = interval
        self.errors = []
        self.manifests_applied = False
        self._stopping = threading.Event()
        self._passes = threading.Condition()
        self._started_passes = 0
        self._finished_passes = 0
        self._thread = None
        self._api_key = None
        self._api_client = None
        # What was last written per object (kind, name, uid): only changes are written.
        self._written = {}
        # Per node: when the shim first saw it, and its Ready condition (status, reason, message, since).
        self._first_seen = {}
        self._ready = {}
        # When a rollout (kind, uid, generation) was first seen.
        self._rollouts = {}

    def start(self):
        # The nodes are a Kubernetes API's kubelets now: what the server-side health check sees of Kubernetes.
        self._cluster.model.kubernetes_api_serving = True
        self._thread = threading.Thread(target=self._run, name="kubelets-%s" % self._cluster.name, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop the thread (the objects it wrote stay in the API server). Safe to call twice."""
        self._stopping.set()
        self._cluster.model.kubernetes_api_serving = False
        if self._thread is not None:
            self._thread.join(timeout=30)

    def sync(self, timeout=10):
        """Wait until a whole pass that started after this call has run (the API server shows the cluster as of now)."""
        with self._passes:
            wanted = self._started_passes + 1
            if not self._passes.wait_for(lambda: self._finished_passes >= wanted, timeout):
                raise TimeoutError("the kubelet shim did not complete a pass in %ss" % timeout)

    def _run(self):
        while not self._stopping.is_set():
            with self._passes:
                self._started_passes += 1
            try:
                self._pass()
            except Exception:  # recorded for the test to see; the next pass tries again
                self.errors.append(traceback.format_exc())
                del self.errors[:-100]
            with self._passes:
                self._finished_passes += 1
                self._passes.notify_all()
            self._stopping.wait(self.interval)

    # One pass.

    def _pass(self):
        snapshot = self._cluster.call(_snapshot, self._cluster.model)
        if snapshot is None or snapshot["credentials"] is None:
            return
        self._connect(snapshot["credentials"])
        core = k8s_client.CoreV1Api(self._api_client)
        if not self.manifests_applied:
            self._apply_manifests(snapshot["manifests"])
        registered = self._reconcile_nodes(core, snapshot["nodes"])
        self._reconcile_mirror_pods(core, snapshot["nodes"], registered)
        self._reconcile_rollouts(len(registered))

    def _connect(self, credentials):
        key = (self.api_url, credentials["endpoint"], credentials["ca_crt"], credentials["ca_key"],
               tuple(credentials["accepted_crts"]))
        if key == self._api_key:
            return
        document = kubernetes.admin_kubeconfig(credentials, None)
        if self.api_url:
            document["clusters"][0]["cluster"]["server"] = self.api_url
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config_from_dict(document, client_configuration=configuration)
        self._api_client = k8s_client.ApiClient(configuration)
        self._api_key = key

    def _write(self, key, body, patch, *args):
        """Merge-patch ``body`` with ``patch(*args, body)`` unless it is what was last written for ``key``."""
        if self._written.get(key) != body:
            _merge_patch(patch, *(args + (body,)))
            self._written[key] = body

    # Bootstrap manifests.

    def _apply_manifests(self, manifests):
        dynamic = DynamicClient(self._api_client, cache_file=os.path.join(self._cluster.state_dir, "kube-discovery.json"))
        core = k8s_client.CoreV1Api(self._api_client)
        try:
            inventory = core.read_namespaced_config_map(kubernetes.INVENTORY_NAME, kubernetes.INVENTORY_NAMESPACE,
                                                        _request_timeout=_TIMEOUT).data or {}
            inventory_exists = True
        except ApiException as error:
            if error.status != 404:
                raise
            inventory, inventory_exists = {}, False
        objects = [obj for _manifest_id, items in sorted(manifests) for obj in items]
        # Namespaces first, as Talos applies them.
        objects.sort(key=lambda obj: obj["kind"] != "Namespace")
        for obj in objects:
            key = kubernetes.inventory_key(obj)
            if key in inventory:
                continue
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            namespace = obj["metadata"].get("namespace") if resource.namespaced else None
            try:
                dynamic.get(resource, name=obj["metadata"]["name"], namespace=namespace)
            except NotFoundError:
                body = copy.deepcopy(obj)
                body["metadata"].setdefault("annotations", {})[kubernetes.INVENTORY_ANNOTATION] = kubernetes.INVENTORY_NAME
                dynamic.server_side_apply(resource, body=body, namespace=namespace, field_manager=kubernetes.FIELD_MANAGER)
            inventory[key] = ""
        body = {"metadata": {"name": kubernetes.INVENTORY_NAME, "namespace": kubernetes.INVENTORY_NAMESPACE}, "data": inventory}
        if inventory_exists:
            _merge_patch(core.patch_namespaced_config_map, kubernetes.INVENTORY_NAME, kubernetes.INVENTORY_NAMESPACE, body)
        else:
            core.create_namespaced_config_map(kubernetes.INVENTORY_NAMESPACE, body, _request_timeout=_TIMEOUT)
        self.manifests_applied = True

    # Nodes.

    def _ready_condition(self, view):
        kubelet = view["kubelet"]
        if kubelet is None:
            wanted = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        elif kubelet["ready"]:
            wanted = ("True", "KubeletReady", "kubelet is posting ready status")
        elif kubelet["pull_error"]:
            wanted = ("False", "KubeletNotReady", "kubelet cannot start: %s" % kubelet["pull_error"])
        else:
            wanted = ("False", "KubeletNotReady", "kubelet is restarting")
        previous = self._ready.get(view["hostname"])
        if previous is None or previous[:3] != wanted:
            previous = wanted + (_now_rfc3339(),)
            self._ready[view["hostname"]] = previous
        status, reason, message, since = previous
        return {"type": "Ready", "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": since, "lastTransitionTime": since}

    def _node_status(self, view, current_version):
        since = self._first_seen.setdefault(view["hostname"], _now_rfc3339())
        conditions = [
            {"type": condition, "status": "False", "reason": reason, "message": message,
             "lastHeartbeatTime": since, "lastTransitionTime": since}
            for condition, reason, message in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(self._ready_condition(view))
        status = {"conditions": conditions}
        kubelet_version = kubernetes.kubelet_version(view["kubelet"]) or current_version
        if view["kubelet"] is not None:
            status.update({
                "addresses": [{"type": "InternalIP", "address": view["address"]}, {"type": "Hostname", "address": view["hostname"]}],
                "capacity": {"cpu": "2", "memory": "4027588Ki", "pods": "110", "ephemeral-storage": "10218772Ki"},
                "allocatable": {"cpu": "1950m", "memory": "3503300Ki", "pods": "110", "ephemeral-storage": "9417620Ki"},
                "nodeInfo": {
                    "kubeletVersion": kubelet_version, "kubeProxyVersion": "", "osImage": view["os_image"],
                    "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "containerd://2.1.5",
                    "kernelVersion": "6.12.57-talos", "machineID": view["hostname"], "systemUUID": view["hostname"],
                    "bootID": view["boot_id"],
                },
            })
        return status

    def _reconcile_nodes(self, core, views):
        """Register and update the Node objects; returns {hostname: uid} of the registered ones."""
        existing = dict((item.metadata.name, item) for item in core.list_node(_request_timeout=_TIMEOUT).items)
        registered = {}
        for view in views:
            name = view["hostname"]
            current = existing.get(name)
            if current is None:
                if view["kubelet"] is None or kubernetes.kubelet_version(view["kubelet"]) is None:
                    continue
                body = {"metadata": {"name": name, "labels": view["labels"]}, "spec": {"taints": view["taints"]}}
                current = core.create_node(body, _request_timeout=_TIMEOUT)
            uid = current.metadata.uid
            registered[name] = uid
            current_version = current.status.node_info.kubelet_version if current.status and current.status.node_info else ""
            status = self._node_status(view, current_version)
            self._write(("NodeStatus", name, uid), {"status": status}, core.patch_node_status, name)
            # The node lifecycle controller's taints follow the Ready condition (TaintNodesByCondition adds not-ready).
            ready = status["conditions"][-1]["status"]
            taints = view["taints"] + [{"key": key, "effect": "NoSchedule"} for key, condition in CONDITION_TAINTS if ready == condition]
            self._write(("Node", name, uid), {"metadata": {"labels": view["labels"]}, "spec": {"taints": taints}}, core.patch_node, name)
        return registered

    # Mirror pods.

    def _reconcile_mirror_pods(self, core, views, registered):
        existing = dict((item.metadata.name, item) for item in core.list_namespaced_pod(
            "kube-system", label_selector="tier=control-plane", _request_timeout=_TIMEOUT).items)
        for view in views:
            if view["hostname"] not in registered:
                continue
            for static_pod in view["static_pods"]:
                pod = kubernetes.mirror_pod(view["hostname"], static_pod["component"], static_pod["image"],
                                            static_pod["config_version"], static_pod["secrets_version"],
                                            registered[view["hostname"]])
                name = pod["metadata"]["name"]
                current = existing.get(name)
                mirror = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"]
                if current is not None and (current.metadata.annotations or {}).get("kubernetes.io/config.mirror") != mirror:
                    core.delete_namespaced_pod(name, "kube-system", grace_period_seconds=0, _request_timeout=_TIMEOUT)
                    current = None
                if current is None:
                    current = core.create_namespaced_pod("kube-system", pod, _request_timeout=_TIMEOUT)
                self._write(("PodStatus", name, current.metadata.uid), {"status": static_pod["status"]},
                            core.patch_namespaced_pod_status, name, "kube-system")

    # Rollouts.

    def _registry_has_all(self, template):
        images = [container.image for container in template.spec.containers]
        return all(self._cluster.call(self._cluster.model.registry_has, image) for image in images)

    def _due(self, kind, item, settled):
        """Whether the controller of ``item`` writes its status now: it changed and ROLLOUT_SECONDS have passed."""
        if settled:
            return False
        first_seen = self._rollouts.setdefault((kind, item.metadata.uid, item.metadata.generation), time.monotonic())
        return time.monotonic() - first_seen >= ROLLOUT_SECONDS

    def _reconcile_rollouts(self, node_count):
        apps = k8s_client.AppsV1Api(self._api_client)
        for daemon_set in apps.list_daemon_set_for_all_namespaces(_request_timeout=_TIMEOUT).items:
            status = daemon_set.status
            generation = daemon_set.metadata.generation
            settled = status is not None and status.observed_generation == generation and status.desired_number_scheduled == node_count
            if not self._due("DaemonSet", daemon_set, settled):
                continue
            # A pod whose image cannot be pulled stays unavailable and the rolling update stops there.
            stuck = 1 if node_count and not self._registry_has_all(daemon_set.spec.template) else 0
            body = {"status": {
                "observedGeneration": generation, "desiredNumberScheduled": node_count,
                "currentNumberScheduled": node_count, "updatedNumberScheduled": node_count if not stuck else 1,
                "numberReady": node_count - stuck, "numberAvailable": node_count - stuck,
                "numberUnavailable": stuck, "numberMisscheduled": 0,
            }}
            _merge_patch(apps.patch_namespaced_daemon_set_status, daemon_set.metadata.name, daemon_set.metadata.namespace,
                         body)
        for deployment in apps.list_deployment_for_all_namespaces(_request_timeout=_TIMEOUT).items:
            status = deployment.status
            generation = deployment.metadata.generation
            replicas = deployment.spec.replicas if deployment.spec.replicas is not None else 1
            if not self._due("Deployment", deployment, status is not None and status.observed_generation == generation):
                continue
            since = _now_rfc3339()
            body = {"status": {
                "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                "readyReplicas": replicas, "availableReplicas": replicas,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                     "message": "Deployment has minimum availability.", "lastUpdateTime": since, "lastTransitionTime": since},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                     "message": 'ReplicaSet "%s" has successfully progressed.' % deployment.metadata.name,
                     "lastUpdateTime": since, "lastTransitionTime": since},
                ],
            }}
            _merge_patch(apps.patch_namespaced_deployment_status, deployment.metadata.name, deployment.metadata.namespace,
                         body)
