# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  talosconfig:
    description:
      - Path of the talosconfig file that holds the endpoints, nodes and client credentials.
      - When not set, a task takes the variable C(talosconfig) of its host (from the inventory, ad-hoc commands
        too). Otherwise the E(TALOSCONFIG) environment variable is used, then C($TALOS_HOME/config) when
        E(TALOS_HOME) is an absolute path, else C(~/.talos/config), then C(/var/run/secrets/talos.dev/config) as
        C(talosctl) does.
      - A file is optional when O(endpoints) and O(ca), O(crt), O(key) (or O(insecure)) are given.
    type: path
  context:
    description:
      - Name of the talosconfig context to use.
      - Defaults to the file's current C(context).
    type: str
  endpoints:
    description:
      - Talos API endpoints to connect to, as C(host), C(host:port) or C(https://host[:port]).
      - Port 50000 is added when an endpoint has none (443 for C(https://) endpoints without a port).
      - Endpoints must be control-plane nodes (workers refuse to forward calls to other nodes). When an endpoint is
        unreachable the next one is tried.
      - Overrides the endpoints of the talosconfig context.
    type: list
    elements: str
  node:
    description:
      - The node the task acts on (IP address or hostname), reached through an endpoint.
      - Overrides the nodes of the talosconfig context. Mutually exclusive with O(nodes).
      - A task on an inventory host that sets neither O(node) nor O(nodes) acts on that host's node - its variable
        C(talos_node) (which the inventory plugin C(talos_linux.talos.talos) sets), else its C(ansible_host) - through
        either door, ad hoc too. M(talos_linux.talos.talos_health) is the exception, since its O(node) is the control
        plane it asks.
      - When neither O(node), O(nodes), such a host variable nor the context's nodes are set, the endpoint itself
        answers.
    type: str
  nodes:
    description:
      - The nodes the task acts on; each is called separately through an endpoint, concurrently.
      - Overrides the nodes of the talosconfig context. Mutually exclusive with O(node).
      - A module that takes several nodes returns each node's result in its return C(nodes), keyed by node, whenever
        the nodes come as a list (this option, or the context's nodes), even of one node; with O(node) the node's
        result is at the top of the task's.
    type: list
    elements: str
  ca:
    description:
      - PEM text (or base64 of it) of the Talos OS CA that signed the nodes' API certificates.
      - Overrides the C(ca) of the talosconfig context.
    type: str
  crt:
    description:
      - PEM text (or base64 of it) of the client certificate. Its Subject Organization values are its Talos roles
        (for example C(os:admin), C(os:reader)).
      - Overrides the C(crt) of the talosconfig context.
    type: str
  key:
    description:
      - PEM text (or base64 of it) of the client certificate's private key; Talos's C(ED25519 PRIVATE KEY) label is accepted.
      - Overrides the C(key) of the talosconfig context.
    type: str
  insecure:
    description:
      - Connect without verifying the server certificate and without a client certificate.
      - Only for nodes in maintenance mode (before their first machine configuration is applied); never use it
        against a configured node.
    type: bool
    default: false
  timeout:
    description:
      - Seconds one API operation may take, including reconnects and retries of retryable answers.
    type: int
    default: 60
notes:
  - The connection options can be set for every module at once with
    C(module_defaults) and the action group C(group/talos_linux.talos.talos).
  - Environment variable E(TALOSCONFIG) sets O(talosconfig).
  - O(endpoints) are the control-plane nodes the client connects to; O(node) and O(nodes) name the machines to act
    on. The server certificate of every endpoint must list the endpoint's address or name.
  - A task fails at once when nothing answers - every endpoint, or the node behind one, refuses the connection, has
    no route or times out connecting; its result then holds C(api_unreachable=true) next to C(msg), C(code) and C(node).
  - Requires the Python libraries C(grpclib), C(protobuf), C(googleapis-common-protos), C(PyYAML) and
    C(cryptography) on the host that runs the module or plugin (the controller, for the inventory plugin).
'''
