# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Volume statuses and the volumes a Reset may name (server-behaviour.md §11, Talos v1alpha1_server.go Reset)."""

import pytest
import yaml
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.cosi.resource import state_pb2
from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

RESET = "machine.MachineService/Reset"


def _volumes(client, node):
    request = state_pb2.ListRequest(namespace="runtime", type="VolumeStatuses.block.talos.dev")
    return dict((reply.resource.metadata.id, yaml.safe_load(reply.resource.spec.yaml_spec))
                for reply in client.call("cosi.resource.State/List", request, node=node))


def _reset_error(client, node, *labels):
    request = machine_pb2.ResetRequest(system_partitions_to_wipe=[
        machine_pb2.ResetPartitionSpec(label=label, wipe=True) for label in labels])
    with pytest.raises(GRPCError) as raised:
        client.call(RESET, request, node=node)
    return raised.value.status, raised.value.message


def test_an_installed_node_reports_its_volumes_but_no_boot_partition(emulator, api):
    cluster = emulator(controlplanes=1, workers=1)
    client = api(cluster, role="reader")
    volumes = _volumes(client, cluster.workers[0].address)
    assert sorted(volumes) == ["CRI", "EPHEMERAL", "ETCD", "KUBELET", "LOG", "META", "STATE"]
    assert volumes["STATE"]["location"] == "/dev/sda3" and volumes["STATE"]["type"] == "partition"
    assert "location" not in volumes["ETCD"] and volumes["ETCD"]["mountSpec"]["parentId"] == "EPHEMERAL"


def test_reset_names_only_volumes_the_node_has(emulator, api):
    cluster = emulator(controlplanes=1, workers=2, node_versions={"worker-2": "v1.13.0"})
    client = api(cluster)
    v114, v113 = cluster.workers[0].address, cluster.workers[1].address
    assert _reset_error(client, v114, "STATE", "EFI") == (
        Status.UNKNOWN, 'failed to get volume status with label "EFI": resource '
                        "VolumeStatuses.block.talos.dev(runtime/EFI@undefined) doesn't exist")
    assert _reset_error(client, v114, "ETCD") == (
        Status.UNKNOWN, 'failed to reset: volume "ETCD" resides on volume "EPHEMERAL", and therefore "ETCD" cannot be '
                        'wiped without wiping "EPHEMERAL"')
    assert _reset_error(client, v113, "ETCD", "EPHEMERAL") == (Status.UNKNOWN, 'failed to reset: volume "ETCD" is not located')
    assert cluster.audit(include_failed=False) == []
    request = machine_pb2.ResetRequest(reboot=True, system_partitions_to_wipe=[
        machine_pb2.ResetPartitionSpec(label=label, wipe=True) for label in ("ETCD", "EPHEMERAL")])
    assert client.call(RESET, request, node=v114).messages[0].actor_id
