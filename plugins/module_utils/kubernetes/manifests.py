# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talos's bootstrap manifests synced to the Kubernetes API, as ``talosctl upgrade-k8s`` and the Terraform provider
sync them on Talos v1.13 and later (go-kubernetes ``ssa.Manager`` over fluxcd's ``ssa.ResourceManager``).

1. Plan, before anything is written: a server-side dry-run apply of every object Talos renders, compared with what
   the API server has (created, updated, unchanged). An object that exists and would change must pass the inventory
   policy; one whose change touches an immutable field is deleted and created again only with ``recreate``. With
   ``prune``, the objects of the inventory Talos no longer renders are looked up and must pass the policy too.
2. Apply in stages: CRDs, Namespaces and ClusterRoles, then the ``*Class`` kinds, each waited for until ready; then
   ConfigMaps and Secrets (workloads that checksum them roll out on the new values); then the rest.
3. Record every rendered object in the inventory ConfigMap; delete what is pruned, then forget it there.
4. Wait until what was written is ready by kstatus's rules, failing at once on an object that failed.

Every object carries the inventory's annotation, as Talos's own manifest controller applies them. Check mode asks
the API server for dry runs only and reports what would be written.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import re

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubernetesAPIError, object_label, strip_volatile
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED, maskable_literals, redact, secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Seen, Waiter

MANIFESTS = ("controlplane", "Manifests.kubernetes.talos.dev")
# Talos records the bootstrap manifests it applied in this ConfigMap and marks each object with the annotation naming
# it (constants.KubernetesBootstrapManifestsInventoryName); the inventory's ID is the ConfigMap's name.
INVENTORY = ("kube-system", "talos-bootstrap-manifests-inventory")
INVENTORY_ANNOTATION = "config.k8s.io/owning-inventory"
# talosctl's --manifests-inventory-policy values; the default is talosctl's and the Terraform provider's.
INVENTORY_POLICIES = ("MustMatch", "AdoptIfNoInventory", "AdoptAll")
DEFAULT_INVENTORY_POLICY = "AdoptIfNoInventory"
# talosctl's --manifests-reconcile-timeout default, in seconds.
DEFAULT_RECONCILE_TIMEOUT = 300
# How long the first stages are waited for when the reconcile wait is off (fluxcd's default wait).
STAGE_WAIT_SECONDS = 60
# Seconds between two looks at what was applied or deleted.
POLL_SECONDS = 1.0

# kstatus's states of a live object.
CURRENT, IN_PROGRESS, FAILED, TERMINATING, NOT_FOUND = "Current", "InProgress", "Failed", "Terminating", "NotFound"

STAGES = ("CRDs, Namespaces and ClusterRoles", "classes", "ConfigMaps and Secrets", "the other objects")
# Within a stage, fluxcd applies kinds in this order (the kinds not named between the two lists, by group and kind).
_FIRST_KINDS = (
    "CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterClass", "RuntimeClass", "PriorityClass",
    "StorageClass", "VolumeSnapshotClass", "IngressClass", "GatewayClass", "ClusterRoleBinding", "ResourceQuota",
    "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret", "Service", "LimitRange", "Deployment",
    "StatefulSet", "CronJob", "PodDisruptionBudget",
)
_LAST_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# What the API server answers when an apply changes a field that cannot change (besides 409 Conflict and 422 Invalid).
_IMMUTABLE = re.compile(r"is\simmutable|immutable\sfield")


def read_manifests(client, node):
    """Each Talos Manifest resource's objects on ``node``, in the resources' order (their IDs sort as Talos applies
    them)."""
    resources = client.list_resources(MANIFESTS[0], MANIFESTS[1], node=node)
    # A Manifest's spec is the list of its objects (ManifestSpec marshals as its items).
    return [[obj for obj in (resource.get("spec") if isinstance(resource.get("spec"), list) else [resource.get("spec")])
             if isinstance(obj, dict)]
            for resource in sorted(resources, key=lambda resource: resource["metadata"]["id"])]


def inventoried(obj):
    """``obj`` marked as an object of Talos's bootstrap-manifest inventory."""
    obj = copy.deepcopy(obj)
    metadata = obj.setdefault("metadata", {})
    metadata["annotations"] = dict(metadata.get("annotations") or {}, **{INVENTORY_ANNOTATION: INVENTORY[1]})
    return obj


def _group(obj):
    api_version = obj.get("apiVersion") or ""
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def inventory_key(obj):
    """How the inventory names an object: ``namespace_name_group_kind`` (``:`` in a name written ``__``)."""
    metadata = obj.get("metadata") or {}
    return "%s_%s_%s_%s" % (metadata.get("namespace") or "", str(metadata.get("name")).replace(":", "__"), _group(obj),
                            obj.get("kind"))


def parse_inventory_key(key):
    """``(namespace, name, group, kind)`` of an inventory key (the namespace before the first ``_``, kind and group
    after the last two: only a name may hold ``_``, as the ``__`` of a ``:``)."""
    namespace, separator, rest = key.partition("_")
    rest, separator_kind, kind = rest.rpartition("_")
    name, separator_group, group = rest.rpartition("_")
    if not (separator and separator_kind and separator_group and name and kind):
        raise TalosError("The bootstrap-manifest inventory (ConfigMap %s/%s) holds the key %r, which names no object "
                         "(namespace_name_group_kind)." % (INVENTORY + (key,)))
    return namespace, name.replace("__", ":"), group, kind


def reference_label(namespace, name, kind):
    """``Kind namespace/name`` of an inventory entry, as object_label writes an object."""
    return "%s %s" % (kind, "%s/%s" % (namespace, name) if namespace else name)


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


def manifest_secrets(objects):
    """The secret values ``objects`` hold, to mask in the task's output: every value of a Secret and the secret-named
    fields of the others, those long enough to be worth masking (a Secret's ``"true"`` is not)."""
    found = set()
    for obj in objects:
        if obj.get("kind") == "Secret":
            found.update(str(value) for field in ("data", "stringData") for value in (obj.get(field) or {}).values())
        else:
            found.update(secret_values(obj))
    return set(maskable_literals(found))


# -- the order: stages, and kinds within a stage ----------------------------------------------------------------


def stage_of(obj):
    """The index in STAGES of the stage ``obj`` is applied in (talosctl: fluxcd's stages, ConfigMaps and Secrets as
    a custom stage)."""
    kind, api_version = obj.get("kind") or "", obj.get("apiVersion") or ""
    if ((kind == "CustomResourceDefinition" and api_version.startswith("apiextensions.k8s.io/"))
            or (kind == "Namespace" and api_version == "v1")
            or (kind == "ClusterRole" and api_version.startswith("rbac.authorization.k8s.io/"))):
        return 0
    if kind.endswith("Class"):
        return 1
    if kind in ("ConfigMap", "Secret") and api_version == "v1":
        return 2
    return 3


def _kind_rank(kind):
    if kind in _FIRST_KINDS:
        return _FIRST_KINDS.index(kind) - len(_FIRST_KINDS)
    if kind in _LAST_KINDS:
        return 1 + _LAST_KINDS.index(kind)
    return 0


def apply_order(obj):
    """The sort key of ``obj`` within its stage: its kind's rank, then group, kind, namespace and name."""
    metadata = obj.get("metadata") or {}
    return (_kind_rank(obj.get("kind")), _group(obj), obj.get("kind") or "", metadata.get("namespace") or "",
            metadata.get("name") or "")


def staged(objects):
    """``objects`` as ``[(stage index, [objects in apply order])]``, the empty stages left out."""
    stages = [[] for _stage in STAGES]
    for obj in objects:
        stages[stage_of(obj)].append(obj)
    return [(index, sorted(items, key=apply_order)) for index, items in enumerate(stages) if items]


# -- the inventory: policy and pruning ----------------------------------------------------------------------------


def inventory_policy_problem(policy, live):
    """Why ``policy`` forbids changing or deleting ``live`` (the object as the API server has it), or None.

    MustMatch changes only the inventory's own objects; AdoptIfNoInventory also those of no inventory;
    AdoptAll any.
    """
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    owner = annotations.get(INVENTORY_ANNOTATION)
    if owner == INVENTORY[1]:
        return None
    if owner is None:
        if policy == "MustMatch":
            return "%s belongs to no inventory, which inventory_policy MustMatch does not adopt" % object_label(live)
        return None
    if policy == "AdoptAll":
        return None
    return "%s belongs to inventory %s, which inventory_policy %s does not take over" % (object_label(live), owner, policy)


def prune_references(inventory_keys, objects):
    """The inventory keys naming none of ``objects`` (what Talos rendered): what a prune deletes, in the
    inventory's order. A cluster-wide entry matches an object of any namespace, as the API server ignores one."""
    rendered = [((obj.get("metadata") or {}).get("namespace") or "", (obj.get("metadata") or {}).get("name"),
                 _group(obj), obj.get("kind")) for obj in objects]
    stale = []
    for key in inventory_keys:
        namespace, name, group, kind = parse_inventory_key(key)
        if not any(name == item[1] and group == item[2] and kind == item[3] and (not namespace or namespace == item[0])
                   for item in rendered):
            stale.append(key)
    return stale


def is_immutable_refusal(error):
    """Whether the API server refused an apply for changing a field that cannot change (kubectl's and fluxcd's
    test: 409 Conflict, 422 Invalid, or a message saying so)."""
    return getattr(error, "status", None) in (409, 422) or bool(_IMMUTABLE.search(error.message or ""))


# -- readiness: kstatus's rules -----------------------------------------------------------------------------------


def _int(value, default):
    return value if isinstance(value, int) else default


def _conditions(status):
    return dict((item.get("type"), item) for item in status.get("conditions") or () if isinstance(item, dict))


def _condition_is(conditions, kind, value):
    return (conditions.get(kind) or {}).get("status") == value


def _in_progress(message):
    return IN_PROGRESS, message


def _short_of(checks):
    """The first ``(wanted, seen, what)`` where fewer than wanted are seen, as an InProgress state, or None."""
    for wanted, seen, what in checks:
        if wanted > seen:
            return _in_progress("%s: %d/%d" % (what, seen, wanted))
    return None


def _deployment(spec, status, conditions):
    # Without a progress deadline the controller sets no Progressing condition: it counts as progressing.
    progressing = _int(spec.get("progressDeadlineSeconds"), 2147483647) == 2147483647
    progress = conditions.get("Progressing") or {}
    if progress.get("reason") == "ProgressDeadlineExceeded":
        return FAILED, "progress deadline exceeded"
    progressing = progressing or (progress.get("status") == "True" and progress.get("reason") == "NewReplicaSetAvailable")
    wanted, replicas = _int(spec.get("replicas"), 1), _int(status.get("replicas"), 0)
    updated, available = _int(status.get("updatedReplicas"), 0), _int(status.get("availableReplicas"), 0)
    short = _short_of(((wanted, replicas, "replicas"), (wanted, updated, "updated"), (replicas, wanted, "pending termination"),
                       (updated, available, "available"), (wanted, _int(status.get("readyReplicas"), 0), "ready")))
    if short:
        return short
    if not progressing:
        return _in_progress("its ReplicaSet is not available")
    if not _condition_is(conditions, "Available", "True"):
        return _in_progress("not Available")
    return CURRENT, "available"


def _daemonset(obj, status):
    # The controller always sets both generations once it has seen the DaemonSet.
    if (obj.get("metadata") or {}).get("generation") is None or status.get("observedGeneration") is None:
        return _in_progress("not observed by its controller yet")
    desired = _int(status.get("desiredNumberScheduled"), -1)
    if desired < 0:
        return _in_progress("no desired number of pods yet")
    return _short_of(((desired, _int(status.get("currentNumberScheduled"), 0), "scheduled"),
                      (desired, _int(status.get("updatedNumberScheduled"), 0), "updated"),
                      (desired, _int(status.get("numberAvailable"), 0), "available"),
                      (desired, _int(status.get("numberReady"), 0), "ready"))) or (CURRENT, "%d pods ready" % desired)


def _statefulset(spec, status):
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type") == "OnDelete":
        return CURRENT, "updated by hand (OnDelete)"
    wanted, replicas = _int(spec.get("replicas"), 1), _int(status.get("replicas"), 0)
    short = _short_of(((wanted, replicas, "replicas"), (wanted, _int(status.get("readyReplicas"), 0), "ready"),
                       (replicas, wanted, "pending termination")))
    if short:
        return short
    partition = _int((strategy.get("rollingUpdate") or {}).get("partition"), -1)
    if partition != -1:
        return _short_of(((wanted - partition, _int(status.get("updatedReplicas"), 0), "updated"),)) or (CURRENT, "partition rolled out")
    short = _short_of(((wanted, _int(status.get("currentReplicas"), 0), "current"),))
    if short:
        return short
    if status.get("currentRevision") != status.get("updateRevision"):
        return _in_progress("the updated revision is not current yet")
    return CURRENT, "%d replicas ready" % replicas


def _replicaset(spec, status, conditions):
    if _condition_is(conditions, "ReplicaFailure", "True"):
        return _in_progress("a replica failed")
    wanted = _int(spec.get("replicas"), 1)
    return _short_of(((wanted, _int(status.get("fullyLabeledReplicas"), 0), "labelled"),
                      (wanted, _int(status.get("availableReplicas"), 0), "available"),
                      (wanted, _int(status.get("readyReplicas"), 0), "ready"),
                      (_int(status.get("replicas"), 0), wanted, "pending termination"))) or (CURRENT, "available")


def _pod(status, conditions):
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        return CURRENT, "completed"
    if phase == "Running":
        if _condition_is(conditions, "Ready", "True"):
            return CURRENT, "Ready"
        looping = [item.get("name") for item in status.get("containerStatuses") or ()
                   if ((item.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"]
        if looping:
            return FAILED, "containers in CrashLoopBackOff: %s" % ", ".join(looping)
        return _in_progress("running but not Ready")
    return _in_progress("phase %s" % (phase or "not observed yet"))


def _job(spec, status, conditions):
    if _condition_is(conditions, "Complete", "True"):
        return CURRENT, "completed"
    if _condition_is(conditions, "Failed", "True"):
        return FAILED, "the Job failed"
    if not status.get("startTime"):
        return _in_progress("not started")
    return CURRENT, "running"


def _crd(conditions):
    if _condition_is(conditions, "NamesAccepted", "False"):
        return FAILED, (conditions["NamesAccepted"].get("message") or "names not accepted")
    established = conditions.get("Established") or {}
    if established.get("status") == "False" and established.get("reason") != "Installing":
        return FAILED, (established.get("message") or "not established")
    if established.get("status") == "True":
        return CURRENT, "established"
    return _in_progress("installing")


def readiness(obj):
    """``(state, message)`` of a live object by kstatus's rules, which fluxcd and so talosctl wait on: CURRENT once
    its controllers have caught up with it, IN_PROGRESS, FAILED (it will not get there by itself) or TERMINATING."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    conditions = _conditions(status)
    if metadata.get("deletionTimestamp"):
        return TERMINATING, "being deleted"
    generation, observed = metadata.get("generation"), status.get("observedGeneration")
    if generation is not None and observed is not None and generation != observed:
        return _in_progress("generation %s not observed yet (observed %s)" % (generation, observed))
    if _condition_is(conditions, "Reconciling", "True"):
        return _in_progress(conditions["Reconciling"].get("message") or "reconciling")
    if _condition_is(conditions, "Stalled", "True"):
        return FAILED, (conditions["Stalled"].get("message") or "stalled")
    kind = (_group(obj), obj.get("kind"))
    if kind in (("", "Secret"), ("", "ConfigMap"), ("batch", "CronJob"), ("policy", "PodDisruptionBudget")):
        return CURRENT, "ready once written"
    if kind in (("apps", "Deployment"), ("extensions", "Deployment")):
        return _deployment(spec, status, conditions)
    if kind in (("apps", "DaemonSet"), ("extensions", "DaemonSet")):
        return _daemonset(obj, status)
    if kind == ("apps", "StatefulSet"):
        return _statefulset(spec, status)
    if kind in (("apps", "ReplicaSet"), ("extensions", "ReplicaSet")):
        return _replicaset(spec, status, conditions)
    if kind == ("", "Pod"):
        return _pod(status, conditions)
    if kind == ("", "PersistentVolumeClaim"):
        return (CURRENT, "Bound") if status.get("phase") == "Bound" else _in_progress("not Bound")
    if kind == ("batch", "Job"):
        return _job(spec, status, conditions)
    if kind == ("", "Service"):
        if spec.get("type") == "LoadBalancer" and not spec.get("clusterIP"):
            return _in_progress("no cluster IP yet")
        return CURRENT, "ready"
    if kind == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        return _crd(conditions)
    if "Ready" in conditions:
        if _condition_is(conditions, "Ready", "True"):
            return CURRENT, "Ready"
        return _in_progress(conditions["Ready"].get("message") or conditions["Ready"].get("reason") or "not Ready")
    return CURRENT, "nothing to wait for"


# -- the sync ---------------------------------------------------------------------------------------------------


class SyncOptions:
    """How the manifests are synced, as talosctl's --manifests-* flags: ``prune`` (not --manifests-no-prune),
    ``inventory_policy``, ``recreate`` (--manifests-force) and ``reconcile_timeout`` (seconds, 0: no wait)."""

    def __init__(self, prune=True, inventory_policy=DEFAULT_INVENTORY_POLICY, recreate=False,
                 reconcile_timeout=DEFAULT_RECONCILE_TIMEOUT):
        self.prune = prune
        self.inventory_policy = inventory_policy
        self.recreate = recreate
        self.reconcile_timeout = reconcile_timeout


class _Planned:
    """One object to write: ``action`` created, updated or recreated; ``live`` what the API server has."""

    def __init__(self, obj, action, live):
        self.obj = obj
        self.action = action
        self.live = live


class ManifestSync:
    """One sync of the bootstrap manifests to ``kube`` (a KubeAPI) with ``options`` (SyncOptions).

    As it goes, ``changes`` lists each object written or pruned (in check mode, that would be) as ``{object,
    action}``, ``inventory`` the keys added to and removed from the inventory, ``diffs`` each object before and after
    (redacted), and ``step`` says what it is doing: a failure raises the TalosError as it is, and these tell what was
    done before it (the KubeAPI counts the writes).
    """

    def __init__(self, kube, options=None, check_mode=False, progress=None):
        self.kube = kube
        self.options = options or SyncOptions()
        self.check_mode = check_mode
        self.progress = progress or (lambda line: None)
        self.changes = []
        self.inventory = {"added": [], "removed": []}
        self.diffs = []
        self.step = "planning"

    def run(self, objects):
        """Sync ``objects`` (what Talos renders, in the Manifests' order)."""
        objects = [inventoried(obj) for obj in objects]
        self.step = "reading the inventory ConfigMap %s/%s" % INVENTORY
        recorded = self.kube.config_map_keys(*INVENTORY)
        planned = self._plan(objects)
        stale = self._plan_prune(recorded or [], objects) if self.options.prune else []
        wanted = [inventory_key(obj) for obj in objects]
        if self.check_mode:
            self.inventory["added"] = [key for key in wanted if recorded is None or key not in recorded]
            self.inventory["removed"] = [key for key, _live in stale]
            for item in planned.values():
                self._record(item.obj, item.action)
            for _key, live in stale:
                if live is not None:
                    self._record(live, "pruned")
            return
        applied = []
        try:
            self._apply(objects, planned, applied)
        except TalosError:
            self._record_partial(applied)
            raise
        if wanted:
            self.step = "recording the objects in the inventory ConfigMap %s/%s" % INVENTORY
            self.inventory["added"] = self.kube.add_config_map_keys(INVENTORY[0], INVENTORY[1], wanted)
        for _key, live in stale:
            if live is not None:
                self._prune(live)
        if stale:
            self.step = "removing the pruned objects from the inventory ConfigMap %s/%s" % INVENTORY
            self.inventory["removed"] = self.kube.remove_config_map_keys(INVENTORY[0], INVENTORY[1],
                                                                         [key for key, _live in stale])
        if self.options.reconcile_timeout:
            self.step = "waiting for the objects written to be ready"
            self._wait_ready([item.obj for item in planned.values()], self.options.reconcile_timeout)

    def _record(self, obj, action):
        what = object_label(obj)
        self.changes.append({"object": what, "action": action})
        self.progress("manifest %s: %s%s" % (what, action, " (check mode)" if self.check_mode else ""))

    def _plan(self, objects):
        """``{inventory key: _Planned}`` of the objects to write, after checking each against the API server."""
        planned = {}
        for obj in objects:
            what = object_label(obj)
            self.step = "comparing %s with the API server (dry run)" % what
            if not self.kube.serves(obj):
                # A CRD of this sync defines its kind: it exists once the first stage is applied.
                planned[inventory_key(obj)] = self._planned(obj, "created", None, obj)
                continue
            live = self.kube.live(obj)
            try:
                after = self.kube.apply(obj, dry_run=True)
            except TalosError as error:
                if live is None or not is_immutable_refusal(error):
                    raise
                if not self.options.recreate:
                    raise TalosError("The API server refuses to change %s in place (%s); set recreate_immutable=true "
                                     "to delete and create it again." % (what, error.message.rstrip(".")),
                                     code=error.code)
                self._check_policy(live)
                planned[inventory_key(obj)] = self._planned(obj, "recreated", live, obj)
                continue
            if live is not None and strip_volatile(live) == strip_volatile(after):
                continue
            if live is not None:
                self._check_policy(live)
            planned[inventory_key(obj)] = self._planned(obj, "created" if live is None else "updated", live, after)
        return planned

    def _planned(self, obj, action, live, after):
        self.diffs.append({"object": object_label(obj),
                           "before": redacted_object(strip_volatile(live)) if live is not None else None,
                           "after": redacted_object(strip_volatile(after))})
        return _Planned(obj, action, live)

    def _check_policy(self, live):
        self.step = "checking %s against the inventory policy" % object_label(live)
        problem = inventory_policy_problem(self.options.inventory_policy, live)
        if problem:
            raise TalosConfigError("%s; set inventory_policy to take it over, or remove it." % problem)

    def _plan_prune(self, recorded, objects):
        """``[(key, live object or None)]`` of the inventory's objects that Talos no longer renders."""
        stale = []
        for key in prune_references(recorded, objects):
            namespace, name, group, kind = parse_inventory_key(key)
            self.step = "reading %s, which Talos no longer renders" % reference_label(namespace, name, kind)
            live = self.kube.live_by_reference(group, kind, namespace, name)
            if live is not None:
                self._check_policy(live)
                self.diffs.append({"object": object_label(live), "before": redacted_object(strip_volatile(live)),
                                   "after": None})
            stale.append((key, live))
        return stale

    def _record_partial(self, applied):
        """After a failure, record what was applied before it, as talosctl does, so that a later prune finds it even
        when Talos stops rendering it before a sync succeeds. The failure is what the task reports: one in recording
        leaves the next sync to record these."""
        if not applied:
            return
        try:
            self.inventory["added"] = self.kube.add_config_map_keys(INVENTORY[0], INVENTORY[1], applied)
        except TalosError:
            pass

    def _apply(self, objects, planned, applied):
        """Write the planned objects stage by stage, adding the inventory key of each one written to ``applied``."""
        for index, stage in staged(objects):
            for obj in stage:
                item = planned.get(inventory_key(obj))
                if item is not None:
                    self._write(item)
                    applied.append(inventory_key(obj))
            if index < 2:
                # Later stages rely on these: CRDs established, Namespaces there, before what lives in them.
                self.step = "waiting for the %s to be ready" % STAGES[index]
                self._wait_ready(stage, self.options.reconcile_timeout or STAGE_WAIT_SECONDS)

    def _write(self, item):
        what = object_label(item.obj)
        if item.action == "recreated":
            self.step = "deleting %s to create it again" % what
            if self.kube.delete(item.live):
                # Reported as it is until the object exists again.
                self._record(item.obj, "deleted")
            self._wait_gone(item.obj)
        self.step = "applying %s" % what
        self.kube.apply(item.obj)
        if self.changes and self.changes[-1] == {"object": what, "action": "deleted"}:
            self.changes[-1]["action"] = "recreated"
        else:
            self._record(item.obj, item.action)

    def _prune(self, live):
        self.step = "pruning %s" % object_label(live)
        if self.kube.delete(live):
            self._record(live, "pruned")

    def _wait_gone(self, obj):
        what = object_label(obj)

        def poll():
            live = self.kube.live(obj)
            if live is None:
                return Seen("deleted", done=True)
            return Seen("deleting", detail="%s still exists" % what)

        Waiter(self.options.reconcile_timeout or STAGE_WAIT_SECONDS, POLL_SECONDS, self.progress).until(
            poll, "%s to be deleted" % what, "manifests", tolerate=_unanswered)

    def _wait_ready(self, objects, timeout):
        """Wait until every one of ``objects`` is CURRENT; one FAILED ends the wait at once."""
        waiting = list(objects)
        if not waiting:
            return

        def poll():
            states = []
            for obj in list(waiting):
                live = self.kube.live(obj)
                state, message = readiness(live) if live is not None else (NOT_FOUND, "not found")
                if state == CURRENT:
                    waiting.remove(obj)
                elif state == FAILED:
                    raise TalosError("%s failed: %s." % (object_label(obj), message.rstrip(".")))
                else:
                    states.append("%s %s: %s" % (object_label(obj), state, message))
            if not waiting:
                return Seen("ready", done=True)
            return Seen("%d not ready" % len(waiting), detail="; ".join(states))

        Waiter(timeout, POLL_SECONDS, self.progress).until(
            poll, "the bootstrap manifests to be ready", "manifests", tolerate=_unanswered)


def _unanswered(error):
    """A Kubernetes API that did not answer is waited out (it may restart); a refusal, or an object that failed, is not."""
    return isinstance(error, KubernetesAPIError) and error.status is None
