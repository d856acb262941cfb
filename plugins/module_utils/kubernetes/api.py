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

from ansible_collections.talos_linux.talos.plugins.module_utils.common import waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import load_client_certificate

try:
    import urllib3
    from kubernetes import client as kube_client
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError
except ImportError:  # reported by the doors through missing_required_lib (LIBRARY)
    urllib3 = kube_client = DynamicClient = None

    class DynamicApiError(Exception):
        pass

    class _PoolManager(object):
        pass
else:
    _PoolManager = urllib3.PoolManager

# (name on PyPI, module to import), for a module's TaskSpec libraries.
LIBRARY = ("kubernetes", "kubernetes")

# Talos's field manager for what it applies (constants.KubernetesFieldManagerName).
FIELD_MANAGER = "talos"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# (connect, read) seconds for one request: an API server that does not answer fails fast; waits poll again.
REQUEST_TIMEOUT = (5, 30)
# Pauses between two tries of a request the API server answered with 429 or 5xx, or (once it has answered) did not
# answer: doubled from the first up to the last, as client-go's retries back off.
RETRY_BACKOFF = (0.5, 8.0)
# HTTP methods that change nothing.
_READ_METHODS = ("GET", "HEAD", "OPTIONS")
# The fields of a live object that say nothing about what was applied.
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")
_DEPRECATED_METRIC = re.compile(r"^apiserver_requested_deprecated_apis\{([^}]*)\}\s+(\S+)", re.MULTILINE)
_METRIC_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class KubernetesAPIError(TalosError):
    """The Kubernetes API could not be reached or refused a request; ``status`` is its HTTP status, if any."""

    def __init__(self, message, status=None):
        super(KubernetesAPIError, self).__init__(message, code="Kubernetes%s" % (status or "Unreachable"))
        self.status = status


def is_retryable(error):
    """Whether a failed request may succeed when tried again: no answer (an API server restarting), 429 (too many
    requests) or a 5xx. Other errors than the Kubernetes API's are left to their own rules (a wait tolerates them)."""
    status = getattr(error, "status", None)
    return status is None or status == 429 or status >= 500


class _WriteCountingPoolManager(_PoolManager):
    """The connection pool of a KubeAPI: counts the requests that changed something (``writes``), whoever made
    them, so that a task reports ``changed`` for every write, dry runs left out."""

    writes = 0

    def request(self, method, url, *args, **kwargs):
        # The official client and this module send every request through request(), never urlopen() directly.
        response = super(_WriteCountingPoolManager, self).request(method, url, *args, **kwargs)
        if method.upper() not in _READ_METHODS and "dryRun=" not in url and 200 <= response.status < 300:
            self.writes += 1
        return response


def api_server_url(value, option):
    """``value`` as the URL of an API server (``https://host:port``, no trailing slash); TalosConfigError naming
    ``option`` when it is none."""
    url = value.strip().rstrip("/")
    scheme, _sep, rest = url.partition("://")
    if scheme not in ("https", "http") or not rest or "/" in rest or " " in rest:
        raise TalosConfigError("%s %r is not the URL of a Kubernetes API server such as https://10.5.0.2:6443." % (option, value))
    return url


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
    """A connection to the Kubernetes API server of ``kubeconfig`` (the mapping Talos's Kubeconfig RPC returns), or
    at ``server`` (``https://host:port``) with its credentials.

    A request the API server answers with 429 or 5xx is tried again, with backoff, for up to ``retry_seconds``; so
    is one it does not answer once it has answered before (it restarts during an upgrade). The first request fails
    at once when nothing answers. Reads that a wait polls are tried once (``retry=False``): the wait polls again.
    """

    def __init__(self, kubeconfig, server=None, retry_seconds=0):
        context = _kubeconfig_entry(kubeconfig, "contexts", kubeconfig.get("current-context"))
        cluster = _kubeconfig_entry(kubeconfig, "clusters", context.get("cluster"))
        user = _kubeconfig_entry(kubeconfig, "users", context.get("user"))
        self.server = (server or cluster.get("server") or "").rstrip("/")
        self.retry_seconds = retry_seconds
        self._answered = False
        tls = ssl.create_default_context(cadata=_pem(cluster, "certificate-authority-data"))
        load_client_certificate(tls, _pem(user, "client-certificate-data"), _pem(user, "client-key-data"),
                                "the kubeconfig from Talos")
        configuration = kube_client.Configuration()
        configuration.host = self.server
        self.api_client = kube_client.ApiClient(configuration)
        # The library would read the key from a file; the context above already holds it.
        self._pool = _WriteCountingPoolManager(
            num_pools=4, maxsize=4, ssl_context=tls, retries=urllib3.Retry(total=2, read=0, redirect=0))
        self.api_client.rest_client.pool_manager = self._pool
        self.core = kube_client.CoreV1Api(self.api_client)
        self.apps = kube_client.AppsV1Api(self.api_client)
        self._dynamic = None
        self._discovery_dir = None

    @property
    def writes(self):
        """How many requests changed something in the cluster (dry runs not counted)."""
        return self._pool.writes

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
        """``call(*args, **kwargs)`` with the request timeout, tried again as the class says (``retry=False``: once);
        a failure raises KubernetesAPIError."""
        retry = kwargs.pop("retry", True)

        def attempt():
            try:
                answer = call(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
                self._answered = True
                return answer
            except KubernetesAPIError as error:
                failure = error
            except (kube_client.exceptions.ApiException, DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
                failure = self._failure(error, what)
            if failure.status is not None:
                self._answered = True
            raise failure

        # No answer at all is worth waiting out only once the server has answered before (it restarts).
        return waiter.retry(attempt, lambda failure: isinstance(failure, KubernetesAPIError) and is_retryable(failure)
                            and (failure.status is not None or self._answered),
                            self.retry_seconds if retry else 0, RETRY_BACKOFF)

    def _get(self, what, path, accept="application/json", retry=True):
        """GET ``path`` from the API server through the client's own connection pool: ``(status, body bytes)``;
        404 is an answer, any other failure raises KubernetesAPIError. (The library's ``call_api`` changed its
        signature between releases; the pool's ``request`` did not.)"""
        def get(_request_timeout):
            response = self._pool.request("GET", self.server + path, headers={"Accept": accept},
                                          timeout=urllib3.Timeout(connect=_request_timeout[0], read=_request_timeout[1]))
            if response.status >= 400 and response.status != 404:
                raise KubernetesAPIError("The Kubernetes API at %s refused to %s: %s %s." % (
                    self.server, what, response.status, str(response.reason or "").rstrip(".")), status=response.status)
            return response.status, response.data
        return self._ask(what, get, retry=retry)

    # -- reads -------------------------------------------------------------------

    def list_objects(self, what, path):
        """The list a GET of ``path`` (``/api/v1/nodes``) answers, as kubectl gets it (``kind: NodeList``, ``items``);
        tried once (talos_support_bundle records a failure and goes on)."""
        status, body = self._get(what, path, retry=False)
        if status == 404:
            raise KubernetesAPIError("The Kubernetes API at %s refused to %s: 404 not found." % (self.server, what), status=404)
        return json.loads(body)

    def version(self):
        """The API server's version (``v1.37.2``)."""
        return self._ask("read its version", kube_client.VersionApi(self.api_client).get_code).git_version

    def nodes(self, retry=True):
        """Every Node as ``{name, address, addresses, control_plane, kubelet_version, ready}``; ``address`` is the
        InternalIP (how talosctl reaches a node), ``addresses`` every address the Node reports (any type)."""
        found = []
        for item in self._ask("list the nodes", self.core.list_node, retry=retry).items:
            reported = [(address.type, address.address) for address in item.status.addresses or ()]
            addresses = dict(reported)
            conditions = [{"type": condition.type, "status": condition.status} for condition in item.status.conditions or ()]
            found.append({
                "name": item.metadata.name,
                "address": addresses.get("InternalIP") or addresses.get("Hostname") or item.metadata.name,
                "addresses": [address for _type, address in reported],
                "control_plane": CONTROL_PLANE_LABEL in (item.metadata.labels or {}),
                "kubelet_version": item.status.node_info.kubelet_version if item.status.node_info else None,
                "ready": is_ready(conditions),
            })
        return found

    def pods(self, namespace, label_selector):
        """The pods matching ``label_selector`` as ``{name, node_name, host_ip, annotations, images, ready}``
        (tried once: waits poll it)."""
        found = []
        for item in self._ask("list the pods %s in %s" % (label_selector, namespace), self.core.list_namespaced_pod,
                              namespace, label_selector=label_selector, retry=False).items:
            conditions = [{"type": condition.type, "status": condition.status} for condition in item.status.conditions or ()]
            found.append({
                "name": item.metadata.name,
                "node_name": item.spec.node_name,
                "host_ip": item.status.host_ip,
                "annotations": dict(item.metadata.annotations or {}),
                "images": [container.image for container in item.spec.containers],
                "ready": is_ready(conditions),
            })
        return found

    def daemonset_rollout(self, namespace, name, retry=False):
        """``{generation, observed, desired, updated, available, images}`` of a DaemonSet, or None when there is
        none (by default tried once: waits poll it)."""
        what = "read DaemonSet %s/%s" % (namespace, name)
        try:
            item = self._ask(what, self.apps.read_namespaced_daemon_set, namespace=namespace, name=name, retry=retry)
        except KubernetesAPIError as error:
            if error.status == 404:
                return None
            raise
        status = item.status
        return {"generation": item.metadata.generation, "observed": status.observed_generation or 0,
                "desired": status.desired_number_scheduled or 0, "updated": status.updated_number_scheduled or 0,
                "available": status.number_available or 0,
                "images": [container.image for container in item.spec.template.spec.containers]}

    def deprecated_api_requests(self):
        """The deprecated APIs clients asked for since the API server started, from its ``/metrics``:
        ``[{group, version, resource, removed_release}]`` (those with a removal release)."""
        status, body = self._get("read its metrics", "/metrics", accept="text/plain")
        if status == 404:
            raise KubernetesAPIError("The Kubernetes API at %s refused to read its metrics: 404 Not Found." % self.server,
                                     status=status)
        return deprecated_apis(body.decode("utf-8", "replace"))

    def object_count(self, group, version, resource):
        """How many objects of the API resource the API server holds (at least; one page is read), or None when it
        does not serve that resource."""
        path = ("/apis/%s/%s/%s" % (group, version, resource)) if group else "/api/%s/%s" % (version, resource)
        status, body = self._get("list %s" % path, path + "?limit=500")
        if status == 404:
            return None
        return len(json.loads(body.decode("utf-8")).get("items") or ())

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
            return self._ask("read %s" % object_label(obj), resource.get, name=metadata.get("name"),
                             namespace=metadata.get("namespace")).to_dict()
        except KubernetesAPIError as error:
            if error.status == 404:
                return None
            raise

    def apply(self, obj, dry_run=False):
        """Server-side apply ``obj`` as Talos's field manager, taking over conflicting fields; returns the result."""
        resource = self._resource(obj)
        metadata = obj.get("metadata") or {}
        return self._ask("apply %s" % object_label(obj), resource.server_side_apply, body=obj, name=metadata.get("name"),
                         namespace=metadata.get("namespace"), field_manager=FIELD_MANAGER, force_conflicts=True,
                         dry_run="All" if dry_run else None).to_dict()

    # -- the bootstrap-manifest inventory: objects by reference, deletion ---------------------

    def live_by_reference(self, group, kind, namespace, name):
        """The object an inventory entry names (``group`` "" for the core API) as the API server has it, at the
        group's preferred version; None when it does not exist or the API server no longer serves its kind."""
        if group:
            try:
                api_version = self.dynamic.resources.get(group=group, kind=kind, preferred=True).group_version
            except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
                raise self._failure(error, "find the API of %s" % kind)
            except Exception:  # the library's ResourceNotFoundError: nothing of this kind can exist any more
                return None
        else:
            api_version = "v1"
        reference = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        if namespace:
            reference["metadata"]["namespace"] = namespace
        return self.live(reference) if self.serves(reference) else None

    def serves(self, obj):
        """Whether the API server serves the kind of ``obj`` (one a CRD applied alongside defines may not be yet)."""
        try:
            self.dynamic.resources.get(api_version=obj.get("apiVersion"), kind=obj.get("kind"))
        except (DynamicApiError, urllib3.exceptions.HTTPError, OSError) as error:
            raise self._failure(error, "find the API of %s" % object_label(obj))
        except Exception:  # the library's ResourceNotFoundError
            return False
        return True

    def delete(self, obj):
        """Delete the object ``obj`` names, its dependents in the background (as talosctl prunes); False when it
        was gone already."""
        resource = self._resource(obj)
        metadata = obj.get("metadata") or {}
        try:
            self._ask("delete %s" % object_label(obj), resource.delete, name=metadata.get("name"),
                      namespace=metadata.get("namespace"), body={"propagationPolicy": "Background"})
        except KubernetesAPIError as error:
            if error.status == 404:
                return False
            raise
        return True

    def config_map_keys(self, namespace, name):
        """The keys of ConfigMap ``namespace/name``, sorted, or None when it does not exist."""
        try:
            item = self._ask("read ConfigMap %s/%s" % (namespace, name), self.core.read_namespaced_config_map, name, namespace)
        except KubernetesAPIError as error:
            if error.status == 404:
                return None
            raise
        return sorted(item.data or {})

    def remove_config_map_keys(self, namespace, name, keys):
        """Remove ``keys`` from ConfigMap ``namespace/name``; returns those it held."""
        existing = self.config_map_keys(namespace, name) or ()
        held = [key for key in keys if key in existing]
        if held:
            self._ask("update ConfigMap %s/%s" % (namespace, name), self.core.patch_namespaced_config_map, name, namespace,
                      {"data": dict((key, None) for key in held)})
        return held
