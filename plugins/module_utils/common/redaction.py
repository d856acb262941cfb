# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where Talos keeps secrets, and their redaction in everything the collection prints.

This is the one list of secret-bearing fields of machine configs (the v1alpha1
document and the multi-document kinds of Talos v1.12+), talosconfigs, secrets
bundles and kubeconfigs. Config redaction, diffs (the node's dry-run text
included), facts and anything else that prints a config go through it.

A value is secret when:

- a key on its path is a secret field name (SECRET_KEY_NAMES: keys, tokens,
  secrets, passwords, passphrases, credentials, registry ``auth``, an
  ``Authorization`` header), or
- its path is a SECRET_PATHS entry (fields whose name does not say so), or
- the value itself shows it (SECRET_VALUES: a PEM private key, raw or base64,
  a ``Bearer``/``Basic`` credential, a URL with a password).

Examples of what the names cover, by document:

- v1alpha1: ``machine.token``, ``machine.ca.key``, ``cluster.secret``,
  ``cluster.token``, ``cluster.secretboxEncryptionSecret``,
  ``cluster.aescbcEncryptionSecret``, ``cluster.{ca,aggregatorCA,etcd.ca}.key``,
  ``cluster.serviceAccount.key``, ``machine.registries.config.*.auth``,
  ``machine.systemDiskEncryption.*.keys``, WireGuard ``privateKey``.
- Kube{APIServer,Aggregator}CAConfig ``issuingCA.key``,
  KubeServiceAccountConfig ``issuer.privateKey``, KubeEtcdEncryptionConfig
  ``config.resources[].providers[].{secretbox,aescbc,aesgcm}.keys``,
  DiscoveryIdentityConfig ``clusterSecret``, RegistryAuthConfig ``password``,
  ``auth``, ``identityToken``, ``registryToken``, WireguardConfig ``privateKey``,
  volume ``encryption.keys``.
- talosconfig ``contexts.*.key``; secrets bundle ``cluster.secret``,
  ``secrets.*``, ``trustdinfo.token``, ``certs.*.key``; kubeconfig
  ``users[].user.{client-key-data,token,password}`` and auth-provider tokens.

COSI resources of a type Talos marks sensitive (SENSITIVE_RESOURCE_TYPES,
the ``secrets`` namespace, or a resource definition that says so) have every
value redacted, whatever their keys are called (``redact_resource_spec``).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import re

REDACTED = "<redacted>"
REDACTED_CHANGED = "<redacted, changed>"

# Key names whose whole value (a scalar or everything under it) is secret.
SECRET_KEY_NAMES = re.compile(
    r"key|token|secret|password|passphrase|credential|^auth$|^authorization$|^proxy-authorization$", re.IGNORECASE)

# Paths (dotted keys, ``*`` for any one key or list item) of secret fields whose name does not say so.
SECRET_PATHS = (
    "cluster.extraManifestHeaders.*",  # HTTP headers for manifest downloads: bearer tokens, basic credentials
    "headers.*",  # KubeExternalManifestConfig and similar documents' HTTP headers
)

# COSI types whose ResourceDefinition is Sensitive in Talos v1.14 (siderolabs/talos pkg/machinery/resources, every
# ``Sensitivity: meta.Sensitive``): reading them needs os:admin, and every value of theirs is treated as a secret.
SENSITIVE_RESOURCE_TYPES = frozenset([
    "APIServerConfigs.kubernetes.talos.dev",
    "ApiCertificates.secrets.talos.dev",
    "AuditPolicyConfigs.kubernetes.talos.dev",
    "AuthenticationConfigs.kubernetes.talos.dev",
    "AuthorizationConfigs.kubernetes.talos.dev",
    "CertSANs.secrets.talos.dev",
    "CustomizationConfigs.cri.talos.dev",
    "DeviceConfigSpecs.net.talos.dev",
    "DiscoveryConfigs.cluster.talos.dev",
    "EncryptionSalts.secrets.talos.dev",
    "EtcFileSpecs.files.talos.dev",
    "EtcdEncryptionConfigs.kubernetes.talos.dev",
    "EtcdRootSecrets.secrets.talos.dev",
    "EtcdSecrets.secrets.talos.dev",
    "ExtensionServiceConfigs.runtime.talos.dev",
    "KubeSpanConfigs.kubespan.talos.dev",
    "KubeSpanIdentities.kubespan.talos.dev",
    "KubeletConfigs.kubernetes.talos.dev",
    "KubeletSecrets.secrets.talos.dev",
    "KubeletSpecs.kubernetes.talos.dev",
    "KubernetesDynamicCerts.secrets.talos.dev",
    "KubernetesRootSecrets.secrets.talos.dev",
    "KubernetesSecrets.secrets.talos.dev",
    "LinkSpecs.net.talos.dev",
    "MachineConfigs.config.talos.dev",
    "MaintenanceRootSecrets.secrets.talos.dev",
    "NodeAnnotationSpecs.k8s.talos.dev",
    "NodeCordonedSpecs.k8s.talos.dev",
    "NodeLabelSpecs.k8s.talos.dev",
    "NodeTaintSpecs.k8s.talos.dev",
    "OOMActions.talos.dev",
    "OSRootSecrets.secrets.talos.dev",
    "OperatorSpecs.net.talos.dev",
    "RegistryConfigs.cri.talos.dev",
    "SiderolinkConfigs.siderolink.talos.dev",
    "SiderolinkTunnels.siderolink.talos.dev",
    "TrustdCertificates.secrets.talos.dev",
    "VolumeConfigs.block.talos.dev",
])
# Namespaces whose every resource is a secret, whatever its type (Talos keeps its PKI and tokens in ``secrets``).
SENSITIVE_NAMESPACES = frozenset(["secrets"])

# Values that are secrets wherever they appear.
_PEM_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_BASE64_PEM = re.compile(r"^LS0tLS1CRUdJTi[A-Za-z0-9+/=\s]+$")
_HTTP_CREDENTIAL = re.compile(r"^\s*(Bearer\s+[A-Za-z0-9._~+/=-]{8,}|Basic\s+[A-Za-z0-9+/=]{8,})\s*$", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"://[^/\s:@]+:[^/\s@]+@")

# Scalars that carry no secret even where a secret is expected.
HARMLESS_SCALARS = frozenset(["", "~", "null", "true", "false", "{}", "[]", '""', "''"])

# Values shorter than this are not masked as literals in free text: they would
# hide unrelated words, and they are still redacted where a secret field names them.
MIN_LITERAL_SECRET = 6

# A line that is nothing but a long base64 run: a line of a PEM body or of a key
# list, whose field may be outside the lines shown (a diff hunk).
_BASE64_LINE = re.compile(r"^(?P<head>\s*(?:-\s+)?)[A-Za-z0-9+/]{32,}={0,2}\s*$")

# "  key: value", "- key: value", '"key": value' in YAML text (after any diff marker).
_YAML_KEY_LINE = re.compile(
    r"^(?P<head>\s*(?:-\s+)*)(?P<quote>[\"']?)(?P<key>[^\s:\"'#][^:\"']*)(?P=quote):(?:(?P<sep>[ \t]+)(?P<value>\S.*?))?\s*$")
_BLOCK_INDICATOR = re.compile(r"^[|>][0-9+-]*(\s+#.*)?$")


def is_secret_key(key):
    """True when a key of this name holds a secret."""
    return isinstance(key, str) and bool(SECRET_KEY_NAMES.search(key))


def _path_matches(path, pattern):
    """True when ``path`` (a tuple of keys) ends with ``pattern`` (dotted, ``*`` matches one key)."""
    parts = pattern.split(".")
    if len(parts) > len(path):
        return False
    tail = path[len(path) - len(parts):]
    return all(part == "*" or part == str(key) for part, key in zip(parts, tail))


def is_secret_path(path):
    """True when the field at ``path`` (a sequence of keys and list indexes) is a secret."""
    path = tuple(path)
    return any(is_secret_key(key) for key in path) or any(_path_matches(path, pattern) for pattern in SECRET_PATHS)


def is_secret_value(value):
    """True when a string is a secret by its own shape, wherever it is."""
    if not isinstance(value, str):
        return False
    if _PEM_PRIVATE_KEY.search(value) or _HTTP_CREDENTIAL.match(value) or _URL_PASSWORD.search(value):
        return True
    if _BASE64_PEM.match(value):
        try:
            decoded = base64.b64decode("".join(value.split())).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return False
        return bool(_PEM_PRIVATE_KEY.search(decoded))
    return False


def _is_secret_scalar(value, secret_field):
    if not isinstance(value, str) or value.strip() in HARMLESS_SCALARS:
        return False
    return secret_field or is_secret_value(value)


def _walk(value, path, secret_field, visit):
    """Call ``visit(value)`` on every secret string under ``value`` and return the redacted copy."""
    if isinstance(value, dict):
        return dict((key, _walk(item, path + (key,), secret_field or is_secret_path(path + (key,)), visit))
                    for key, item in value.items())
    if isinstance(value, list):
        return [_walk(item, path + (index,), secret_field, visit) for index, item in enumerate(value)]
    if _is_secret_scalar(value, secret_field):
        visit(value)
        return REDACTED
    return value


def redact(value):
    """A copy of ``value`` (documents, a list of them, any structure) with every secret string replaced by REDACTED."""
    return _walk(value, (), False, lambda found: None)


def is_sensitive_resource(resource_type, namespace=None):
    """True for a COSI resource type (or namespace) whose every value is a secret."""
    return resource_type in SENSITIVE_RESOURCE_TYPES or namespace in SENSITIVE_NAMESPACES


def redact_resource_spec(spec, resource_type, namespace=None, sensitive=False):
    """A resource's spec with its secrets redacted: every value when the type is sensitive (``is_sensitive_resource``,
    or ``sensitive`` as the node's resource definition says), else what ``redact`` finds. The keys stay."""
    if sensitive or is_sensitive_resource(resource_type, namespace):
        return _redact_every_value(spec)
    return redact(spec)


def _redact_every_value(value):
    if isinstance(value, dict):
        return dict((key, _redact_every_value(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_redact_every_value(item) for item in value]
    return None if value is None else REDACTED


def secret_values(value):
    """Every secret string in ``value`` (the literals to mask in free text)."""
    found = set()
    _walk(value, (), False, found.add)
    return found


def maskable_literals(known_secrets):
    """The literals of ``known_secrets`` worth masking in free text: long enough, and each line of multi-line ones."""
    literals = set()
    for value in known_secrets:
        for literal in [value] + (value.splitlines() if "\n" in value else []):
            literal = literal.strip()
            if len(literal) >= MIN_LITERAL_SECRET and not literal.startswith("-----"):
                literals.add(literal)
    return sorted(literals, key=len, reverse=True)


def _mask_literals(line, literals):
    for literal in literals:
        if literal in line:
            line = line.replace(literal, REDACTED)
    return line


def _is_diff_header(line):
    return line.startswith(("--- ", "+++ ", "@@ ")) or line in ("---", "+++")


def _redact_line(body, literals, secret_indent):
    """One YAML line redacted; returns ``(line, secret_indent)``.

    ``secret_indent`` is the indentation of a secret field whose value
    continues on the following, deeper lines (a literal block, a mapping, a
    list): those lines are redacted whole.
    """
    indent = len(body) - len(body.lstrip(" "))
    if secret_indent is not None:
        if not body.strip():
            return body, secret_indent
        if indent > secret_indent or (indent == secret_indent and body.lstrip().startswith("- ")):
            return " " * indent + REDACTED, secret_indent
        secret_indent = None
    match = _YAML_KEY_LINE.match(body)
    if match:
        key, value = match.group("key"), match.group("value")
        if is_secret_key(key) or is_secret_value(value):
            if value is None or _BLOCK_INDICATOR.match(value):
                secret_indent = match.start("quote")
            elif value.strip() not in HARMLESS_SCALARS:
                body = body[:match.start("value")] + REDACTED
    else:
        base64_line = _BASE64_LINE.match(body)
        if base64_line:
            body = base64_line.group("head") + REDACTED
    return _mask_literals(body, literals), secret_indent


def redact_text(text, known_secrets=(), diff=False):
    """Redact YAML ``text`` (or a unified diff of YAML when ``diff``) line by line.

    Values of secret fields are replaced, including the lines of a block,
    mapping or list under them, and so is every literal occurrence of
    ``known_secrets`` (the secrets of the config being applied; the other side
    of a diff is only known as text). A line that is a bare long base64 run
    (a PEM body line whose field is outside a diff hunk) is replaced too. In a
    diff, an added line whose secret differs from the removed line it replaces
    says REDACTED_CHANGED, so that a changed secret stays visible.
    """
    literals = maskable_literals(known_secrets)
    lines = []
    secret_indent = None
    removed = {}
    for line in text.splitlines():
        if diff and _is_diff_header(line):
            removed = {}
            secret_indent = None
            lines.append(line)
            continue
        marker, body = (line[:1], line[1:]) if diff else ("", line)
        redacted, secret_indent = _redact_line(body, literals, secret_indent)
        if marker == "-":
            removed.setdefault(redacted, set()).add(body)
        elif marker == "+" and REDACTED in redacted and redacted in removed and body not in removed[redacted]:
            redacted = redacted.replace(REDACTED, REDACTED_CHANGED)
        lines.append(marker + redacted)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
