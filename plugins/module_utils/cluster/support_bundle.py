# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A support bundle as ``talosctl support`` writes it: one zip of every node's logs, state and resources and of the
cluster's Kubernetes Nodes and kube-system pods.

The layout follows talosctl (siderolabs/go-talos-support ``support/collectors``): per node ``<node>/dmesg.log``,
``controller-runtime.log``, ``dependencies.dot`` (the controller-runtime graph), ``dns-resolve-cache.log``,
``mounts``, ``devices``, ``io``, ``processes``, ``summary``, ``service-logs/<id>.log`` and ``<id>.state``,
``kubernetes-logs/kube-system/<pod>[-exited].log`` and
``resources/<definition id>.yaml``; for the cluster ``kubernetesResources/nodes.yaml`` and ``systemPods.yaml``.
Beside talosctl's files, ``support-bundle.yaml`` says what was collected and what was missed and why, per node and
for the cluster: a node that cannot be reached, a section a node refused, a Kubernetes API that does not answer.

No secret goes in: a resource of a type the node marks sensitive (or of Talos's secret types) is written as talosctl
writes it, its metadata with ``spec: <REDACTED>`` (its spec is never read), every other resource and every Kubernetes
manifest is redacted as talos_resource_info redacts, Secrets are never read, and log lines that hold a secret by their
shape are replaced as talos_logs replaces them.

Each section is one RPC sent to every node at once, at most ``max_concurrency`` in flight (the client's
``call_many``/``stream_many``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import posixpath
import tempfile
import zipfile

try:
    import yaml
except ImportError:  # reported by task.execute through missing_required_lib
    yaml = None

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import resource_metadata_to_dict, resource_to_dict
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import PrivateFile
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.kubeconfig import fetch_kubeconfig
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.logs import LineCollector
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import is_sensitive_resource, redact, secret_values
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.resources import DEFINITIONS_NAMESPACE, DEFINITIONS_TYPE, redact_resource

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.inspect import inspect_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2
except ImportError:  # reported by task.execute through missing_required_lib
    common_pb2 = state_pb2 = inspect_pb2 = machine_pb2 = None

# What each node's part holds, in collection order (the names the result and support-bundle.yaml use).
NODE_SECTIONS = ("summary", "dmesg", "controller-runtime", "dns-resolve-cache", "service-logs", "kubernetes-logs",
                 "mounts", "devices", "io", "processes", "resources", "dependencies")
CLUSTER_SECTIONS = ("kubernetes-nodes", "kubernetes-system-pods")
REPORT = "support-bundle.yaml"
# The spec talosctl writes for a resource of a sensitive type (go-talos-support's talosResource collector).
REDACTED_SPEC = "<REDACTED>"
# (recipient prefix, pyrage module attribute): the recipients age and talosctl take.
_RECIPIENT_KINDS = (("age1", "x25519"), ("ssh-", "ssh"))
AGE_LIBRARY = ("pyrage", "pyrage")


def _text(data):
    """Log bytes as text with every line that holds a secret by its shape replaced (talos_logs' rule)."""
    collector = LineCollector(0, None)
    collector.feed(data)
    lines = collector.close()
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _yaml(documents):
    return yaml.safe_dump_all(documents, default_flow_style=False, sort_keys=False).encode("utf-8")


def _table(header, rows):
    """Rows aligned in columns three spaces apart, as talosctl's tabwriter prints them."""
    rows = [header] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[index]) for row in rows) for index in range(len(header) - 1)]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "   " + row[-1] for row in rows]
    return "".join(line.rstrip() + "\n" for line in lines).encode("utf-8")


def _human_bytes(count):
    """go-humanize's Bytes, which talosctl's process list uses: SI units, one decimal below 10 (``1.5 MB``)."""
    if count < 10:
        return "%d B" % count
    exponent = min(int(math.floor(math.log(count, 1000))), 6)
    value = math.floor(count / 1000.0 ** exponent * 10 + 0.5) / 10
    return ("%.1f %s" if value < 10 else "%.0f %s") % (value, ("B", "kB", "MB", "GB", "TB", "PB", "EB")[exponent])


def _summary(node, version):
    info = version.version
    server = ("\tTag:         %s\n\tSHA:         %s\n\tBuilt:       %s\n\tGo version:  %s\n\tOS/Arch:     %s/%s\n"
              % (info.tag, info.sha, info.built, info.go_version, info.os, info.arch))
    return ("Client:\n\ttalos_linux.talos Ansible collection (Talos API over gRPC, no talosctl)\nServer:\n" + server).encode()


def _mounts(node, reply):
    rows = []
    for stat in reply.stats:
        used = stat.size - stat.available
        percent = "%.2f%%" % (100.0 * used / stat.size) if stat.size else "0.00%"
        rows.append([node, stat.filesystem, "%.2f" % (stat.size / 1e9), "%.2f" % (used / 1e9), "%.2f" % (stat.available / 1e9),
                     percent, stat.mounted_on])
    return _table(["NODE", "FILESYSTEM", "SIZE(GB)", "USED(GB)", "AVAILABLE(GB)", "PERCENT USED", "MOUNTED ON"], rows)


def _io(reply):
    rows = [[stat.name, stat.io_time_ms, stat.io_time_weighted_ms, stat.write_sectors, stat.read_sectors] for stat in reply.devices]
    return _table(["NAME", "IO_TIME", "IO_TIME_WEIGHTED", "DISK_WRITE_SECTORS", "DISK_READ_SECTORS"], rows)


def _processes(reply):
    rows = []
    for process in reply.processes:
        args = process.args or process.command
        if not process.executable:
            args = process.command
        elif process.args and process.args.split()[0] == posixpath.basename(process.executable.split()[0]):
            args = process.args.replace(process.args.split()[0], process.executable, 1)
        rows.append(["%6d" % process.pid, process.state, "%4d" % process.threads, "%8.2f" % process.cpu_time,
                     _human_bytes(process.virtual_memory), _human_bytes(process.resident_memory), args])
    return _table(["PID", "STATE", "THREADS", "CPU-TIME", "VIRTMEM", "RESMEM", "COMMAND"], rows)


def _graph(reply):
    """The controller-runtime dependency graph in Graphviz DOT, as ``talosctl inspect dependencies --with-resources``
    draws it: controllers as boxes, resource types as ellipses; inputs point at the controller (weak ones dashed),
    outputs away from it (shared ones dashed)."""
    edge_types = dict((value, name) for name, value in inspect_pb2.DependencyEdgeType.items())
    lines = ["digraph {"]
    declared = set()

    def declare(node_id, label, shape):
        if node_id not in declared:
            declared.add(node_id)
            lines.append('\t"%s" [label="%s", shape="%s"];' % (node_id, label, shape))

    for edge in reply.edges:
        controller = "controller:" + edge.controller_name
        resource = "resource:%s/%s%s" % (edge.resource_namespace, edge.resource_type,
                                         "/" + edge.resource_id if edge.resource_id else "")
        declare(controller, edge.controller_name, "box")
        declare(resource, "%s\n%s" % (edge.resource_type, edge.resource_namespace), "ellipse")
        kind = edge_types.get(edge.edge_type, "")
        style = "dashed" if kind in ("INPUT_WEAK", "OUTPUT_SHARED", "INPUT_DESTROY_READY") else "solid"
        source, target = (resource, controller) if kind.startswith("INPUT") else (controller, resource)
        lines.append('\t"%s" -> "%s" [style="%s"];' % (source, target, style))
    lines.append("}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _service_state(node, service):
    lines = ["NODE     %s" % node, "ID       %s" % service.id, "STATE    %s" % service.state]
    health = service.health
    lines.append("HEALTH   %s" % ("?" if health.unknown else ("OK" if health.healthy else "Fail")))
    if not health.unknown and health.last_message:
        lines.append("LAST HEALTH MESSAGE   %s" % health.last_message)
    events = list(service.events.events)
    for index, event in enumerate(reversed(events)):
        lines.append("%s [%s]: %s (%s)" % ("EVENTS  " if index == 0 else "        ", event.state, event.msg,
                                           event.ts.ToJsonString()))
    return _text("\n".join(lines).encode())


class BundleWriter:
    """The zip being filled: files under their talosctl paths, and what was collected and missed."""

    def __init__(self, spool):
        self.archive = zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED)
        self.collected = {}
        self.missed = {}

    def add(self, source, section, path, data):
        self.archive.writestr(path, data)
        sections = self.collected.setdefault(source, [])
        if section not in sections:
            sections.append(section)

    def miss(self, source, section, reason):
        self.missed.setdefault(source, []).append({"section": section, "reason": reason})

    def close(self, report):
        self.archive.writestr(REPORT, _yaml([report]))
        self.archive.close()


class SupportBundle:
    """Collects the bundle of ``nodes`` (node addresses, or None for the endpoint itself) through ``client``.

    ``kube_api_factory(kubeconfig)`` makes the Kubernetes client (kube_api.KubeAPI) from the kubeconfig Talos
    returns, None to leave the Kubernetes part out; ``progress(message)`` shows how far it got.
    """

    def __init__(self, client, nodes, names, max_concurrency, progress, kube_api_factory=None, hide=None):
        self.client = client
        self.nodes = list(nodes)
        self.names = names
        self.max_concurrency = max_concurrency
        self.progress = progress
        self.kube_api_factory = kube_api_factory
        self.hide = hide or (lambda values: None)

    # -- helpers -----------------------------------------------------------------

    def _each(self, writer, nodes, section, method, request=None, stream=False, failures=None):
        """``{node: reply}`` of ``method`` on ``nodes``; a node that fails is recorded as missing ``section`` (and its
        TalosError in ``failures``, when given)."""
        self.progress("support bundle: %s of %d node(s)" % (section, len(nodes)))
        many = self.client.stream_many if stream else self.client.call_many
        answers = many(method, request, nodes=nodes, max_concurrency=self.max_concurrency)
        found = {}
        for node in nodes:
            answer = answers[node]
            if isinstance(answer, TalosError):
                writer.miss(self.names[node], section, answer.message)
                if failures is not None:
                    failures[node] = answer
            else:
                found[node] = answer
        return found

    def _file(self, node, name):
        return "%s/%s" % (self.names[node], name)

    # -- the node's part ---------------------------------------------------------

    def _reachable(self, writer):
        """The nodes that answer Version (their summary written), and ``{node: TalosError}`` of those that do not."""
        unreached = {}
        versions = self._each(writer, self.nodes, "summary", rpc.VERSION, failures=unreached)
        for node, items in versions.items():
            writer.add(self.names[node], "summary", self._file(node, "summary"), _summary(node, items[0]))
        return [node for node in self.nodes if node in versions], unreached

    def _logs(self, writer, nodes, section, service, path):
        request = machine_pb2.LogsRequest(namespace="system", id=service, driver=common_pb2.CONTAINERD, tail_lines=-1)
        for node, data in self._each(writer, nodes, section, rpc.LOGS, request, stream=True).items():
            writer.add(self.names[node], section, self._file(node, path), _text(data))

    def _service_logs(self, writer, nodes):
        listed = self._each(writer, nodes, "service-logs", rpc.SERVICE_LIST)
        by_service = {}
        for node, items in listed.items():
            for service in items[0].services:
                writer.add(self.names[node], "service-logs", self._file(node, "service-logs/%s.state" % service.id),
                           _service_state(self.names[node], service))
                by_service.setdefault(service.id, []).append(node)
        for service, having in sorted(by_service.items()):
            self._logs(writer, having, "service-logs", service, "service-logs/%s.log" % service)

    def _kubernetes_logs(self, writer, nodes):
        request = machine_pb2.ContainersRequest(namespace="k8s.io", driver=common_pb2.CRI)
        listed = self._each(writer, nodes, "kubernetes-logs", rpc.CONTAINERS, request)
        for node, items in listed.items():
            for container in items[0].containers:
                namespace, _slash, pod = container.pod_id.partition("/")
                # Pause sandboxes have no log; talosctl keeps kube-system's containers only, named by their pod.
                if container.status == "SANDBOX_READY" or namespace != "kube-system":
                    continue
                path = "kubernetes-logs/kube-system/%s%s.log" % (pod, "" if container.pid else "-exited")
                logs = machine_pb2.LogsRequest(namespace="k8s.io", id=container.id, driver=common_pb2.CRI, tail_lines=-1)
                answer = self.client.stream_many(rpc.LOGS, logs, nodes=[node],
                                                 max_concurrency=self.max_concurrency)[node]
                if isinstance(answer, TalosError):
                    writer.miss(self.names[node], "kubernetes-logs", answer.message)
                else:
                    writer.add(self.names[node], "kubernetes-logs", self._file(node, path), _text(answer))

    def _resources(self, writer, nodes):
        request = state_pb2.ListRequest(namespace=DEFINITIONS_NAMESPACE, type=DEFINITIONS_TYPE)
        listed = self._each(writer, nodes, "resources", rpc.COSI_LIST, request, stream=True)
        kinds, sensitive = {}, set()
        for node, replies in listed.items():
            for reply in replies:
                definition = resource_to_dict(reply.resource)
                spec = definition["spec"] if isinstance(definition["spec"], dict) else {}
                kind = (definition["metadata"]["id"], spec.get("type"), spec.get("defaultNamespace"))
                if spec.get("sensitivity") == "sensitive" or is_sensitive_resource(kind[1], kind[2]):
                    sensitive.add(kind)
                kinds.setdefault(kind, []).append(node)
        for kind, having in sorted(kinds.items()):
            definition_id, resource_type, namespace = kind
            request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
            answers = self.client.stream_many(rpc.COSI_LIST, request, nodes=having,
                                              max_concurrency=self.max_concurrency)
            for node in having:
                answer = answers[node]
                if isinstance(answer, TalosError):
                    writer.miss(self.names[node], "resources", answer.message)
                    continue
                documents = []
                for reply in answer:
                    if kind in sensitive:
                        # As talosctl writes it: the metadata, and the spec replaced whole, unread.
                        documents.append({"metadata": resource_metadata_to_dict(reply.resource), "spec": REDACTED_SPEC})
                        continue
                    resource = redact_resource(resource_to_dict(reply.resource))
                    documents.append({"metadata": resource["metadata"], "spec": resource["spec"]})
                if documents:
                    writer.add(self.names[node], "resources", self._file(node, "resources/%s.yaml" % definition_id),
                               _yaml(documents))

    def collect_nodes(self, writer):
        """The nodes reached, and ``{node: TalosError}`` of those that were not."""
        nodes, unreached = self._reachable(writer)
        for section in NODE_SECTIONS[1:]:
            if not nodes:
                break
            if section == "dmesg":
                request = machine_pb2.DmesgRequest(follow=False, tail=False)
                for node, data in self._each(writer, nodes, section, rpc.DMESG, request, stream=True).items():
                    writer.add(self.names[node], section, self._file(node, "dmesg.log"), _text(data))
            elif section in ("controller-runtime", "dns-resolve-cache"):
                self._logs(writer, nodes, section, section, "%s.log" % section)
            elif section == "service-logs":
                self._service_logs(writer, nodes)
            elif section == "kubernetes-logs":
                self._kubernetes_logs(writer, nodes)
            elif section == "mounts":
                for node, items in self._each(writer, nodes, section, rpc.MOUNTS).items():
                    writer.add(self.names[node], section, self._file(node, "mounts"), _mounts(self.names[node], items[0]))
            elif section == "devices":
                request = machine_pb2.ReadRequest(path="/proc/bus/pci/devices")
                for node, data in self._each(writer, nodes, section, rpc.READ, request, stream=True).items():
                    writer.add(self.names[node], section, self._file(node, "devices"), data)
            elif section == "io":
                for node, items in self._each(writer, nodes, section, rpc.DISK_STATS).items():
                    writer.add(self.names[node], section, self._file(node, "io"), _io(items[0]))
            elif section == "processes":
                for node, items in self._each(writer, nodes, section, rpc.PROCESSES).items():
                    writer.add(self.names[node], section, self._file(node, "processes"), _processes(items[0]))
            elif section == "resources":
                self._resources(writer, nodes)
            elif section == "dependencies":
                method = rpc.INSPECT_CONTROLLER_RUNTIME_DEPENDENCIES
                for node, items in self._each(writer, nodes, section, method).items():
                    writer.add(self.names[node], section, self._file(node, "dependencies.dot"), _graph(items[0]))
        return nodes, unreached

    # -- the cluster's part ------------------------------------------------------

    def collect_cluster(self, writer, nodes):
        if self.kube_api_factory is None:
            return
        self.progress("support bundle: Kubernetes Nodes and kube-system pods")
        kubeconfig, reasons = None, []
        for node in nodes:
            try:
                _text_config, kubeconfig = fetch_kubeconfig(self.client, node)
                break
            except TalosError as error:
                reasons.append(error.message)
        if kubeconfig is None:
            for section in CLUSTER_SECTIONS:
                writer.miss("cluster", section, "no node gave a kubeconfig: %s" % ("; ".join(reasons) or "no node was reached"))
            return
        self.hide(secret_values(kubeconfig))
        kube = self.kube_api_factory(kubeconfig)
        try:
            for section, path, api_path in (
                    ("kubernetes-nodes", "kubernetesResources/nodes.yaml", "/api/v1/nodes"),
                    ("kubernetes-system-pods", "kubernetesResources/systemPods.yaml", "/api/v1/namespaces/kube-system/pods")):
                try:
                    listed = kube.list_objects("list %s" % api_path, api_path)
                except TalosError as error:
                    writer.miss("cluster", section, error.message)
                    continue
                writer.add("cluster", section, path, _yaml([redact(listed)]))
        finally:
            kube.close()

    def plan(self):
        """What ``collect`` would gather (check mode): ``report`` and ``unreached`` as ``collect`` gives them, for the
        nodes that answer Version, with the sections they would give as ``collected``."""
        answers = self.client.call_many(rpc.VERSION, nodes=self.nodes, max_concurrency=self.max_concurrency)
        unreached = dict((node, answers[node]) for node in self.nodes if isinstance(answers[node], TalosError))
        collected = dict((self.names[node], list(NODE_SECTIONS)) for node in self.nodes if node not in unreached)
        missed = dict((self.names[node], [{"section": "summary", "reason": error.message}])
                      for node, error in unreached.items())
        cluster = list(CLUSTER_SECTIONS) if self.kube_api_factory is not None and collected else []
        return self._report(collected, missed, unreached, cluster, []), unreached

    def collect(self, spool):
        """Write the bundle into the open binary file ``spool``.

        Returns ``(report, unreached)``: the report (also written to the archive) is ``nodes``, each node's
        ``reached``, ``collected`` (the sections) and ``missed`` (``[{section, reason}]``) by its name, and the
        ``cluster``'s ``collected`` and ``missed``; ``unreached`` is ``{node: TalosError}`` of the nodes that did
        not answer.
        """
        writer = BundleWriter(spool)
        try:
            reached, unreached = self.collect_nodes(writer)
            self.collect_cluster(writer, reached)
        except BaseException:
            # The spool is thrown away; the zip is closed so that nothing writes to it later.
            writer.archive.close()
            raise
        report = self._report(writer.collected, writer.missed, unreached, writer.collected.get("cluster", []),
                              writer.missed.get("cluster", []))
        writer.close(report)
        return report, unreached

    def _report(self, collected, missed, unreached, cluster_collected, cluster_missed):
        nodes = dict((self.names[node], {"reached": node not in unreached, "collected": collected.get(self.names[node], []),
                                         "missed": missed.get(self.names[node], [])}) for node in self.nodes)
        return {"nodes": nodes, "cluster": {"collected": cluster_collected, "missed": cluster_missed}}


def age_recipients(recipients):
    """The pyrage recipients of ``recipients`` (age ``age1...`` or SSH public keys); TalosConfigError naming a bad one."""
    import pyrage
    parsed = []
    for text in recipients:
        kind = next((attribute for prefix, attribute in _RECIPIENT_KINDS if text.strip().startswith(prefix)), None)
        try:
            if kind is None:
                raise ValueError("not an age (age1...) or SSH public key")
            parsed.append(getattr(pyrage, kind).Recipient.from_str(text.strip()))
        except (ValueError, pyrage.RecipientError) as error:
            raise TalosConfigError("encryption_recipients holds %r, which is not a recipient age accepts (%s)." % (text, error))
    return parsed


def write_bundle(bundle, dest, recipients=()):
    """Collect ``bundle`` into ``dest``: a private file (0600) that appears whole or not at all, encrypted with age
    to ``recipients`` (from ``age_recipients``) when there are any. The zip is built in an anonymous temporary file
    first. ``(report, unreached)`` as ``SupportBundle.collect`` gives them."""
    with tempfile.TemporaryFile(prefix="talos-support-") as spool:
        outcome = bundle.collect(spool)
        spool.seek(0)
        with PrivateFile(dest, "the support bundle") as staged:
            if recipients:
                import pyrage
                pyrage.encrypt_io(spool, _Sink(staged), list(recipients))
            else:
                for block in iter(lambda: spool.read(1024 * 1024), b""):
                    staged.write(block)
            staged.commit()
    return outcome


class _Sink:
    """A PrivateFile as pyrage's output, which wants write() to return the number of bytes written."""

    def __init__(self, staged):
        self.staged = staged

    def write(self, data):
        self.staged.write(data)
        return len(data)
