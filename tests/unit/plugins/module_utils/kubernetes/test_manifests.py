# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubernetes_manifests.py: the stages and their order, inventory keys and policy, what a prune selects, kstatus's
readiness rules, and a sync against a fake Kubernetes API (check mode, stages and waits, prune, recreate, failures)."""

import copy

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import manifests
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubernetesAPIError, object_label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import WaitTimedOut

OURS = {manifests.INVENTORY_ANNOTATION: manifests.INVENTORY[1]}


def obj(kind, name, namespace=None, api_version="v1", annotations=None, **fields):
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = annotations
    return dict({"apiVersion": api_version, "kind": kind, "metadata": metadata}, **fields)


CRD = obj("CustomResourceDefinition", "widgets.example.com", api_version="apiextensions.k8s.io/v1")
NAMESPACE = obj("Namespace", "flannel")
CLUSTER_ROLE = obj("ClusterRole", "system:talos-nodes", api_version="rbac.authorization.k8s.io/v1")
BINDING = obj("ClusterRoleBinding", "system:talos-nodes", api_version="rbac.authorization.k8s.io/v1")
PRIORITY = obj("PriorityClass", "talos-critical", api_version="scheduling.k8s.io/v1")
CONFIG_MAP = obj("ConfigMap", "kubeconfig-in-cluster", "kube-system", data={"kubeconfig": "x"})
SECRET = obj("Secret", "bootstrap-token-abc", "kube-system", stringData={"token-secret": "s3cr3tvalue0123456"})
ACCOUNT = obj("ServiceAccount", "kube-proxy", "kube-system")
DAEMONSET = obj("DaemonSet", "kube-proxy", "kube-system", api_version="apps/v1", spec={"template": {}})
DEPLOYMENT = obj("Deployment", "coredns", "kube-system", api_version="apps/v1", spec={"replicas": 2})
WEBHOOK = obj("ValidatingWebhookConfiguration", "talos", api_version="admissionregistration.k8s.io/v1")
WIDGET = obj("Widget", "one", "default", api_version="example.com/v1")


def labels(objects):
    return [object_label(item) for item in objects]


# -- order ------------------------------------------------------------------------------------------------------


def test_stages_put_definitions_then_classes_then_configuration_then_the_rest_each_in_kind_order():
    rendered = [WEBHOOK, DEPLOYMENT, SECRET, DAEMONSET, ACCOUNT, WIDGET, CONFIG_MAP, PRIORITY, BINDING, CLUSTER_ROLE,
                NAMESPACE, CRD]
    assert [(index, labels(items)) for index, items in manifests.staged(rendered)] == [
        (0, ["CustomResourceDefinition widgets.example.com", "Namespace flannel", "ClusterRole system:talos-nodes"]),
        (1, ["PriorityClass talos-critical"]),
        (2, ["ConfigMap kube-system/kubeconfig-in-cluster", "Secret kube-system/bootstrap-token-abc"]),
        # ClusterRoleBinding, ServiceAccount, Deployment by rank; the unranked by group and kind; webhooks last.
        (3, ["ClusterRoleBinding system:talos-nodes", "ServiceAccount kube-system/kube-proxy", "Deployment kube-system/coredns",
             "DaemonSet kube-system/kube-proxy", "Widget default/one", "ValidatingWebhookConfiguration talos"]),
    ]


@pytest.mark.parametrize("item, stage", [
    (CRD, 0), (NAMESPACE, 0), (CLUSTER_ROLE, 0), (PRIORITY, 1), (CONFIG_MAP, 2), (SECRET, 2), (BINDING, 3),
    # A kind of the same name in another group is no definition and no configuration.
    (obj("Namespace", "x", api_version="example.com/v1"), 3), (obj("ConfigMap", "x", "y", api_version="example.com/v1"), 3),
])
def test_stage_of(item, stage):
    assert manifests.stage_of(item) == stage


def test_empty_stages_are_left_out():
    assert [index for index, _items in manifests.staged([DEPLOYMENT, CONFIG_MAP])] == [2, 3]


# -- inventory keys and policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("item, key", [
    (BINDING, "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"),
    (DAEMONSET, "kube-system_kube-proxy_apps_DaemonSet"),
    (CONFIG_MAP, "kube-system_kubeconfig-in-cluster__ConfigMap"),
])
def test_inventory_keys_round_trip(item, key):
    assert manifests.inventory_key(item) == key
    metadata = item["metadata"]
    assert manifests.parse_inventory_key(key) == (metadata.get("namespace", ""), metadata["name"],
                                                  manifests._group(item), item["kind"])


def test_a_key_naming_no_object_is_refused():
    with pytest.raises(TalosError, match="holds the key 'kube-proxy', which names no object"):
        manifests.parse_inventory_key("kube-proxy")


@pytest.mark.parametrize("owner, policy, refused", [
    (manifests.INVENTORY[1], "MustMatch", None),
    (manifests.INVENTORY[1], "AdoptIfNoInventory", None),
    (None, "MustMatch", "belongs to no inventory, which inventory_policy MustMatch does not adopt"),
    (None, "AdoptIfNoInventory", None),
    (None, "AdoptAll", None),
    ("flux-system", "MustMatch", "belongs to inventory flux-system, which inventory_policy MustMatch does not take over"),
    ("flux-system", "AdoptIfNoInventory", "belongs to inventory flux-system, which inventory_policy AdoptIfNoInventory"),
    ("flux-system", "AdoptAll", None),
])
def test_inventory_policy(owner, policy, refused):
    live = obj("ConfigMap", "x", "kube-system", annotations={manifests.INVENTORY_ANNOTATION: owner} if owner else {})
    problem = manifests.inventory_policy_problem(policy, live)
    if refused is None:
        assert problem is None
    else:
        assert problem.startswith("ConfigMap kube-system/x " + refused)


def test_prune_selects_the_inventory_entries_talos_no_longer_renders():
    recorded = ["kube-system_kube-proxy_apps_DaemonSet", "kube-system_kube-proxy__ServiceAccount",
                "_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding",
                # Same name, another kind, group or namespace: not what is rendered.
                "kube-system_kube-proxy__ConfigMap", "kube-system_kube-proxy_extensions_DaemonSet",
                "default_kube-proxy_apps_DaemonSet"]
    rendered = [DAEMONSET, ACCOUNT,
                # A cluster-wide entry matches the object whatever namespace the manifest gives it.
                obj("ClusterRoleBinding", "system:talos-nodes", "kube-system", api_version="rbac.authorization.k8s.io/v1")]
    assert manifests.prune_references(recorded, rendered) == [
        "kube-system_kube-proxy__ConfigMap", "kube-system_kube-proxy_extensions_DaemonSet", "default_kube-proxy_apps_DaemonSet"]
    assert manifests.prune_references([], rendered) == []


@pytest.mark.parametrize("status, message, immutable", [
    (422, "roleRef: Invalid value: cannot change roleRef", True),
    (409, "the object has been modified", True),
    (400, "spec.selector: field is immutable", True),
    (400, "admission webhook: immutable field changed", True),
    (403, "forbidden", False),
    (None, "could not be reached", False),
])
def test_immutable_refusals(status, message, immutable):
    assert manifests.is_immutable_refusal(KubernetesAPIError(message, status=status)) is immutable


# -- readiness ---------------------------------------------------------------------------------------------------


def live(kind, api_version="apps/v1", generation=2, spec=None, status=None, **metadata):
    return {"apiVersion": api_version, "kind": kind, "metadata": dict({"name": "x", "generation": generation}, **metadata),
            "spec": spec or {}, "status": status or {}}


def deployment_status(replicas=2, updated=2, ready=2, available=2, observed=2, conditions=None):
    return {"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated, "readyReplicas": ready,
            "availableReplicas": available,
            "conditions": conditions if conditions is not None else [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}


def daemonset_status(desired=3, current=3, updated=3, available=3, ready=3, observed=2):
    return {"observedGeneration": observed, "desiredNumberScheduled": desired, "currentNumberScheduled": current,
            "updatedNumberScheduled": updated, "numberAvailable": available, "numberReady": ready}


@pytest.mark.parametrize("item, state, message", [
    (live("Deployment", spec={"replicas": 2}, status=deployment_status()), "Current", "available"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(observed=1)), "InProgress", "generation 2 not observed"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(updated=1)), "InProgress", "updated: 1/2"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(replicas=3)), "InProgress", "pending termination: 2/3"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(available=1)), "InProgress", "available: 1/2"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(ready=1)), "InProgress", "ready: 1/2"),
    (live("Deployment", spec={"replicas": 2, "progressDeadlineSeconds": 600},
          status=deployment_status(conditions=[{"type": "Available", "status": "True"}])), "InProgress", "its ReplicaSet"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(conditions=[
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}])), "Failed", "progress deadline"),
    (live("Deployment", spec={"replicas": 2}, status=deployment_status(conditions=[])), "InProgress", "not Available"),
    (live("DaemonSet", status=daemonset_status()), "Current", "3 pods ready"),
    (live("DaemonSet", status=dict(daemonset_status(), observedGeneration=None)), "InProgress", "not observed"),
    (live("DaemonSet", status=daemonset_status(updated=2)), "InProgress", "updated: 2/3"),
    (live("DaemonSet", status=daemonset_status(available=2)), "InProgress", "available: 2/3"),
    (live("DaemonSet", status={"observedGeneration": 2}), "InProgress", "no desired number"),
    (live("StatefulSet", spec={"replicas": 1}, status={"observedGeneration": 2, "replicas": 1, "readyReplicas": 1,
                                                       "currentReplicas": 1, "currentRevision": "a", "updateRevision": "a"}),
     "Current", "1 replicas ready"),
    (live("StatefulSet", spec={"replicas": 1}, status={"observedGeneration": 2, "replicas": 1, "readyReplicas": 1,
                                                       "currentReplicas": 1, "currentRevision": "a", "updateRevision": "b"}),
     "InProgress", "the updated revision"),
    (live("StatefulSet", spec={"updateStrategy": {"type": "OnDelete"}}), "Current", "OnDelete"),
    (live("ReplicaSet", spec={"replicas": 1}, status={"replicas": 1, "fullyLabeledReplicas": 1, "availableReplicas": 0}),
     "InProgress", "available: 0/1"),
    (live("Pod", "v1", None, status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}), "Current", "Ready"),
    (live("Pod", "v1", None, status={"phase": "Running", "containerStatuses": [
        {"name": "dns", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}), "Failed", "CrashLoopBackOff: dns"),
    (live("Pod", "v1", None, status={"phase": "Pending"}), "InProgress", "phase Pending"),
    (live("Job", "batch/v1", None, status={"conditions": [{"type": "Failed", "status": "True"}]}), "Failed", "the Job failed"),
    (live("Job", "batch/v1", None, status={}), "InProgress", "not started"),
    (live("PersistentVolumeClaim", "v1", None, status={"phase": "Pending"}), "InProgress", "not Bound"),
    (live("Service", "v1", None, spec={"type": "LoadBalancer"}), "InProgress", "no cluster IP"),
    (live("Service", "v1", None, spec={"type": "ClusterIP", "clusterIP": "10.96.0.10"}), "Current", "ready"),
    (live("CustomResourceDefinition", "apiextensions.k8s.io/v1", None,
          status={"conditions": [{"type": "Established", "status": "True"}]}), "Current", "established"),
    (live("CustomResourceDefinition", "apiextensions.k8s.io/v1", None,
          status={"conditions": [{"type": "Established", "status": "False", "reason": "Installing"}]}), "InProgress", "installing"),
    (live("CustomResourceDefinition", "apiextensions.k8s.io/v1", None, status={"conditions": [
        {"type": "NamesAccepted", "status": "False", "message": "plural is taken"}]}), "Failed", "plural is taken"),
    (live("Secret", "v1", None), "Current", "ready once written"),
    (live("ConfigMap", "v1", None, deletionTimestamp="2026-01-01T00:00:00Z"), "Terminating", "being deleted"),
    # Any other kind: the generic conditions, then Ready, else nothing to wait for.
    (live("Widget", "example.com/v1", status={"conditions": [{"type": "Reconciling", "status": "True", "message": "busy"}]}),
     "InProgress", "busy"),
    (live("Widget", "example.com/v1", status={"conditions": [{"type": "Stalled", "status": "True", "message": "stuck"}]}),
     "Failed", "stuck"),
    (live("Widget", "example.com/v1", status={"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting"}]}),
     "InProgress", "Waiting"),
    (live("Widget", "example.com/v1", status={"conditions": [{"type": "Ready", "status": "True"}]}), "Current", "Ready"),
    (live("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", None), "Current", "nothing to wait for"),
])
def test_readiness(item, state, message):
    found = manifests.readiness(item)
    assert found[0] == state and message in found[1], found


# -- the sync against a fake API ----------------------------------------------------------------------------------


# What the controllers write once they caught up, for the kinds with rules of their own.
CURRENT_STATUS = {
    "DaemonSet": daemonset_status(desired=1, current=1, updated=1, available=1, ready=1, observed=1),
    "Deployment": deployment_status(observed=1),
    "CustomResourceDefinition": {"conditions": [{"type": "Established", "status": "True"}]},
}


class FakeKube:
    """The API server as the sync sees it: objects by inventory key, the inventory's keys, every write in ``calls``.

    An object's readiness is ``ready`` (a kstatus state per key, "Current" by default); ``refuse`` maps a key to the
    error its dry-run apply raises (while the object exists); ``unserved`` lists kinds not served until a CRD is
    applied.
    """

    def __init__(self, objects=(), inventory=None):
        self.objects = dict((manifests.inventory_key(item), copy.deepcopy(item)) for item in objects)
        self.inventory = None if inventory is None else list(inventory)
        self.calls = []
        self.refuse = {}
        self.ready = {}
        self.unserved = set()

    def serves(self, item):
        return item["kind"] not in self.unserved

    def config_map_keys(self, namespace, name):
        return None if self.inventory is None else sorted(self.inventory)

    def live(self, item):
        found = self.objects.get(manifests.inventory_key(item))
        if found is None:
            return None
        found = copy.deepcopy(found)
        state = self.ready.get(manifests.inventory_key(item), "Current")
        if state == "Current":
            found["metadata"]["generation"] = 1
            found["status"] = CURRENT_STATUS.get(found["kind"], {})
        elif state == "Failed":
            found["status"] = {"conditions": [{"type": "Stalled", "status": "True", "message": "broken"}]}
        elif state == "InProgress":
            found["status"] = {"conditions": [{"type": "Ready", "status": "False", "message": "starting"}]}
        return found

    def live_by_reference(self, group, kind, namespace, name):
        for key, item in self.objects.items():
            if manifests.parse_inventory_key(key) == (namespace or "", name, group, kind):
                return copy.deepcopy(item)
        return None

    def apply(self, item, dry_run=False):
        key = manifests.inventory_key(item)
        if key in self.refuse and key in self.objects:
            raise self.refuse[key]
        if not dry_run:
            self.calls.append(("apply", object_label(item)))
            self.objects[key] = copy.deepcopy(item)
            if item["kind"] == "CustomResourceDefinition":
                self.unserved.discard("Widget")
        return copy.deepcopy(item)

    def delete(self, item):
        self.calls.append(("delete", object_label(item)))
        return self.objects.pop(manifests.inventory_key(item), None) is not None

    def add_config_map_keys(self, namespace, name, keys):
        missing = sorted(key for key in keys if self.inventory is None or key not in self.inventory)
        self.inventory = (self.inventory or []) + missing
        if missing:
            self.calls.append(("inventory add", missing))
        return missing

    def remove_config_map_keys(self, namespace, name, keys):
        held = [key for key in keys if key in (self.inventory or ())]
        self.inventory = [key for key in self.inventory or () if key not in held]
        if held:
            self.calls.append(("inventory remove", held))
        return held


def synced(kube, rendered, check_mode=False, **options):
    sync = manifests.ManifestSync(kube, manifests.SyncOptions(**options), check_mode=check_mode)
    sync.run(rendered)
    return sync


def ours(item):
    return manifests.inventoried(item)


STALE = obj("ConfigMap", "talos-extra", "kube-system", annotations=dict(OURS))
RENDERED = [DAEMONSET, CONFIG_MAP, BINDING]


def cluster_with_drift():
    """The binding missing, the DaemonSet changed by hand, a ConfigMap Talos no longer renders in the inventory."""
    changed = ours(DAEMONSET)
    changed["spec"] = {"template": {"by": "hand"}}
    return FakeKube([changed, ours(CONFIG_MAP), STALE],
                    inventory=[manifests.inventory_key(item) for item in (DAEMONSET, CONFIG_MAP, STALE)])


def test_check_mode_writes_nothing_and_reports_what_would_be_applied_and_pruned():
    kube = cluster_with_drift()
    before = copy.deepcopy(kube.objects)
    sync = synced(kube, RENDERED, check_mode=True)
    assert kube.calls == [] and kube.objects == before
    assert sync.changes == [{"object": "DaemonSet kube-system/kube-proxy", "action": "updated"},
                            {"object": "ClusterRoleBinding system:talos-nodes", "action": "created"},
                            {"object": "ConfigMap kube-system/talos-extra", "action": "pruned"}]
    assert sync.inventory == {"added": ["_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"],
                              "removed": ["kube-system_talos-extra__ConfigMap"]}
    pruned = next(item for item in sync.diffs if item["object"] == "ConfigMap kube-system/talos-extra")
    assert pruned["after"] is None and pruned["before"]["metadata"]["name"] == "talos-extra"


def test_a_sync_applies_records_then_prunes_and_forgets_what_talos_no_longer_renders():
    kube = cluster_with_drift()
    sync = synced(kube, RENDERED)
    assert kube.calls == [
        ("apply", "ClusterRoleBinding system:talos-nodes"), ("apply", "DaemonSet kube-system/kube-proxy"),
        ("inventory add", ["_system__talos-nodes_rbac.authorization.k8s.io_ClusterRoleBinding"]),
        ("delete", "ConfigMap kube-system/talos-extra"),
        ("inventory remove", ["kube-system_talos-extra__ConfigMap"]),
    ]
    assert [item["action"] for item in sync.changes] == ["created", "updated", "pruned"]
    # Every object written carries the inventory's annotation.
    assert all(item["metadata"]["annotations"] == OURS for item in kube.objects.values())
    # A second sync finds nothing to do.
    kube.calls = []
    again = synced(kube, RENDERED)
    assert kube.calls == [] and again.changes == []
    assert again.inventory == {"added": [], "removed": []}


def test_prune_false_keeps_what_talos_no_longer_renders():
    kube = cluster_with_drift()
    sync = synced(kube, RENDERED, prune=False)
    assert "kube-system_talos-extra__ConfigMap" in kube.objects and "kube-system_talos-extra__ConfigMap" in kube.inventory
    assert [item["action"] for item in sync.changes] == ["created", "updated"]
    assert synced(cluster_with_drift(), RENDERED, prune=False, check_mode=True).inventory["removed"] == []


def test_an_inventory_entry_already_gone_is_only_forgotten():
    kube = FakeKube([ours(CONFIG_MAP)], inventory=["kube-system_talos-extra__ConfigMap"])
    sync = synced(kube, [CONFIG_MAP])
    assert ("delete", "ConfigMap kube-system/talos-extra") not in kube.calls
    assert sync.inventory["removed"] == ["kube-system_talos-extra__ConfigMap"] and sync.changes == []


def test_stages_are_applied_in_order_and_the_first_two_waited_for():
    kube = FakeKube(inventory=[])
    kube.unserved.add("Widget")
    waited = []
    sync = manifests.ManifestSync(kube, manifests.SyncOptions(reconcile_timeout=0))
    sync._wait_ready = lambda objects, timeout: waited.append((labels(objects), timeout))
    sync.run([WIDGET, DEPLOYMENT, SECRET, PRIORITY, CRD])
    assert [call[1] for call in kube.calls if call[0] == "apply"] == [
        "CustomResourceDefinition widgets.example.com", "PriorityClass talos-critical",
        "Secret kube-system/bootstrap-token-abc", "Deployment kube-system/coredns", "Widget default/one"]
    # The CRD stage and the class stage, for the stage wait's own time when the reconcile wait is off; no final wait.
    assert waited == [(["CustomResourceDefinition widgets.example.com"], manifests.STAGE_WAIT_SECONDS),
                      (["PriorityClass talos-critical"], manifests.STAGE_WAIT_SECONDS)]


def test_the_reconcile_wait_covers_what_was_written_only():
    kube = FakeKube([ours(CONFIG_MAP)], inventory=[])
    waited = []
    sync = manifests.ManifestSync(kube, manifests.SyncOptions(reconcile_timeout=30))
    sync._wait_ready = lambda objects, timeout: waited.append((labels(objects), timeout))
    sync.run([CONFIG_MAP, DEPLOYMENT])
    assert waited == [(["Deployment kube-system/coredns"], 30)]


def test_an_object_that_fails_ends_the_wait_at_once_and_what_was_written_is_reported():
    kube = FakeKube(inventory=[])
    kube.ready[manifests.inventory_key(DEPLOYMENT)] = "Failed"
    sync = manifests.ManifestSync(kube, manifests.SyncOptions(reconcile_timeout=30))
    with pytest.raises(TalosError, match=r"^Deployment kube-system/coredns failed: broken\.$"):
        sync.run([DEPLOYMENT])
    assert sync.step == "waiting for the objects written to be ready"
    assert sync.changes == [{"object": "Deployment kube-system/coredns", "action": "created"}]
    assert sync.inventory["added"] == [manifests.inventory_key(DEPLOYMENT)]


def test_the_wait_times_out_naming_what_is_not_ready():
    kube = FakeKube(inventory=[])
    kube.ready[manifests.inventory_key(DEPLOYMENT)] = "InProgress"
    sync = manifests.ManifestSync(kube, manifests.SyncOptions(reconcile_timeout=0.01))
    with pytest.raises(WaitTimedOut, match="ready; last observed: Deployment kube-system/coredns InProgress: replicas: 0/2"):
        sync.run([DEPLOYMENT])
    assert sync.changes == [{"object": "Deployment kube-system/coredns", "action": "created"}]


@pytest.mark.parametrize("policy", ["MustMatch", "AdoptIfNoInventory"])
def test_an_object_of_another_inventory_stops_the_sync_before_any_write(policy):
    foreign = obj("ServiceAccount", "kube-proxy", "kube-system", annotations={manifests.INVENTORY_ANNOTATION: "flux"})
    kube = FakeKube([foreign], inventory=[])
    with pytest.raises(TalosConfigError, match="belongs to inventory flux, which inventory_policy %s" % policy):
        synced(kube, [DEPLOYMENT, ACCOUNT], inventory_policy=policy)
    assert kube.calls == []
    kube = FakeKube([foreign], inventory=[])
    synced(kube, [DEPLOYMENT, ACCOUNT], inventory_policy="AdoptAll")
    assert kube.objects[manifests.inventory_key(ACCOUNT)]["metadata"]["annotations"] == OURS


def test_an_object_of_no_inventory_is_adopted_unless_the_policy_is_must_match():
    kube = FakeKube([obj("ServiceAccount", "kube-proxy", "kube-system")], inventory=[])
    with pytest.raises(TalosConfigError, match="belongs to no inventory"):
        synced(kube, [ACCOUNT], inventory_policy="MustMatch")
    assert [item["action"] for item in synced(kube, [ACCOUNT]).changes] == ["updated"]


def test_a_prune_the_policy_forbids_stops_the_sync_before_any_write():
    foreign = obj("ConfigMap", "talos-extra", "kube-system", annotations={manifests.INVENTORY_ANNOTATION: "flux"})
    kube = FakeKube([foreign], inventory=["kube-system_talos-extra__ConfigMap"])
    with pytest.raises(TalosConfigError, match="ConfigMap kube-system/talos-extra belongs to inventory flux"):
        synced(kube, [DEPLOYMENT])
    assert kube.calls == []
    synced(kube, [DEPLOYMENT], prune=False)
    assert "kube-system_talos-extra__ConfigMap" in kube.objects


def test_an_immutable_change_fails_before_any_write_unless_recreate():
    kube = FakeKube([ours(BINDING)], inventory=[])
    kube.refuse[manifests.inventory_key(BINDING)] = KubernetesAPIError("cannot change roleRef", status=422)
    with pytest.raises(TalosError, match=r"refuses to change ClusterRoleBinding system:talos-nodes in place \(cannot change "
                                         r"roleRef\); set recreate_immutable=true"):
        synced(kube, [DEPLOYMENT, BINDING])
    assert kube.calls == []

    assert synced(kube, [BINDING], check_mode=True, recreate=True).changes == [
        {"object": "ClusterRoleBinding system:talos-nodes", "action": "recreated"}]
    assert kube.calls == []

    sync = synced(kube, [BINDING], recreate=True, reconcile_timeout=1)
    assert kube.calls[:2] == [("delete", "ClusterRoleBinding system:talos-nodes"), ("apply", "ClusterRoleBinding system:talos-nodes")]
    assert sync.changes == [{"object": "ClusterRoleBinding system:talos-nodes", "action": "recreated"}]


def test_what_was_applied_before_a_failure_is_recorded_in_the_inventory():
    kube = FakeKube([ours(DEPLOYMENT)], inventory=[])
    kube.ready[manifests.inventory_key(NAMESPACE)] = "Failed"
    with pytest.raises(TalosError, match="Namespace flannel failed"):
        synced(kube, [NAMESPACE, DEPLOYMENT, CONFIG_MAP])
    # The Namespace was applied, its stage failed: nothing after it was written, the Namespace is recorded.
    assert kube.calls == [("apply", "Namespace flannel"), ("inventory add", ["_flannel__Namespace"])]

    def refuse(*_args):
        raise KubernetesAPIError("refused", status=403)

    kube = FakeKube(inventory=[])
    kube.add_config_map_keys = refuse
    kube.ready[manifests.inventory_key(NAMESPACE)] = "Failed"
    with pytest.raises(TalosError, match="Namespace flannel failed"):
        synced(kube, [NAMESPACE])


def test_a_refusal_that_is_not_about_immutable_fields_is_not_a_recreate():
    kube = FakeKube([ours(BINDING)], inventory=[])
    kube.refuse[manifests.inventory_key(BINDING)] = KubernetesAPIError("forbidden", status=403)
    with pytest.raises(KubernetesAPIError, match="forbidden"):
        synced(kube, [BINDING], recreate=True)
    assert kube.calls == []


def test_secrets_are_collected_and_redacted_in_diffs_whatever_their_keys_are_called():
    secret = obj("Secret", "registry", "kube-system", data={"config": "eyJhdXRocyI6e319"})
    token = obj("Secret", "bootstrap-token-abc", "kube-system",
                stringData={"token-secret": "s3cr3tvalue0123456", "usage-bootstrap-signing": "true"})
    # Every value long enough to mask: a "true" masked would garble every message that says true.
    assert manifests.manifest_secrets([token, secret]) == {"s3cr3tvalue0123456", "eyJhdXRocyI6e319"}
    live = copy.deepcopy(secret)
    live["data"]["config"] = "b2xkLXZhbHVl"
    sync = synced(FakeKube([live], inventory=[]), [secret], check_mode=True)
    assert sync.diffs[0]["after"]["data"] == {"config": "<redacted>"} and sync.diffs[0]["before"]["data"] == {"config": "<redacted>"}
