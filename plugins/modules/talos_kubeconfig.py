#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: talos_kubeconfig
short_description: Fetch the Kubernetes admin kubeconfig of a Talos cluster
version_added: 0.1.0
description:
  - Fetches the Kubernetes admin kubeconfig from a Talos control-plane node with the Kubeconfig RPC, the way
    C(talosctl kubeconfig) does, and writes it to O(dest) on the controller with mode C(0600), or returns it when
    O(dest) is not set.
  - Talos issues a new admin client certificate on every call. The module therefore compares the fetched kubeconfig
    with the file at O(dest) leaving out the client credentials (C(client-certificate-data), C(client-key-data)) of
    its users, and rewrites the file only when something else differs (cluster CA, server, names), when the file's
    client certificate has expired or expires within a day, or when the file's mode is not C(0600). A second run
    therefore reports no change and leaves the existing credentials in place.
  - Optionally points the kubeconfig at another API server address (O(server)) and renames its context and cluster
    (O(context_name), O(cluster_name)), for example to merge several clusters' kubeconfigs later.
author:
  - Talos Linux Ansible collection contributors (!UNKNOWN)
options:
  dest:
    description:
      - Path on the controller to write the kubeconfig to. Its directory must exist.
      - When not set, the kubeconfig is returned in RV(kubeconfig) instead.
    type: path
  server:
    description:
      - Kubernetes API server URL to write into every cluster entry (C(clusters[].cluster.server)), for example
        V(https://k8s.example.com:6443). By default the endpoint Talos put there is kept.
    type: str
  context_name:
    description:
      - New name for the kubeconfig's context; C(current-context) follows.
      - Named so because O(context) selects the talosconfig context.
    type: str
  cluster_name:
    description:
      - New name for the kubeconfig's cluster entry; the context's reference follows.
    type: str
extends_documentation_fragment:
  - talos_linux.talos.connection
  - talos_linux.talos.attributes
  - talos_linux.talos.attributes.actiongroup_talos
attributes:
  check_mode:
    support: full
    details: The kubeconfig is fetched and compared but not written.
  diff_mode:
    support: full
    details: The diff shows the kubeconfig with client credentials replaced by C(<redacted>).
  idempotent:
    support: full
    details: Regenerated client credentials alone do not count as a change.
notes:
  - Needs the C(os:admin) role and a control-plane node; Talos serves the kubeconfig only there.
  - Without O(dest), RV(kubeconfig) holds cluster-admin credentials. Set C(no_log=true) on such tasks so that the
    credentials are not printed or logged.
requirements:
  - PyYAML
  - cryptography
"""

EXAMPLES = r"""
- name: Write the admin kubeconfig next to the playbook
  talos_linux.talos.talos_kubeconfig:
    talosconfig: ./talosconfig
    node: 10.5.0.2
    dest: ./kubeconfig

- name: Point the kubeconfig at the load balancer and give it a name of its own
  talos_linux.talos.talos_kubeconfig:
    node: 10.5.0.2
    dest: ~/.kube/prod.yaml
    server: https://k8s.example.com:6443
    context_name: prod
    cluster_name: prod

- name: Hand the kubeconfig to the next task without writing a file
  talos_linux.talos.talos_kubeconfig:
    node: 10.5.0.2
  register: admin
  no_log: true
"""

RETURN = r"""
dest:
  description: Absolute path of the kubeconfig file.
  returned: when O(dest) is set
  type: str
  sample: /home/ops/.kube/prod.yaml
kubeconfig:
  description:
    - The kubeconfig (YAML text), with the O(server), O(context_name) and O(cluster_name) rewrites applied.
    - Holds cluster-admin credentials; use C(no_log) on the task.
  returned: when O(dest) is not set
  type: str
server:
  description: The API server URL of the kubeconfig's (first) cluster entry.
  returned: always
  type: str
  sample: https://10.5.0.2:6443
context:
  description: The kubeconfig's current context.
  returned: always
  type: str
  sample: admin@prod
cluster:
  description: The name of the kubeconfig's (first) cluster entry.
  returned: always
  type: str
  sample: prod
node:
  description: The control-plane node that issued the kubeconfig (null when the endpoint answered for itself).
  returned: always
  type: str
  sample: 10.5.0.2
"""

import base64
import copy
import datetime
import gzip
import io
import os
import tarfile
import zlib

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.files import write_private
from ansible_collections.talos_linux.talos.plugins.module_utils.redaction import redact
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_module import TalosModule

try:
    import yaml
except ImportError:  # reported by TalosModule through missing_required_lib
    yaml = None

try:
    from cryptography import x509
except ImportError:  # reported by TalosModule through missing_required_lib
    x509 = None

KUBECONFIG = "machine.MachineService/Kubeconfig"
CREDENTIAL_KEYS = ("client-certificate-data", "client-key-data")
# Existing credentials that expire sooner than this are replaced.
RENEW_BEFORE = datetime.timedelta(days=1)


def extract_kubeconfig(blob, node):
    """The ``kubeconfig`` file inside the gzip'd tar archive Talos streams."""
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as archive:
            for member in archive.getmembers():
                if member.isfile() and os.path.basename(member.name) == "kubeconfig":
                    return archive.extractfile(member).read().decode("utf-8")
    except (OSError, EOFError, zlib.error, tarfile.TarError, UnicodeDecodeError) as err:
        raise TalosError("The kubeconfig archive from %s could not be read (%s): expected a gzip-compressed tar "
                         "holding a file named kubeconfig." % (describe(node), err), node=node)
    raise TalosError("The kubeconfig archive from %s holds no file named kubeconfig." % describe(node), node=node)


def describe(node):
    return "node %s" % node if node else "the endpoint"


def rewrite(config, server=None, context=None, cluster=None):
    """Apply the server, context and cluster options to a parsed kubeconfig in place."""
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
    return config


def without_credentials(config):
    """A copy of ``config`` whose users' client credentials are removed."""
    config = copy.deepcopy(config)
    for entry in config.get("users") or []:
        user = entry.get("user") or {}
        for key in CREDENTIAL_KEYS:
            user.pop(key, None)
    return config


def credentials_expire_soon(config, now):
    """True when a user's client certificate in ``config`` is unreadable or expires within RENEW_BEFORE."""
    for entry in config.get("users") or []:
        data = (entry.get("user") or {}).get("client-certificate-data")
        if not data:
            continue
        try:
            certificate = x509.load_pem_x509_certificate(base64.b64decode(data))
        except (ValueError, TypeError):
            return True
        if certificate.not_valid_after_utc - RENEW_BEFORE <= now:
            return True
    return False


def read_existing(path):
    """The parsed kubeconfig at ``path``, or None when there is none or it is not a kubeconfig."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        try:
            config = yaml.safe_load(f)
        except yaml.YAMLError:
            return None
    return config if isinstance(config, dict) else None


def needs_write(existing, fetched, path):
    """Whether the file at ``path`` must be (re)written with ``fetched``."""
    if existing is None:
        return True
    if without_credentials(existing) != without_credentials(fetched):
        return True
    if credentials_expire_soon(existing, datetime.datetime.now(datetime.timezone.utc)):
        return True
    return os.stat(path).st_mode & 0o777 != 0o600


def redacted_text(config):
    if config is None:
        return ""
    return yaml.safe_dump(redact(config), default_flow_style=False, sort_keys=False)


def run(module):
    params = module.params
    dest = params["dest"]
    if dest and os.path.isdir(dest):
        module.fail_json(msg="Cannot write the kubeconfig to %s: it is a directory; set dest to a file path." % dest)
    if dest and not os.path.isdir(os.path.dirname(os.path.abspath(dest))):
        module.fail_json(msg="Cannot write the kubeconfig to %s: directory %s does not exist."
                             % (dest, os.path.dirname(os.path.abspath(dest))))

    client = module.client
    node = module.single_node("fetches from one control-plane node")
    text = extract_kubeconfig(client.read_bytes(KUBECONFIG, node=node), node)
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise TalosError("The kubeconfig from %s is not valid YAML (%s)." % (describe(node), err), node=node)
    if not isinstance(config, dict):
        raise TalosError("The kubeconfig from %s is not a YAML mapping." % describe(node), node=node)
    if params["server"] or params["context_name"] or params["cluster_name"]:
        rewrite(config, server=params["server"], context=params["context_name"], cluster=params["cluster_name"])
        text = yaml.safe_dump(config, default_flow_style=False, sort_keys=False)

    clusters = config.get("clusters") or [{}]
    result = {
        "changed": False,
        "node": node,
        "server": (clusters[0].get("cluster") or {}).get("server"),
        "cluster": clusters[0].get("name"),
        "context": config.get("current-context"),
    }
    if not dest:
        result["kubeconfig"] = text
        module.exit_json(**result)

    path = os.path.abspath(dest)
    existing = read_existing(path)
    result.update(dest=path, changed=needs_write(existing, config, path))
    if result["changed"]:
        result["diff"] = {"before": redacted_text(existing), "after": redacted_text(config),
                          "before_header": path, "after_header": path}
        if not module.check_mode:
            try:
                write_private(path, text)
            except (IOError, OSError) as err:
                module.fail_json(msg="Cannot write the kubeconfig to %s: %s." % (path, err.strerror or err))
    module.exit_json(**result)


def main():
    module = TalosModule(
        argument_spec=dict(
            dest=dict(type="path"),
            server=dict(type="str"),
            context_name=dict(type="str"),
            cluster_name=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    module.run(run)


if __name__ == "__main__":
    main()
