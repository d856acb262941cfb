# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A Talos node: its Talos version, its machine type and status, and its services.

A node is identified as the API routes to it: the address or name in the
``node`` metadata of a call, or None when the endpoint answers for itself.
Every rule about what a node reports lives here once (how messages name it is
``common.errors.label``):

- Talos version tags (``v1.14.0``), their order, the version Members report and the
  releases the collection supports;
- the machine type (``controlplane``, ``init``, ``worker``) and the machine
  status (stage and readiness, COSI ``MachineStatus``);
- services (ServiceList): which states count as started, up or healthy.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosError

# -- Talos version -------------------------------------------------------------

# v1.14.0, 1.14.0, v1.14.0-rc.1, v1.13.0-alpha.2.3+g1234 (git describe builds)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")

# Members say "Talos (v1.14.0)"; the version is the part in parentheses.
_OS_VERSION = re.compile(r"\((v?\d[^)]*)\)")

# The Talos minor releases the collection supports, oldest first: their every patch and pre-release, newer patches
# included (a patch release keeps its minor release's API and machine config). A newer minor release may change
# both, so the collection takes it as a target only once a release of the collection supports it.
SUPPORTED_RELEASES = ((1, 9), (1, 10), (1, 11), (1, 12), (1, 13), (1, 14))
SUPPORTED_TEXT = "v%d.%d to v%d.%d" % (SUPPORTED_RELEASES[0] + SUPPORTED_RELEASES[-1])


def normalize_version(version):
    """``"1.14.0"`` -> ``"v1.14.0"``: the spelling of ``Version.tag``. Returns None for None."""
    if version is None:
        return None
    version = str(version).strip()
    return version if version.startswith("v") else "v" + version


def parse_version(tag):
    """A sortable key for a Talos version tag, or None when ``tag`` is not ``vMAJOR.MINOR.PATCH[-pre]``.

    Pre-releases sort before their release, as in semantic versioning:
    ``v1.13.0-alpha.2 < v1.13.0-rc.1 < v1.13.0``. ``key[:2]`` is the minor
    release, ``(1, 13)``, the form feature checks compare.
    """
    match = _VERSION.match(str(tag or "").strip())
    if not match:
        return None
    major, minor, patch, pre = match.groups()
    if pre is None:
        pre_key = (1,)
    else:
        pre_key = (0,) + tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in pre.split("."))
    return (int(major), int(minor), int(patch), pre_key)


def runs_at_least(tag, release):
    """Whether Talos ``tag`` is minor release ``release`` (``(1, 13)``) or later, its pre-releases included;
    None when ``tag`` is no version."""
    key = parse_version(tag)
    if key is None:
        return None
    return key[:2] >= tuple(release)


def os_version(operating_system):
    """The version in what COSI Members report: ``"Talos (v1.14.0)"`` -> ``"v1.14.0"``.

    Other text is kept as it is; empty text is None.
    """
    if not operating_system:
        return None
    found = _OS_VERSION.search(operating_system)
    return found.group(1) if found else operating_system


def read_version_tag(client, node, deadline=None):
    """The Talos version ``node`` runs, as ``Version`` reports it (``v1.14.0``)."""
    return client.call(rpc.VERSION, node=node, deadline=deadline)[0].version.tag


# -- machine type and status ---------------------------------------------------

# COSI (namespace, type, id) of the node's machine type and machine status.
MACHINE_TYPE = ("config", "MachineTypes.config.talos.dev", "machine-type")
MACHINE_STATUS = ("runtime", "MachineStatuses.runtime.talos.dev", "machine")

# Machine types that run etcd and the control plane (init is the pre-v1.x first control plane).
CONTROL_PLANE_TYPES = ("controlplane", "init")


def machine_type_of(spec):
    """The machine type in a ``MachineType`` spec (a bare string), or None when the node cannot say."""
    return spec if isinstance(spec, str) else None


def read_machine_type(client, node):
    """The node's machine type (controlplane, init, worker), or None when it has none yet or cannot say."""
    namespace, resource_type, resource_id = MACHINE_TYPE
    try:
        resource = client.get_resource(namespace, resource_type, resource_id, node=node)
    except TalosError as err:
        if err.code in ("NotFound", "Unimplemented"):
            return None
        raise
    return machine_type_of(resource["spec"])


# COSI (namespace, type, id) of the hostname the node runs with.
HOSTNAME_STATUS = ("network", "HostnameStatuses.net.talos.dev", "hostname")


def read_hostname(client, node):
    """The hostname ``node`` runs with, or None when it has none yet."""
    namespace, resource_type, resource_id = HOSTNAME_STATUS
    try:
        spec = client.get_resource(namespace, resource_type, resource_id, node=node)["spec"]
    except TalosError as err:
        if err.code == "NotFound":
            return None
        raise
    if not isinstance(spec, dict):
        return None
    return spec.get("hostname") or None


def is_configured_type(machine_type):
    """Whether ``machine_type`` is a real one: a node without configuration reports ``unknown``."""
    return machine_type not in (None, "", "unknown")


def is_control_plane_type(machine_type):
    return machine_type in CONTROL_PLANE_TYPES


class MachineStatus:
    """A node's ``MachineStatus``: its boot stage and whether it is ready.

    The stages are Talos's (``booting``, ``running``, ``rebooting``,
    ``maintenance``, ``upgrading``, ``shutting down``, ...); ready means every
    condition Talos checks is met, else ``unmet_conditions`` says which is not.
    """

    def __init__(self, spec):
        spec = spec if isinstance(spec, dict) else {}
        status = spec.get("status") or {}
        self.stage = spec.get("stage")
        self.ready = bool(status.get("ready"))
        self.unmet_conditions = [{"name": condition.get("name"), "reason": condition.get("reason")}
                                 for condition in status.get("unmetConditions") or []]

    @property
    def running_and_ready(self):
        """The node finished booting and serves: what every wait after a reboot waits for."""
        return self.stage == "running" and self.ready

    @property
    def in_maintenance(self):
        return self.stage == "maintenance"

    @property
    def state(self):
        """A short word for progress lines: the stage, with ``not ready`` while a running node is not."""
        stage = self.stage or "unknown"
        return "%s, not ready" % stage if stage == "running" and not self.ready else stage

    def __str__(self):
        unmet = ", ".join("%s: %s" % (condition["name"], condition["reason"]) for condition in self.unmet_conditions)
        return "stage %s, ready %s%s" % (self.stage or "unknown", str(self.ready).lower(), " (%s)" % unmet if unmet else "")


def read_machine_status(client, node, deadline=None):
    """The MachineStatus of ``node``."""
    namespace, resource_type, resource_id = MACHINE_STATUS
    return MachineStatus(client.get_resource(namespace, resource_type, resource_id, node=node, deadline=deadline)["spec"])


# -- services --------------------------------------------------------------------

RUNNING = "Running"
STOPPED = "Finished"
STOPPING = "Stopping"
# States of a service that runs or is on its way to running: starting it again is a no-op on the server.
STARTED_STATES = ("Preparing", "Waiting", "Starting", RUNNING)


def services_by_id(items):
    """The ``ServiceInfo`` messages of ServiceList reply items, by service ID."""
    return dict((info.id, info) for item in items for info in item.services)


def list_services(client, node, deadline=None):
    """The ``ServiceInfo`` messages of ``node`` by service ID."""
    return services_by_id(client.call(rpc.SERVICE_LIST, node=node, deadline=deadline))


def is_started(state):
    """Whether a service in ``state`` runs or is on its way to running."""
    return state in STARTED_STATES


def is_up(info):
    """Running and, when the service has a health check, healthy: what a wait for a service waits for."""
    return info.state == RUNNING and (info.health.unknown or info.health.healthy)


def is_healthy(info):
    """Running and reported healthy, as talosctl's cluster health check wants etcd and kubelet.

    Stricter than ``is_up``: a service whose health check has not reported yet
    (health unknown) is not healthy.
    """
    return info.state == RUNNING and info.health.healthy


def health_word(info):
    """``healthy``, ``unhealthy`` or ``unknown`` (no health check result)."""
    if info.health.unknown:
        return "unknown"
    return "healthy" if info.health.healthy else "unhealthy"


def last_event_message(info):
    """The message of the service's newest event, or an empty string."""
    return info.events.events[-1].msg if info.events.events else ""


def last_event_time(info):
    """Seconds since the epoch of the service's newest event (0 when it has none)."""
    return max([event.ts.seconds + event.ts.nanos / 1e9 for event in info.events.events] or [0])


def service_state(info):
    """The service as a progress line shows it: ``Running, healthy``."""
    return "%s, %s" % (info.state, health_word(info))


# The services Talos v1.9 to v1.14 defines itself; a system extension's are ext-<name>. Control planes alone run
# etcd and trustd (internal/app/machined/pkg/system/services), so a worker never lists them.
TALOS_SERVICES = ("apid", "auditd", "containerd", "cri", "dashboard", "etcd", "kubelet", "machined", "syslogd", "trustd",
                  "udevd")
CONTROL_PLANE_SERVICES = ("etcd", "trustd")


def unknown_services_problem(option, names):
    """The sentence refusing the names of ``option`` that no Talos node ever runs (a typo), or None."""
    unknown = [name for name in names if name not in TALOS_SERVICES and not name.startswith("ext-")]
    if not unknown:
        return None
    return ("%s names %s, which no Talos node runs: Talos's services are %s, and a system extension's are ext-<name>."
            % (option, ", ".join(unknown), ", ".join(TALOS_SERVICES)))


def runs_service(machine_type, name):
    """Whether a node of ``machine_type`` may run service ``name``: a worker never runs etcd or trustd."""
    return name not in CONTROL_PLANE_SERVICES or not is_configured_type(machine_type) or is_control_plane_type(machine_type)


# The operations Talos lets the API run, per service (system/system.go: only
# services implementing the API hooks; kubelet cannot be stopped).
_CONTROLLABLE = {"kubelet": ("started", "restarted")}
_EXTENSION_CONTROLS = ("started", "stopped", "restarted")
_VERBS = {"started": "start", "stopped": "stop", "restarted": "restart"}


def control_refusal(name, goal):
    """Why Talos will not let the API bring service ``name`` to ``goal`` (started, stopped, restarted), or None."""
    allowed = _EXTENSION_CONTROLS if name.startswith("ext-") else _CONTROLLABLE.get(name, ())
    if goal in allowed:
        return None
    if allowed:
        return ("Talos does not let the API %s service %s: it can only be %s through the API, because Talos keeps "
                "managing it itself." % (_VERBS[goal], name, " or ".join(allowed)))
    return ("Service %s cannot be controlled through the Talos API: Talos only lets the API start and restart kubelet "
            "and start, stop and restart system extension services (ext-<name>); every other service is managed "
            "by Talos itself." % name)


def needs_control(state, goal):
    """Whether a service in ``state`` needs a request to be ``goal``: a restart always does."""
    if goal == "started":
        return not is_started(state)
    if goal == "stopped":
        return is_started(state)
    return True


def has_settled(info, goal, restarted_after=0):
    """Whether the service has settled in ``goal`` after a request.

    Stopped: no longer started nor stopping. Started: up (``is_up``).
    Restarted: up, with an event newer than ``restarted_after`` (the newest
    before the request), so that its pre-restart Running state does not count.
    """
    if goal == "stopped":
        return not is_started(info.state) and info.state != STOPPING
    if not is_up(info):
        return False
    return goal != "restarted" or last_event_time(info) > restarted_after
