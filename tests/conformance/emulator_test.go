// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/hashicorp/go-multierror"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// TestEmulatorWithMachineryClient drives one emulated cluster (three control
// planes, one worker) with the machinery client, through one endpoint with
// node targeting, as talosctl does. The steps build on each other.
func TestEmulatorWithMachineryClient(t *testing.T) {
	emu := startCluster(t, "--controlplanes", "3", "--workers", "1", "--reboot-seconds", "0.3")
	admin := emu.client(t, "admin")
	controlplanes := emu.byRole("controlplane")
	worker := emu.node("worker-1")
	first := controlplanes[0]

	t.Run("Version", func(t *testing.T) {
		for _, node := range emu.Nodes {
			resp, err := admin.Version(client.WithNode(callContext(t), node.Address))
			if err != nil {
				t.Fatalf("Version on %s: %v", node.Name, err)
			}

			if len(resp.GetMessages()) != 1 {
				t.Fatalf("Version on %s: %d messages, want 1", node.Name, len(resp.GetMessages()))
			}

			message := resp.GetMessages()[0]
			if message.GetMetadata() != nil {
				t.Errorf("Version on %s: a one-to-one reply carries metadata %v", node.Name, message.GetMetadata())
			}

			if tag := message.GetVersion().GetTag(); tag != "v1.14.0" {
				t.Errorf("Version on %s: tag %q, want v1.14.0", node.Name, tag)
			}

			if !message.GetFeatures().GetRbac() {
				t.Errorf("Version on %s: features.rbac is not true", node.Name)
			}
		}
	})

	t.Run("VersionOneToManyWithFailedNode", func(t *testing.T) {
		// The deprecated `nodes` proxying is still served; the client's FilterMessages
		// must split the reply into answers and NodeErrors.
		down := "127.0.0.250"
		targets := []string{first.Address, worker.Address, down}

		resp, err := admin.Version(client.WithNodes(callContext(t), targets...))

		var multi *multierror.Error
		if !errors.As(err, &multi) || len(multi.Errors) != 1 {
			t.Fatalf("FilterMessages: want one node error, got %v", err)
		}

		var nodeErr *client.NodeError
		if !errors.As(multi.Errors[0], &nodeErr) || nodeErr.Node != down {
			t.Fatalf("FilterMessages: want a NodeError for %s, got %#v", down, multi.Errors[0])
		}

		if code := client.StatusCode(nodeErr); code != codes.Unavailable {
			t.Errorf("StatusCode of the failed node: %s, want Unavailable", code)
		}

		var hostnames []string
		for _, message := range resp.GetMessages() {
			hostnames = append(hostnames, message.GetMetadata().GetHostname())
		}

		slices.Sort(hostnames)

		if want := []string{first.Address, worker.Address}; !slices.Equal(hostnames, want) {
			t.Errorf("one-to-many hostnames %v, want %v", hostnames, want)
		}
	})

	t.Run("ReadStreamOneToManyWithFailedNode", func(t *testing.T) {
		// A one-to-many stream: the failed node's frame carries metadata.error, which the
		// client's ReadStream turns into the reader's error.
		reader, err := admin.Read(client.WithNodes(callContext(t), worker.Address, "127.0.0.250"), "/etc/hostname")
		if err != nil {
			t.Fatalf("Read: %v", err)
		}

		defer reader.Close() //nolint:errcheck

		if _, err = io.ReadAll(reader); client.StatusCode(err) != codes.Unavailable {
			t.Errorf("ReadStream over a failed node: %v, want Unavailable", err)
		}
	})

	t.Run("Hostname", func(t *testing.T) {
		for _, node := range emu.Nodes {
			resp, err := admin.MachineClient.Hostname(client.WithNode(callContext(t), node.Address), &emptypb.Empty{})
			if err != nil {
				t.Fatalf("Hostname on %s: %v", node.Name, err)
			}

			if got := resp.GetMessages()[0].GetHostname(); got != node.Name {
				t.Errorf("Hostname on %s: %q", node.Name, got)
			}
		}
	})

	t.Run("ServiceList", func(t *testing.T) {
		for _, node := range emu.Nodes {
			ctx := client.WithNode(callContext(t), node.Address)

			resp, err := admin.ServiceList(ctx)
			if err != nil {
				t.Fatalf("ServiceList on %s: %v", node.Name, err)
			}

			var ids []string
			for _, service := range resp.GetMessages()[0].GetServices() {
				ids = append(ids, service.GetId())
			}

			for _, id := range []string{"apid", "containerd", "cri", "kubelet", "machined", "udevd"} {
				if !slices.Contains(ids, id) {
					t.Errorf("ServiceList on %s: no %s in %v", node.Name, id, ids)
				}
			}

			if hasEtcd := slices.Contains(ids, "etcd"); hasEtcd != (node.Role == "controlplane") {
				t.Errorf("ServiceList on %s (%s): etcd listed = %v", node.Name, node.Role, hasEtcd)
			}

			// ServiceInfo is the client's own filter over ServiceList.
			infos, err := admin.ServiceInfo(ctx, "apid")
			if err != nil || len(infos) != 1 || infos[0].Service.GetState() != "Running" {
				t.Errorf("ServiceInfo(apid) on %s: %v %v", node.Name, infos, err)
			}
		}
	})

	t.Run("Bootstrap", func(t *testing.T) {
		ctx := client.WithNode(callContext(t), first.Address)
		if err := admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
			t.Fatalf("first Bootstrap: %v", err)
		}

		err := admin.Bootstrap(ctx, &machineapi.BootstrapRequest{})
		expectStatus(t, "second Bootstrap", err, codes.AlreadyExists, "etcd data directory is not empty")

		err = admin.Bootstrap(client.WithNode(callContext(t), worker.Address), &machineapi.BootstrapRequest{})
		expectStatus(t, "Bootstrap on a worker", err, codes.Unimplemented, "bootstrap is only available on control plane nodes")
	})

	t.Run("EtcdMemberList", func(t *testing.T) {
		var want []string
		for _, node := range controlplanes {
			want = append(want, node.Name)
		}

		eventually(t, 10*time.Second, "etcd members", func() error {
			resp, err := admin.EtcdMemberList(client.WithNode(callContext(t), first.Address), &machineapi.EtcdMemberListRequest{})
			if err != nil {
				return err
			}

			var names []string
			for _, member := range resp.GetMessages()[0].GetMembers() {
				if member.GetId() == 0 || len(member.GetPeerUrls()) == 0 || len(member.GetClientUrls()) == 0 {
					return errorf("incomplete member %v", member)
				}

				names = append(names, member.GetHostname())
			}

			slices.Sort(names)

			if !slices.Equal(names, want) {
				return errorf("members %v, want %v", names, want)
			}

			return nil
		})

		_, err := admin.EtcdMemberList(client.WithNode(callContext(t), worker.Address), &machineapi.EtcdMemberListRequest{})
		expectStatus(t, "EtcdMemberList on a worker", err, codes.Unimplemented, "member list is only available on control plane nodes")
	})

	t.Run("EtcdStatus", func(t *testing.T) {
		members, err := admin.EtcdMemberList(client.WithNode(callContext(t), first.Address), &machineapi.EtcdMemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}

		ids := map[uint64]string{}
		for _, member := range members.GetMessages()[0].GetMembers() {
			ids[member.GetId()] = member.GetHostname()
		}

		for _, node := range controlplanes {
			resp, err := admin.EtcdStatus(client.WithNode(callContext(t), node.Address))
			if err != nil {
				t.Fatalf("EtcdStatus on %s: %v", node.Name, err)
			}

			status := resp.GetMessages()[0].GetMemberStatus()
			if ids[status.GetMemberId()] != node.Name {
				t.Errorf("EtcdStatus on %s: member id %x belongs to %q", node.Name, status.GetMemberId(), ids[status.GetMemberId()])
			}

			if status.GetLeader() == 0 || status.GetProtocolVersion() == "" || status.GetStorageVersion() == "" {
				t.Errorf("EtcdStatus on %s: incomplete status %v", node.Name, status)
			}
		}

		_, err = admin.EtcdStatus(client.WithNode(callContext(t), worker.Address))
		expectStatus(t, "EtcdStatus on a worker", err, codes.Unimplemented, "etcd status is only available on control plane nodes")
	})

	t.Run("EtcdSnapshot", func(t *testing.T) {
		// The etcd model holds no database: the snapshot fails as machined's does when its etcd client cannot read
		// one (TestEtcdSnapshotOfRealMembers reads a real one).
		reader, err := admin.EtcdSnapshot(client.WithNode(callContext(t), first.Address), &machineapi.EtcdSnapshotRequest{})
		if err == nil {
			defer reader.Close() //nolint:errcheck

			_, err = io.ReadAll(reader)
		}

		expectStatus(t, "EtcdSnapshot of the etcd model", err, codes.Unknown, "failed reading etcd snapshot: the emulator's "+
			"etcd model cannot make a snapshot; start real etcd members to take one: make demo with Go installed, or "+
			"tests/talos-emulator up --etcd real")
	})

	t.Run("ServiceControl", func(t *testing.T) {
		ctx := client.WithNode(callContext(t), first.Address)

		_, err := admin.ServiceStop(ctx, "etcd")
		expectStatus(t, "ServiceStop etcd", err, codes.Unknown, `service "etcd" doesn't support stop operation via API`)

		resp, err := admin.ServiceRestart(ctx, "kubelet")
		if err != nil {
			t.Fatalf("ServiceRestart kubelet: %v", err)
		}

		if got := resp.GetMessages()[0].GetResp(); got != "Service \"kubelet\" restarted" {
			t.Errorf("ServiceRestart kubelet: %q", got)
		}
	})

	t.Run("HealthLogsDmesgServices", func(t *testing.T) {
		var controlPlaneAddresses []string
		for _, node := range controlplanes {
			controlPlaneAddresses = append(controlPlaneAddresses, node.Address)
		}

		ctx, cancel := context.WithTimeout(client.WithNode(context.Background(), first.Address), 60*time.Second)
		defer cancel()

		check, err := admin.ClusterHealthCheck(ctx, 10*time.Second, &clusterapi.ClusterInfo{
			ControlPlaneNodes: controlPlaneAddresses,
			WorkerNodes:       []string{worker.Address},
		})
		if err != nil {
			t.Fatalf("ClusterHealthCheck: %v", err)
		}

		// The Talos checks pass; with no Kubernetes API behind the emulated cluster the first Kubernetes check cannot,
		// and the check ends as Talos's does when its wait timeout runs out.
		var progress []string
		for {
			message, err := check.Recv()
			if err != nil {
				if client.StatusCode(err) != codes.DeadlineExceeded {
					t.Fatalf("ClusterHealthCheck after %v: %v", progress, err)
				}

				break
			}

			progress = append(progress, message.GetMessage())
		}

		if len(progress) < 2 || !strings.HasPrefix(progress[0], "discovered nodes: [\"") ||
			!slices.Contains(progress, "waiting for etcd to be healthy: OK") ||
			!slices.Contains(progress, "waiting for all nodes to finish boot sequence: OK") ||
			!strings.HasPrefix(progress[len(progress)-1], "waiting for all k8s nodes to report: Get \"https://") {
			t.Fatalf("health check progress %v", progress)
		}

		logs, err := admin.Logs(client.WithNode(callContext(t), first.Address), "system", common.ContainerDriver_CONTAINERD, "etcd", false, 3)
		if err != nil {
			t.Fatalf("Logs: %v", err)
		}

		reader, err := client.ReadStream(logs)
		if err != nil {
			t.Fatalf("Logs stream: %v", err)
		}

		text, err := io.ReadAll(reader)
		if err != nil {
			t.Fatalf("Logs read: %v", err)
		}

		if lines := strings.Split(strings.TrimSpace(string(text)), "\n"); len(lines) != 3 {
			t.Fatalf("Logs with tail 3: %q", lines)
		}

		dmesg, err := admin.Dmesg(client.WithNode(callContext(t), worker.Address), false, false)
		if err != nil {
			t.Fatalf("Dmesg: %v", err)
		}

		frames := 0
		for {
			data, err := dmesg.Recv()
			if errors.Is(err, io.EOF) {
				break
			}

			if err != nil {
				t.Fatalf("Dmesg: %v", err)
			}

			if !strings.HasPrefix(string(data.GetBytes()), "kern:") {
				t.Fatalf("Dmesg frame %q", data.GetBytes())
			}

			frames++
		}

		if frames == 0 {
			t.Fatal("Dmesg sent no frame")
		}

		services, err := safe.StateListAll[*v1alpha1.Service](client.WithNode(callContext(t), first.Address), admin.COSI)
		if err != nil {
			t.Fatalf("Services: %v", err)
		}

		etcd, found := services.Find(func(service *v1alpha1.Service) bool { return service.Metadata().ID() == "etcd" })
		if !found || !etcd.TypedSpec().Running || !etcd.TypedSpec().Healthy {
			t.Fatalf("etcd Service resource: found %v", found)
		}
	})

	t.Run("Kubeconfig", func(t *testing.T) {
		kubeconfig, err := admin.Kubeconfig(client.WithNode(callContext(t), first.Address))
		if err != nil {
			t.Fatalf("Kubeconfig: %v", err)
		}

		text := string(kubeconfig)
		for _, want := range []string{"kind: Config", "certificate-authority-data:", "client-key-data:", "server: https://"} {
			if !strings.Contains(text, want) {
				t.Errorf("the kubeconfig has no %q", want)
			}
		}

		_, err = admin.Kubeconfig(client.WithNode(callContext(t), worker.Address))
		expectStatus(t, "Kubeconfig on a worker", err, codes.Unimplemented, "kubeconfig is only available on control plane nodes")

		reader := emu.client(t, "reader")
		_, err = reader.Kubeconfig(client.WithNode(callContext(t), first.Address))
		expectStatus(t, "Kubeconfig as os:reader", err, codes.PermissionDenied, "not authorized")
	})

	t.Run("COSI", func(t *testing.T) {
		for _, node := range emu.Nodes {
			ctx := client.WithNode(callContext(t), node.Address)

			status, err := safe.StateGetByID[*runtime.MachineStatus](ctx, admin.COSI, runtime.MachineStatusID)
			if err != nil {
				t.Fatalf("Get MachineStatus on %s: %v", node.Name, err)
			}

			if spec := status.TypedSpec(); spec.Stage != runtime.MachineStageRunning || !spec.Status.Ready {
				t.Errorf("MachineStatus on %s: stage %s ready %v", node.Name, spec.Stage, spec.Status.Ready)
			}

			machineConfig, err := safe.StateGetByID[*config.MachineConfig](ctx, admin.COSI, config.ActiveID)
			if err != nil {
				t.Fatalf("Get MachineConfig on %s: %v", node.Name, err)
			}

			wantType := machine.TypeWorker
			if node.Role == "controlplane" {
				wantType = machine.TypeControlPlane
			}

			if got := machineConfig.Config().Machine().Type(); got != wantType {
				t.Errorf("MachineConfig on %s: machine type %s, want %s", node.Name, got, wantType)
			}

			if got := machineConfig.Provider().RawV1Alpha1().ClusterConfig.ClusterName; got != emu.Name {
				t.Errorf("MachineConfig on %s: cluster name %q, want %q", node.Name, got, emu.Name)
			}
		}

		members, err := safe.StateListAll[*cluster.Member](client.WithNode(callContext(t), first.Address), admin.COSI)
		if err != nil {
			t.Fatalf("List Members: %v", err)
		}

		if members.Len() != len(emu.Nodes) {
			t.Fatalf("List Members: %d members, want %d", members.Len(), len(emu.Nodes))
		}

		for member := range members.All() {
			spec := member.TypedSpec()

			var node *emulatedNode
			for i := range emu.Nodes {
				if emu.Nodes[i].Name == spec.Hostname {
					node = &emu.Nodes[i]
				}
			}

			if node == nil {
				t.Errorf("member %s has an unknown hostname %q", member.Metadata().ID(), spec.Hostname)

				continue
			}

			if !slices.Equal(spec.Addresses, []netip.Addr{netip.MustParseAddr(node.Address)}) {
				t.Errorf("member %s: addresses %v, want [%s]", spec.Hostname, spec.Addresses, node.Address)
			}

			if (node.Role == "controlplane") != (spec.MachineType == machine.TypeControlPlane) {
				t.Errorf("member %s: machine type %s for a %s", spec.Hostname, spec.MachineType, node.Role)
			}

			if !strings.HasPrefix(spec.OperatingSystem, "Talos (") {
				t.Errorf("member %s: operating system %q", spec.Hostname, spec.OperatingSystem)
			}
		}

		// talosctl get resolves aliases through the ResourceDefinitions.
		var namespace resource.Namespace

		definition, err := admin.ResolveResourceKind(client.WithNode(callContext(t), first.Address), &namespace, "machinestatus")
		if err != nil {
			t.Fatalf("ResolveResourceKind(machinestatus): %v", err)
		}

		if definition.TypedSpec().Type != runtime.MachineStatusType || namespace != runtime.NamespaceName {
			t.Errorf("ResolveResourceKind(machinestatus): %s in %s", definition.TypedSpec().Type, namespace)
		}

		missing := resource.NewMetadata(runtime.NamespaceName, runtime.MachineStatusType, "nothing", resource.VersionUndefined)
		if _, err = admin.COSI.Get(client.WithNode(callContext(t), first.Address), missing); !state.IsNotFoundError(err) {
			t.Errorf("Get of a missing resource: want a COSI NotFound error, got %v", err)
		}

		reader := emu.client(t, "reader")
		_, err = safe.StateGetByID[*config.MachineConfig](client.WithNode(callContext(t), first.Address), reader.COSI, config.ActiveID)
		expectStatus(t, "Get MachineConfig as os:reader", err, codes.PermissionDenied, "")

		// Watch as talosctl get -w does: the client's adapter swallows the server's first,
		// empty reply, then every member arrives, then the bootstrapped marker.
		ctx := client.WithNode(callContext(t), first.Address)
		events := make(chan state.Event)

		kind := resource.NewMetadata(cluster.NamespaceName, cluster.MemberType, "", resource.VersionUndefined)
		if err = admin.COSI.WatchKind(ctx, kind, events, state.WithBootstrapContents(true)); err != nil {
			t.Fatalf("WatchKind Members: %v", err)
		}

		var watched []string

		for done := false; !done; {
			select {
			case event := <-events:
				switch event.Type {
				case state.Created:
					watched = append(watched, event.Resource.(*cluster.Member).TypedSpec().Hostname)
				case state.Bootstrapped:
					done = true
				default:
					t.Fatalf("WatchKind Members: unexpected %s event %v", event.Type, event.Error)
				}
			case <-ctx.Done():
				t.Fatalf("WatchKind Members: no bootstrapped event after %v", watched)
			}
		}

		if len(watched) != len(emu.Nodes) {
			t.Errorf("WatchKind Members with bootstrap contents: %v", watched)
		}

		statuses := make(chan state.Event)
		if err = admin.COSI.Watch(ctx, runtime.NewMachineStatus().Metadata(), statuses); err != nil {
			t.Fatalf("Watch MachineStatus: %v", err)
		}

		select {
		case event := <-statuses:
			if event.Type != state.Created || event.Resource.(*runtime.MachineStatus).TypedSpec().Stage != runtime.MachineStageRunning {
				t.Errorf("Watch MachineStatus: first event %s %v", event.Type, event.Resource)
			}
		case <-ctx.Done():
			t.Fatal("Watch MachineStatus: no event")
		}
	})

	t.Run("ApplyConfiguration", func(t *testing.T) {
		ctx := client.WithNode(callContext(t), worker.Address)

		active, err := safe.StateGetByID[*config.MachineConfig](ctx, admin.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		current, err := active.Container().Bytes()
		if err != nil {
			t.Fatal(err)
		}

		resp, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
			Data: current, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT, DryRun: true,
		})
		if err != nil {
			t.Fatalf("dry run of the active config: %v", err)
		}

		if details := resp.GetMessages()[0].GetModeDetails(); !strings.HasSuffix(details, "No changes.") {
			t.Errorf("dry run of the active config: %q", details)
		}

		patch, err := configpatcher.LoadPatch([]byte("machine:\n  env:\n    CONFORMANCE: \"1\"\n"))
		if err != nil {
			t.Fatal(err)
		}

		patched, err := configpatcher.Apply(configpatcher.WithBytes(current), []configpatcher.Patch{patch})
		if err != nil {
			t.Fatal(err)
		}

		changed, err := patched.Bytes()
		if err != nil {
			t.Fatal(err)
		}

		resp, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
			Data: changed, Mode: machineapi.ApplyConfigurationRequest_AUTO, DryRun: true,
		})
		if err != nil {
			t.Fatalf("dry run of a change: %v", err)
		}

		reply := resp.GetMessages()[0]
		if reply.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT {
			t.Errorf("dry run in AUTO mode: mode %s, want NO_REBOOT", reply.GetMode())
		}

		wantPrefix := "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n"
		if details := reply.GetModeDetails(); !strings.HasPrefix(details, wantPrefix) || !strings.Contains(details, "CONFORMANCE") {
			t.Errorf("dry run of a change: %q", details)
		}

		bootID := readFile(t, admin, worker.Address, "/proc/sys/kernel/random/boot_id")

		resp, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
			Data: changed, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
		})
		if err != nil {
			t.Fatalf("NO_REBOOT apply: %v", err)
		}

		if details := resp.GetMessages()[0].GetModeDetails(); details != "Applied configuration without a reboot" {
			t.Errorf("NO_REBOOT apply: %q", details)
		}

		applied, err := safe.StateGetByID[*config.MachineConfig](ctx, admin.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		if env := applied.Config().Machine().Env(); env["CONFORMANCE"] != "1" {
			t.Errorf("the applied config is not active: machine.env %v", env)
		}

		if after := readFile(t, admin, worker.Address, "/proc/sys/kernel/random/boot_id"); after != bootID {
			t.Errorf("a NO_REBOOT apply rebooted the node")
		}

		_, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
			Data: changed, Mode: machineapi.ApplyConfigurationRequest_REBOOT,
		})
		expectStatus(t, "REBOOT mode", err, codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")

		_, err = admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{
			Data: []byte("machine: [not a config"), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
		})
		expectStatus(t, "a config that does not parse", err, codes.InvalidArgument, "")
	})

	t.Run("CollectionTalosconfig", func(t *testing.T) {
		// A talosconfig the collection writes (talos_client_config) from the cluster's bundle.
		path := filepath.Join(t.TempDir(), "talosconfig")
		if _, err := runPlaybook("client_config.yml", "-e", "dest="+path, "-e", "state_dir="+emu.StateDir,
			"-e", "cluster_name="+emu.Name, "-e", "endpoint="+emu.Endpoint); err != nil {
			t.Fatal(err)
		}

		loaded, err := clientconfig.Open(path)
		if err != nil {
			t.Fatalf("machinery cannot load the collection's talosconfig: %v", err)
		}

		ours, err := client.New(context.Background(), client.WithConfig(loaded))
		if err != nil {
			t.Fatalf("machinery cannot build a client from the collection's talosconfig: %v", err)
		}

		defer ours.Close() //nolint:errcheck

		if got := ours.GetEndpoints(); !slices.Equal(got, []string{emu.Endpoint}) {
			t.Errorf("endpoints %v, want [%s]", got, emu.Endpoint)
		}

		for _, node := range emu.Nodes {
			if _, err := ours.Version(client.WithNode(callContext(t), node.Address)); err != nil {
				t.Errorf("Version on %s with the collection's talosconfig: %v", node.Name, err)
			}
		}

		// os:admin: a sensitive resource is readable.
		if _, err = safe.StateGetByID[*config.MachineConfig](client.WithNode(callContext(t), first.Address), ours.COSI, config.ActiveID); err != nil {
			t.Errorf("MachineConfig with the collection's talosconfig: %v", err)
		}
	})

	t.Run("UpstreamArtifactsInTheCollection", func(t *testing.T) {
		checkUpstreamArtifacts(t, emu, first.Address)

		// The playbook only dry-ran: nothing was applied to the node.
		active, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(callContext(t), first.Address), admin.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		if name := active.Provider().RawV1Alpha1().ClusterConfig.ClusterName; name != emu.Name {
			t.Errorf("a check-mode run changed the node's config (cluster name %q)", name)
		}
	})

	t.Run("Reboot", func(t *testing.T) {
		rebootAndWait(t, admin, worker.Address)
	})

	t.Run("Upgrade", func(t *testing.T) {
		// talosctl v1.14's path: ImageService.Pull into the system store, then
		// LifecycleService.Upgrade (progress, then an exit code), then Reboot.
		target := controlplanes[len(controlplanes)-1]
		image := "ghcr.io/siderolabs/installer:v1.14.1"
		instance := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
		ctx := client.WithNode(callContext(t), target.Address)

		pull, err := admin.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{Containerd: instance, ImageRef: image})
		if err != nil {
			t.Fatalf("Pull: %v", err)
		}

		pulled := ""

		for {
			reply, err := pull.Recv()
			if errors.Is(err, io.EOF) {
				break
			}

			if err != nil {
				t.Fatalf("Pull: %v", err)
			}

			pulled = reply.GetName()
		}

		if pulled == "" {
			t.Errorf("Pull: no final image name")
		}

		upgrade, err := admin.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
			Containerd: instance, Source: &machineapi.InstallArtifactsSource{ImageName: image},
		})
		if err != nil {
			t.Fatalf("LifecycleService.Upgrade: %v", err)
		}

		exitCode, messages := int32(-1), 0

		for {
			reply, err := upgrade.Recv()
			if errors.Is(err, io.EOF) {
				break
			}

			if err != nil {
				t.Fatalf("LifecycleService.Upgrade: %v", err)
			}

			switch progress := reply.GetProgress().GetResponse().(type) {
			case *machineapi.LifecycleServiceInstallProgress_Message:
				messages++
			case *machineapi.LifecycleServiceInstallProgress_ExitCode:
				exitCode = progress.ExitCode
			}
		}

		if exitCode != 0 || messages == 0 {
			t.Fatalf("LifecycleService.Upgrade: exit code %d after %d messages", exitCode, messages)
		}

		rebootAndWait(t, admin, target.Address)

		version, err := admin.Version(client.WithNode(callContext(t), target.Address))
		if err != nil {
			t.Fatal(err)
		}

		if tag := version.GetMessages()[0].GetVersion().GetTag(); tag != "v1.14.1" {
			t.Errorf("after the upgrade and reboot: version %s, want v1.14.1", tag)
		}
	})

	t.Run("MaintenanceMode", func(t *testing.T) {
		testMaintenanceMode(t, emu, admin, worker)
	})
}

// rebootAndWait reboots a node and waits as talosctl's action tracker does (the machinery
// client has no wait of its own): watch the node's Events before acting, follow the
// reboot's actor ID, reconnect with the whole history of the new boot while the node
// is away, and finish when MachineStatus is running and ready with a new boot ID.
func rebootAndWait(t *testing.T, admin *client.Client, address string) {
	t.Helper()

	bootID := readFile(t, admin, address, "/proc/sys/kernel/random/boot_id")

	ctx, cancel := context.WithTimeout(client.WithNode(context.Background(), address), 30*time.Second)
	defer cancel()

	events := make(chan client.EventResult)
	if err := admin.EventsWatchV2(ctx, events); err != nil {
		t.Fatalf("Events: %v", err)
	}

	resp, err := admin.RebootWithResponse(client.WithNode(callContext(t), address))
	if err != nil {
		t.Fatalf("Reboot: %v", err)
	}

	actorID := resp.GetMessages()[0].GetActorId()
	if actorID == "" {
		t.Fatal("Reboot: the reply has no actor ID")
	}

	sawActor, sawRebooting := false, false

	for {
		var result client.EventResult

		select {
		case result = <-events:
		case <-ctx.Done():
			t.Fatalf("%s did not come back (actor seen %v, rebooting seen %v)", address, sawActor, sawRebooting)
		}

		if result.Error != nil {
			reconnectEvents(t, ctx, admin, events)

			continue
		}

		sawActor = sawActor || result.Event.ActorID == actorID

		status, ok := result.Event.Payload.(*machineapi.MachineStatusEvent)
		if !ok {
			continue
		}

		sawRebooting = sawRebooting || (status.GetStage() == machineapi.MachineStatusEvent_REBOOTING && result.Event.ActorID == actorID)

		if sawActor && status.GetStage() == machineapi.MachineStatusEvent_RUNNING && status.GetStatus().GetReady() {
			if readFile(t, admin, address, "/proc/sys/kernel/random/boot_id") == bootID {
				t.Fatal("the node reports running and ready with its old boot ID")
			}

			if !sawRebooting {
				t.Error("no MachineStatusEvent rebooting carried the reboot's actor ID")
			}

			return
		}
	}
}

// reconnectEvents re-opens the Events stream with the whole history, retrying while the
// node is away (Unavailable, Canceled), as talosctl's tracker does.
func reconnectEvents(t *testing.T, ctx context.Context, admin *client.Client, events chan client.EventResult) {
	t.Helper()

	for {
		err := admin.EventsWatchV2(ctx, events, client.WithTailEvents(-1))
		if err == nil {
			return
		}

		if code := client.StatusCode(err); code != codes.Unavailable && code != codes.Canceled {
			t.Fatalf("Events: %v", err)
		}

		select {
		case <-ctx.Done():
			t.Fatalf("Events: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func testMaintenanceMode(t *testing.T, emu *emulatedCluster, admin *client.Client, worker emulatedNode) {
	// Wiping STATE takes the node's config: it boots into maintenance mode.
	err := admin.ResetGeneric(client.WithNode(callContext(t), worker.Address), &machineapi.ResetRequest{
		Reboot: true,
		SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{
			{Label: "STATE", Wipe: true}, {Label: "EPHEMERAL", Wipe: true},
		},
	})
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}

	fingerprint := ""

	eventually(t, 15*time.Second, "the maintenance certificate", func() error {
		var err error
		fingerprint, err = maintenanceFingerprint(worker.Endpoint)

		return err
	})

	wrong, err := client.New(context.Background(), client.WithMaintenanceMode(worker.Endpoint, []string{base64.StdEncoding.EncodeToString(make([]byte, sha256.Size))}))
	if err != nil {
		t.Fatal(err)
	}

	defer wrong.Close() //nolint:errcheck

	if _, err = wrong.Version(callContext(t)); err == nil {
		t.Errorf("a maintenance connection with the wrong fingerprint succeeded")
	}

	insecure, err := client.New(context.Background(), client.WithMaintenanceMode(worker.Endpoint, []string{fingerprint}))
	if err != nil {
		t.Fatal(err)
	}

	defer insecure.Close() //nolint:errcheck

	version, err := insecure.Version(callContext(t))
	if err != nil {
		t.Fatalf("Version in maintenance: %v", err)
	}

	if message := version.GetMessages()[0]; message.GetFeatures() != nil || message.GetVersion().GetTag() != "v1.14.0" {
		t.Errorf("Version in maintenance: %v", message)
	}

	status, err := safe.StateGetByID[*runtime.MachineStatus](callContext(t), insecure.COSI, runtime.MachineStatusID)
	if err != nil || status.TypedSpec().Stage != runtime.MachineStageMaintenance {
		t.Errorf("MachineStatus in maintenance: %v %v", status, err)
	}

	_, err = insecure.RebootWithResponse(callContext(t))
	expectStatus(t, "Reboot in maintenance", err, codes.PermissionDenied, "not authorized")

	_, err = insecure.EtcdStatus(callContext(t))
	expectStatus(t, "EtcdStatus in maintenance", err, codes.Unimplemented, "machine type is not set, cannot use etcd status API")

	_, err = safe.StateGetByID[*config.MachineConfig](callContext(t), insecure.COSI, config.ActiveID)
	expectStatus(t, "MachineConfig in maintenance", err, codes.PermissionDenied, "")

	workerConfig, err := os.ReadFile(emu.path("worker.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = configloader.NewFromBytes(workerConfig); err != nil {
		t.Fatalf("machinery cannot load the emulator's worker.yaml: %v", err)
	}

	resp, err := insecure.ApplyConfiguration(callContext(t), &machineapi.ApplyConfigurationRequest{
		Data: workerConfig, Mode: machineapi.ApplyConfigurationRequest_AUTO, DryRun: true,
	})
	if err != nil {
		t.Fatalf("dry run in maintenance: %v", err)
	}

	if details := resp.GetMessages()[0].GetModeDetails(); !strings.HasPrefix(details, "Dry run summary:") {
		t.Errorf("dry run in maintenance: %q", details)
	}

	if _, err = insecure.ApplyConfiguration(callContext(t), &machineapi.ApplyConfigurationRequest{
		Data: workerConfig, Mode: machineapi.ApplyConfigurationRequest_AUTO,
	}); err != nil {
		t.Fatalf("apply in maintenance: %v", err)
	}

	// The node installs, reboots and serves mutual TLS again: the admin client reaches it.
	eventually(t, 15*time.Second, "the configured worker", func() error {
		resp, err := admin.MachineClient.Hostname(client.WithNode(callContext(t), worker.Address), &emptypb.Empty{})
		if err != nil {
			return err
		}

		if got := resp.GetMessages()[0].GetHostname(); got != worker.Name {
			return errorf("hostname %q", got)
		}

		return nil
	})
}

// maintenanceFingerprint is the SPKI SHA-256 of the node's maintenance certificate,
// as the console prints it for `talosctl --insecure`; it fails while the node is away
// or still serves mutual TLS.
func maintenanceFingerprint(endpoint string) (string, error) {
	conn, err := tls.Dial("tcp", endpoint, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec
	if err != nil {
		return "", err
	}

	defer conn.Close() //nolint:errcheck

	leaf := conn.ConnectionState().PeerCertificates[0]
	if leaf.Subject.CommonName != "maintenance-service.talos.dev" {
		return "", errorf("certificate CN %q", leaf.Subject.CommonName)
	}

	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)

	return base64.StdEncoding.EncodeToString(sum[:]), nil
}

func readFile(t *testing.T, admin *client.Client, address, path string) string {
	t.Helper()

	reader, err := admin.Read(client.WithNode(callContext(t), address), path)
	if err != nil {
		t.Fatalf("Read %s on %s: %v", path, address, err)
	}

	defer reader.Close() //nolint:errcheck

	content, err := io.ReadAll(reader)
	if err != nil {
		t.Fatalf("Read %s on %s: %v", path, address, err)
	}

	return string(content)
}

// expectStatus checks an error with the client's own StatusCode/Status helpers.
// TestEtcdSnapshotOfRealMembers reads a snapshot of real etcd members (tests/talos-emulator up --etcd real) with the
// machinery client, as talosctl etcd snapshot does: etcd's bbolt database, then its SHA-256.
func TestEtcdSnapshotOfRealMembers(t *testing.T) {
	emu := startCluster(t, "--controlplanes", "1", "--bootstrapped", "--etcd", "real")
	admin := emu.client(t, "admin")
	node := emu.byRole("controlplane")[0]

	reader, err := admin.EtcdSnapshot(client.WithNode(callContext(t), node.Address), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	defer reader.Close() //nolint:errcheck

	snapshot, err := io.ReadAll(reader)
	if err != nil {
		t.Fatalf("EtcdSnapshot: %v", err)
	}

	// etcd's snapshot file layout: the database in pages of 512 bytes or more, then its SHA-256.
	body := len(snapshot) - sha256.Size
	if body <= 0 || body%512 != 0 {
		t.Fatalf("EtcdSnapshot: %d bytes, not a database of whole pages and its SHA-256", len(snapshot))
	}

	// The first page is a bbolt meta page: its magic follows the 16-byte page header.
	if magic := binary.LittleEndian.Uint32(snapshot[16:20]); magic != 0xED0CDAED {
		t.Errorf("EtcdSnapshot: magic %#x, not a bbolt database", magic)
	}

	if sum := sha256.Sum256(snapshot[:body]); string(sum[:]) != string(snapshot[body:]) {
		t.Errorf("EtcdSnapshot: the trailing SHA-256 does not match the data")
	}
}

func expectStatus(t *testing.T, what string, err error, code codes.Code, message string) {
	t.Helper()

	if err == nil {
		t.Errorf("%s: succeeded, want %s", what, code)

		return
	}

	if got := client.StatusCode(err); got != code {
		t.Errorf("%s: code %s, want %s (%v)", what, got, code, err)
	}

	if message != "" {
		if got := client.Status(err).Message(); got != message {
			t.Errorf("%s: message %q, want %q", what, got, message)
		}
	}
}
