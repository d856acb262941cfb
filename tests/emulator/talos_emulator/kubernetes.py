# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node renders for Kubernetes from its machine config, as Talos's ``k8s`` controllers do.

Both config layouts are read: the v1alpha1 fields (``machine.kubelet.image``,
``cluster.apiServer.image``, ...) and the v1.14 documents (``KubeletConfig``,
``KubeAPIServerConfig``, ...), a document winning over its v1alpha1 field as
Talos's config container decides; a missing image is Talos's default for the
Kubernetes version. From that a node serves (through ``services/cosi.py``):
``KubeletSpecs`` (every configured node: its arguments with the config's
``extraArgs``, its ``featureGates`` from ``extraConfig``), ``APIServerConfigs``,
``ControllerManagerConfigs``, ``SchedulerConfigs``, ``StaticPods`` (the pods
with their command lines, ``extraArgs`` merged in) and ``Manifests`` (control
planes), and ``StaticPodStatuses`` (control planes whose etcd runs).

``NodeKubernetes`` is the node's container runtime for these: when an applied
config changes what a container runs, the container restarts and is ready
``RESTART_SECONDS`` later (also after every boot); the static pods also restart
when the secrets Talos renders for them change (the Kubernetes CAs: their
``talos.dev/secrets-version``), and while a real kube-apiserver serves for the
control planes theirs is ready only once it restarted with their CAs. The kubelet also restarts
when its secrets change (the Kubernetes CAs it trusts, the API endpoint), as
Talos's KubeletServiceController stops and starts the kubelet service on every
change of KubeletSpec or the Kubelet secret: the node's ``kubelet`` service
shows the restart in its events. An image the registry does
not have (``faults.mark_image_unavailable``) and the node does not hold keeps
it from starting until the registry has it. The kubelet shim
(``kubelets.py``) shows the result in a real API server.
"""

import base64
import datetime
import functools
import hashlib
import ipaddress
import json
import time

from . import configgen
from .pki import CertificateAuthority
from .runners import started_message
from .versions import image_tag

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The COSI type of each static pod's config resource (its ID is the component's name).
CONFIG_TYPES = {
    "kube-apiserver": "APIServerConfigs.kubernetes.talos.dev",
    "kube-controller-manager": "ControllerManagerConfigs.kubernetes.talos.dev",
    "kube-scheduler": "SchedulerConfigs.kubernetes.talos.dev",
}
RESTART_SECONDS = 0.3
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.12.4"
KUBELET_REPOSITORY = "ghcr.io/siderolabs/kubelet"
# The annotations Talos puts on its static pods (constants.AnnotationStaticPod*).
CONFIG_VERSION_ANNOTATION = "talos.dev/config-version"
SECRETS_VERSION_ANNOTATION = "talos.dev/secrets-version"
# Talos's bootstrap manifests apply (manifest_apply.go): server-side apply as "talos", listed in this inventory.
FIELD_MANAGER = "talos"
INVENTORY_NAMESPACE = "kube-system"
INVENTORY_NAME = "talos-bootstrap-manifests-inventory"
INVENTORY_ANNOTATION = "config.k8s.io/owning-inventory"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"

_SYSTEM, _CRI = "NS_SYSTEM", "NS_CRI"
_RESOURCES = {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {}}


# The config, as Talos's config container reads it.

@functools.lru_cache(maxsize=256)
def settings(config_bytes):
    """The Kubernetes settings of a validated config (a shared dict: do not change it)."""
    documents = configgen.parse_documents(config_bytes)
    by_kind = dict((document.get("kind"), document) for document in documents)
    v1alpha1 = by_kind.get(None) or {}
    machine, cluster = v1alpha1.get("machine") or {}, v1alpha1.get("cluster") or {}
    default_tag = configgen.DEFAULT_KUBERNETES_VERSION

    def image(kind, section, repository, parent=cluster):
        document = by_kind.get(kind)
        if document is not None and document.get("image"):
            return document["image"]
        return (parent.get(section) or {}).get("image") or "%s:%s" % (repository, default_tag)

    def enabled(kind, section):
        document = by_kind.get(kind)
        if document is not None:
            return document.get("enabled", True) is not False
        return not (cluster.get(section) or {}).get("disabled", False)

    def extra_args(kind, section, parent=cluster):
        document = by_kind.get(kind)
        args = (document if document is not None else (parent.get(section) or {})).get("extraArgs") or {}
        if isinstance(args, list):  # the documents' list form: [{name, value}]
            args = dict((item.get("name"), item.get("value")) for item in args)
        return dict((str(name), "" if value is None else str(value)) for name, value in args.items())

    kubelet_document = by_kind.get("KubeletConfig")
    kubelet_extra_config = ((kubelet_document if kubelet_document is not None else machine.get("kubelet") or {})
                            .get("extraConfig") or {})
    network = by_kind.get("KubeNetworkConfig") or cluster.get("network") or {}
    kubernetes = configgen.kubernetes_settings(config_bytes)
    return {
        "images": {
            "kubelet": image("KubeletConfig", "kubelet", KUBELET_REPOSITORY, parent=machine),
            "kube-apiserver": image("KubeAPIServerConfig", "apiServer", "registry.k8s.io/kube-apiserver"),
            "kube-controller-manager": image("KubeControllerManagerConfig", "controllerManager",
                                             "registry.k8s.io/kube-controller-manager"),
            "kube-scheduler": image("KubeSchedulerConfig", "scheduler", "registry.k8s.io/kube-scheduler"),
            "kube-proxy": image("KubeProxyConfig", "proxy", "registry.k8s.io/kube-proxy"),
            "coredns": (by_kind.get("KubeCoreDNSConfig") or {}).get("image") or (cluster.get("coreDNS") or {}).get("image")
            or COREDNS_IMAGE,
        },
        "enabled": {
            "kube-controller-manager": (by_kind.get("KubeControllerManagerConfig") or {}).get("enabled", True) is not False,
            "kube-scheduler": (by_kind.get("KubeSchedulerConfig") or {}).get("enabled", True) is not False,
            "kube-proxy": enabled("KubeProxyConfig", "proxy"),
            "coredns": enabled("KubeCoreDNSConfig", "coreDNS"),
        },
        "extra_args": {
            "kubelet": extra_args("KubeletConfig", "kubelet", parent=machine),
            "kube-apiserver": extra_args("KubeAPIServerConfig", "apiServer"),
            "kube-controller-manager": extra_args("KubeControllerManagerConfig", "controllerManager"),
            "kube-scheduler": extra_args("KubeSchedulerConfig", "scheduler"),
        },
        "kubelet_feature_gates": dict(kubelet_extra_config.get("featureGates") or {}),
        "dns_domain": network.get("dnsDomain") or "cluster.local",
        "cni": (network.get("cni") or {}).get("name") or "flannel",
        "pod_subnets": list(network.get("podSubnets") or ["10.244.0.0/16"]),
        "service_subnets": list(network.get("serviceSubnets") or ["10.96.0.0/12"]),
        "bootstrap_token": cluster.get("token") or "",
        "node_labels": dict((by_kind.get("KubeNodeConfig") or {}).get("labels") or machine.get("nodeLabels") or {}),
        "schedule_on_control_planes": bool(cluster.get("allowSchedulingOnControlPlanes")),
        "cluster_name": kubernetes["cluster_name"],
        "endpoint": kubernetes["endpoint"],
        "ca_crt": kubernetes["ca_crt"],
        "ca_key": kubernetes["ca_key"],
        "accepted_crts": kubernetes["accepted_crts"],
    }


def admin_kubeconfig(kubernetes, default_endpoint):
    """A fresh admin kubeconfig (a dict) as Talos's Kubeconfig RPC builds it from ``kubernetes`` (the cluster name,
    endpoint and CAs of ``configgen.kubernetes_settings``): a ``system:masters`` certificate of the issuing
    Kubernetes CA, trusting it and every accepted CA (``pkg/kubeconfig``: the server's certificate may come from
    either while a rotation runs)."""
    ca = CertificateAuthority.from_pem(kubernetes["ca_crt"], kubernetes["ca_key"])
    crt_pem, key_pem = ca.issue_client(["system:masters"], common_name="admin")
    name = kubernetes["cluster_name"]
    user = "admin@%s" % name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": kubernetes["endpoint"] or default_endpoint,
            "certificate-authority-data": base64.b64encode(
                kubernetes["ca_crt"] + b"".join(kubernetes.get("accepted_crts") or [])).decode(),
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": base64.b64encode(crt_pem).decode(),
            "client-key-data": base64.b64encode(key_pem).decode(),
        }}],
        "contexts": [{"name": user, "context": {"cluster": name, "namespace": "default", "user": user}}],
        "current-context": user,
    }


def _service_ip(subnets, index):
    return str(ipaddress.ip_network(subnets[0], strict=False)[index])


# The specs of the node's resources (yaml_spec as Talos marshals them).

def _command_line(defaults, extra_args):
    """``--name=value`` arguments, sorted, the config's ``extraArgs`` over Talos's defaults (as Talos merges them)."""
    args = dict(defaults, **extra_args)
    return ["--%s=%s" % (name, value) for name, value in sorted(args.items())]


def kubelet_spec(node):
    config = settings(node.config_bytes)
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "clusterDNS": [_service_ip(config["service_subnets"], 10)],
        "clusterDomain": config["dns_domain"],
    }
    if config["kubelet_feature_gates"]:
        kubelet_config["featureGates"] = config["kubelet_feature_gates"]
    return {
        "image": config["images"]["kubelet"],
        "args": _command_line({
            "bootstrap-kubeconfig": "/etc/kubernetes/bootstrap-kubeconfig",
            "cert-dir": "/var/lib/kubelet/pki",
            "config": "/etc/kubernetes/kubelet.yaml",
            "hostname-override": node.hostname,
            "kubeconfig": "/etc/kubernetes/kubeconfig-kubelet",
            "node-ip": node.address,
        }, config["extra_args"]["kubelet"]),
        "expectedNodename": node.hostname,
        "config": kubelet_config,
    }


def kubelet_secrets(node):
    """What Talos's Kubelet secret holds that the kubelet runs with: the Kubernetes CAs it trusts (the issuing one
    and the accepted ones), the API endpoint and the bootstrap token."""
    config = settings(node.config_bytes)
    return (config["ca_crt"], tuple(config["accepted_crts"]), config["endpoint"], config["bootstrap_token"])


def static_pod_secrets(node):
    """What of the secrets Talos renders for the static pods the emulator follows: the Kubernetes CAs (the issuing
    one and the accepted ones, the kube-apiserver's ``ca.crt``) and the API endpoint. Talos renders the static pods
    anew when they change (their ``talos.dev/secrets-version``), and the kubelet restarts them."""
    config = settings(node.config_bytes)
    return (config["ca_crt"], tuple(config["accepted_crts"]), config["endpoint"])


def static_pod_config(node, component):
    """The spec of the component's ``*Configs.kubernetes.talos.dev`` resource."""
    config = settings(node.config_bytes)
    image = config["images"][component]
    if component == "kube-apiserver":
        return {
            "image": image, "cloudProvider": "", "controlPlaneEndpoint": config["endpoint"] or "",
            "etcdServers": ["https://localhost:2379"], "localPort": 6443, "serviceCIDR": config["service_subnets"],
            "extraArgs": {}, "extraVolumes": [], "environmentVariables": {}, "advertisedAddress": "$(POD_IP)",
            "resources": _RESOURCES,
        }
    if component == "kube-controller-manager":
        return {
            "enabled": config["enabled"][component], "image": image, "cloudProvider": "",
            "podCIDRs": config["pod_subnets"], "serviceCIDRs": config["service_subnets"], "extraVolumes": [],
            "environmentVariables": {}, "resources": _RESOURCES,
        }
    return {"enabled": config["enabled"][component], "image": image, "config": {}, "extraVolumes": [],
            "environmentVariables": {}, "resources": _RESOURCES}


# Talos's defaults of each static pod's command line (a few of them: the ones a removal check may meet).
_STATIC_POD_ARGS = {
    "kube-apiserver": {"enable-admission-plugins": "NodeRestriction", "etcd-servers": "https://localhost:2379",
                       "secure-port": "6443"},
    "kube-controller-manager": {"controllers": "*,tokencleaner", "leader-elect": "true"},
    "kube-scheduler": {"leader-elect": "true"},
}


def static_pod(node, component):
    """The spec of the component's ``StaticPods.kubernetes.talos.dev`` resource: the pod Talos hands the kubelet."""
    config = settings(node.config_bytes)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": component, "namespace": "kube-system",
                     "labels": {"k8s-app": component, "tier": "control-plane"}},
        "spec": {"hostNetwork": True, "priorityClassName": "system-cluster-critical", "containers": [{
            "name": component, "image": config["images"][component],
            "command": ["/usr/local/bin/%s" % component] + _command_line(
                _STATIC_POD_ARGS[component], config["extra_args"][component]),
        }]},
    }


def static_pods(node):
    if not node.is_control_plane or node.maintenance:
        return []
    return [(component, static_pod(node, component)) for component in COMPONENTS
            if static_pod_config(node, component).get("enabled", True)]


# The node's containers.

class _Container:
    """A container the node runs for Kubernetes (the kubelet, a static pod) and where it is in its restart."""

    def __init__(self, name, namespace):
        self.name = name
        self.namespace = namespace
        self.spec = None
        self.secrets = None
        self.image = None
        # When the container with the wanted spec started (None: not yet, its image is not pulled).
        self.started = None
        self.pull_error = None
        # The image of the last container that became ready.
        self.ready_image = None

    def want(self, node, spec, now, secrets=None):
        """Run ``spec`` with ``secrets``; returns whether a running container restarted for it."""
        if (spec, secrets) != (self.spec, self.secrets):
            restarted = self.started is not None
            self.spec, self.secrets, self.image, self.started = spec, secrets, spec["image"], None
            self.evaluate(node, now)
            return restarted
        return False

    def evaluate(self, node, now):
        if self.started is None:
            if node.cluster.registry_has(self.image) or self.image in node.images.get(self.namespace, {}):
                self.started, self.pull_error = now, None
            else:
                self.pull_error = 'failed to pull image "%s": not found' % self.image
        # Every boot restarts it.
        started = max(self.started, node.booted_at or 0) if self.started is not None else None
        ready = started is not None and now - started >= RESTART_SECONDS
        if ready and self.name == "kube-apiserver":
            # A real kube-apiserver (control.run_kubernetes) serves for the control planes: theirs is ready once it
            # restarted with their CAs.
            ready = node.cluster.kube_apiserver_restarted()
        if ready:
            self.ready_image = self.image
        return {"image": self.image, "started": started, "ready": ready, "pull_error": self.pull_error,
                "ready_image": self.ready_image}


class NodeKubernetes:
    """The node's kubelet and static pods (state changes on the cluster's loop)."""

    def __init__(self, node):
        self.node = node
        self._containers = {}

    def _wanted(self):
        """name -> (containerd namespace, spec, secrets) of what the node's config asks it to run."""
        node = self.node
        if node.maintenance:
            return {}
        wanted = {"kubelet": (_SYSTEM, kubelet_spec(node), kubelet_secrets(node))}
        if node.is_control_plane:
            for component in COMPONENTS:
                spec = static_pod_config(node, component)
                if spec.get("enabled", True):
                    wanted[component] = (_CRI, spec, static_pod_secrets(node))
        return wanted

    def _container(self, name, namespace, spec, secrets, now):
        container = self._containers.get(name)
        if container is None:
            container = self._containers[name] = _Container(name, namespace)
        return container, container.want(self.node, spec, now, secrets)

    def config_applied(self):
        """A config became active (apply, TRY, boot): what it changes restarts now."""
        now = time.time()
        node = self.node
        for name, (namespace, spec, secrets) in self._wanted().items():
            _container, restarted = self._container(name, namespace, spec, secrets, now)
            service = node.services.get("kubelet") if name == "kubelet" else None
            if restarted and service is not None and service.running and node.stage == "running":
                node.set_service("kubelet", "Finished", "Service finished successfully")
                node.set_service("kubelet", "Running", started_message("kubelet"))

    def state(self, name):
        """``{image, started, ready, pull_error, ready_image}`` of a container the config asks for, or None."""
        wanted = self._wanted().get(name)
        if wanted is None:
            return None
        now = time.time()
        return self._container(name, wanted[0], wanted[1], wanted[2], now)[0].evaluate(self.node, now)

    def static_pods(self):
        """``[(component, state)]`` of the static pods running: on a control plane whose etcd runs."""
        if not (self.node.is_control_plane and self.node.etcd_running):
            return []
        states = [(component, self.state(component)) for component in COMPONENTS]
        return [(component, state) for component, state in states if state is not None]


def _rfc3339(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_status(node, name, state):
    """The pod status of a static pod in ``state`` (what the kubelet reports and StaticPodStatuses holds)."""
    ready = "True" if state["ready"] else "False"
    address = node.address
    since = _rfc3339(state["started"] or node.booted_at or 0)
    container = {"name": name, "image": state["image"], "imageID": "", "ready": state["ready"],
                 "started": state["ready"], "restartCount": 0}
    if state["ready"]:
        container["containerID"] = "containerd://%s" % hashlib.sha256(("%s@%s" % (name, since)).encode()).hexdigest()
        container["state"] = {"running": {"startedAt": since}}
    elif state["pull_error"]:
        container["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "%s"' % state["image"]}}
    else:
        container["state"] = {"waiting": {"reason": "ContainerCreating"}}
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True" if state["started"] else "False"},
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": ready},
        {"type": "ContainersReady", "status": ready},
        {"type": "PodScheduled", "status": "True"},
    ]
    for condition in conditions:
        condition["lastProbeTime"] = None
        condition["lastTransitionTime"] = since
    return {
        "phase": "Running" if state["ready"] else "Pending",
        "conditions": conditions,
        "hostIP": address, "hostIPs": [{"ip": address}], "podIP": address, "podIPs": [{"ip": address}],
        "startTime": _rfc3339(node.booted_at or 0),
        "containerStatuses": [container],
        "qosClass": "Burstable",
    }


# COSI readers: (id, spec) pairs, as services/cosi.py serves them.

def kubelet_specs(node):
    return [] if node.maintenance else [("kubelet", kubelet_spec(node))]


def _static_pod_configs(component):
    def read(node):
        return [(component, static_pod_config(node, component))] if node.is_control_plane else []
    return read


apiserver_configs = _static_pod_configs("kube-apiserver")
controller_manager_configs = _static_pod_configs("kube-controller-manager")
scheduler_configs = _static_pod_configs("kube-scheduler")


def static_pod_statuses(node):
    return [("kube-system/%s-%s" % (component, node.hostname), pod_status(node, component, state))
            for component, state in node.kubernetes.static_pods()]


def kubelet_configs(node):
    """KubeletConfigs ``kubelet``: what the config asks of the kubelet (the health check's "kubelet enabled")."""
    if node.maintenance:
        return []
    config = settings(node.config_bytes)
    return [("kubelet", {"image": config["images"]["kubelet"], "clusterDNS": [_service_ip(config["service_subnets"], 10)],
                         "clusterDomain": config["dns_domain"]})]


def bootstrap_manifests_configs(node):
    """BootstrapManifestsConfigs ``manifests`` on control planes: what the bootstrap manifests are rendered from."""
    if not node.is_control_plane:
        return []
    config = settings(node.config_bytes)
    return [("manifests", {
        "string": config["endpoint"], "clusterDomain": config["dns_domain"], "podCIDRs": config["pod_subnets"],
        "proxyEnabled": config["enabled"]["kube-proxy"], "proxyImage": config["images"]["kube-proxy"],
        "coreDNSEnabled": config["enabled"]["coredns"], "coreDNSImage": config["images"]["coredns"],
        "dnsServiceIP": _service_ip(config["service_subnets"], 10), "flannelEnabled": config["cni"] == "flannel",
        "cniName": config["cni"],
    })]


def manifests(node):
    """Talos's bootstrap manifests: ``(id, [objects])``, the spec being the list of objects."""
    return bootstrap_manifests(node.config_bytes) if node.is_control_plane else []


# Talos's bootstrap manifests (internal/app/machined/pkg/controllers/k8s/internal/k8stemplates).

def _cluster_role_binding(name, role, subjects, bootstrapping=False):
    metadata = {"name": name}
    if bootstrapping:
        metadata["annotations"] = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
        metadata["labels"] = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects}


def _group(name):
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}


def _service_account_subject(name):
    return {"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}


def _node_affinity():
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
    ]}]}}}


def _kube_proxy(config):
    labels = {"k8s-app": "kube-proxy", "tier": "node"}
    container = {
        "name": "kube-proxy",
        "image": config["images"]["kube-proxy"],
        "command": ["/usr/local/bin/kube-proxy", "--cluster-cidr=%s" % ",".join(config["pod_subnets"]),
                    "--hostname-override=$(NODE_NAME)", "--kubeconfig=/etc/kubernetes/kubeconfig", "--proxy-mode=iptables",
                    "--conntrack-max-per-core=0"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [{"mountPath": "/lib/modules", "name": "lib-modules", "readOnly": True},
                         {"mountPath": "/etc/ssl/certs", "name": "ssl-certs-host", "readOnly": True},
                         {"mountPath": "/etc/kubernetes", "name": "kubeconfig", "readOnly": True}],
    }
    daemon_set = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "affinity": _node_affinity(),
                "containers": [container],
                "hostNetwork": True,
                "priorityClassName": "system-cluster-critical",
                "serviceAccountName": "kube-proxy",
                "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}, {"effect": "NoExecute", "operator": "Exists"}],
                "volumes": [{"name": "lib-modules", "hostPath": {"path": "/usr/lib/modules"}},
                            {"name": "ssl-certs-host", "hostPath": {"path": "/etc/ssl/certs"}},
                            {"name": "kubeconfig", "configMap": {"name": "kubeconfig-in-cluster"}}],
            }},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }
    return [
        daemon_set,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kube-proxy", "namespace": "kube-system"}},
        _cluster_role_binding("kube-proxy", "system:node-proxier", [_service_account_subject("kube-proxy")]),
    ]


def _corefile(domain):
    return (".:53 {\n    errors\n    health {\n        lameduck 5s\n    }\n    ready\n    log . {\n        class error\n    }\n"
            "    prometheus :9153\n\n    kubernetes %s in-addr.arpa ip6.arpa {\n        pods insecure\n"
            "        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n    forward . /etc/resolv.conf {\n"
            "       max_concurrent 1000\n    }\n    cache 30 {\n       disable success %s\n       disable denial %s\n"
            "    }\n    loop\n    reload\n    loadbalance\n}\n" % (domain, domain, domain))


def _core_dns(config):
    labels = {"k8s-app": "kube-dns"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": {
                "affinity": _node_affinity(),
                "containers": [{
                    "name": "coredns", "image": config["images"]["coredns"], "imagePullPolicy": "IfNotPresent",
                    "args": ["-conf", "/etc/coredns/Corefile"],
                    "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                              {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                              {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
                    "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
                    "volumeMounts": [{"mountPath": "/etc/coredns", "name": "config-volume", "readOnly": True}],
                }],
                "dnsPolicy": "Default",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "priorityClassName": "system-cluster-critical",
                "serviceAccountName": "coredns",
                "tolerations": [{"effect": "NoSchedule", "key": CONTROL_PLANE_LABEL, "operator": "Exists"},
                                {"effect": "NoSchedule", "key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists"}],
                "volumes": [{"name": "config-volume", "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
            }},
        },
    }
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:coredns", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                  {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        cluster_role,
        _cluster_role_binding("system:coredns", "system:coredns", [_service_account_subject("coredns")], bootstrapping=True),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": _corefile(config["dns_domain"])}},
        deployment,
    ]


def _core_dns_service(config):
    address = _service_ip(config["service_subnets"], 10)
    return [{
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
        "spec": {
            "clusterIP": address, "clusterIPs": [address], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                      {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                      {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}],
            "selector": {"k8s-app": "kube-dns"},
        },
    }]


_IN_CLUSTER_KUBECONFIG = """apiVersion: v1
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://localhost:6443
  name: local
contexts:
- context:
    cluster: local
    user: service-account
  name: local
current-context: local
kind: Config
users:
- name: service-account
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
"""


@functools.lru_cache(maxsize=64)
def bootstrap_manifests(config_bytes):
    """``[(id, [objects])]`` as Talos's ManifestController renders them from a control plane's config (shared lists:
    do not change them). ``00-kubelet-bootstrapping-token`` holds the bootstrap token: a secret."""
    config = settings(config_bytes)
    token_id, _dot, token_secret = config["bootstrap_token"].partition(".")
    manifests = [
        ("00-kubelet-bootstrapping-token", [{
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-%s" % token_id, "namespace": "kube-system"},
            "stringData": {"auth-extra-groups": "system:bootstrappers:nodes", "token-id": token_id,
                           "token-secret": token_secret, "usage-bootstrap-authentication": "true"},
        }]),
        ("01-csr-node-bootstrap", [_cluster_role_binding(
            "system-bootstrap-node-bootstrapper", "system:node-bootstrapper",
            [_group("system:bootstrappers:nodes"), _group("system:nodes")])]),
        ("01-csr-approver-role-binding", [_cluster_role_binding(
            "system-bootstrap-approve-node-client-csr", "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            [_group("system:bootstrappers:nodes")])]),
        ("01-csr-renewal-role-binding", [_cluster_role_binding(
            "system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            [_group("system:nodes")])]),
        ("11-kube-config-in-cluster", [{"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "kubeconfig-in-cluster", "namespace": "kube-system"},
                                        "data": {"kubeconfig": _IN_CLUSTER_KUBECONFIG}}]),
        ("11-talos-node-rbac-template", [
            _cluster_role_binding("system:talos-nodes", "system:talos-nodes", [_group("system:nodes")], bootstrapping=True),
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "system:talos-nodes", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
             "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]},
        ]),
    ]
    if config["enabled"]["coredns"]:
        manifests += [("11-core-dns", _core_dns(config)), ("11-core-dns-svc", _core_dns_service(config))]
    if config["enabled"]["kube-proxy"]:
        manifests.append(("10-kube-proxy", _kube_proxy(config)))
    return manifests


def inventory_key(obj):
    """How the manifests inventory (cli-utils ObjMetadata) names an object: namespace_name_group_kind."""
    group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
    name = obj["metadata"]["name"].replace(":", "__")
    return "%s_%s_%s_%s" % (obj["metadata"].get("namespace", ""), name, group, obj["kind"])


def mirror_pod(hostname, component, image, config_version, secrets_version, node_uid=None):
    """The mirror pod of a static pod as the kubelet creates it (no status); recreated when its hash changes."""
    pod_hash = hashlib.md5(json.dumps([component, image, config_version, secrets_version]).encode()).hexdigest()
    metadata = {
        "name": "%s-%s" % (component, hostname),
        "namespace": "kube-system",
        "labels": {"k8s-app": component, "tier": "control-plane"},
        "annotations": {
            "kubernetes.io/config.hash": pod_hash,
            "kubernetes.io/config.mirror": pod_hash,
            "kubernetes.io/config.source": "file",
            CONFIG_VERSION_ANNOTATION: config_version,
            SECRETS_VERSION_ANNOTATION: secrets_version,
        },
    }
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": hostname, "uid": node_uid, "controller": True}]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {
            "nodeName": hostname,
            "hostNetwork": True,
            "priorityClassName": "system-cluster-critical",
            "containers": [{"name": component, "image": image, "command": ["/usr/local/bin/%s" % component],
                            "resources": {"requests": dict(_RESOURCES["requests"])}}],
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
        },
    }


def kubelet_version(state):
    """What the node's kubelet reports as its version (the tag of the image of the kubelet that last became ready)."""
    return image_tag(state["ready_image"]) if state and state["ready_image"] else None
