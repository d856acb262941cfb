# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What expires when: the certificates of a Talos cluster, on its nodes and in the controller's files.

Every certificate is reported the same way (``report``): subject, issuer,
validity, days left, key algorithm and fingerprint - never a key. The CAs a
node issues from and accepts are read from its active machine config, in
both forms: v1alpha1 fields (``machine.ca``, ``machine.acceptedCAs``,
``cluster.ca``, ``cluster.acceptedCAs``: base64 of PEM) and the documents of
the v1.14 contract (``KubeAPIServerCAConfig``: raw PEM). The Talos API keeps
its CAs in the v1alpha1 document in both forms. apid's serving certificate is
the one a TLS handshake with the node shows.

``read_certificates`` is talos_certificate_info's read: the controller's files,
every node through the several-nodes home (several_nodes.run), and what
expires within ``warn_before`` among them all.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import socket
import ssl

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import DEFAULT_MAX_CONCURRENCY
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import split_endpoint
from ansible_collections.talos_linux.talos.plugins.module_utils.common import x509 as talos_pki
from ansible_collections.talos_linux.talos.plugins.module_utils.common.durations import parse_duration, parse_time
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    TalosConfigError, TalosConnectionError, TalosError, TalosPermissionError)
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import is_v1alpha1, parse_yaml_stream, read_active_config
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes

DEFAULT_WARN_BEFORE = "720h"
KUBE_APISERVER_CA_KIND = "KubeAPIServerCAConfig"
# Bundle certificate name -> name in the report.
BUNDLE_AUTHORITIES = (("os", "talos_ca"), ("k8s", "kubernetes_ca"), ("etcd", "etcd_ca"), ("k8saggregator", "aggregator_ca"))
_SECONDS_PER_DAY = 86400


def report(certificate, now):
    """What may be said about ``certificate`` at ``now``: talos_pki.certificate_facts, its issuer and whole days left.

    ``days_left`` is negative once it has expired.
    """
    facts = talos_pki.certificate_facts(certificate)
    facts["issuer"] = certificate.issuer.rfc4514_string()
    facts["days_left"] = int((certificate.not_valid_after_utc - now).total_seconds() // _SECONDS_PER_DAY)
    return facts


def load_certificates(pem, what):
    """Every certificate of PEM text (a CA bundle may hold several); PKIError names ``what``."""
    from cryptography import x509
    data = pem.encode("ascii", "replace") if not isinstance(pem, bytes) else pem
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise talos_pki.PKIError("%s is not a PEM certificate" % what)


# Node configs.

class ConfigAuthorities:
    """The CA certificates (PEM texts, no keys) a machine config names.

    ``talos_ca``/``kubernetes_ca`` are the issuing CAs (None when the config
    names none), ``talos_accepted``/``kubernetes_accepted`` the accepted ones in
    config order. ``form`` is ``v1alpha1`` or ``documents`` (where the
    Kubernetes CAs live in a KubeAPIServerCAConfig document).
    """

    def __init__(self, talos_ca, talos_accepted, kubernetes_ca, kubernetes_accepted, form):
        self.talos_ca = talos_ca
        self.talos_accepted = talos_accepted
        self.kubernetes_ca = kubernetes_ca
        self.kubernetes_accepted = kubernetes_accepted
        self.form = form

    @classmethod
    def from_config(cls, text, source):
        """The CAs of the machine config ``text``; TalosConfigError names ``source`` and the field at fault."""
        return cls.from_documents([document for document in parse_yaml_stream(text, source) if isinstance(document, dict)],
                                  source)

    @classmethod
    def from_documents(cls, documents, source):
        """The CAs of a machine config's parsed ``documents``; TalosConfigError names ``source`` and the field at fault."""
        v1alpha1 = next((document for document in documents if is_v1alpha1(document)), None)
        if v1alpha1 is None:
            raise TalosConfigError("The machine config of %s holds no v1alpha1 document." % source)
        machine, cluster = v1alpha1.get("machine") or {}, v1alpha1.get("cluster") or {}
        ca_document = next((document for document in documents if document.get("kind") == KUBE_APISERVER_CA_KIND), None)
        try:
            talos_ca = _b64_crt(machine.get("ca"), "machine.ca.crt")
            talos_accepted = _b64_list(machine.get("acceptedCAs"), "machine.acceptedCAs")
            if ca_document is not None:
                kubernetes_ca = (ca_document.get("issuingCA") or {}).get("cert") or None
                kubernetes_accepted = [pem for pem in ca_document.get("acceptedCAs") or [] if pem]
                form = "documents"
            else:
                kubernetes_ca = _b64_crt(cluster.get("ca"), "cluster.ca.crt")
                kubernetes_accepted = _b64_list(cluster.get("acceptedCAs"), "cluster.acceptedCAs")
                form = "v1alpha1"
        except talos_pki.PKIError as error:
            raise TalosConfigError("The machine config of %s cannot be read: %s." % (source, error))
        return cls(talos_ca, talos_accepted, kubernetes_ca, kubernetes_accepted, form)

    def report(self, now, source):
        """Each CA as ``report`` has it: ``talos_ca``, ``talos_accepted_cas``, ``kubernetes_ca``, ``kubernetes_accepted_cas``."""
        def one(pem, what):
            return report(load_certificates(pem, "%s of %s" % (what, source))[0], now) if pem else None

        def several(pems, what):
            return [report(certificate, now) for index, pem in enumerate(pems)
                    for certificate in load_certificates(pem, "%s[%d] of %s" % (what, index, source))]

        return {
            "config_form": self.form,
            "talos_ca": one(self.talos_ca, "machine.ca.crt"),
            "talos_accepted_cas": several(self.talos_accepted, "machine.acceptedCAs"),
            "kubernetes_ca": one(self.kubernetes_ca, "the Kubernetes CA"),
            "kubernetes_accepted_cas": several(self.kubernetes_accepted, "the accepted Kubernetes CAs"),
        }


def _b64_crt(pair, field):
    if not isinstance(pair, dict) or not pair.get("crt"):
        return None
    return talos_pki.pem_from_b64(pair["crt"], field)


def _b64_list(items, field):
    return [talos_pki.pem_from_b64((item or {}).get("crt"), "%s[%d].crt" % (field, index))
            for index, item in enumerate(items or [])]


# Certificates a server shows.

def serving_certificate(host, port, timeout, context=None):
    """The leaf certificate ``host:port`` presents in a TLS handshake.

    ``context`` is the client's (to present its certificate to apid, which
    asks for one); the server is not verified here, its certificate is what
    is reported. TalosConnectionError when no handshake completes.
    """
    from cryptography import x509
    if context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    address = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError) as err:
        raise TalosConnectionError("No TLS handshake with %s completed (%s)." % (address, getattr(err, "reason", None) or err),
                                   code="Unavailable")
    if not der:
        raise TalosConnectionError("%s presented no certificate." % address, code="Unavailable")
    return x509.load_der_x509_certificate(der)


def signed_by_any(certificate, authorities):
    """True when one of ``authorities`` (certificates) signed ``certificate``."""
    return any(talos_pki.signed_by(certificate, authority) for authority in authorities)


def apid_report(settings, node, port, now):
    """apid's serving certificate on ``node`` (None: the first endpoint), with ``trusted`` when the talosconfig's CA signed it."""
    host = node if node is not None else split_endpoint(settings.endpoints[0])[0]
    context = settings.ssl_context()
    certificate = serving_certificate(host, port, settings.timeout, context)
    facts = report(certificate, now)
    facts["trusted"] = signed_by_any(certificate, load_certificates(settings.ca, "the CA of %s" % settings.ca_source))
    return facts


# Controller files.

def bundle_report(bundle, path, now):
    """The CAs of a loaded secrets bundle."""
    result = {"path": path}
    for name, key in BUNDLE_AUTHORITIES:
        result[key] = report(bundle.cas[name].certificate, now)
    return result


def talosconfig_report(settings, now):
    """The talosconfig context in use: its CAs and its client certificate (with its roles)."""
    client = talos_pki.load_certificate(settings.crt, "the client certificate of %s" % settings.certificate_source)
    client_facts = report(client, now)
    client_facts["roles"] = talos_pki.organizations(client)
    authorities = load_certificates(settings.ca, "the CA of %s" % settings.ca_source)
    client_facts["trusted"] = signed_by_any(client, authorities)
    return {
        "path": settings.config_path,
        "context": settings.context,
        "cas": [report(authority, now) for authority in authorities],
        "client": client_facts,
    }


def kubeconfig_report(config, path, now, timeout):
    """The admin kubeconfig: its clusters' CAs and the API server's certificate, its users' client certificates."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.kubeconfig import cluster_authorities, user_certificates
    clusters = []
    for name, server, authorities in cluster_authorities(config):
        entry = {"name": name, "server": server, "cas": [report(authority, now) for authority in authorities],
                 "server_certificate": None, "server_error": None}
        host_port = _https_host_port(server)
        if host_port:
            try:
                certificate = serving_certificate(host_port[0], host_port[1], timeout)
                entry["server_certificate"] = report(certificate, now)
                entry["server_certificate"]["trusted"] = signed_by_any(certificate, authorities)
            except TalosConnectionError as error:
                entry["server_error"] = error.message
        clusters.append(entry)
    users = []
    for name, certificate in user_certificates(config):
        users.append({"name": name, "client": report(certificate, now) if certificate is not None else None})
    return {"path": path, "clusters": clusters, "users": users}


def _https_host_port(url):
    """``(host, port)`` of an https URL (port 443 by default), None for anything else."""
    if not isinstance(url, str) or not url.startswith("https://"):
        return None
    netloc = url[len("https://"):].split("/", 1)[0]
    if netloc.startswith("["):
        host, _sep, rest = netloc[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _sep, port = netloc.partition(":")
    return (host, int(port)) if port.isdigit() else (host, 443)


# Expiry.

def expiring(result, warn_before, now):
    """``[{"where", "name", "not_after", "days_left"}]``: every certificate of ``result`` that expires within
    ``warn_before`` (a timedelta) of ``now``, or has expired.

    ``where`` names the node or file, ``name`` the certificate's path in the result.
    """
    found = []

    def walk(value, where, name):
        if isinstance(value, dict):
            if "days_left" in value and "not_after" in value:
                if parse_time(value["not_after"]) - now <= warn_before:
                    found.append({"where": where, "name": name, "subject": value["subject"],
                                  "not_after": value["not_after"], "days_left": value["days_left"]})
                return
            for key, item in value.items():
                walk(item, where, "%s.%s" % (name, key) if name else key)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, where, "%s[%d]" % (name, index))

    for node, entry in (result.get("nodes") or {}).items():
        walk(entry, "node %s" % node, "")
    for kind, entry in (result.get("files") or {}).items():
        if entry:
            walk(dict((key, value) for key, value in entry.items() if key != "path"), "%s %s" % (kind, entry["path"]), "")
    return sorted(found, key=lambda item: item["days_left"])


def expiry_warning(item):
    """One sentence about a certificate that ``expiring`` found."""
    if item["days_left"] < 0:
        return "The %s of %s (%s) expired on %s." % (item["name"], item["where"], item["subject"], item["not_after"])
    return "The %s of %s (%s) expires in %d days, on %s." % (
        item["name"], item["where"], item["subject"], item["days_left"], item["not_after"])


# talos_certificate_info.

def read_certificates(client, nodes, secrets=None, kubeconfig=None, warn_before=DEFAULT_WARN_BEFORE, api_port=None,
                      max_concurrency=DEFAULT_MAX_CONCURRENCY, warn=None):
    """The certificates of ``nodes`` and of the controller's files (the talosconfig in use, the secrets bundle at
    ``secrets``, the admin kubeconfig at ``kubeconfig``) and those that expire within ``warn_before`` (a duration),
    each given to ``warn`` as a sentence: talos_certificate_info's result, in the shape of several_nodes.result.

    ``api_port`` is the port of the TLS handshake with apid (default: the
    first endpoint's). A node that cannot be read fails the task once every
    node is read, with the files and what expires among the others.
    """
    warn = warn or (lambda message: None)
    settings = client.settings
    now = talos_pki.now_utc()
    warn_before = parse_duration(warn_before, "warn_before")
    port = api_port or split_endpoint(settings.endpoints[0])[1]
    files = controller_files(settings, secrets, kubeconfig, now)

    def task_keys(answered):
        # The files and what expires are the task's, whichever node failed.
        found = expiring({"nodes": answered, "files": files}, warn_before, now)
        for item in found:
            warn(expiry_warning(item))
        return dict(files=files, expiring=found)

    return several_nodes.run(client, nodes, lambda node_client, node: node_certificates(node_client, node, port, now, warn),
                             max_concurrency, task_keys=task_keys)


def controller_files(settings, secrets, kubeconfig, now):
    """The certificates of the talosconfig in use (none when ``settings`` are insecure), of the secrets bundle at path
    ``secrets`` and of the kubeconfig at path ``kubeconfig`` (each None when not given)."""
    files = {"talosconfig": None, "secrets": None, "kubeconfig": None}
    if not settings.insecure:
        files["talosconfig"] = talosconfig_report(settings, now)
    if secrets:
        path = os.path.abspath(secrets)
        files["secrets"] = bundle_report(SecretsBundle.load(path), path, now)
    if kubeconfig:
        from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.kubeconfig import read_kubeconfig
        path = os.path.abspath(kubeconfig)
        config = read_kubeconfig(path)
        if config is None:
            raise TalosConfigError("kubeconfig %s does not exist or is not a kubeconfig (a YAML mapping)." % path)
        files["kubeconfig"] = kubeconfig_report(config, path, now, settings.timeout)
    return files


def node_certificates(client, node, port, now, warn):
    """The certificates of ``node`` (None: the endpoint itself): its CAs, or ``config_error`` when its role may not read
    them, and apid's serving certificate, or ``apid_error`` (also given to ``warn``) when no handshake completed on
    ``port``. A node that cannot be reached at all raises its TalosError."""
    settings = client.settings
    where = several_nodes.node_key(node, settings)
    entry = {}
    try:
        authorities = ConfigAuthorities.from_config(read_active_config(client, node), where)
        entry.update(authorities.report(now, where))
    except TalosPermissionError as error:
        entry["config_error"] = error.message
    try:
        entry["apid"] = apid_report(settings, node, port, now)
    except TalosError as error:
        # The node answered through the API: only the direct handshake failed (a port the option did not give).
        entry["apid"] = None
        entry["apid_error"] = error.message
        warn("apid's serving certificate of node %s could not be read: %s" % (where, error.message))
    return entry
