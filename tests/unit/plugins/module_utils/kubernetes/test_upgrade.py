# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubernetes_upgrade.py against a simulated cluster: FakeTalos answers from the simulation's nodes, FakeKube is
what the API server shows of them. Every change the nodes and the API server make shows only after a few looks, so
a step the upgrade does not wait for is caught: each apply checks that everything applied before it was seen done.
"""

import copy

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import components
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import upgrade as kubernetes_upgrade
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import ActionFailed, TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubernetesAPIError
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.upgrade import KubernetesUpgrade
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from fake_talos import FakeTalos, fails_with, resource

FROM, TO = "1.36.3", "1.37.2"
DETAILS = "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n%s"
ALL = components.STATIC_PODS + (components.KUBE_PROXY, components.KUBELET)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(kubernetes_upgrade, "POLL_SECONDS", 0.001)


def config_text(control_plane, version=FROM, extra=""):
    text = ("version: v1alpha1\nmachine:\n  type: %s\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v%s\n"
            % ("controlplane" if control_plane else "worker", version))
    if control_plane:
        text += ("cluster:\n  apiServer:\n    image: registry.k8s.io/kube-apiserver:v{0}\n  controllerManager:\n"
                 "    image: registry.k8s.io/kube-controller-manager:v{0}\n  scheduler:\n"
                 "    image: registry.k8s.io/kube-scheduler:v{0}\n  proxy:\n    image: registry.k8s.io/kube-proxy:v{0}\n"
                 ).format(version)
    return text + extra


class Lagging(object):
    """A value that shows what it was set to only after ``after`` more reads; ``settled`` once a read showed it."""

    def __init__(self, value):
        self.value = value
        self.next = None
        self.left = 0

    def set(self, value, after):
        self.next, self.left = value, after

    def read(self):
        if self.next is not None:
            if self.left <= 0:
                self.value, self.next = self.next, None
            else:
                self.left -= 1
        return self.value

    @property
    def settled(self):
        return self.next is None


class SimNode(object):
    def __init__(self, target, name, address, control_plane, talos="v1.14.0", config=None, registered=True):
        self.target, self.name, self.address, self.control_plane, self.talos = target, name, address, control_plane, talos
        # Whether its kubelet registered a Node.
        self.registered = registered
        self.config = config or config_text(control_plane)
        self.extra_args = {}
        # What Talos renders per component, (image, resource version); the mirror pods (config version, ready); the
        # kubelet as its Node reports it (version, ready).
        self.rendered = dict((component.name, Lagging((self.image(component), 1))) for component in
                             (components.STATIC_PODS if control_plane else ()) + (components.KUBELET,))
        self.pods = dict((component.name, Lagging(("1", True))) for component in
                         (components.STATIC_PODS if control_plane else ()))
        self.kubelet = Lagging(("v" + FROM, True))

    def documents(self, text=None):
        return [document for document in yaml.safe_load_all(text or self.config) if document]

    def image(self, component, text=None):
        return components.config_home(self.documents(text), component).image


class Simulation(object):
    """Three nodes (two control planes, a worker), their Talos API (``talos``) and API server (``kube``)."""

    def __init__(self, nodes=None):
        self.nodes = nodes or [SimNode("10.5.0.2", "cp-1", "10.5.0.2", True), SimNode("10.5.0.3", "cp-2", "10.5.0.3", True),
                               SimNode("10.5.0.5", "worker-1", "10.5.0.5", False)]
        self.applied = []  # (node name, component names) in order
        self.on_apply = []
        self.proxy = None  # the kube-proxy DaemonSet: Lagging(rolled out) and its image
        self.proxy_image = "registry.k8s.io/kube-proxy:v" + FROM
        self.talos = FakeTalos()
        self.talos.answer(rpc.VERSION, lambda _request, node: [
            machine_pb2.Version(version=machine_pb2.VersionInfo(tag=self.node(node).talos))])
        self.talos.answer(rpc.COSI_GET, self._get)
        self.talos.answer(rpc.COSI_LIST, self._list)
        self.talos.answer(rpc.APPLY_CONFIGURATION, self._apply)
        self.kube = FakeKube(self)

    def node(self, target):
        for node in self.nodes:
            if target in (node.target, node.name, node.address):
                return node
        raise AssertionError("no simulated node %r" % (target,))

    def _get(self, request, target):
        node = self.node(target)
        if request.type == "MachineConfigs.config.talos.dev":
            return [state_pb2.GetResponse(resource=resource(request.namespace, request.type, request.id, node.config))]
        if request.type == "Nodenames.kubernetes.talos.dev":
            return [state_pb2.GetResponse(resource=resource("k8s", request.type, "nodename", {"nodename": node.name}))]
        if request.type == "StaticPods.kubernetes.talos.dev":
            args = ["--%s=%s" % item for item in sorted(node.extra_args.get(request.id, {}).items())]
            pod = {"spec": {"containers": [{"name": request.id, "command": ["/usr/local/bin/" + request.id] + args}]}}
            return [state_pb2.GetResponse(resource=resource("k8s", request.type, request.id, pod))]
        for component in ALL:
            if component.resource and component.resource[1] == request.type and request.id in node.rendered:
                image, version = node.rendered[request.id].read()
                spec = {"image": image}
                if component is components.KUBELET:
                    spec["args"] = ["--%s=%s" % item for item in sorted(node.extra_args.get("kubelet", {}).items())]
                return [state_pb2.GetResponse(resource=resource(request.namespace, request.type, request.id, spec,
                                                                version=str(version)))]
        return fails_with("NotFound", "resource %s doesn't exist" % request.type)

    def _list(self, request, target):
        assert request.type == "Manifests.kubernetes.talos.dev"
        image = self.node(target).image(components.KUBE_PROXY)
        daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
                     "spec": {"template": {"spec": {"containers": [{"name": "kube-proxy", "image": image}]}}}}
        return [state_pb2.ListResponse(resource=resource("controlplane", request.type, "10-kube-proxy", [daemonset]))]

    def _apply(self, request, target):
        node = self.node(target)
        text = request.data.decode()
        changed = [component for component in ALL if (node.control_plane or component is components.KUBELET)
                   and node.image(component, text) != node.image(component)]
        if not request.dry_run:
            for hook in list(self.on_apply):
                hook(node, changed)
            node.config = text
            self.applied.append((node.name, [component.name for component in changed]))
            for component in changed:
                if component.name in node.pods:
                    image, version = node.rendered[component.name].value
                    node.rendered[component.name].set((node.image(component), version + 1), after=2)
                    node.pods[component.name].set((str(version + 1), True), after=3)
                elif component is components.KUBELET:
                    node.rendered["kubelet"] = Lagging((node.image(component), 2))
                    node.kubelet.set(("v" + components.image_version(node.image(component)), True), after=3)
        return [machine_pb2.ApplyConfiguration(mode=machine_pb2.ApplyConfigurationRequest.NO_REBOOT,
                                               mode_details=DETAILS % ("--- a\n+++ b\n" if changed else "No changes."))]

    def pending(self):
        """What was applied and not yet seen done: ``[(node, what)]``."""
        found = []
        for node in self.nodes:
            for name, value in node.rendered.items():
                if not value.settled:
                    found.append((node.name, "Talos's %s config" % name))
            for name, value in node.pods.items():
                if not value.settled:
                    found.append((node.name, "%s mirror pod" % name))
            if not node.kubelet.settled:
                found.append((node.name, "Node"))
        if self.proxy is not None and not self.proxy.settled:
            found.append(("cluster", "kube-proxy rollout"))
        return found

    def check_waited(self):
        """Every apply must find what was applied before it seen done."""
        def hook(node, changed):
            assert not self.pending(), "%s applied on %s while %s was not seen done" % (
                [component.name for component in changed], node.name, self.pending())
        self.on_apply.append(hook)

    def upgrade(self, **options):
        options.setdefault("pre_pull", False)
        options.setdefault("sync_manifests", False)
        options.setdefault("wait_timeout", 5)
        return KubernetesUpgrade(self.talos, self.kube, options.pop("to_version", TO), issuer=self.nodes[0].target, **options)


class FakeKube(object):
    """What the API server shows of the simulation (KubeAPI's reads and writes)."""

    def __init__(self, sim):
        self.sim = sim
        self.writes = 0
        self.deprecated = []
        self.objects = {}  # (group, version, resource) -> how many the API server holds
        self.failures = []  # KubernetesAPIErrors the next reads raise, in turn

    def _fail_maybe(self):
        if self.failures:
            raise self.failures.pop(0)

    def nodes(self, retry=True):
        self._fail_maybe()
        found = []
        for node in self.sim.nodes:
            if not node.registered:
                continue
            version, ready = node.kubelet.read()
            found.append({"name": node.name, "address": node.address, "addresses": [node.address, node.name],
                          "control_plane": node.control_plane, "kubelet_version": version, "ready": ready})
        return found

    def pods(self, namespace, label_selector):
        self._fail_maybe()
        component = label_selector.split("=", 1)[1]
        found = []
        for node in self.sim.nodes:
            if component in node.pods:
                config_version, ready = node.pods[component].read()
                found.append({"name": "%s-%s" % (component, node.name), "node_name": node.name, "host_ip": node.address,
                              "annotations": {"talos.dev/config-version": config_version}, "ready": ready})
        return found

    def daemonset_rollout(self, namespace, name, retry=False):
        self._fail_maybe()
        done = self.sim.proxy.read() if self.sim.proxy is not None else True
        count = len(self.sim.nodes)
        return {"generation": 2, "observed": 2 if done else 1, "desired": count, "updated": count if done else 1,
                "available": count, "images": [self.sim.proxy_image]}

    def deprecated_api_requests(self):
        return list(self.deprecated)

    def object_count(self, group, version, resource_name):
        return self.objects.get((group, version, resource_name))

    def apply(self, obj, dry_run=False):
        assert obj["kind"] == "DaemonSet"
        if not dry_run:
            self.writes += 1
            for hook in list(self.sim.on_apply):
                hook(None, [components.KUBE_PROXY])
            self.sim.proxy_image = obj["spec"]["template"]["spec"]["containers"][0]["image"]
            self.sim.proxy = Lagging(False)
            self.sim.proxy.set(True, after=3)
        return obj


def _applies(sim):
    return [call for call in sim.talos.calls_to(rpc.APPLY_CONFIGURATION) if not call.request.dry_run]


def test_an_upgrade_waits_for_each_step_before_the_next():
    """Static pod rendered, mirror pod on the new config version and Ready, kube-proxy rolled out, each Node on the
    new kubelet and Ready: each seen before the next apply (and the last before the task returns)."""
    sim = Simulation()
    sim.check_waited()
    result = sim.upgrade().run()
    assert sim.pending() == []
    assert result["changed"] is True and result["from_version"] == FROM
    assert sim.applied == (
        [(name, [component]) for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
         for name in ("cp-1", "cp-2")]
        + [("cp-1", ["kube-proxy"]), ("cp-2", ["kube-proxy"])]
        + [(name, ["kubelet"]) for name in ("cp-1", "cp-2", "worker-1")])
    assert all(node.image(component).endswith(":v" + TO) for node in sim.nodes for component in ALL
               if node.control_plane or component is components.KUBELET)


def test_nodes_named_otherwise_than_kubernetes_knows_them_are_found_by_their_nodename():
    """A DNS name or a NAT address as the Talos target: the node's Kubernetes Node is found (Talos's Nodename) and
    waited on by its name."""
    sim = Simulation([SimNode("cp-1.example.com", "cp-1", "10.5.0.2", True), SimNode("203.0.113.3", "cp-2", "10.5.0.3", True),
                      SimNode("worker-1.example.com", "worker-1", "10.5.0.5", False)])
    sim.check_waited()
    result = sim.upgrade(control_planes=["cp-1.example.com", "203.0.113.3"], workers=["worker-1.example.com"]).run()
    assert result["kubernetes_nodes"] == {"cp-1.example.com": "cp-1", "203.0.113.3": "cp-2", "worker-1.example.com": "worker-1"}
    assert sim.pending() == [] and len(sim.applied) == 11


def test_a_node_kubernetes_does_not_know_is_refused_before_any_change():
    sim = Simulation()
    sim.nodes.append(SimNode("10.5.0.9", "stray", "10.5.0.9", False, registered=False))
    with pytest.raises(TalosConfigError) as refused:
        sim.upgrade(control_planes=["10.5.0.2", "10.5.0.3"], workers=["10.5.0.5", "10.5.0.9"]).run()
    assert refused.value.message == (
        "No Kubernetes Node matches worker_nodes entry 10.5.0.9 (by the Node's name, an address it reports, or the nodename "
        "Talos registers the node with); the API server lists cp-1 (10.5.0.2, cp-1), cp-2 (10.5.0.3, cp-2), worker-1 "
        "(10.5.0.5, worker-1); nothing was changed.")
    assert _applies(sim) == []


def test_the_starting_version_is_the_lowest_component_so_an_interrupted_run_still_refuses_a_minor_jump():
    # The static pods reached 1.37, kube-proxy stayed on 1.36: 1.38 is two minors away from where the cluster is.
    nodes = [SimNode("10.5.0.2", "cp-1", "10.5.0.2", True, talos="v1.15.0", config=config_text(True, TO)),
             SimNode("10.5.0.5", "worker-1", "10.5.0.5", False, talos="v1.15.0")]
    sim = Simulation(nodes)
    sim.proxy_image = "registry.k8s.io/kube-proxy:v" + FROM
    with pytest.raises(TalosConfigError, match=r"^Kubernetes upgrades one minor release at a time: 1\.36\.3 to 1\.38\.1 skips"):
        sim.upgrade(to_version="1.38.1").run()
    # A scheduler left behind counts as well.
    nodes[0].rendered["kube-scheduler"] = Lagging(("registry.k8s.io/kube-scheduler:v1.36.3", 1))
    sim.proxy_image = "registry.k8s.io/kube-proxy:v" + TO
    with pytest.raises(TalosConfigError, match=r"1\.36\.3 to 1\.38\.1 skips"):
        sim.upgrade(to_version="1.38.1").run()


def test_a_talos_release_missing_from_the_table_is_refused_before_the_kubernetes_api():
    sim = Simulation()
    sim.nodes[0].talos = "v1.16.0"
    sim.kube.failures = [AssertionError("the Kubernetes API was asked")]
    with pytest.raises(TalosConfigError, match=r"^node 10\.5\.0\.2 runs Talos v1\.16\.0, whose supported Kubernetes "):
        sim.upgrade().run()


def test_a_config_edited_during_the_upgrade_is_not_reverted():
    sim = Simulation()
    edited = "  nodeLabels:\n    edited: during-the-upgrade\n"

    def edit(node, changed):
        second = sim.node("cp-2")
        if node is not None and node.name == "cp-1" and "nodeLabels" not in second.config:
            second.config = second.config.replace("  type: controlplane\n", "  type: controlplane\n" + edited)
    sim.on_apply.append(edit)
    sim.upgrade().run()
    assert edited in sim.node("cp-2").config
    assert sim.node("cp-2").image(components.KUBELET).endswith(":v" + TO)


def test_kube_proxy_disabled_by_its_document_is_left_alone():
    proxy_off = "---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: false\n"
    nodes = [SimNode("10.5.0.2", "cp-1", "10.5.0.2", True, config=config_text(True) + proxy_off),
             SimNode("10.5.0.5", "worker-1", "10.5.0.5", False)]
    sim = Simulation(nodes)
    sim.proxy_image = "cilium-replaced-it"
    result = sim.upgrade(wait_timeout=2).run()
    assert "kube-proxy" not in [item["component"] for item in result["plan"]]
    assert sim.proxy is None and sim.kube.writes == 0
    assert result["from_version"] == FROM


def test_removed_arguments_are_read_from_what_talos_renders():
    sim = Simulation()
    sim.node("cp-2").extra_args["kube-scheduler"] = {"feature-gates": "GangScheduling=true"}
    sim.node("worker-1").extra_args["kubelet"] = {"containerd": "/run/containerd/containerd.sock"}
    with pytest.raises(TalosConfigError) as refused:
        sim.upgrade().run()
    assert refused.value.message == (
        "Kubernetes 1.37.2 removed what the components are still started with: feature gate GangScheduling of "
        "kube-scheduler on node 10.5.0.3; flag --containerd of kubelet on node 10.5.0.5; remove them from the machine "
        "config (extraArgs, or the kubelet's extraConfig) first.")
    assert _applies(sim) == []


def test_the_api_server_restarting_during_waits_is_ridden_out():
    sim = Simulation()
    sim.check_waited()
    upgrade = sim.upgrade()
    original = upgrade._upgrade_static_pods

    def with_failures():
        sim.kube.failures = [KubernetesAPIError("unreachable"), KubernetesAPIError("busy", status=429),
                             KubernetesAPIError("restarting", status=503)]
        original()
    upgrade._upgrade_static_pods = with_failures
    assert upgrade.run()["changed"] is True
    assert sim.kube.failures == []


def test_a_refusal_that_will_not_pass_ends_a_wait():
    sim = Simulation()
    upgrade = sim.upgrade()
    original = upgrade._upgrade_static_pods

    def forbidden():
        sim.kube.failures = [KubernetesAPIError("forbidden", status=403)]
        original()
    upgrade._upgrade_static_pods = forbidden
    with pytest.raises(ActionFailed) as failed:
        upgrade.run()
    assert "kube-apiserver on node 10.5.0.2, waiting for the mirror pod" in failed.value.message


def test_changed_counts_every_write_also_when_the_task_fails():
    sim = Simulation()
    upgrade = sim.upgrade()
    sim.kube.writes = 2
    with pytest.raises(ActionFailed) as failed:
        upgrade._failed("Syncing the bootstrap manifests, applying ConfigMap kube-system/x", TalosError("refused."))
    assert failed.value.result["changed"] is True
    assert failed.value.message.endswith("refused; 2 write(s) were made in the Kubernetes API, rerun the task to finish the upgrade.")


def test_images_move_to_another_repository():
    sim = Simulation()
    result = sim.upgrade(repositories={"kube-apiserver": "registry.example.com/k8s/kube-apiserver",
                                       "kubelet": "registry.example.com/k8s/kubelet"}).run()
    targets = dict(((item["node"], item["component"]), item["image_to"]) for item in result["plan"])
    assert targets[("10.5.0.2", "kube-apiserver")] == "registry.example.com/k8s/kube-apiserver:v" + TO
    assert targets[("10.5.0.5", "kubelet")] == "registry.example.com/k8s/kubelet:v" + TO
    assert targets[("10.5.0.2", "kube-scheduler")] == "registry.k8s.io/kube-scheduler:v" + TO


def test_check_mode_validates_and_writes_nothing():
    sim = Simulation()
    before = [copy.deepcopy(node.config) for node in sim.nodes]
    result = sim.upgrade(check_mode=True).run()
    assert result["changed"] is True and len(result["plan"]) == 11
    assert _applies(sim) == [] and [node.config for node in sim.nodes] == before


@pytest.mark.parametrize("options, message", [
    ({"to_version": "1.39.0"}, r"^to_version 1\.39\.0 is not supported by any Talos release \(Talos 1\.9 to 1\.15 run "),
    ({"to_version": "1.37.2", "from_version": "1.35.0"}, r"^Kubernetes upgrades one minor release at a time"),
    ({"to_version": "1.37.2", "kubelet_image": "registry.example.com/kubelet:v1.37.2"},
     r"^kubelet_image 'registry.example.com/kubelet:v1.37.2' is not an image repository such as "),
    ({"to_version": "1.37.2", "kubernetes_endpoint": "10.5.0.2:6443"},
     r"^kubernetes_endpoint '10.5.0.2:6443' is not the URL of a Kubernetes API server such as https://10.5.0.2:6443\.$"),
])
def test_the_module_checks_what_needs_no_node_before_any_call(options, message):
    from module_fakes import run_task
    from ansible_collections.talos_linux.talos.plugins.modules import talos_kubernetes_upgrade

    client = FakeTalos()
    with pytest.raises(TalosConfigError, match=message):
        run_task(talos_kubernetes_upgrade, client, **options)
    assert client.calls == []


def test_objects_of_an_api_resource_the_target_removes_are_refused():
    sim = Simulation()
    sim.kube.objects[("scheduling.k8s.io", "v1alpha2", "workloads")] = 2
    with pytest.raises(TalosConfigError) as refused:
        sim.upgrade().run()
    assert refused.value.message == ("Kubernetes 1.37.2 no longer serves API resources the cluster still holds objects of: "
                                     "workloads.v1alpha2.scheduling.k8s.io (2 objects); migrate or delete them first.")
    assert _applies(sim) == []


# -- the task: kubeconfig, API connection, message and diff ----------------------------------

class ClosingKube(FakeKube):
    """FakeKube as upgrade_kubernetes builds it (KubeAPI's arguments kept), closed or not."""

    made = []

    def __init__(self, sim, kubeconfig, server=None, retry_seconds=0):
        super(ClosingKube, self).__init__(sim)
        self.kubeconfig, self.server, self.retry_seconds = kubeconfig, server, retry_seconds
        self.closed = False
        ClosingKube.made.append(self)

    def close(self):
        self.closed = True


@pytest.fixture
def task_sim(monkeypatch):
    """A Simulation whose first control plane issues an admin kubeconfig, with KubeAPI made as a ClosingKube."""
    from kubeconfig_samples import archive, kubeconfig

    sim = Simulation()
    sim.kubeconfig = kubeconfig()
    sim.talos.answer(rpc.KUBECONFIG, archive(yaml.safe_dump(sim.kubeconfig)))
    ClosingKube.made = []
    monkeypatch.setattr(kubernetes_upgrade, "KubeAPI", lambda config, **options: ClosingKube(sim, config, **options))
    return sim


def _task(sim, heard, **options):
    options.setdefault("pre_pull", False)
    options.setdefault("sync_manifests", False)
    options.setdefault("wait_timeout", 5)
    return kubernetes_upgrade.upgrade_kubernetes(sim.talos, "10.5.0.2", options.pop("to_version", TO), hide=heard.update,
                                                 **options)


def test_the_task_upgrades_with_the_kubeconfig_of_its_node_and_hides_its_secrets(task_sim):
    heard = set()
    result = _task(task_sim, heard, server="https://10.5.0.9:6443", diff=True)
    assert [call.node for call in task_sim.talos.calls_to(rpc.KUBECONFIG)] == ["10.5.0.2"]
    kube, = ClosingKube.made
    assert (kube.kubeconfig, kube.server, kube.retry_seconds, kube.closed) == (task_sim.kubeconfig, "https://10.5.0.9:6443", 5, True)
    user = task_sim.kubeconfig["users"][0]["user"]
    assert user["client-key-data"] in heard
    assert result["msg"] == "Upgraded Kubernetes from %s to %s: 11 image change(s), 0 manifest object(s) synced." % (FROM, TO)
    images, = result["diff"]
    assert (images["before_header"], images["after_header"]) == ("images the nodes run", "images after the upgrade")
    assert images["before"].splitlines()[0] == "10.5.0.2 kube-apiserver: registry.k8s.io/kube-apiserver:v" + FROM
    assert images["after"].splitlines()[-1] == "10.5.0.5 kubelet: ghcr.io/siderolabs/kubelet:v" + TO
    assert len(_applies(task_sim)) == 11


def test_the_task_in_check_mode_says_what_it_would_do_and_a_rerun_that_nothing_is_left(task_sim):
    result = _task(task_sim, set(), check_mode=True)
    assert result["msg"] == "Would upgrade Kubernetes from %s to %s: 11 image change(s), 0 manifest object(s) to sync." % (FROM, TO)
    assert "diff" not in result and _applies(task_sim) == []
    _task(task_sim, set())
    again = _task(task_sim, set(), diff=True)
    assert again["changed"] is False and again["diff"] == []
    assert again["msg"] == "Kubernetes %s runs on every node and the bootstrap manifests are in sync: nothing to do." % TO
    assert [kube.closed for kube in ClosingKube.made] == [True, True, True]


def test_the_task_closes_the_api_connection_when_the_upgrade_fails(task_sim):
    heard = set()
    task_sim.talos.answer(rpc.APPLY_CONFIGURATION, fails_with("PermissionDenied", "not authorized"))
    with pytest.raises(ActionFailed, match="^kube-apiserver on node 10.5.0.2, patching the machine config: "):
        _task(task_sim, heard)
    assert ClosingKube.made[0].closed is True
    assert task_sim.kubeconfig["users"][0]["user"]["client-key-data"] in heard
