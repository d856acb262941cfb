# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's etcd as real etcd members (``EmulatedCluster.start(..., etcd="real")``).

Every control plane whose etcd service runs has one member process
(``tests/etcd_member``: go.etcd.io/etcd/server/v3 embedded) listening on the
node's own address, 2379 and 2380 where they are free, with a certificate of
the cluster's etcd CA. Members start as Talos's etcd service starts them: the
bootstrap node a new cluster (or the uploaded snapshot restored into a new
one-member cluster), every other control plane by joining as a learner through
the members' client URLs, a node whose data directory holds a member by
restarting it. A machine that goes down kills its member, so quorum and
leadership are etcd's.

``RealEtcdCluster`` keeps the model's record of which node is which member
(``membership.EtcdCluster``: the Talos rules read it) and answers every etcd
RPC from the members themselves, as machined asks etcd through clientv3.
"""

import asyncio
import base64
import os
import sys

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

from .membership import EtcdCluster
from .pki import to_standard_pem

# tests/, where the etcd member harness lives beside the emulator (as tests/kube_apiserver does).
_TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
from etcd_member import EtcdMember as MemberProcess, EtcdMemberError, binary, choose_ports  # noqa: E402

# How long a member may take to start serving: a joining one waits for etcd to take it (one learner at a time, and a
# member added to a cluster that has not been healthy for 5 s is refused).
READY_SECONDS = 120
# How long Talos retries leaving a cluster that etcd finds unhealthy.
LEAVE_RETRY_SECONDS = 300
# Snapshots and defragmentations of a test database take well under this.
MAINTENANCE_SECONDS = 60

build_member = binary


def _talos_error(error, code=Status.UNKNOWN, prefix=""):
    return GRPCError(code, prefix + str(error))


class RealEtcdCluster(EtcdCluster):
    """Real members under ``state_dir`` (one directory per node: data, certificate, log), started with ``spawn``
    on the cluster's loop, trusting ``etcd_ca`` (the secrets bundle's)."""

    def __init__(self, state_dir, spawn, etcd_ca, quota_backend_bytes=0):
        super().__init__()
        self.state_dir = state_dir
        # The database size at which the members raise NOSPACE (0: etcd's default), small to test the alarm.
        self.quota_backend_bytes = quota_backend_bytes
        self._spawn = spawn
        self._ca = (etcd_ca.crt_pem, to_standard_pem(etcd_ca.key_pem))
        # node -> its member process while one runs; node -> (client port, peer port), stable for the node's life.
        self.processes = {}
        self._ports = {}
        # node -> how many times its member was stopped: a start that a power cut overtook kills what it started.
        self._stops = {}

    # Where members listen.

    def _ports_of(self, node):
        if node not in self._ports:
            self._ports[node] = choose_ports(node.address)
        return self._ports[node]

    def client_url(self, node):
        return "https://%s:%d" % (node.address, self._ports_of(node)[0])

    def peer_url(self, node):
        return "https://%s:%d" % (node.address, self._ports_of(node)[1])

    def client_urls(self):
        """The client URLs of every control plane that ever ran a member (Talos dials every control-plane IP)."""
        return [self.client_url(node) for node in self._ports]

    # Starting and stopping members (the etcd service).

    def bootstrap(self, node, snapshot=None, skip_hash_check=False):
        """Start a new cluster on ``node`` (from ``snapshot`` bytes, restored into a new one-member cluster); its
        etcd service fails when the snapshot cannot be restored."""
        self.members = []
        options = dict(initial_cluster="%s=%s" % (node.hostname, self.peer_url(node)))
        if snapshot is not None:
            directory = self._member_dir(node)
            os.makedirs(directory, exist_ok=True)
            options = dict(restore_from=os.path.join(directory, "etcd.snapshot"), skip_hash_check=skip_hash_check)
            with open(options["restore_from"], "wb") as output:
                output.write(snapshot)
        node.etcd_data = True
        self._start(node, wipe=True, recovering=snapshot is not None, **options)

    def bootstrap_together(self, nodes):
        """The fixture shortcut of a bootstrapped cluster: ``nodes`` start as the members of one new cluster (etcd's
        static bootstrap). It forms in about a second, where Talos's way, one learner at a time and each only once
        the cluster has been healthy for 5 s, takes seconds a member; the Bootstrap RPC goes Talos's way."""
        self.members = []
        initial_cluster = ",".join("%s=%s" % (node.hostname, self.peer_url(node)) for node in nodes)
        for node in nodes:
            node.etcd_data = True
            self._start(node, wipe=True, initial_cluster=initial_cluster)

    def join(self, node):
        """Restart the node's member from its data directory, or join the cluster as a new member: it waits, for as
        long as it takes, until a member of the cluster takes it. Nothing new while the node's member is starting or
        waiting to join already."""
        process = self.processes.get(node)
        if process is not None and process.running:
            return
        if node.etcd_data:
            self._start(node)
        else:
            others = [url for url in self.client_urls() if url != self.client_url(node)]
            self._start(node, wipe=True, join=others)

    def _ca_of(self, node):
        """The etcd CA the node's member gets its certificate from: its config's (``.cluster.etcd.ca``), as on Talos,
        the bundle's when the config carries none."""
        ca = ((((node.config or {}).get("cluster") or {}).get("etcd") or {}).get("ca")) or {}
        if ca.get("crt") and ca.get("key"):
            return base64.b64decode(ca["crt"]), to_standard_pem(base64.b64decode(ca["key"]))
        return self._ca

    def _member_dir(self, node):
        return os.path.join(self.state_dir, node.name)

    def _start(self, node, recovering=False, **options):
        stops = self._stops.get(node, 0)
        # Bootstrap on a node whose member waits to join stops that member first, as Talos restarts its etcd service.
        previous = self.processes.pop(node, None)

        async def run():
            if previous is not None:
                await previous.kill()
            process = await MemberProcess.start(self._member_dir(node), node.hostname, node.address, self._ports_of(node),
                                                *self._ca_of(node), quota_backend_bytes=self.quota_backend_bytes, **options)
            if self._stops.get(node, 0) != stops:
                await process.kill()
                return
            self.processes[node] = process
            try:
                member_id = await process.wait_ready(None if options.get("join") else READY_SECONDS)
            except EtcdMemberError as error:
                if self._stops.get(node, 0) == stops:
                    if recovering:
                        node.etcd_data = False
                    node.set_service("etcd", "Failed", ("failed to recover etcd: %s" if recovering else "%s") % error, False)
                return
            if self._stops.get(node, 0) != stops:
                # Ready just as it was stopped (a reset that wipes its data, a power cut): it never served.
                return
            self._add_member(node).id = member_id
            node.etcd_ready()
        self._spawn(run())

    async def stop_member(self, node):
        """The machine is down: its member dies with it, the data directory stays."""
        self._stops[node] = self._stops.get(node, 0) + 1
        process = self.processes.pop(node, None)
        if process is not None:
            await process.kill()

    # What machined asks of etcd.

    def serves(self, node):
        """Whether ``node``'s member process answers its clients (its service may run before it does)."""
        process = self.processes.get(node)
        return node.etcd_running and process is not None and process.serving

    def _local(self, node):
        process = self.processes.get(node)
        if process is None or not process.serving:
            raise GRPCError(Status.UNKNOWN, "etcd is not running on this node")
        return process

    def _any(self, node):
        """The member to ask the cluster through: Talos dials every control plane from any node, here a running
        member's client dials them."""
        process = self.processes.get(node)
        if process is not None and process.serving:
            return process
        for process in self.processes.values():
            if process.serving:
                return process
        raise GRPCError(Status.UNKNOWN, "etcd is not running on any control plane")

    async def member_list(self, node, query_local):
        try:
            if query_local:
                listed = await self._local(node).request("member_list")
            else:
                listed = await self._any(node).request("member_list", endpoints=self.client_urls())
        except EtcdMemberError as error:
            raise _talos_error(error)
        return [machine_pb2.EtcdMember(id=member["id"], hostname=member["name"], peer_urls=member["peer_urls"] or [],
                                       client_urls=member["client_urls"] or [], is_learner=member["is_learner"])
                for member in listed["members"]]

    async def remove_member(self, node, member_id):
        try:
            await self._any(node).request("member_remove", member_id=member_id, endpoints=self.client_urls())
        except EtcdMemberError as error:
            if "member not found" in str(error):
                raise _talos_error(error, Status.NOT_FOUND, "failed to remove member %d: " % member_id)
            raise _talos_error(error, prefix="failed to remove member: failed to remove member %d: " % member_id)
        removed = next((member for member in self.members if member.id == member_id), None)
        if removed is not None:
            # etcd stops a member once it learns it was removed.
            await self.stop_member(removed.node)
            node.cluster.remove_etcd_member(removed)

    async def leave(self, node):
        """As Talos's LeaveCluster: remove this member through the control planes, retrying while etcd finds the
        cluster unhealthy or a member stopped (a member that reconnected less than 5 s ago makes etcd refuse; the
        member removed stops), an already removed member being success; then stop etcd and empty its data."""
        if self.member_of(node) is not None:
            try:
                own_id = (await self._local(node).request("status"))["member_id"]
            except EtcdMemberError as error:
                raise _talos_error(error, prefix="failed to leave cluster: ")
            deadline = asyncio.get_running_loop().time() + LEAVE_RETRY_SECONDS
            while True:
                try:
                    await self._any(node).request("member_remove", member_id=own_id, endpoints=self.client_urls())
                    break
                except EtcdMemberError as error:
                    if "member not found" in str(error):
                        break
                    retryable = any(text in str(error) for text in ("unhealthy", "stopped", "exited"))
                    if not retryable or asyncio.get_running_loop().time() > deadline:
                        raise _talos_error(error, prefix="failed to leave cluster: ")
                await asyncio.sleep(0.2)
            await self.stop_member(node)
        node.leave_etcd()

    async def forfeit_leadership(self, node, member):
        """As Talos's ForfeitLeadership: nothing unless this member leads, else leadership moves to the first other
        voting member that takes it."""
        process = self._local(node)
        try:
            members = (await process.request("member_list"))["members"]
            if len(members) == 1:
                raise GRPCError(Status.UNKNOWN, "cannot forfeit leadership, only one member")
            status = await process.request("status")
            if status["leader"] != status["member_id"]:
                return ""
            for candidate in members:
                if candidate["id"] == status["member_id"] or candidate["is_learner"]:
                    continue
                try:
                    await process.request("move_leader", member_id=candidate["id"])
                except EtcdMemberError:
                    continue
                return candidate["name"]
        except EtcdMemberError as error:
            raise _talos_error(error)
        return ""

    async def status(self, node, member):
        try:
            status = await self._local(node).request("status")
        except EtcdMemberError as error:
            raise _talos_error(error)
        return machine_pb2.EtcdMemberStatus(
            protocol_version=status["version"], db_size=status["db_size"], db_size_in_use=status["db_size_in_use"],
            leader=status["leader"], raft_index=status["raft_index"], raft_term=status["raft_term"],
            raft_applied_index=status["raft_applied_index"], errors=status["errors"] or [], is_learner=status["is_learner"],
            member_id=status["member_id"], storage_version=status["storage_version"],
        )

    async def make_leader(self, node, timeout=10):
        """Hand leadership to the node's member: the leader moves it (etcd's MoveLeader), once there is one."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            leader = await self.leader_node()
            if leader is node:
                return
            if leader is not None:
                try:
                    await self.processes[leader].request("move_leader", member_id=self.member_of(node).id)
                    return
                except EtcdMemberError:
                    pass
            if asyncio.get_running_loop().time() > deadline:
                raise EtcdMemberError("leadership did not move to %s within %ss" % (node.hostname, timeout))
            await asyncio.sleep(0.1)

    async def leader_node(self):
        """The node whose member leads as a running member sees it, or None."""
        for process in list(self.processes.values()):
            if not process.serving:
                continue
            try:
                leader_id = (await process.request("status"))["leader"]
            except EtcdMemberError:
                continue
            return next((member.node for member in self.members if member.id == leader_id), None)
        return None

    async def snapshot_bytes(self, node):
        """The maintenance API's snapshot: the bbolt database followed by the sha256 etcd appends."""
        path = os.path.join(self._member_dir(node), "snapshot.db")
        try:
            await self._local(node).request("snapshot", path=path, timeout=MAINTENANCE_SECONDS)
            with open(path, "rb") as snapshot:
                return snapshot.read()
        except EtcdMemberError as error:
            raise _talos_error(error)
        finally:
            if os.path.exists(path):
                os.remove(path)

    async def alarm_list(self, node):
        return await self._alarms(node, "alarm_list")

    async def alarm_disarm(self, node):
        return await self._alarms(node, "alarm_disarm")

    async def _alarms(self, node, op):
        try:
            alarms = (await self._local(node).request(op))["alarms"]
        except EtcdMemberError as error:
            raise _talos_error(error)
        return [machine_pb2.EtcdMemberAlarm(member_id=alarm["member_id"], alarm=machine_pb2.EtcdMemberAlarm.AlarmType.Value(alarm["alarm"]))
                for alarm in alarms]

    async def raise_alarm(self, node, alarm):
        await self._local(node).request("alarm_activate", alarm=alarm)

    async def defragment(self, node, member):
        self.defragmenting += 1
        self.most_concurrent_defragments = max(self.most_concurrent_defragments, self.defragmenting)
        try:
            await self._local(node).request("defragment", timeout=MAINTENANCE_SECONDS)
        except EtcdMemberError as error:
            raise _talos_error(error)
        finally:
            self.defragmenting -= 1

    def fragment(self, node, free_bytes):
        """A real database has the free pages its writes left: no knob sets them."""
        raise ValueError("fragment_etcd sets the model's free pages; on real etcd members write, delete and compact keys "
                         "(cluster.etcd.kv) to leave free pages behind")

    # What a client of the keyspace does (the Kubernetes API server on Talos; a test here).

    async def kv(self, node, op, **fields):
        """``put`` (key, value), ``get`` (key), ``delete`` (key prefix) or ``compact`` through the node's member."""
        return await self._local(node).request(op, **fields)
