# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Connection settings: talosconfig parsing, option precedence and the TLS context.

Precedence follows talosctl: explicit options (endpoints, nodes/node, ca, crt,
key) override the chosen talosconfig context field by field.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import os
import re
import ssl

try:
    import yaml
except ImportError:  # reported by task.execute through missing_required_lib
    yaml = None

from ansible.module_utils.basic import env_fallback

from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.files import private_temp_file

DEFAULT_PORT = 50000
DEFAULT_TIMEOUT = 60
IN_POD_TALOSCONFIG = "/var/run/secrets/talos.dev/config"

# Talos writes Ed25519 keys as PKCS#8 under a label of its own that ssl and
# cryptography refuse; the bytes inside are standard PKCS#8.
_TALOS_KEY_LABEL = re.compile(r"-----(BEGIN|END) ED25519 PRIVATE KEY-----")

# The connection options (doc fragment talos_linux.talos.connection): TaskSpec adds them to a module's argument
# spec, the inventory plugin reads the same names, and ConnectionSettings.from_params resolves them.
CONNECTION_ARGUMENT_SPEC = dict(
    talosconfig=dict(type="path", fallback=(env_fallback, ["TALOSCONFIG"])),
    context=dict(type="str"),
    endpoints=dict(type="list", elements="str"),
    node=dict(type="str"),
    nodes=dict(type="list", elements="str"),
    ca=dict(type="str", no_log=True),
    crt=dict(type="str", no_log=True),
    key=dict(type="str", no_log=True),
    insecure=dict(type="bool", default=False),
    timeout=dict(type="int", default=DEFAULT_TIMEOUT),
)
CONNECTION_OPTIONS = tuple(CONNECTION_ARGUMENT_SPEC)


def default_talosconfig_paths(environ=None):
    """Where talosctl looks for its config when no path is given, in order."""
    environ = os.environ if environ is None else environ
    paths = []
    if environ.get("TALOSCONFIG"):
        paths.append(environ["TALOSCONFIG"])
    talos_home = environ.get("TALOS_HOME", "")
    if talos_home and os.path.isabs(talos_home):
        paths.append(os.path.join(talos_home, "config"))
    else:
        paths.append(os.path.join(os.path.expanduser("~"), ".talos", "config"))
    paths.append(IN_POD_TALOSCONFIG)
    return paths


_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.I)


def normalize_endpoint(endpoint, source="the endpoints option"):
    """``host`` -> ``host:50000``; ``https://host`` -> ``host:443``; bare IPv6 gets brackets.

    ``source`` names where the endpoint came from, for the error message.
    """
    value = endpoint.strip()
    default_port = DEFAULT_PORT
    scheme = _SCHEME.match(value)
    if scheme:
        if scheme.group(1).lower() == "https":
            default_port = 443
        value = value[scheme.end():].split("/", 1)[0]
    if not value:
        raise TalosConfigError("Endpoint %r from %s names no host." % (endpoint, source))
    if value.startswith("["):
        host, _sep, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") > 1:  # bare IPv6 address
        host, port = value, ""
    else:
        host, _sep, port = value.partition(":")
    if port and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise TalosConfigError("Endpoint %r from %s has port %r: expected a number from 1 to 65535." % (endpoint, source, port))
    if not host:
        raise TalosConfigError("Endpoint %r from %s names no host." % (endpoint, source))
    host_text = "[%s]" % host if ":" in host else host
    return "%s:%s" % (host_text, port or default_port)


def split_endpoint(endpoint):
    """``"host:port"`` (as normalize_endpoint writes it) -> ``("host", port)``."""
    host, _sep, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def relabel_private_key(pem):
    """Give a Talos ``ED25519 PRIVATE KEY`` PEM the standard PKCS#8 label."""
    return _TALOS_KEY_LABEL.sub(lambda m: "-----%s PRIVATE KEY-----" % m.group(1), pem)


def certificate_roles(crt_pem):
    """The Talos roles of a client certificate: its Subject Organization values."""
    # Only a refused call needs the roles: cryptography is imported then, not by every task.
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(crt_pem.encode("ascii"))
    except ValueError:
        return []
    return [attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) if attr.value]


def _pem_text(value, name, source):
    """PEM text from an option or a talosconfig field: PEM as is, or base64 of PEM."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = value.strip()
    if "-----BEGIN" in text:
        return text + "\n"
    try:
        decoded = base64.b64decode("".join(text.split()), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        decoded = ""
    if "-----BEGIN" not in decoded:
        raise TalosConfigError("The %s from %s is neither PEM text nor base64-encoded PEM." % (name, source))
    return decoded.strip() + "\n"


class ConnectionSettings:
    """Everything needed to reach a Talos cluster, resolved from options and talosconfig.

    ``endpoints`` are ``host:port`` strings, ``nodes`` the target nodes
    (``[None]`` means the endpoint answers itself), ``nodes_listed`` whether
    they came as a list (the nodes option or the context's nodes) rather than
    as one node (the node option, the host's node, the endpoint itself): the
    shape of a task's result follows it. ``ca``/``crt``/``key`` PEM
    text (``key`` already relabelled for ssl), ``ca_source`` names where the CA
    came from, for error messages.
    """

    def __init__(self, endpoints, nodes=None, ca=None, crt=None, key=None, insecure=False,
                 timeout=DEFAULT_TIMEOUT, context=None, config_path=None, cluster=None,
                 ca_source="the ca option", certificate_source="the crt and key options", params=None,
                 endpoints_source="the endpoints option", nodes_listed=None):
        self.endpoints = [normalize_endpoint(e, endpoints_source) for e in endpoints]
        self.nodes = list(nodes) if nodes else [None]
        self.nodes_listed = len(self.nodes) > 1 if nodes_listed is None else bool(nodes_listed)
        self.ca = ca
        self.crt = crt
        self.key = relabel_private_key(key) if key else key
        self.insecure = bool(insecure)
        self.timeout = float(timeout)
        self.context = context
        self.config_path = config_path
        self.cluster = cluster
        self.ca_source = ca_source
        self.certificate_source = certificate_source
        if params is None:  # built directly: these values are the options
            named = [n for n in self.nodes if n]
            params = dict(endpoints=list(self.endpoints), ca=ca, crt=crt, key=key, insecure=self.insecure, timeout=timeout,
                          **(dict(nodes=named) if self.nodes_listed else dict(node=(named or [None])[0])))
        self._params = dict(params)
        if not self.endpoints:
            raise TalosConfigError(
                "No Talos endpoint is configured: set the endpoints option or use a talosconfig context that lists endpoints.")
        if self.timeout <= 0:
            raise TalosConfigError("The timeout option must be a positive number of seconds, got %s." % timeout)
        if not self.insecure:
            missing = [name for name in ("ca", "crt", "key") if not getattr(self, name)]
            if missing:
                where = "talosconfig context %r (%s)" % (context, config_path) if config_path else "the options"
                raise TalosConfigError(
                    "Mutual TLS needs %s but %s does not provide %s: set the options or use a complete talosconfig context "
                    "(insecure: true is only for nodes in maintenance mode)." % (", ".join(missing), where, " or ".join(missing)))

    @classmethod
    def from_params(cls, params, environ=None):
        """Resolve module parameters (CONNECTION_OPTIONS) against the talosconfig file."""
        environ = os.environ if environ is None else environ
        params = dict((name, params.get(name)) for name in CONNECTION_OPTIONS)
        context_data, context_name, path = {}, None, None

        path = params["talosconfig"] or environ.get("TALOSCONFIG") or None
        if path:
            path = os.path.expanduser(path)
            if os.path.isdir(path):
                raise TalosConfigError("The talosconfig path %s is a directory: expected a talosconfig file." % path)
            if not os.path.isfile(path):
                raise TalosConfigError("The talosconfig file %s does not exist." % path)
        else:
            path = next((p for p in default_talosconfig_paths(environ) if os.path.isfile(p)), None)
        if path:
            context_name, context_data = _load_context(path, params["context"])
        elif params["context"]:
            raise TalosConfigError("The context option %r needs a talosconfig file, but none was found at %s."
                                   % (params["context"], ", ".join(default_talosconfig_paths(environ))))

        file_source = "talosconfig context %r (%s)" % (context_name, path)
        endpoints = params["endpoints"] or context_data.get("endpoints") or []
        if not endpoints and context_data.get("target"):
            endpoints = [context_data["target"]]
        if not endpoints and not path:
            raise TalosConfigError(
                "No Talos endpoint is configured and no talosconfig file was found: the talosconfig option and "
                "TALOSCONFIG are unset and neither %s exists. Point one of them at a talosconfig file, or give the "
                "endpoints, ca, crt and key options." % " nor ".join(default_talosconfig_paths(environ)))
        endpoints_source = "the endpoints option" if params["endpoints"] else file_source
        if params["nodes"]:
            nodes = params["nodes"]
        elif params["node"]:
            nodes = [params["node"]]
        else:
            nodes = context_data.get("nodes") or []
        nodes_listed = bool(nodes) and not params["node"]

        pems = {}
        for name in ("ca", "crt", "key"):
            if params[name]:
                pems[name] = _pem_text(params[name], name, "the %s option" % name)
            elif context_data.get(name):
                pems[name] = _pem_text(context_data[name], name, file_source)
            else:
                pems[name] = None
        ca_source = "the ca option" if params["ca"] else file_source
        certificate_source = "the crt and key options" if params["crt"] and params["key"] else file_source

        timeout = params["timeout"] if params["timeout"] is not None else DEFAULT_TIMEOUT
        return cls(endpoints=[str(e) for e in endpoints], nodes=[str(n) for n in nodes], insecure=params["insecure"],
                   timeout=timeout, context=context_name, config_path=path, cluster=context_data.get("cluster") or None,
                   ca_source=ca_source, certificate_source=certificate_source, params=params,
                   endpoints_source=endpoints_source, nodes_listed=nodes_listed, **pems)

    def replace(self, **overrides):
        """New settings from the same options with some of them replaced (``insecure=False``...)."""
        unknown = set(overrides) - set(CONNECTION_OPTIONS)
        if unknown:
            raise TypeError("unknown connection options: %s" % ", ".join(sorted(unknown)))
        params = dict(self._params)
        if "node" in overrides or "nodes" in overrides:
            params["node"] = params["nodes"] = None
        params.update(overrides)
        return ConnectionSettings.from_params(params)

    @property
    def client_roles(self):
        """Roles of the client certificate, or None on an insecure (certificate-less) connection."""
        if self.insecure:
            return None
        return certificate_roles(self.crt)

    def ssl_context(self):
        """The client TLS context: TLS >= 1.2, ALPN h2, CA and SAN verification, client certificate.

        With ``insecure`` (maintenance mode) the server is not verified and no
        client certificate is sent, as talosctl does.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            context.load_verify_locations(cadata=self.ca)
        except (ssl.SSLError, ValueError) as err:
            raise TalosConfigError("The CA from %s is not a valid PEM certificate (%s)." % (self.ca_source, _ssl_reason(err)))
        load_client_certificate(context, self.crt, self.key, self.certificate_source)
        return context


def _ssl_reason(err):
    return getattr(err, "reason", None) or type(err).__name__


def load_client_certificate(context, crt, key, source):
    """Load certificate and key from memory.

    ssl only loads a key pair from a file, so it goes through a private (0600)
    temporary file that is removed as soon as it is loaded.
    """
    try:
        with private_temp_file(crt + key) as path:
            context.load_cert_chain(path)
    except (ssl.SSLError, ValueError) as err:
        raise TalosConfigError("The client certificate and key from %s cannot be loaded (%s): they must be a PEM certificate "
                               "and its matching private key." % (source, _ssl_reason(err)))


def read_talosconfig(path):
    """The talosconfig at ``path`` as a mapping whose ``contexts`` is a mapping, or None when the file is empty.

    Raises TalosConfigError naming the file when it cannot be read or is not a talosconfig.
    """
    try:
        with open(path, "rb") as config_file:
            data = go_yaml.load(config_file.read().decode("utf-8"))
    except (OSError, IOError) as err:
        raise TalosConfigError("The talosconfig file %s cannot be read: %s." % (path, err.strerror or err))
    except UnicodeDecodeError:
        raise TalosConfigError("The talosconfig file %s is not a text file: expected the YAML that talosctl writes." % path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = " at line %d" % (mark.line + 1) if mark else ""
        raise TalosConfigError("The talosconfig file %s is not valid YAML%s." % (path, where))
    if not data:
        return None
    if not isinstance(data, dict):
        raise TalosConfigError("The talosconfig file %s is not a mapping of context, contexts." % path)
    if not isinstance(data.get("contexts") or {}, dict):
        raise TalosConfigError("The contexts of talosconfig %s must be a mapping of context names to contexts." % path)
    return data


def _load_context(path, context_option):
    """Read ``path`` and return ``(context_name, context_dict)``."""
    data = read_talosconfig(path)
    if data is None:
        raise TalosConfigError("The talos config file %s is empty." % path)
    contexts = data.get("contexts") or {}
    available = ", ".join(sorted(str(name) for name in contexts)) or "none"
    if context_option:
        if context_option not in contexts:
            raise TalosConfigError("The context %r was not found in talosconfig %s (contexts: %s)."
                                   % (context_option, path, available))
        name = context_option
    else:
        name = data.get("context")
        if not name or name not in contexts:
            raise TalosConfigError("The default context %r was not found in talosconfig %s (contexts: %s); set the context option."
                                   % (name or "", path, available))
    context = contexts[name] or {}
    if not isinstance(context, dict):
        raise TalosConfigError("The context %r in talosconfig %s is not a mapping." % (name, path))
    for field in ("endpoints", "nodes"):
        if context.get(field) is not None and not (
                isinstance(context[field], list) and all(isinstance(item, str) and item.strip() for item in context[field])):
            raise TalosConfigError("The %s of context %r in talosconfig %s must be a list of addresses." % (field, name, path))
    for field in ("ca", "crt", "key", "target", "cluster"):
        if context.get(field) is not None and not isinstance(context[field], str):
            raise TalosConfigError("The %s of context %r in talosconfig %s must be a string." % (field, name, path))
    return name, context
