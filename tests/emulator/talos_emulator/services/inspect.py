# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inspect.InspectService: the controller-runtime dependency graph (``talosctl inspect dependencies``).

A real node reports several hundred edges between its controllers and the resource types they read and write;
the emulator reports a few of them, and a control plane's etcd, static pod and manifest controllers besides a worker's,
each between resource types it serves (talosctl resolves every type of the graph).
"""

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.inspect import inspect_grpc, inspect_pb2

_EDGE = inspect_pb2.DependencyEdgeType
# (controller, edge type, namespace, resource type)
_EVERY_NODE = (
    ("config.MachineTypeController", _EDGE.INPUT_WEAK, "config", "MachineConfigs.config.talos.dev"),
    ("config.MachineTypeController", _EDGE.OUTPUT_EXCLUSIVE, "config", "MachineTypes.config.talos.dev"),
    ("network.HostnameSpecController", _EDGE.INPUT_STRONG, "network", "HostnameSpecs.net.talos.dev"),
    ("network.HostnameSpecController", _EDGE.OUTPUT_EXCLUSIVE, "network", "HostnameStatuses.net.talos.dev"),
    ("k8s.KubeletSpecController", _EDGE.INPUT_WEAK, "k8s", "KubeletConfigs.kubernetes.talos.dev"),
    ("k8s.KubeletSpecController", _EDGE.OUTPUT_EXCLUSIVE, "k8s", "KubeletSpecs.kubernetes.talos.dev"),
    ("k8s.NodenameController", _EDGE.INPUT_WEAK, "network", "HostnameStatuses.net.talos.dev"),
    ("k8s.NodenameController", _EDGE.OUTPUT_EXCLUSIVE, "k8s", "Nodenames.kubernetes.talos.dev"),
    ("runtime.MachineStatusController", _EDGE.INPUT_WEAK, "runtime", "Services.v1alpha1.talos.dev"),
    ("runtime.MachineStatusController", _EDGE.OUTPUT_EXCLUSIVE, "runtime", "MachineStatuses.runtime.talos.dev"),
)
_CONTROL_PLANE = (
    ("etcd.SpecController", _EDGE.INPUT_WEAK, "etcd", "EtcdConfigs.etcd.talos.dev"),
    ("etcd.SpecController", _EDGE.OUTPUT_EXCLUSIVE, "etcd", "EtcdSpecs.etcd.talos.dev"),
    ("k8s.ControlPlaneStaticPodController", _EDGE.INPUT_STRONG, "controlplane", "APIServerConfigs.kubernetes.talos.dev"),
    ("k8s.ControlPlaneStaticPodController", _EDGE.OUTPUT_EXCLUSIVE, "k8s", "StaticPods.kubernetes.talos.dev"),
    ("k8s.ManifestController", _EDGE.INPUT_STRONG, "controlplane", "BootstrapManifestsConfigs.kubernetes.talos.dev"),
    ("k8s.ManifestController", _EDGE.OUTPUT_EXCLUSIVE, "controlplane", "Manifests.kubernetes.talos.dev"),
)


class InspectService(inspect_grpc.InspectServiceBase):
    def __init__(self, node):
        self.node = node

    async def ControllerRuntimeDependencies(self, stream):
        await stream.recv_message()
        rows = _EVERY_NODE + (_CONTROL_PLANE if self.node.is_control_plane else ())
        edges = [inspect_pb2.ControllerDependencyEdge(controller_name=controller, edge_type=edge, resource_namespace=namespace,
                                                      resource_type=resource_type)
                 for controller, edge, namespace, resource_type in rows]
        reply = inspect_pb2.ControllerRuntimeDependency(edges=edges)
        await stream.send_message(inspect_pb2.ControllerRuntimeDependenciesResponse(messages=[reply]))
