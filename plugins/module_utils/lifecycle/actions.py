# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Node lifecycle: reboot, shutdown, reset, rollback and upgrade of one node, from start to end.

Each action takes a client, the node and plain values, passes the etcd quorum
guard (etcd_quorum.QuorumGuard) before the node goes down, sends its request unless in
check mode, waits when given a ``wait_timeout`` (None: no wait; the wait's
progress goes to ``progress``) and returns the task's result. What went wrong
after the request was sent raises errors.ActionFailed, which carries the result
so far; bad input raises TalosConfigError. The waits are in nodes/waits.py, what
a node reports in nodes/node.py, what a reset wipes and its request in
nodes/reset.py, the maintenance-mode probe in nodes/maintenance.py, the
installer, target version and upgrade API choice in images/installer.py.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading

from ansible_collections.talos_linux.talos.plugins.module_utils.client import rpc
from ansible_collections.talos_linux.talos.plugins.module_utils.etcd import quorum as etcd_quorum
from ansible_collections.talos_linux.talos.plugins.module_utils.task import several_nodes
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import waits
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import (
    ActionFailed,
    TalosError,
    TalosUnimplementedError,
    failing_as,
    label,
    short_label,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.images.store import PULL_TIMEOUT
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import has_lifecycle_api
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import (
    CONTROL_PLANE_SERVICES,
    is_configured_type,
    is_control_plane_type,
    read_machine_type,
    read_version_tag,
    runs_at_least,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.common.waiter import Waiter
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.maintenance import (
    MAINTENANCE_PROBE_SECONDS,
    found_in_maintenance,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.reset import (
    STATE_VOLUME,
    reset_request,
    resolve_labels,
    wait_for_reset_reboot,
    wipeable_volumes,
)

try:
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import (
        image_pb2,
        lifecycle_pb2,
        machine_pb2,
    )
except ImportError:  # reported by the task doors through missing_required_lib
    common_pb2 = image_pb2 = lifecycle_pb2 = machine_pb2 = None

# How long the installer may run when the task does not wait for the node (wait_timeout bounds it otherwise).
INSTALL_TIMEOUT = 1200


# Seconds between two looks at a rebooting node, and at a node going away (which answers until it is
# gone: looked at often, so that the wait ends promptly).
REBOOT_POLL_SECONDS = 2.0
GONE_POLL_SECONDS = 1.0


# Installer lines kept in a failure message: enough to show the cause.
FAILURE_CONTEXT_LINES = 5


def _actor_id(items):
    return items[0].actor_id if items and items[0].actor_id else None


def _waiter(wait_timeout, progress, interval=None):
    """The Waiter of an action's wait, started before the request so that it counts from it; None without a wait."""
    if wait_timeout is None:
        return None
    return Waiter(wait_timeout, interval or REBOOT_POLL_SECONDS, progress=progress)


# -- several nodes in one task -------------------------------------------------

def on_nodes(client, nodes, act, max_concurrency, waited=True, progress=None):
    """Run ``act(client, node)`` - one node's action from its guard to its wait, returning its result - on ``nodes``.

    several_nodes.run with the control planes one at a time
    (ControlPlaneTurns: ``waited`` and ``progress`` are its); workers go
    concurrently, at most ``max_concurrency`` at once. Returns the result
    every multi-node module shares; when nodes fail, the others still finish,
    then ActionFailed names the failed nodes and carries every result.
    """
    return several_nodes.run(client, nodes, act, max_concurrency, in_turn=ControlPlaneTurns(waited, progress).take)


class ControlPlaneTurns:
    """Lets the control planes of one task go down one at a time; workers go at once.

    Each control plane's quorum guard must judge etcd with the one before
    back, so a control plane waits for its turn until the one before it is
    done. ``waited`` says that an action returns only once its node is back
    (it waits, or nothing goes down in check mode); without that, a second
    control plane is refused after one that changed and did not say
    ``rebooted: false``: the guard cannot see the first one go down.
    ``progress`` hears of a control plane that waits for its turn.
    """

    def __init__(self, waited, progress=None):
        self.waited = waited
        self.progress = progress
        self._lock = threading.Lock()
        self._holder = None
        self._unwaited = None

    def take(self, client, node, act):
        """``act(client, node)``, in turn when ``node`` may be a control plane (a worker goes at once)."""
        try:
            machine_type = read_machine_type(client, node)
        except TalosError:
            machine_type = None  # taken in turn: the action says why the node cannot be read
        if is_configured_type(machine_type) and not is_control_plane_type(machine_type):
            return act(client, node)
        if not self._lock.acquire(blocking=False):
            if self.progress is not None:
                holder = self._holder
                self.progress("%s: waiting until %s is done: control planes go one at a time" % (
                    short_label(node), "control plane %s" % short_label(holder) if holder else "the control plane before it"))
            self._lock.acquire()
        try:
            if self._unwaited is not None:
                raise TalosError("Refusing to take control-plane %s down in the same task as control plane %s without "
                                 "wait: the etcd quorum guard cannot see %s go down; set wait: true, or take one control "
                                 "plane down per task." % (label(node), short_label(self._unwaited),
                                                           short_label(self._unwaited)), node=node)
            self._holder = node
            result = act(client, node)
            if result.get("changed") and result.get("rebooted", True) and not self.waited:
                self._unwaited = node
            return result
        finally:
            self._lock.release()


# -- reboot and shutdown -------------------------------------------------------

def reboot(client, node, mode="default", services=(), force_quorum_loss=False, quorum_wait_timeout=0, wait_timeout=None,
           check_mode=False, progress=None):
    """Reboot ``node`` (RebootRequest ``mode``) and wait until it is back with a new boot and runs ``services``."""
    if mode == "force":
        tag = read_version_tag(client, node)
        if runs_at_least(tag, (1, 12)) is False:
            raise TalosError("mode: force needs Talos v1.12 or newer, but %s runs %s; use mode: default or powercycle."
                             % (label(node), tag))
    result = dict(changed=True, mode=mode, boot_id_before=None, boot_id_after=None, elapsed=None, actor_id=None)
    result.update(etcd_quorum.guard(client, node, "reboot", force_quorum_loss, quorum_wait_timeout=quorum_wait_timeout,
                                    progress=progress))
    result["boot_id_before"] = waits.read_boot_marker(client, node)
    # Which of the services this node may run at all is known before it goes down.
    machine_type = read_machine_type(client, node) if any(name in CONTROL_PLANE_SERVICES for name in services) else None
    if check_mode:
        return result

    waiter = _waiter(wait_timeout, progress)
    request = machine_pb2.RebootRequest(mode=machine_pb2.RebootRequest.Mode.Value(mode.upper()))
    result["actor_id"] = _actor_id(client.call(rpc.REBOOT, request, node=node))
    if waiter is None:
        return result
    with failing_as("The reboot of %s was requested but the node is not back as expected" % label(node), result):
        result["boot_id_after"] = waits.wait_for_reboot(client, node, result["boot_id_before"], waiter)
        if services:
            result["services"] = waits.wait_for_services(client, node, services, waiter, machine_type=machine_type)
    result["elapsed"] = waiter.elapsed
    return result


def shutdown(client, node, graceful=True, force_quorum_loss=False, quorum_wait_timeout=0, wait_timeout=None,
             check_mode=False, progress=None):
    """Power ``node`` off (``graceful``: after cordon and drain) and wait until it stops answering."""
    result = dict(changed=True, actor_id=None, elapsed=None)
    result.update(etcd_quorum.guard(client, node, "shut down", force_quorum_loss, quorum_wait_timeout=quorum_wait_timeout,
                                    progress=progress))
    if check_mode:
        read_version_tag(client, node)  # the node must answer now to be shut down
        return result

    waiter = _waiter(wait_timeout, progress, interval=GONE_POLL_SECONDS)
    result["actor_id"] = _actor_id(client.call(rpc.SHUTDOWN, machine_pb2.ShutdownRequest(force=not graceful), node=node))
    if waiter is not None:
        with failing_as("The shutdown of %s was requested but the node still answers" % label(node), result):
            waits.wait_until_unreachable(client, node, waiter)
        result["elapsed"] = waiter.elapsed
    return result


# -- reset ---------------------------------------------------------------------


def reset(client, node, plan, wipe_mode="all", graceful=True, force_quorum_loss=False, quorum_wait_timeout=0,
          probe_seconds=MAINTENANCE_PROBE_SECONDS, wait_timeout=None, check_mode=False, progress=None):
    """Wipe ``node`` as ``plan`` (reset_plan) says, then wait until it is off, in maintenance mode or back.

    A node already in maintenance mode has no configuration to reset: done
    when ``plan`` wipes STATE, refused otherwise (Talos refuses Reset there).
    A graceful reset makes a control plane leave etcd, so its guard is the
    removal's.
    """
    expected = plan["ends"]
    result = dict(changed=False, wiped=dict((key, plan[key]) for key in ("system_disk", "labels", "user_disks")),
                  expected_state=expected, state=None, graceful=graceful, controlplane=None, quorum=None,
                  etcd_gate_open=None, actor_id=None)
    if found_in_maintenance(client, node, probe_seconds):
        if not plan["system_disk"] and STATE_VOLUME not in [volume.upper() for volume in plan["labels"]]:
            raise ActionFailed("%s is in maintenance mode, where Talos refuses Reset; it has no configuration, and only "
                               "wiping STATE would count as done - install it with talos_apply_config first to wipe "
                               "anything else." % label(node, start=True), result)
        result["state"] = "maintenance"
        return result

    volumes = wipeable_volumes(client, node) if plan["partitions"] else None
    if volumes is not None:
        plan = resolve_labels(plan, volumes, node)
        result["wiped"]["labels"] = plan["labels"]
    result.update(etcd_quorum.guard(client, node, "gracefully reset" if graceful else "reset", force_quorum_loss, removal=graceful,
                                    quorum_wait_timeout=quorum_wait_timeout, progress=progress))
    result["changed"] = True
    if check_mode:
        return result

    rebooting = expected != "off"
    marker = waits.read_boot_marker(client, node) if rebooting and wait_timeout is not None else None
    waiter = _waiter(wait_timeout, progress, interval=REBOOT_POLL_SECONDS if rebooting else GONE_POLL_SECONDS)
    result["actor_id"] = _actor_id(client.call(rpc.RESET, reset_request(plan, wipe_mode, graceful), node=node))
    if waiter is None:
        return result
    with failing_as("The reset of %s was requested but did not complete as expected" % label(node), result):
        if rebooting:
            result["state"] = wait_for_reset_reboot(client, node, marker, waiter)[0]
        else:
            waits.wait_until_unreachable(client, node, waiter)
            result["state"] = "off"
    if result["state"] != expected:
        raise ActionFailed("%s came back %s after the reset, not %s as expected: check that the wipe happened."
                           % (label(node, start=True), result["state"], expected), result)
    return result


# -- maintenance mode ----------------------------------------------------------


# -- rollback ------------------------------------------------------------------

def rollback(client, node, force_quorum_loss=False, quorum_wait_timeout=0, wait_timeout=None, check_mode=False,
             diff=False, progress=None):
    """Make ``node`` boot its previous installation, then wait until it runs a version other than before."""
    previous = read_version_tag(client, node)
    result = dict(changed=True, from_version=previous, current_version=None, boot_id_before=None, boot_id_after=None)
    result.update(etcd_quorum.guard(client, node, "roll back", force_quorum_loss, quorum_wait_timeout=quorum_wait_timeout,
                                    progress=progress))
    result["boot_id_before"] = waits.read_boot_id(client, node)
    if diff:
        result["diff"] = dict(before={"version": previous}, after={"version": "(the previous installation)"})
    if check_mode:
        return result

    waiter = _waiter(wait_timeout, progress)
    try:
        client.call(rpc.ROLLBACK, node=node)
    except TalosError as err:
        raise ActionFailed("%s cannot roll back from %s: %s It has no previous installation to return to (it was not "
                           "upgraded since its installation), or its boot loader refused; the node was not changed."
                           % (label(node, start=True), previous, err.message), dict(result, changed=False), err)
    if waiter is None:
        return result
    with failing_as("The rollback of %s from %s was requested but the node is not back as expected"
                    % (label(node), previous), result):
        result["boot_id_after"] = waits.wait_for_reboot(client, node, result["boot_id_before"], waiter)
        result["current_version"] = read_version_tag(client, node)
    if diff:
        result["diff"]["after"] = {"version": result["current_version"]}
    if result["current_version"] == previous:
        raise ActionFailed("%s rebooted but still runs %s: the rollback did not change its version (its previous "
                           "installation holds the same version, or the boot loader did not switch)."
                           % (label(node, start=True), previous), result)
    return result


# -- upgrade -------------------------------------------------------------------

def upgrade(client, node, image, target, api, fall_back=True, reboot_mode="default", preserve=False, stage=False,
            force_quorum_loss=False, quorum_wait_timeout=0, pull_timeout=PULL_TIMEOUT, wait_timeout=None,
            check_mode=False, diff=False, progress=None):
    """Upgrade ``node`` to Talos ``target`` with installer ``image``, unless it runs ``target`` already.

    ``api`` is the first upgrade API to try (installer.choose_api); with
    ``fall_back`` a node without the lifecycle API is upgraded with the legacy
    one. ``preserve`` and ``stage`` are the legacy API's; ``force_quorum_loss``
    also skips the legacy API's own etcd check on the node. ``pull_timeout``
    bounds the installer's pull.
    """
    previous = read_version_tag(client, node)
    # ``upgraded``: the node moves (in check mode, would move) to ``target``; ``changed`` may also come from its
    # installer reference alone (config/installer_reference.update_installer_reference).
    result = dict(changed=False, upgraded=False, from_version=previous, current_version=previous, to_version=target,
                  image=image, rebooted=False, api_used=None, controlplane=None, etcd_gate_open=None, quorum=None,
                  progress=[])
    if previous == target:
        return result
    result.update(etcd_quorum.guard(client, node, "upgrade", force_quorum_loss, quorum_wait_timeout=quorum_wait_timeout,
                                    progress=progress))
    result.update(changed=True, upgraded=True)
    if diff:
        result["diff"] = dict(before={"version": previous}, after={"version": target})
    if check_mode:
        # The real run learns this from the node's answer; predict it from the version.
        result["api_used"] = "legacy" if fall_back and has_lifecycle_api(previous) is False else api
        return result
    steps = NodeUpgrade(client, node, image, target, result, fall_back=fall_back, reboot_mode=reboot_mode,
                        preserve=preserve, stage=stage, force=force_quorum_loss, pull_timeout=pull_timeout,
                        progress=progress)
    return steps.run(api, wait_timeout)


class NodeUpgrade:
    """The steps of one node's upgrade that change it; ``result`` (the task's result) records what happened.

    A failed step raises ActionFailed whose result names the ``step`` (pull,
    install, reboot, upgrade for the legacy API, wait) and whose message says
    in which state the node was left.
    """

    def __init__(self, client, node, image, target, result, fall_back=True, reboot_mode="default", preserve=False,
                 stage=False, force=False, pull_timeout=PULL_TIMEOUT, progress=None):
        self.client = client
        self.node = node
        self.image = image
        self.target = target
        self.result = result
        self.previous = result["from_version"]
        self.fall_back = fall_back
        self.powercycle = reboot_mode == "powercycle"
        self.preserve = preserve
        self.stage = stage
        self.force = force
        self.pull_timeout = pull_timeout
        self.label = label(node)
        self.progress = progress

    def run(self, api, wait_timeout=None):
        """Upgrade with ``api`` (``lifecycle`` may turn into ``legacy``), then wait unless ``wait_timeout`` is None.

        The installer has ``wait_timeout`` (INSTALL_TIMEOUT without a wait) to
        finish: a real one pulls and writes for minutes, far beyond the
        connection's timeout.
        """
        boot_id = waits.read_boot_id(self.client, self.node) if wait_timeout is not None else None
        if api == "lifecycle" and not self._pull():
            api = "legacy"
        self.result["api_used"] = api
        if api == "lifecycle":
            self._install(wait_timeout if wait_timeout is not None else INSTALL_TIMEOUT)
            self._reboot()
        else:
            self._legacy_upgrade()
        if wait_timeout is not None:
            self.result["current_version"] = self._wait(boot_id, wait_timeout)
        return self.result

    def _note(self, line):
        self.result["progress"].append(line)
        if self.progress is not None:
            self.progress("%s: %s" % (short_label(self.node), line))

    def _fail(self, step, message, cause=None):
        raise ActionFailed(message, dict(self.result, step=step), cause)

    def _containerd(self):
        return common_pb2.ContainerdInstance(driver=common_pb2.CRI, namespace=common_pb2.NS_SYSTEM)

    def _pull(self):
        """Pull the installer image; False when the node has no ImageService and the legacy API may be used."""
        request = image_pb2.ImageServicePullRequest(containerd=self._containerd(), image_ref=self.image)
        try:
            frames = self.client.stream(rpc.IMAGE_PULL, request, node=self.node, deadline=self.pull_timeout)
        except TalosUnimplementedError as err:
            if self.fall_back:
                self._note("node has no lifecycle API; using the legacy upgrade API")
                return False
            self._fail("pull", "Pulling installer image %s on %s failed: %s The node was not changed and still runs %s; "
                       "use api: legacy for Talos older than v1.13." % (self.image, self.label, err.message, self.previous), err)
        except TalosError as err:
            self._fail("pull", "Pulling installer image %s on %s failed: %s The node was not changed and still runs %s."
                       % (self.image, self.label, err.message, self.previous), err)
        names = [frame.name for frame in frames if frame.WhichOneof("response") == "name"]
        self._note("pulled %s" % (names[-1] if names else self.image))
        return True

    def _install(self, deadline):
        request = lifecycle_pb2.LifecycleServiceUpgradeRequest(
            containerd=self._containerd(), source=lifecycle_pb2.InstallArtifactsSource(image_name=self.image))
        exit_codes = []

        def record(frame):
            kind = frame.progress.WhichOneof("response")
            if kind == "message":
                self._note(frame.progress.message)
            elif kind == "exit_code":
                exit_codes.append(frame.progress.exit_code)
                self._note("installer exited with code %d" % frame.progress.exit_code)

        try:
            self._note("installing %s (up to %d seconds)" % (self.image, deadline))
            self.client.stream(rpc.LIFECYCLE_UPGRADE, request, node=self.node, on_message=record, deadline=deadline)
        except TalosError as err:
            self._fail("install", "Installing %s on %s failed: %s The node still runs %s and was not rebooted."
                       % (self.image, self.label, err.message, self.previous), err)
        if not exit_codes or exit_codes[-1] != 0:
            outcome = "exited with code %d" % exit_codes[-1] if exit_codes else "ended without an exit code"
            lines = [line for line in self.result["progress"] if not line.startswith("installer exited")]
            self._fail("install", "The installer for %s on %s %s (last messages: %s); the node still runs %s and was not "
                       "rebooted." % (self.image, self.label, outcome,
                                      " | ".join(lines[-FAILURE_CONTEXT_LINES:]) or "none", self.previous))

    def _reboot(self):
        mode = machine_pb2.RebootRequest.POWERCYCLE if self.powercycle else machine_pb2.RebootRequest.DEFAULT
        try:
            self.client.call(rpc.REBOOT, machine_pb2.RebootRequest(mode=mode), node=self.node)
        except TalosError as err:
            self._fail("reboot", "Rebooting %s into %s failed: %s Talos %s is installed but the node still runs %s until "
                       "its next reboot." % (self.label, self.target, err.message, self.target, self.previous), err)
        self.result["rebooted"] = True
        self._note("reboot requested")

    def _legacy_upgrade(self):
        reboot_mode = machine_pb2.UpgradeRequest.POWERCYCLE if self.powercycle else machine_pb2.UpgradeRequest.DEFAULT
        request = machine_pb2.UpgradeRequest(image=self.image, preserve=self.preserve, stage=self.stage,
                                             force=self.force, reboot_mode=reboot_mode)
        try:
            items = self.client.call(rpc.LEGACY_UPGRADE, request, node=self.node)
        except TalosError as err:
            self._fail("upgrade", "%s refused the upgrade to %s: %s The node was not changed and still runs %s."
                       % (label(self.node, start=True), self.image, err.message, self.previous), err)
        self.result["rebooted"] = True
        self._note(items[0].ack if items and items[0].ack else "upgrade requested")

    def _wait(self, boot_id, timeout):
        try:
            waits.wait_for_reboot(self.client, self.node, boot_id, _waiter(timeout, self.progress))
            current = read_version_tag(self.client, self.node)
        except TalosError as err:
            self._fail("wait", "%s did not come back from the upgrade to %s: %s It was rebooting from %s into %s; check "
                       "its console." % (label(self.node, start=True), self.target, err.message, self.previous,
                                         self.target), err)
        if current == self.target:
            self._note("node is running %s" % current)
            return current
        if current == self.previous:
            self._fail("wait", "%s rebooted but came back on %s instead of %s: Talos rolled the upgrade back because the "
                       "new version failed to boot; read the node's console or dmesg before trying again."
                       % (label(self.node, start=True), current, self.target))
        self._fail("wait", "%s rebooted into %s, not the target %s: the installer image %s does not hold that version."
                   % (label(self.node, start=True), current, self.target, self.image))
