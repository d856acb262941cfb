# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MachineService/ApplyConfiguration with the semantics of each Talos release.

v1.14 (``v1alpha1_server.go``): every change is applied live; REBOOT is refused
outside maintenance; AUTO means NO_REBOOT. v1.13 and earlier: REBOOT persists
and reboots; AUTO and the immediate modes check whether the change can be
applied without a reboot. The v1.12 maintenance server has its own rules.
"""

import difflib

import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from .. import authz
from ..codes import status_from_name
from ..configgen import DUMPER, LOADER, ConfigError, parse_machine_config
from ..context import current_call
from ..versions import older_than
from .common import go_duration

Mode = machine_pb2.ApplyConfigurationRequest.Mode

DEFAULT_TRY_TIMEOUT = 60.0

_WITHOUT_REBOOT = "Applied configuration without a reboot"
_WITH_REBOOT = "Applied configuration with a reboot"
_STAGED = "Staged configuration to be applied after the next reboot"
_NOT_IMMEDIATE = "this config change can't be applied in immediate mode"

# Before v1.14, only changes below these keys could be applied without a reboot (runtime CanApplyImmediate; the
# Talos API CAs among them: talosctl rotate-ca patches them with NO_REBOOT).
_IMMEDIATE_MACHINE_KEYS = frozenset([
    "acceptedCAs", "ca", "certSANs", "controlPlane", "env", "features", "files", "install", "kernel", "kubelet", "logging",
    "network", "nodeAnnotations", "nodeLabels", "nodeTaints", "pods", "registries", "sysctls", "sysfs", "time",
])


def _mode_flag(mode):
    return Mode.Name(mode).lower().replace("_", "-")


def _canonical(config_bytes):
    """The config as Talos re-encodes it for diffs: documents in a stable key order."""
    if not config_bytes:
        return ""
    documents = [document for document in yaml.load_all(config_bytes, Loader=LOADER) if document is not None]
    return yaml.dump_all(documents, Dumper=DUMPER, sort_keys=True)


def config_diff(old_bytes, new_bytes):
    diff = "".join(difflib.unified_diff(
        _canonical(old_bytes).splitlines(True), _canonical(new_bytes).splitlines(True), fromfile="old", tofile="new", n=3,
    ))
    return diff or "No changes."


def _immediate_blockers(old_config, new_config):
    """Top-level keys whose change needs a reboot on Talos before v1.14."""
    old_config, new_config = old_config or {}, new_config or {}
    old_machine, new_machine = old_config.get("machine") or {}, new_config.get("machine") or {}
    keys = set(old_machine) | set(new_machine)
    return sorted(key for key in keys if key not in _IMMEDIATE_MACHINE_KEYS and old_machine.get(key) != new_machine.get(key))


class ApplyConfigurationRPC:
    async def ApplyConfiguration(self, stream):
        request = await stream.recv_message()
        call = current_call()
        node = self.node
        call.audit.update(mode=Mode.Name(request.mode), dry_run=request.dry_run)
        if node.maintenance and older_than(node.talos_version, "v1.13.0"):
            reply = self._apply_v112_maintenance(request)
        else:
            if node.apply_in_progress and not older_than(node.talos_version, "v1.14.0"):
                raise GRPCError(Status.FAILED_PRECONDITION, "another apply configuration is already in progress")
            node.apply_in_progress = True
            try:
                await node.cluster.faults.hold(node, call.method)
                reply = self._apply(request, call)
            finally:
                node.apply_in_progress = False
        await stream.send_message(machine_pb2.ApplyConfigurationResponse(messages=[reply]))

    def _apply(self, request, call):
        node = self.node
        v114 = not older_than(node.talos_version, "v1.14.0")
        if not node.maintenance and not call.has_role(authz.ADMIN):
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")
        if request.mode != Mode.TRY:
            node.cancel_try_rollback()
        validation_error = None
        try:
            new_config = parse_machine_config(request.data, node.talos_version)
        except ConfigError as error:
            if error.kind != "validation":
                raise GRPCError(status_from_name(error.code), error.message)
            validation_error, new_config = error, None

        mode = request.mode
        if mode == Mode.REBOOT and v114:
            if not node.maintenance:
                raise GRPCError(Status.UNIMPLEMENTED, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
            mode = Mode.NO_REBOOT
        if validation_error is not None:
            raise GRPCError(status_from_name(validation_error.code), validation_error.message)

        diff = config_diff(node.config_bytes, request.data)
        reboot = False
        if mode == Mode.AUTO and v114:
            mode = Mode.NO_REBOOT
        if mode in (Mode.TRY, Mode.NO_REBOOT):
            details = _WITHOUT_REBOOT
        elif mode == Mode.STAGED:
            details = _STAGED
        elif mode in (Mode.REBOOT, Mode.AUTO):
            details, reboot = _WITH_REBOOT, True
        else:
            raise GRPCError(Status.INVALID_ARGUMENT, "incorrect mode '%s' specified for the apply config call" % _mode_flag(mode))
        if not v114 and not node.maintenance and mode in (Mode.AUTO, Mode.TRY, Mode.NO_REBOOT):
            blockers = _immediate_blockers(node.config, new_config)
            if blockers and mode != Mode.AUTO:
                raise GRPCError(Status.INVALID_ARGUMENT, "%s\ndiff:\n%s" % (_NOT_IMMEDIATE, diff))
            if blockers:
                mode, details, reboot = Mode.REBOOT, "%s: %s\ndiff:\n%s" % (_WITH_REBOOT, _NOT_IMMEDIATE, diff), True
            elif mode == Mode.AUTO:
                mode, details, reboot = Mode.NO_REBOOT, _WITHOUT_REBOOT, False

        if request.dry_run:
            summary = "Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s" % (details, diff)
            return machine_pb2.ApplyConfiguration(mode=mode, mode_details=summary)

        if node.maintenance:
            node.install(request.data)
        elif mode == Mode.TRY:
            timeout = request.try_mode_timeout.ToTimedelta().total_seconds() if request.HasField("try_mode_timeout") else DEFAULT_TRY_TIMEOUT
            node.apply_active_config(request.data)
            node.start_try_rollback(timeout)
            details += "\nThe config is applied in 'try' mode and will be automatically reverted back in %s" % go_duration(timeout)
        elif mode == Mode.STAGED:
            node.persistent_config_bytes = request.data
        else:
            node.persistent_config_bytes = request.data
            node.apply_active_config(request.data)
            if reboot:
                node.run_sequence("reboot", node.reboot())
        return machine_pb2.ApplyConfiguration(mode=mode, mode_details=details)

    def _apply_v112_maintenance(self, request):
        """The separate maintenance server of Talos v1.12 and earlier."""
        node = self.node
        if request.mode not in (Mode.TRY, Mode.REBOOT, Mode.AUTO):
            raise GRPCError(
                Status.UNIMPLEMENTED, "apply configuration --mode='%s' is not supported in maintenance mode" % _mode_flag(request.mode),
            )
        try:
            parse_machine_config(request.data, node.talos_version)
        except ConfigError as error:
            if error.kind == "parse":
                raise GRPCError(Status.UNKNOWN, "failed to parse config: %s" % error.message)
            raise GRPCError(Status.INVALID_ARGUMENT, "configuration validation failed: %s" % error.message)
        if request.dry_run:
            return machine_pb2.ApplyConfiguration(
                mode_details="Dry run summary:\nNode is running in maintenance mode and does not have a config yet.",
            )
        node.install(request.data)
        return machine_pb2.ApplyConfiguration()
