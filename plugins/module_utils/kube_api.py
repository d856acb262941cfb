# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes API of a Talos cluster, through the official ``kubernetes`` client.

The credentials are the admin kubeconfig Talos issues (the Kubeconfig RPC),
kept in memory: the client key goes into the TLS context through the same
short-lived private file as the Talos client's own key, never into a
kubeconfig on disk. Every failure is a ``KubernetesAPIError`` naming the API
server and what was asked; no answer carries a credential.

The ``kubernetes`` library is optional: only the modules that talk to
Kubernetes import this file, and they declare it (``LIBRARY``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import os
import re
import shutil
import ssl
import tempfile

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import load_client_certificate

try:
    import urllib3
    from kubernetes import client as kube_client
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError
except ImportError:  # reported by the doors through missing_required_lib (LIBRARY)
    kube_client = DynamicClient = None

    class DynamicApiError(Exception):
        pass

    class NotFoundError(DynamicApiError):
        pass

# (name on PyPI, module to import), for a module's TaskSpec libraries.
LIBRARY = ("kubernetes", "kubernetes")

# Talos's field manager for what it applies (constants.KubernetesFieldManagerName).
FIELD_MANAGER = "talos"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# (connect, read) seconds for one request: an API server that does not answer fails fast; waits poll again.
REQUEST_TIMEOUT = (5, 30)
# The fields of a live object that say nothing about what was applied.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")
_DEPRECATED_METRIC = re.compile(r"^apiserver_requested_deprecated_apis\{([^}]*)\}\s+(\S+)", re.MULTILINE)
_METRIC_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class KubernetesAPIError(TalosError):
    """The Kubernetes API could not be reached or refused a request; ``status`` is its HTTP status, if any."""

    def __init__(self, message, status=None):
        super(KubernetesAPIError, self).__init__(message, code="Kubernetes%s" % (status or "Unreachable"))
        self.status = status


def _kubeconfig_entry(config, section, name):
    for item in config.get(section) or ():
        if isinstance(item, dict) and item.get("name") == name:
            return item.get(section[:-1]) or {}
    raise TalosError("The kubeconfig from Talos has no %s named %r." % (section[:-1], name))


def _pem(entry, key):
    value = entry.get(key)
    if not value:
        raise TalosError("The kubeconfig from Talos has no %s." % key)
    return base64.b64decode(value).decode("ascii")


def strip_volatile(obj):
    """``obj`` (a Kubernetes object as a dict) without status and the metadata the server keeps for itself."""
    obj = dict(obj)
    obj.pop("status", None)
    metadata = dict(obj.get("metadata") or {})
    for key in _VOLATILE_METADATA:
        metadata.pop(key, None)
    annotations = dict(metadata.get("annotations") or {})
    annotations.pop("deprecated.daemonset.template.generation", None)
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    obj["metadata"] = metadata
    return obj


def object_label(obj):
    """``Kind namespace/name`` (``Kind name`` for a cluster-wide object)."""
    metadata = obj.get("metadata") or {}
    where = "%s/%s" % (metadata["namespace"], metadata.get("name")) if metadata.get("namespace") else metadata.get("name")
    return "%s %s" % (obj.get("kind"), where)


def deprecated_apis(metrics):
    """The deprecated APIs with a removal release that clients asked for, from the API server's ``metrics`` text
    (``apiserver_requested_deprecated_apis``): ``[{group, version, resource, removed_release}]``, sorted."""
    found = []
    for labels, value in _DEPRECATED_METRIC.findall(metrics):
        fields = dict(_METRIC_LABEL.findall(labels))
        if fields.get("removed_release") and float(value) > 0:
            found.append(dict((key, fields.get(key, "")) for key in ("group", "version", "resource", "removed_release")))
    return sorted(found, key=lambda item: (item["group"], item["version"], item["resource"]))


def is_ready(conditions, kind="Ready"):
    """Whether ``conditions`` (a list of dicts) has ``kind`` with status True."""
    return any(condition.get("type") == kind and condition.get("status") == "True" for condition in conditions or ())


class KubeAPI:
    """A connection to the Kubernetes API server of ``kubeconfig`` (the mapping Talos's Kubeconfig RPC returns)."""

    def __init__(self, kubeconfig):
        context = _kubeconfig_entry(kubeconfig, "contexts", kubeconfig.get("current-context"))
        cluster = _kubeconfig_entry(kubeconfig, "clusters", context.get("cluster"))
        user = _kubeconfig_entry(kubeconfig, "users", context.get("user"))
        self.server = cluster.get("server")
        tls = ssl.create_default_context(cadata=_pem(cluster, "certificate-authority-data"))
        load_client_certificate(tls, _pem(user, "client-certificate-data"), _pem(user, "client-key-data"),
                                "the kubeconfig from Talos")
        configuration = kube_client.Configuration()
        configuration.host = self.server
        self.api_client = kube_client.ApiClient(configuration)
        # The library would read the key from a file; the context above already holds it.
        self.api_client.rest_client.pool_manager = urllib3.PoolManager(
            num_pools=4, maxsize=4, ssl_context=tls, retries=urllib3.Retry(total=2, read=0, redirect=0))
        self.core = kube_client.CoreV1Api(self.api_client)
        self.apps = kube_client.AppsV1Api(self.api_client)
        self._dynamic = None
        self._discovery_dir = None

    def close(self):
        self.api_client.close()
        if self._discovery_dir is not None:
            shutil.rmtree(self._discovery_dir, ignore_errors=True)

    def _failure(self, error, what):
        status = getattr(error, "status", None)
        if status:
            reason = ""
            try:
                reason = json.loads(error.body).get("message") or ""
            except (TypeError, ValueError, AttributeError):
                reason = getattr(error, "reason", "") or ""
            return KubernetesAPIError("The Kubernetes API at %s refused to %s: %s %s." % (
                self.server, what, status, str(reason).rstrip(".")), status=status)
        return KubernetesAPIError("The Kubernetes API at %s could not be reached to %s (%s); the admin kubeconfig Talos "
                                  "issues names it as the cluster's control-plane endpoint." % (
                                      self.server, what, getattr(error, "reason", None) or error))

    def _ask(self, what, call, *args, **kwargs):
        try:
            return call(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except (kube_client.exceptions.ApiException, DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, what)

    # -- reads -------------------------------------------------------------------

    def version(self):
        """The API server's version (``v1.37.2``)."""
        return self._ask("read its version", kube_client.VersionApi(self.api_client).get_code).git_version

    def nodes(self):
        """Every Node as ``{name, address, control_plane, kubelet_version, ready}``; ``address`` is the InternalIP."""
        found = []
        for item in self._ask("list the nodes", self.core.list_node).items:
            addresses = dict((address.type, address.address) for address in item.status.addresses or ())
            conditions = [{"type": condition.type, "status": condition.status} for condition in item.status.conditions or ()]
            found.append({
                "name": item.metadata.name,
                "address": addresses.get("InternalIP") or addresses.get("Hostname") or item.metadata.name,
                "control_plane": CONTROL_PLANE_LABEL in (item.metadata.labels or {}),
                "kubelet_version": item.status.node_info.kubelet_version if item.status.node_info else None,
                "ready": is_ready(conditions),
            })
        return found

    def pods(self, namespace, label_selector):
        """The pods matching ``label_selector`` as ``{name, host_ip, annotations, images, ready}``."""
        found = []
        for item in self._ask("list the pods %s in %s" % (label_selector, namespace), self.core.list_namespaced_pod,
                              namespace, label_selector=label_selector).items:
            conditions = [{"type": condition.type, "status": condition.status} for condition in item.status.conditions or ()]
            found.append({
                "name": item.metadata.name,
                "host_ip": item.status.host_ip,
                "annotations": dict(item.metadata.annotations or {}),
                "images": [container.image for container in item.spec.containers],
                "ready": is_ready(conditions),
            })
        return found

    def daemonset_rollout(self, namespace, name):
        """``{generation, observed, desired, updated, available}`` of a DaemonSet, or None when there is none."""
        try:
            item = self.apps.read_namespaced_daemon_set(namespace=namespace, name=name, _request_timeout=REQUEST_TIMEOUT)
        except kube_client.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise self._failure(error, "read DaemonSet %s/%s" % (namespace, name))
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "read DaemonSet %s/%s" % (namespace, name))
        status = item.status
        return {"generation": item.metadata.generation, "observed": status.observed_generation or 0,
                "desired": status.desired_number_scheduled or 0, "updated": status.updated_number_scheduled or 0,
                "available": status.number_available or 0}

    def deprecated_api_requests(self):
        """The deprecated APIs clients asked for since the API server started, from its ``/metrics``:
        ``[{group, version, resource, removed_release}]`` (those with a removal release)."""
        response = self._ask("read its metrics", self.api_client.call_api, "GET", self.server + "/metrics",
                             header_params={"Accept": "text/plain"})
        response.read()
        if response.status >= 400:
            raise KubernetesAPIError("The Kubernetes API at %s refused to read its metrics: %s %s."
                                     % (self.server, response.status, response.reason), status=response.status)
        return deprecated_apis(response.data.decode("utf-8", "replace"))

    def add_config_map_keys(self, namespace, name, keys):
        """Add ``keys`` (with empty values) to ConfigMap ``namespace/name``, creating it when missing; returns the
        keys that were missing."""
        what = "update ConfigMap %s/%s" % (namespace, name)
        try:
            existing = self.core.read_namespaced_config_map(name, namespace, _request_timeout=REQUEST_TIMEOUT).data or {}
        except kube_client.exceptions.ApiException as error:
            if error.status != 404:
                raise self._failure(error, what)
            existing = None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, what)
        missing = sorted(key for key in keys if existing is None or key not in existing)
        if existing is None:
            self._ask(what, self.core.create_namespaced_config_map, namespace,
                      {"metadata": {"name": name, "namespace": namespace}, "data": dict((key, "") for key in missing)})
        elif missing:
            self._ask(what, self.core.patch_namespaced_config_map, name, namespace,
                      {"data": dict((key, "") for key in missing)})
        return missing

    # -- server-side apply ----------------------------------------------------------

    @property
    def dynamic(self):
        if self._dynamic is None:
            self._dynamic = self._ask_dynamic()
        return self._dynamic

    def _ask_dynamic(self):
        # The library caches API discovery in a file, by default one that outlives the task in the temp directory.
        self._discovery_dir = tempfile.mkdtemp(prefix="talos-kube-")
        try:
            return DynamicClient(self.api_client, cache_file=os.path.join(self._discovery_dir, "discovery.json"))
        except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "list its APIs")

    def _resource(self, obj):
        try:
            return self.dynamic.resources.get(api_version=obj.get("apiVersion"), kind=obj.get("kind"))
        except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "find the API of %s" % object_label(obj))
        except Exception:  # the library's ResourceNotFoundError: the API server does not serve this kind
            raise KubernetesAPIError("The Kubernetes API at %s does not serve %s (%s), which a Talos manifest holds."
                                     % (self.server, obj.get("kind"), obj.get("apiVersion")))

    def live(self, obj):
        """The object ``obj`` names as the API server has it (a dict), or None."""
        resource = self._resource(obj)
        metadata = obj.get("metadata") or {}
        try:
            return resource.get(name=metadata.get("name"), namespace=metadata.get("namespace"),
                                _request_timeout=REQUEST_TIMEOUT).to_dict()
        except NotFoundError:
            return None
        except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "read %s" % object_label(obj))

    def apply(self, obj, dry_run=False):
        """Server-side apply ``obj`` as Talos's field manager, taking over conflicting fields; returns the result."""
        resource = self._resource(obj)
        metadata = obj.get("metadata") or {}
        try:
            return resource.server_side_apply(
                body=obj, name=metadata.get("name"), namespace=metadata.get("namespace"), field_manager=FIELD_MANAGER,
                force_conflicts=True, dry_run="All" if dry_run else None, _request_timeout=REQUEST_TIMEOUT).to_dict()
        except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "apply %s" % object_label(obj))
