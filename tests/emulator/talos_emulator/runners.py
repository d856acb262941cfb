# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How machined runs each system service (Talos ``internal/app/machined/pkg/system/services``): in its own process
(goroutine), as a process, or as a container of the ``system`` containerd namespace; and what that makes the
service's events, PIDs and containers read."""

import zlib

# Services with a health check report healthy/unhealthy; the others (dashboard, extensions) report unknown health.
HEALTH_CHECKED = frozenset(["apid", "auditd", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"])
# How machined runs each service (Talos's system/services): in its own process, as a process, or as a container of
# the system containerd namespace. The runner says what the service's "Running" event reads.
GOROUTINES = frozenset(["auditd", "machined", "syslogd"])
CONTAINERS = ("apid", "etcd", "kubelet", "trustd")
_PROCESS_ARGS = {
    "containerd": ["/bin/containerd", "--address", "/system/run/containerd/containerd.sock", "--state",
                   "/system/run/containerd", "--root", "/system/var/lib/containerd"],
    "cri": ["/bin/containerd", "--address", "/run/containerd/containerd.sock", "--config", "/etc/cri/containerd.toml"],
    "dashboard": ["/sbin/dashboard"],
    "udevd": ["/sbin/systemd-udevd", "--resolve-names=never"],
}


def service_pid(service_id):
    """The PID of a service's process: stable for a service id, as the emulator has no real processes."""
    return 1000 + zlib.crc32(service_id.encode()) % 9000


def started_message(service_id):
    """The event machined's runner records when the service starts (runner/goroutine, process, containerd)."""
    if service_id in GOROUTINES:
        return "Service started as goroutine"
    if service_id in CONTAINERS:
        return "Started task %s (PID %d) for container %s" % (service_id, service_pid(service_id), service_id)
    args = _PROCESS_ARGS.get(service_id, ["/usr/local/lib/containers/%s/%s" % (service_id[4:], service_id[4:])])
    return "Process Process([%s]) started with PID %d" % (" ".join('"%s"' % arg for arg in args), service_pid(service_id))
