# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""TalosModule: the module base of every talos_linux.talos module that talks to nodes.

On top of ControllerModule's option checks and error reporting, it merges
the shared connection options into the module's argument spec, builds the
TalosClient on first use and closes it when the module is done.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.basic import env_fallback

from ansible_collections.talos_linux.talos.plugins.module_utils.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.controller_module import ControllerModule
from ansible_collections.talos_linux.talos.plugins.module_utils.talosconfig import ConnectionSettings

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
    timeout=dict(type="int", default=60),
)

CONNECTION_MUTUALLY_EXCLUSIVE = [("node", "nodes")]

# Inclusive (lowest, highest) bounds of the shared numeric options; modules add their own with ``ranges``.
# Every int or float option must have bounds: TalosModule refuses to build a module that leaves one out.
CONNECTION_RANGES = dict(timeout=(1, None))
WAIT_RANGES = dict(wait_timeout=(1, None))

WAIT_ARGUMENT_SPEC = dict(
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=600),
)

# (name on PyPI, module to import) for every library the client needs.
REQUIRED_LIBRARIES = (
    ("grpclib", "grpclib"),
    ("protobuf", "google.protobuf"),
    ("googleapis-common-protos", "google.rpc.status_pb2"),
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)


class TalosModule(ControllerModule):
    """An AnsibleModule with the connection options, a lazy ``client`` and ``run()``.

    ``wait=True`` adds the ``wait``/``wait_timeout`` options (doc fragment
    talos_linux.talos.wait).
    """

    def __init__(self, argument_spec, wait=False, mutually_exclusive=None, ranges=None, may_be_empty=(), **kwargs):
        spec = dict(CONNECTION_ARGUMENT_SPEC)
        bounds = dict(CONNECTION_RANGES)
        if wait:
            spec.update(WAIT_ARGUMENT_SPEC)
            bounds.update(WAIT_RANGES)
        bounds.update(ranges or {})
        shadowed = sorted(set(spec) & set(argument_spec))
        if shadowed:
            # A module option with a shared option's name would silently replace it.
            raise ValueError("module options %s shadow the shared connection or wait options" % ", ".join(shadowed))
        spec.update(argument_spec)
        exclusive = list(CONNECTION_MUTUALLY_EXCLUSIVE) + list(mutually_exclusive or [])
        super(TalosModule, self).__init__(argument_spec=spec, mutually_exclusive=exclusive, ranges=bounds,
                                          may_be_empty=may_be_empty, libraries=REQUIRED_LIBRARIES, **kwargs)
        self._settings = None
        self._client = None

    @property
    def settings(self):
        """ConnectionSettings from the module's connection options (raises TalosConfigError)."""
        if self._settings is None:
            self._settings = ConnectionSettings.from_params(self.params)
        return self._settings

    @property
    def client(self):
        """The TalosClient, created on first use; closed by ``run()``."""
        if self._client is None:
            self._client = TalosClient(self.settings)
        return self._client

    @property
    def target_nodes(self):
        """The nodes the task addresses; ``[None]`` means the endpoint itself."""
        return list(self.settings.nodes)

    def single_node(self, task):
        """The one node a single-node module addresses; several targeted nodes fail the task.

        ``task`` says what the module does, e.g. "bootstraps exactly one control-plane node".
        """
        nodes = self.target_nodes
        if len(nodes) > 1:
            self.fail_json(msg="%s %s but %d nodes are targeted (%s): set node to one of them, for example "
                               "node: \"{{ ansible_host }}\" with one inventory host per node."
                               % (self._name.rsplit(".", 1)[-1], task, len(nodes), ", ".join(nodes)))
        return nodes[0]

    def close_client(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(self, fn):
        """Call ``fn(self)``; a TalosError becomes fail_json; the client is always closed."""
        try:
            super(TalosModule, self).run(fn)
        finally:
            self.close_client()
