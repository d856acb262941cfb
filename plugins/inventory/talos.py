# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
name: talos
short_description: Talos Linux cluster nodes as Ansible inventory
version_added: 1.0.0
description:
  - Asks a Talos cluster which nodes it has, through the Talos API and the credentials of a talosconfig, and makes
    every node an inventory host, grouped by machine type.
  - The nodes come from the cluster's COSI C(Members) resources (namespace C(cluster), type
    C(Members.cluster.talos.dev)), which every node derives from cluster discovery. When O(discovery=false), or when
    the cluster has discovery turned off in its machine configuration (no C(Members)), the nodes are those of
    O(nodes) (else the talosconfig context's C(nodes)) plus the control planes in the etcd member list, and each
    node is asked for its hostname, machine type, version and addresses. When that happens with O(discovery=true), a
    warning names the nodes listed, as workers in neither list are missing.
  - Every host gets C(ansible_host), C(talos_node), C(talos_addresses), C(talos_machine_type), C(talos_os_version)
    and C(talos_hostname), and C(ansible_connection=local) with C(ansible_python_interpreter) set to the
    controller's Python, so that the collection's modules run on the controller and reach the node through
    the API with their O(talos_linux.talos.talos_facts#module:node) option set to C({{ talos_node }}).
  - The variables are plain values (C(ansible-inventory --list) shows no C(__ansible_unsafe) wrapper, so an AWX
    inventory sync stores them as they are); text from the cluster that looks like a template is kept as data
    that is never rendered.
  - Never puts a key or a certificate in the inventory.
  - The configuration file name must end with C(talos.yml) or C(talos.yaml).
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
extends_documentation_fragment:
  - talos_linux.talos.connection
  - constructed
  - inventory_cache
options:
  plugin:
    description:
      - The name of this plugin; marks the file as a configuration of it.
    type: str
    required: true
    choices: [talos_linux.talos.talos]
  discovery:
    description:
      - Read the nodes from the cluster's C(Members) resources.
      - With V(false), or when the cluster reports no C(Members) (discovery turned off in its machine
        configuration), the nodes are those of O(nodes) (else of the talosconfig context) plus the etcd members.
    type: bool
    default: true
  nodes:
    description:
      - Addresses of the nodes to list when the nodes do not come from C(Members) (see O(discovery)).
      - Overrides the C(nodes) of the talosconfig context. Control planes in the etcd member list are added.
      - Mutually exclusive with O(node).
    type: list
    elements: str
  node:
    description:
      - One node to list when the nodes do not come from C(Members), as O(nodes) with one element.
      - Mutually exclusive with O(nodes).
    type: str
  inventory_hostname:
    description:
      - What names a host in the inventory - the node's V(hostname), or the V(address) chosen for C(ansible_host).
      - A node without a hostname, or with the hostname of a node listed before it, is named by address.
    type: str
    choices: [hostname, address]
    default: hostname
  address_family:
    description:
      - Which address of a node becomes C(ansible_host) and C(talos_node) - the first V(ipv4) or the first V(ipv6)
        address it reports; a node without an address of that family gets its first address.
    type: str
    choices: [ipv4, ipv6]
    default: ipv4
  controlplane_group:
    description:
      - Group of the control-plane nodes.
    type: str
    default: controlplane
  worker_group:
    description:
      - Group of the worker nodes.
    type: str
    default: workers
  ansible_connection:
    description:
      - The C(ansible_connection) of every host. The collection's modules run on the controller, hence the default.
      - With V(local), C(ansible_python_interpreter) is also set to C({{ ansible_playbook_python }}), the Python that
        runs Ansible and has the libraries the modules need.
      - Set it to an empty string to leave both variables unset.
    type: str
    default: local
notes:
  - Nodes come and go as the cluster changes; with O(cache=true) the list is read again once O(cache_timeout) has
    passed, or with C(--flush-cache).
seealso:
  - module: talos_linux.talos.talos_facts
  - ref: inventory_sources
    description: Ansible's documentation of inventory sources and plugins.
"""

EXAMPLES = r"""
# cluster.talos.yml: every node of the cluster of the default talosconfig ($TALOSCONFIG or ~/.talos/config)
plugin: talos_linux.talos.talos

# Other cluster.talos.yml files (one source per file):
#
# another talosconfig and context, hosts named by address, own group names
#   plugin: talos_linux.talos.talos
#   talosconfig: ~/clusters/prod/talosconfig
#   context: prod
#   inventory_hostname: address
#   controlplane_group: talos_control_planes
#   worker_group: talos_workers
#
# groups by Talos version and an extra variable, cached for ten minutes
#   plugin: talos_linux.talos.talos
#   keyed_groups:
#     - key: talos_os_version
#       prefix: talos
#   compose:
#     talos_is_control_plane: talos_machine_type == 'controlplane'
#   groups:
#     upgrade_candidates: talos_os_version != 'v1.14.0'
#   cache: true
#   cache_plugin: ansible.builtin.jsonfile
#   cache_connection: ~/.cache/talos-inventory
#   cache_timeout: 600
#
# A playbook: the connection options once for the action group, each task aimed at its host's node.
# ansible-playbook -i cluster.talos.yml site.yml
# - hosts: all
#   gather_facts: false
#   module_defaults:
#     group/talos_linux.talos.talos:
#       talosconfig: ~/clusters/prod/talosconfig
#   tasks:
#     - talos_linux.talos.talos_facts:
#         node: "{{ talos_node }}"
#         gather_subset: [min]
"""

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

try:  # ansible-core 2.19+: what an inventory plugin sets is data unless trusted as a template
    from ansible.template import trust_as_template

    def as_data(value):
        return value
except ImportError:  # earlier versions render every string that is not marked unsafe
    from ansible.utils.unsafe_proxy import wrap_var as as_data

    def trust_as_template(value):
        return value

from ansible_collections.talos_linux.talos.plugins.module_utils.client.client import TalosClient
from ansible_collections.talos_linux.talos.plugins.module_utils.cluster.discovery import discover, preferred_address
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import is_control_plane_type
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.task.task import CLIENT_LIBRARIES, missing_libraries
from ansible_collections.talos_linux.talos.plugins.module_utils.client.talosconfig import CONNECTION_OPTIONS, ConnectionSettings

PLAYBOOK_PYTHON = "{{ ansible_playbook_python }}"

# Jinja's delimiters as Ansible configures them; text without them renders as itself.
TEMPLATE_MARKERS = ("{{", "{%", "{#")


def reported(value):
    """A value the cluster reported, as the inventory holds it.

    Text without template syntax renders as itself, so it is marked as such: ``ansible-inventory --list``
    (and so an AWX inventory sync) shows it as a plain value rather than ``{"__ansible_unsafe": ...}``.
    Text that looks like a template stays data that is never rendered.
    """
    if isinstance(value, list):
        return [reported(item) for item in value]
    if not isinstance(value, str):
        return value
    if any(marker in value for marker in TEMPLATE_MARKERS):
        return as_data(value)
    return trust_as_template(value)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):

    NAME = "talos_linux.talos.talos"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(("talos.yml", "talos.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._read_config_data(path)

        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        nodes = None
        if use_cache:
            try:
                nodes = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if nodes is None:
            nodes = self._discover(path)
        if update_cache:
            self._cache[cache_key] = nodes
        self._populate(nodes)

    def _discover(self, path):
        """The nodes the cluster reports (a list of plain dicts, see module_utils/cluster/discovery.py)."""
        missing = missing_libraries(CLIENT_LIBRARIES)
        if missing:
            raise AnsibleParserError("%s: the talos inventory plugin needs the Python libraries %s on the controller."
                                     % (path, ", ".join(name for name, _traceback in missing)))
        params = dict((name, self.get_option(name)) for name in CONNECTION_OPTIONS)
        if params["node"] and params["nodes"]:
            raise AnsibleParserError("%s: node and nodes are mutually exclusive; set one of them." % path)
        try:
            settings = ConnectionSettings.from_params(params)
            with self._client(settings) as client:
                nodes, source = discover(client, use_members=self.get_option("discovery"), warn=self.display.warning)
        except TalosError as error:
            # The error is one sentence without key material; a traceback would add nothing.
            raise AnsibleParserError("%s: %s" % (path, error.message)) from None
        if not nodes:
            raise AnsibleParserError(
                "%s: the cluster reports no nodes: it lists no Members (discovery is off), its etcd has no members and "
                "neither the nodes option nor the talosconfig context lists nodes; set nodes." % path)
        if source != "members" and self.get_option("discovery"):
            self.display.warning(
                "%s: the Talos cluster lists no Members (cluster discovery is off in its machine configuration, or its "
                "nodes have not found each other yet), so the inventory holds only %s and the control planes in etcd: %s; "
                "workers listed in neither are missing. Turn on cluster discovery (a DiscoveryServiceConfig document, or "
                "cluster.discovery.enabled before Talos v1.14), or list every node in nodes."
                % (path, "the nodes option" if self.get_option("nodes") or self.get_option("node") else
                   "the nodes of the talosconfig context", ", ".join(node["hostname"] for node in nodes)))
        self.display.vvv("talos inventory %s: %d nodes from %s" % (path, len(nodes), source))
        return nodes

    def _client(self, settings):
        return TalosClient(settings)

    def _group(self, node):
        """The machine-type group of a node (created on first use), or None for a node of unknown type."""
        if is_control_plane_type(node.get("machine_type")):
            name = self.get_option("controlplane_group")
        elif node.get("machine_type") == "worker":
            name = self.get_option("worker_group")
        else:
            return None
        return self.inventory.add_group(name)

    def _populate(self, nodes):
        strict = self.get_option("strict")
        connection = self.get_option("ansible_connection")
        named = {}
        for node in nodes:
            address = preferred_address(node["addresses"], self.get_option("address_family"))
            if address is None:
                self.display.warning("Talos node %s reports no address and is left out of the inventory." % node["hostname"])
                continue
            name = self._host_name(node, address, named)
            named[name] = address
            self.inventory.add_host(name, group=self._group(node))
            hostvars = {
                "ansible_host": address,
                "talos_node": address,
                "talos_addresses": list(node["addresses"]),
                "talos_machine_type": node.get("machine_type"),
                "talos_os_version": node.get("os_version"),
                "talos_hostname": node.get("hostname"),
            }
            for key, value in hostvars.items():
                self.inventory.set_variable(name, key, reported(value))
            if connection:
                self.inventory.set_variable(name, "ansible_connection", connection)
                if connection in ("local", "ansible.builtin.local"):
                    self.inventory.set_variable(name, "ansible_python_interpreter", trust_as_template(PLAYBOOK_PYTHON))

            host_vars = self.inventory.get_host(name).get_vars()
            self._set_composite_vars(self.get_option("compose"), host_vars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), host_vars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), host_vars, name, strict=strict)

    def _host_name(self, node, address, named):
        """The node's hostname (option inventory_hostname), else its address; ``named`` maps names taken to addresses."""
        name = node.get("hostname") if self.get_option("inventory_hostname") == "hostname" else None
        if name and name in named:
            self.display.warning("Talos nodes %s and %s share the hostname %s; the second is named by its address."
                                 % (named[name], address, name))
            name = None
        return name or address
