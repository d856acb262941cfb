# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes admin kubeconfig of a Talos cluster: fetching, renaming, comparing with a file.

Talos serves it on control-plane nodes through the Kubeconfig RPC as a
gzip-compressed tar holding one file named ``kubeconfig``, and issues a new
admin client certificate on every call. Two fetches therefore differ only in
their users' client credentials: a kubeconfig file is compared with a fetched
one leaving those out, and its credentials are replaced only when they expire
soon.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import copy
import datetime
import gzip
import io
import os
import tarfile
import zlib

try:
    import yaml
except ImportError:  # reported by the module through missing_required_lib
    yaml = None

try:
    from cryptography import x509
except ImportError:  # reported by the module through missing_required_lib
    x509 = None

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import read_text
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import redact

CREDENTIAL_KEYS = ("client-certificate-data", "client-key-data")
# Existing credentials that expire sooner than this are replaced.
RENEW_BEFORE = datetime.timedelta(days=1)


def fetch_kubeconfig(client, node):
    """``(text, config)``: the admin kubeconfig ``node`` issues, as Talos wrote it and parsed."""
    text = extract_kubeconfig(client.read_bytes(rpc.KUBECONFIG, node=node), node)
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise TalosError("The kubeconfig from %s is not valid YAML (%s)." % (label(node), err), node=node)
    if not isinstance(config, dict):
        raise TalosError("The kubeconfig from %s is not a YAML mapping." % label(node), node=node)
    return text, config


def extract_kubeconfig(blob, node):
    """The ``kubeconfig`` file inside the gzip'd tar archive Talos streams."""
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as archive:
            for member in archive.getmembers():
                if member.isfile() and os.path.basename(member.name) == "kubeconfig":
                    return archive.extractfile(member).read().decode("utf-8")
    except (OSError, EOFError, zlib.error, tarfile.TarError, UnicodeDecodeError) as err:
        raise TalosError("The kubeconfig archive from %s could not be read (%s): expected a gzip-compressed tar "
                         "holding a file named kubeconfig." % (label(node), err), node=node)
    raise TalosError("The kubeconfig archive from %s holds no file named kubeconfig." % label(node), node=node)


def rewrite(config, server=None, context=None, cluster=None):
    """Point every cluster entry of ``config`` at ``server`` and rename its one context and cluster, in place.

    Returns the new text. A rename of a kubeconfig with several contexts or
    clusters is refused: which one is meant cannot be told.
    """
    clusters = config.get("clusters") or []
    contexts = config.get("contexts") or []
    if server:
        for entry in clusters:
            entry.setdefault("cluster", {})["server"] = server
    if cluster:
        if len(clusters) != 1:
            raise TalosError("Cannot rename the cluster to %s: the kubeconfig has %d cluster entries, expected one."
                             % (cluster, len(clusters)))
        old = clusters[0].get("name")
        clusters[0]["name"] = cluster
        for entry in contexts:
            if (entry.get("context") or {}).get("cluster") == old:
                entry["context"]["cluster"] = cluster
    if context:
        if len(contexts) != 1:
            raise TalosError("Cannot rename the context to %s: the kubeconfig has %d contexts, expected one."
                             % (context, len(contexts)))
        contexts[0]["name"] = context
        config["current-context"] = context
    return yaml.safe_dump(config, default_flow_style=False, sort_keys=False)


def summary(config):
    """The API server URL and name of the (first) cluster entry, and the current context."""
    first = (config.get("clusters") or [{}])[0]
    return {"server": (first.get("cluster") or {}).get("server"), "cluster": first.get("name"),
            "context": config.get("current-context")}


def without_credentials(config):
    """A copy of ``config`` whose users' client credentials are removed."""
    config = copy.deepcopy(config)
    for entry in config.get("users") or []:
        user = entry.get("user") or {}
        for key in CREDENTIAL_KEYS:
            user.pop(key, None)
    return config


def load_data_certificates(data):
    """The certificates of a kubeconfig ``*-data`` field (base64 of one or more PEM certificates); [] when unreadable."""
    try:
        return x509.load_pem_x509_certificates(base64.b64decode(data))
    except (ValueError, TypeError):
        return []


def user_certificates(config):
    """``[(user name, certificate or None)]``: each user's client certificate, None when it cannot be read."""
    found = []
    for entry in config.get("users") or []:
        data = (entry.get("user") or {}).get("client-certificate-data")
        if data:
            certificates = load_data_certificates(data)
            found.append((entry.get("name"), certificates[0] if certificates else None))
    return found


def cluster_authorities(config):
    """``[(cluster name, server URL, [CA certificates])]`` from the cluster entries' certificate-authority-data."""
    found = []
    for entry in config.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        data = cluster.get("certificate-authority-data")
        found.append((entry.get("name"), cluster.get("server"), load_data_certificates(data) if data else []))
    return found


def credentials_expire_soon(config, now):
    """True when a user's client certificate in ``config`` is unreadable or expires within RENEW_BEFORE."""
    for _name, certificate in user_certificates(config):
        if certificate is None or certificate.not_valid_after_utc - RENEW_BEFORE <= now:
            return True
    return False


def read_kubeconfig(path):
    """The parsed kubeconfig at ``path``, or None when there is none or it is not a kubeconfig."""
    text = read_text(path)
    try:
        config = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None
    return config if isinstance(config, dict) else None


def may_stay(existing, fetched, now=None):
    """Whether the ``existing`` kubeconfig (None: no file) may stay instead of ``fetched``.

    It may when only the client credentials differ and its own do not expire soon.
    """
    if existing is None or without_credentials(existing) != without_credentials(fetched):
        return False
    return not credentials_expire_soon(existing, now or datetime.datetime.now(datetime.timezone.utc))


def file_diff(existing, fetched, path):
    """--diff of the kubeconfig file at ``path`` from ``existing`` (None: no file) to ``fetched``, credentials redacted."""
    def redacted(config):
        return yaml.safe_dump(redact(config), default_flow_style=False, sort_keys=False) if config is not None else ""
    return {"before": redacted(existing), "after": redacted(fetched), "before_header": path, "after_header": path}
