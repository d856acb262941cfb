// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// The clusters tests/integration/test_adopt_role.py adopts: machine configs made by Talos's own
// generator and patcher (pkg/machinery), as talosctl gen config and apply-config --config-patch make
// them, with the patches users write (an extra disk, the network, kubelet extra args, an extension
// service, a registry mirror), for single-document (v1.9 to v1.11), two-document (v1.12, v1.13) and multi-document
// (v1.14) contracts. They are
// committed in tests/fixtures/adoption, so that the Python tests need no Go; this test checks that
// they are still what the generator makes, and writes them again with UPDATE_ADOPTION_FIXTURES=1:
//
//	UPDATE_ADOPTION_FIXTURES=1 tests/run-conformance -run TestAdoptionFixtures
var adoptionFixtures = filepath.Join(repoRoot, "tests", "fixtures", "adoption")

// adoptionNode is one node of a fixture cluster: its name (the emulated node's) and its own patches.
type adoptionNode struct {
	Name    string   `yaml:"name"`
	Type    string   `yaml:"type"`
	File    string   `yaml:"file"`
	Bundle  string   `yaml:"bundle,omitempty"`
	Patches []string `yaml:"-"`
}

// adoptionCluster is one fixture cluster: the generator's inputs and the patches of every node,
// of each machine type and of each node (talosctl's --config-patch, --config-patch-control-plane,
// --config-patch-worker, then the node's own).
type adoptionCluster struct {
	Name              string         `yaml:"name"`
	Contract          string         `yaml:"contract"`
	TalosVersion      string         `yaml:"talos_version"`
	ClusterName       string         `yaml:"cluster_name"`
	Endpoint          string         `yaml:"endpoint"`
	KubernetesVersion string         `yaml:"kubernetes_version"`
	InstallDisk       string         `yaml:"install_disk"`
	InstallImage      string         `yaml:"install_image"`
	AdditionalSANs    []string       `yaml:"additional_sans"`
	Comments          bool           `yaml:"comments"`
	Bundle            string         `yaml:"bundle"`
	Nodes             []adoptionNode `yaml:"nodes"`
	common            []string
	controlPlane      []string
	worker            []string
}

const (
	extensionPatch = `apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nut-client
configFiles:
  - content: MONITOR upsmonHost 1 remote username password
    mountPath: /usr/local/etc/nut/upsmon.conf
environment:
  - NUT_UPS=upsname
`
	legacyKubeletPatch = `machine:
  kubelet:
    extraArgs:
      rotate-server-certificates: "true"
`
	legacyDiskPatch = `machine:
  disks:
    - device: /dev/sdb
      partitions:
        - mountpoint: /var/mnt/data
`
	legacyControlPlanePatch = `cluster:
  allowSchedulingOnControlPlanes: true
`
	registryMirrorPatch = `apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: docker.io
endpoints:
  - url: https://mirror.adopt.example
`
	kubeletPatch = `apiVersion: v1alpha1
kind: KubeletConfig
extraArgs:
  rotate-server-certificates: "true"
`
	// A cluster with its own CNI (Cilium, say): no flannel.
	noFlannelPatch = `apiVersion: v1alpha1
kind: KubeFlannelCNIConfig
$patch: delete
`
	userVolumePatch = `apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: disk.dev_path == "/dev/sdb"
  minSize: 10GiB
`
)

// legacyNetworkPatch is a node's static address and hostname in the v1alpha1 document.
func legacyNetworkPatch(hostname, address string) string {
	return `machine:
  network:
    hostname: ` + hostname + `
    interfaces:
      - interface: eth0
        addresses:
          - ` + address + `/24
        routes:
          - network: 0.0.0.0/0
            gateway: 10.5.0.1
`
}

// linkPatch is a node's static address in a LinkConfig document (Talos v1.12 and later).
func linkPatch(address string) string {
	return `apiVersion: v1alpha1
kind: LinkConfig
name: eth0
addresses:
  - address: ` + address + `/24
routes:
  - gateway: 10.5.0.1
`
}

func adoptionClusters() []adoptionCluster {
	return []adoptionCluster{
		{
			Name: "v1.9-patched", Contract: "v1.9", TalosVersion: "v1.9.5", ClusterName: "legacy",
			Endpoint: "https://legacy.adopt.example:6443", KubernetesVersion: "1.32.4", InstallDisk: "/dev/sda",
			InstallImage: "ghcr.io/siderolabs/installer:v1.9.5", Bundle: "secrets.yaml",
			common:       []string{legacyKubeletPatch, extensionPatch},
			controlPlane: []string{legacyControlPlanePatch},
			worker:       []string{legacyDiskPatch},
			Nodes: []adoptionNode{
				{Name: "controlplane-1", Type: "controlplane", Patches: []string{legacyNetworkPatch("controlplane-1", "10.5.0.2")}},
				{Name: "controlplane-2", Type: "controlplane", Patches: []string{legacyNetworkPatch("controlplane-2", "10.5.0.3")}},
				{Name: "worker-1", Type: "worker", Patches: []string{legacyNetworkPatch("worker-1", "10.5.0.10")}},
				{Name: "worker-2", Type: "worker", Patches: []string{legacyNetworkPatch("worker-2", "10.5.0.11")}},
			},
		},
		{
			Name: "v1.10", Contract: "v1.10", TalosVersion: "v1.10.7", ClusterName: "ten",
			Endpoint: "https://ten.adopt.example:6443", KubernetesVersion: "1.32.9", InstallDisk: "/dev/sda",
			InstallImage: "ghcr.io/siderolabs/installer:v1.10.7", Bundle: "secrets.yaml", Comments: true,
			Nodes: []adoptionNode{{Name: "controlplane-1", Type: "controlplane"}, {Name: "worker-1", Type: "worker"}},
		},
		{
			Name: "v1.11", Contract: "v1.11", TalosVersion: "v1.11.5", ClusterName: "eleven",
			Endpoint: "https://10.5.0.2:6443", KubernetesVersion: "1.33.5", InstallDisk: "/dev/vda",
			InstallImage: "ghcr.io/siderolabs/installer:v1.11.5", Bundle: "secrets.yaml",
			Nodes: []adoptionNode{{Name: "controlplane-1", Type: "controlplane"}, {Name: "worker-1", Type: "worker"}},
		},
		{
			Name: "v1.12-patched", Contract: "v1.12", TalosVersion: "v1.12.4", ClusterName: "twelve",
			Endpoint: "https://twelve.adopt.example:6443", KubernetesVersion: "1.35.4", InstallDisk: "/dev/sda",
			InstallImage: "ghcr.io/siderolabs/installer:v1.12.4", Bundle: "secrets.yaml",
			common: []string{registryMirrorPatch, legacyKubeletPatch},
			worker: []string{legacyDiskPatch},
			Nodes: []adoptionNode{
				{Name: "controlplane-1", Type: "controlplane", Patches: []string{linkPatch("10.5.0.2")}},
				{Name: "worker-1", Type: "worker", Patches: []string{linkPatch("10.5.0.10")}},
				{Name: "worker-2", Type: "worker", Patches: []string{linkPatch("10.5.0.11")}},
			},
		},
		{
			Name: "v1.13", Contract: "v1.13", TalosVersion: "v1.13.6", ClusterName: "thirteen",
			Endpoint: "https://cp.thirteen.example:6443", KubernetesVersion: "1.35.2", InstallDisk: "/dev/nvme0n1",
			InstallImage: "ghcr.io/siderolabs/installer:v1.13.6", Bundle: "secrets.yaml", Comments: true,
			Nodes: []adoptionNode{{Name: "controlplane-1", Type: "controlplane"}, {Name: "worker-1", Type: "worker"}},
		},
		{
			Name: "v1.14-patched", Contract: "v1.14", TalosVersion: "v1.14.1", ClusterName: "modern",
			Endpoint: "https://modern.adopt.example:6443", KubernetesVersion: "1.37.0", InstallDisk: "/dev/sda",
			InstallImage:   "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
			AdditionalSANs: []string{"modern.adopt.example"}, Bundle: "secrets.yaml", Comments: true,
			common:       []string{kubeletPatch, extensionPatch},
			controlPlane: []string{noFlannelPatch},
			worker:       []string{userVolumePatch},
			Nodes: []adoptionNode{
				{Name: "controlplane-1", Type: "controlplane", Patches: []string{linkPatch("10.5.0.2")}},
				{Name: "controlplane-2", Type: "controlplane", Patches: []string{linkPatch("10.5.0.3")}},
				{Name: "worker-1", Type: "worker", Patches: []string{linkPatch("10.5.0.10")}},
				{Name: "worker-2", Type: "worker", Patches: []string{linkPatch("10.5.0.11")}},
			},
		},
		// The second control plane belongs to another cluster: same Talos API CA (the talosconfig
		// reaches it), another Kubernetes CA and cluster ID.
		{
			Name: "v1.14-two-clusters", Contract: "v1.14", TalosVersion: "v1.14.1", ClusterName: "modern",
			Endpoint: "https://modern.adopt.example:6443", KubernetesVersion: "1.37.0", InstallDisk: "/dev/sda",
			InstallImage: "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
			Bundle:       "secrets.yaml",
			Nodes: []adoptionNode{
				{Name: "controlplane-1", Type: "controlplane"},
				{Name: "controlplane-2", Type: "controlplane", Bundle: "other-cluster.yaml"},
			},
		},
	}
}

// adoptionBundles loads the fixtures' bundles, making them first when updating and they are missing:
// secrets.yaml, as talosctl gen secrets makes it, and other-cluster.yaml, a second cluster's with the
// same Talos API CA. An update keeps existing bundles, so that only the configs it changes change.
func adoptionBundles(t *testing.T, update bool) map[string]*secrets.Bundle {
	t.Helper()

	paths := map[string]string{
		"secrets.yaml":       filepath.Join(adoptionFixtures, "secrets.yaml"),
		"other-cluster.yaml": filepath.Join(adoptionFixtures, "other-cluster.yaml"),
	}

	if _, err := os.Stat(paths["secrets.yaml"]); update && os.IsNotExist(err) {
		contract, err := config.ParseContractFromVersion("v1.14")
		if err != nil {
			t.Fatal(err)
		}

		clock := secrets.NewFixedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

		main, err := secrets.NewBundle(clock, contract)
		if err != nil {
			t.Fatal(err)
		}

		other, err := secrets.NewBundle(clock, contract)
		if err != nil {
			t.Fatal(err)
		}

		other.Certs.OS = main.Certs.OS

		if err = os.MkdirAll(adoptionFixtures, 0o755); err != nil {
			t.Fatal(err)
		}

		for name, bundle := range map[string]*secrets.Bundle{"secrets.yaml": main, "other-cluster.yaml": other} {
			raw, err := yaml.Marshal(bundle)
			if err != nil {
				t.Fatal(err)
			}

			writeFile(t, paths[name], raw)
		}
	}

	bundles := map[string]*secrets.Bundle{}

	for name, path := range paths {
		bundle, err := secrets.LoadBundle(path)
		if err != nil {
			t.Fatalf("the adoption fixtures' bundle %s: %v (make them with UPDATE_ADOPTION_FIXTURES=1)", path, err)
		}

		bundles[name] = bundle
	}

	return bundles
}

// adoptionConfig is the machine config of one node of cluster, as talosctl makes it.
func adoptionConfig(t *testing.T, cluster adoptionCluster, bundle *secrets.Bundle, node adoptionNode) []byte {
	t.Helper()

	contract, err := config.ParseContractFromVersion(cluster.Contract)
	if err != nil {
		t.Fatal(err)
	}

	input, err := generate.NewInput(cluster.ClusterName, cluster.Endpoint, cluster.KubernetesVersion,
		generate.WithSecretsBundle(bundle),
		generate.WithVersionContract(contract),
		generate.WithInstallDisk(cluster.InstallDisk),
		generate.WithInstallImage(cluster.InstallImage),
		generate.WithAdditionalSubjectAltNames(cluster.AdditionalSANs),
	)
	if err != nil {
		t.Fatal(err)
	}

	machineType, err := machine.ParseType(node.Type)
	if err != nil {
		t.Fatal(err)
	}

	provider, err := input.Config(machineType)
	if err != nil {
		t.Fatalf("the machinery generator: %v", err)
	}

	patches := append([]string{}, cluster.common...)
	if node.Type == "controlplane" {
		patches = append(patches, cluster.controlPlane...)
	} else {
		patches = append(patches, cluster.worker...)
	}

	patches = append(patches, node.Patches...)

	if len(patches) > 0 {
		loaded, err := configpatcher.LoadPatches(patches)
		if err != nil {
			t.Fatalf("the machinery patch loader: %v", err)
		}

		patched, err := configpatcher.Apply(configpatcher.WithConfig(provider), loaded)
		if err != nil {
			t.Fatalf("the machinery patcher: %v", err)
		}

		if provider, err = patched.Config(); err != nil {
			t.Fatal(err)
		}
	}

	// talosctl writes documentation comments by default, the Terraform provider none.
	comments := encoder.CommentsDisabled
	if cluster.Comments {
		comments = encoder.CommentsAll
	}

	out, err := provider.EncodeBytes(encoder.WithComments(comments))
	if err != nil {
		t.Fatal(err)
	}

	return out
}

// TestAdoptionFixtures: the committed fixture configs are the generator's for their inputs.
func TestAdoptionFixtures(t *testing.T) {
	update := os.Getenv("UPDATE_ADOPTION_FIXTURES") == "1"
	bundles := adoptionBundles(t, update)
	clusters := adoptionClusters()

	for index := range clusters {
		cluster := &clusters[index]
		directory := filepath.Join(adoptionFixtures, cluster.Name)

		if update {
			if err := os.MkdirAll(directory, 0o755); err != nil {
				t.Fatal(err)
			}
		}

		for position := range cluster.Nodes {
			node := &cluster.Nodes[position]
			bundle := bundles[cluster.Bundle]

			if node.Bundle != "" {
				bundle = bundles[node.Bundle]
			}

			node.File = node.Name + ".machineconfig" // not .yaml: ansible-test sanity takes a .yaml file for one document
			made := adoptionConfig(t, *cluster, bundle, *node)
			path := filepath.Join(directory, node.File)

			if update {
				writeFile(t, path, made)

				continue
			}

			committed, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (make the fixtures with UPDATE_ADOPTION_FIXTURES=1)", err)
			}

			if !bytes.Equal(committed, made) {
				t.Errorf("%s is not what the generator makes: UPDATE_ADOPTION_FIXTURES=1 writes it again", path)
			}
		}
	}

	manifest, err := yaml.Marshal(map[string]any{"clusters": clusters})
	if err != nil {
		t.Fatal(err)
	}

	manifest = append([]byte("# Written by tests/conformance/adoption_fixtures_test.go: the fixture clusters and their inputs.\n"), manifest...)
	path := filepath.Join(adoptionFixtures, "clusters.yaml")

	if update {
		writeFile(t, path, manifest)
		sortedFiles(t)

		return
	}

	committed, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(committed, manifest) {
		t.Errorf("%s is not the fixtures' manifest: UPDATE_ADOPTION_FIXTURES=1 writes it again", path)
	}
}

// sortedFiles lists what an update wrote, for the one running it.
func sortedFiles(t *testing.T) {
	t.Helper()

	var files []string

	if err := filepath.Walk(adoptionFixtures, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			files = append(files, strings.TrimPrefix(path, adoptionFixtures+"/"))
		}

		return err
	}); err != nil {
		t.Fatal(err)
	}

	sort.Strings(files)
	t.Logf("wrote %s", strings.Join(files, ", "))
}
