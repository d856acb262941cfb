// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
)

// A user's patches over a generated config: fields of most areas the migration moves.
const (
	userPatch = `machine:
  network:
    nameservers: [10.5.0.53, 1.1.1.1]
    searchDomains: [cluster.example]
    extraHostEntries:
      - {ip: 10.5.0.9, aliases: [gw.cluster.example]}
    kubespan:
      enabled: true
      mtu: 1380
  time:
    servers: [time.cluster.example]
    bootTimeout: 2m0s
  sysctls:
    vm.max_map_count: "262144"
  env:
    HTTPS_PROXY: http://proxy.cluster.example:3128
  nodeLabels:
    rack: r1
  nodeTaints:
    dedicated: db:NoSchedule
  nodeAnnotations:
    owner: platform
  kubelet:
    extraArgs:
      max-pods: "200"
    nodeIP:
      validSubnets: [10.5.0.0/16]
    clusterDNS: [10.96.0.10]
  kernel:
    modules:
      - name: br_netfilter
  registries:
    mirrors:
      docker.io:
        endpoints: [https://mirror.cluster.example]
        overridePath: true
    config:
      registry.cluster.example:
        auth:
          username: pull
          password: pull-secret
        tls:
          insecureSkipVerify: true
  udev:
    rules:
      - SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="44", MODE="0660"
  systemDiskEncryption:
    state:
      provider: luks2
      keys:
        - slot: 0
          nodeID: {}
        - slot: 1
          tpm:
            checkSecurebootStatusOnEnroll: true
    ephemeral:
      cipher: aes-xts-plain64
      keySize: 512
      options: [no_read_workqueue]
      keys:
        - slot: 0
          static:
            passphrase: ephemeral-passphrase
        - slot: 1
          kms:
            endpoint: https://kms.cluster.example
  files:
    - path: /etc/nfsmount.conf
      op: overwrite
      permissions: 0o600
      content: |
        [NFSMount_Global_Options]
        nfsvers=4.2
    - path: /etc/cri/conf.d/20-customization.part
      op: create
      permissions: 0o644
      content: |
        [plugins."io.containerd.cri.v1.images"]
          discard_unpacked_layers = false
  pods:
    - apiVersion: v1
      kind: Pod
      metadata:
        name: nginx
      spec:
        containers:
          - name: nginx
            image: nginx
`
	// Network interfaces the migration moves (eth0, its VLAN, a bond, a bridge and its ports - one of them a bond -, a
	// WireGuard and a dummy link, a DHCPv6 DUID) and those it leaves in v1alpha1 (a bond with a primary link, an
	// interface picked by deviceSelector); VIPs only on a control plane, as Talos allows, merged into eth0 and its VLAN by
	// the patcher.
	interfacesPatch = `machine:
  network:
    interfaces:
      - interface: eth0
        addresses: [10.5.0.2/24, 10.5.0.3]
        mtu: 9000
        routes:
          - network: 0.0.0.0/0
            gateway: 10.5.0.1
          - network: 10.9.0.0/16
            gateway: 10.5.0.254
            metric: 100
            mtu: 1400
        dhcp: true
        dhcpOptions:
          routeMetric: 512
          ipv6: true
        vlans:
          - vlanId: 100
            addresses: [192.168.100.2/24]
            mtu: 1500
            dhcp: true
            routes:
              - network: 192.168.0.0/16
                gateway: 192.168.100.1
      - interface: bond0
        bond:
          interfaces: [eth1, eth2]
          mode: 802.3ad
          lacpRate: fast
          xmitHashPolicy: layer3+4
          miimon: 100
          updelay: 200
          downdelay: 200
          adActorSysPrio: 1000
        dhcp: true
      - interface: bond1
        bond:
          interfaces: [eth7, eth8]
          mode: active-backup
          primary: eth7
      - interface: bond2
        bond:
          interfaces: [eth9]
        bridgePort:
          master: br0
      - interface: br0
        bridge:
          interfaces: [eth3]
          stp:
            enabled: true
        addresses: [10.6.0.2/24]
      - interface: eth4
        mtu: 9000
        bridgePort:
          master: br0
      - interface: wg0
        mtu: 1420
        addresses: [10.8.0.1/24]
        wireguard:
          privateKey: ` + wireguardPrivateKey + `
          listenPort: 51820
          firewallMark: 7
          peers:
            - publicKey: ` + wireguardPeerKey + `
              endpoint: 192.0.2.1:51820
              persistentKeepaliveInterval: 25s
              allowedIPs: [10.8.0.0/24, fd08::/64]
      - interface: dummy0
        dummy: true
        addresses: [169.254.10.1/32]
      - interface: eth5
        dhcp: true
        dhcpOptions:
          ipv4: false
          ipv6: true
          duidv6: 000100011A2B3C4D5E6F0011
      - deviceSelector:
          hardwareAddr: "00:00:5e:*"
          physical: true
        dhcp: true
`
	// WireGuard keys (base64 of 32 bytes) for the interfaces above.
	wireguardPrivateKey  = "cHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHA="
	wireguardPeerKey     = "cXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXE="
	controlPlaneVIPPatch = `machine:
  network:
    interfaces:
      - interface: eth0
        vip:
          ip: 10.5.0.10
        vlans:
          - vlanId: 100
            vip:
              ip: 192.168.100.10
              hcloud:
                apiToken: hcloud-token
`
	// Before the v1.12 contract the generator writes no HostnameConfig: a static hostname is the user's to set.
	hostnamePatch = `machine:
  network:
    hostname: node-1
`
	controlPlanePatch = `cluster:
  allowSchedulingOnControlPlanes: true
  apiServer:
    certSANs: [api.cluster.example]
    extraArgs:
      audit-log-maxage: "30"
  proxy:
    mode: ipvs
  coreDNS:
    image: registry.k8s.io/coredns/coredns:v1.12.0
  extraManifests: [https://manifests.cluster.example/a.yaml]
  inlineManifests:
    - name: ns
      contents: |
        apiVersion: v1
        kind: Namespace
        metadata:
          name: a
`
)

// migrationInput is one config upstream's generator made for a contract before v1.14, patched as a user would.
type migrationInput struct {
	name     string
	contract *config.VersionContract
	machine  machine.Type
	patches  []string
}

func migrationInputs() []migrationInput {
	var inputs []migrationInput

	for _, contract := range []*config.VersionContract{config.TalosVersion1_9, config.TalosVersion1_11, config.TalosVersion1_12, config.TalosVersion1_13} {
		for _, machineType := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
			base := fmt.Sprintf("v%d.%d-%s", contract.Major, contract.Minor, machineType)
			inputs = append(inputs, migrationInput{name: base, contract: contract, machine: machineType})

			patches := []string{userPatch}
			if !contract.Greater(config.TalosVersion1_11) {
				patches = append(patches, hostnamePatch)
			}

			if machineType == machine.TypeControlPlane {
				patches = append(patches, interfacesPatch, controlPlanePatch, controlPlaneVIPPatch)
			} else {
				patches = append(patches, interfacesPatch)
			}

			inputs = append(inputs, migrationInput{name: base + "-patched", contract: contract, machine: machineType, patches: patches})
		}
	}

	// A cluster made before Talos v1.3 encrypts with an aescbc secret, no secretbox one.
	return append(inputs, migrationInput{name: "v1.11-controlplane-aescbc", contract: config.TalosVersion1_11,
		machine: machine.TypeControlPlane, patches: []string{
			`[{"op": "move", "from": "/cluster/secretboxEncryptionSecret", "path": "/cluster/aescbcEncryptionSecret"}]`,
		}})
}

// migrationReport is migrate_configs.py's word on each config.
type migrationReport map[string]struct {
	Refusal *string `json:"refusal"`
	Steps   []struct {
		From  string `json:"from"`
		To    string `json:"to"`
		Field string `json:"field"`
	} `json:"steps"`
}

// TestMigratedConfigsValidateAndKeepTheEffectiveConfiguration: configs upstream's generator made for the v1.9 to
// v1.13 contracts (and patched as users do) are migrated by the collection; upstream's loader and validator take
// each migrated config, and what Talos v1.14 reads from it (every accessor of the config container that the
// documents feed) is what it read from the config before.
func TestMigratedConfigsValidateAndKeepTheEffectiveConfiguration(t *testing.T) {
	dir := t.TempDir()

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersion1_13)
	if err != nil {
		t.Fatal(err)
	}

	inputs := migrationInputs()
	originals := map[string]config.Provider{}

	for _, input := range inputs {
		originals[input.name] = writeGeneratedConfig(t, dir, bundle, input)
	}

	output, err := run(pythonCommand(), filepath.Join(repoRoot, "tests", "conformance", "migrate_configs.py"), dir)
	if err != nil {
		t.Fatalf("migrate_configs.py: %v", err)
	}

	var report migrationReport
	if err = json.Unmarshal(output, &report); err != nil {
		t.Fatalf("migrate_configs.py's report: %v\n%s", err, output)
	}

	for _, input := range inputs {
		t.Run(input.name, func(t *testing.T) {
			entry, ok := report[input.name+".yaml"]
			if !ok {
				t.Fatal("the collection did not migrate it")
			}

			if entry.Refusal != nil {
				t.Fatalf("the collection refuses to migrate it: %s", *entry.Refusal)
			}

			raw, err := os.ReadFile(filepath.Join(dir, input.name+".migrated.yaml"))
			if err != nil {
				t.Fatal(err)
			}

			migrated, err := configloader.NewFromBytes(raw)
			if err != nil {
				t.Fatalf("the machinery loader refuses the migrated config: %v", err)
			}

			if _, err = migrated.Validate(metalMode{}); err != nil {
				t.Fatalf("validation for metal fails: %v", err)
			}

			if kind := deprecatedLeft(t, raw); kind != "" {
				t.Errorf("the migrated config still sets %s", kind)
			}

			compareEffective(t, originals[input.name], migrated)
		})
	}
}

// writeGeneratedConfig writes what machinery's generator makes for input, patched with machinery's patcher.
func writeGeneratedConfig(t *testing.T, dir string, bundle *secrets.Bundle, input migrationInput) config.Provider {
	t.Helper()

	generation, err := generate.NewInput("migration", "https://cp.migration.example:6443", "1.33.0",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(input.contract),
		generate.WithInstallDisk("/dev/vda"), generate.WithInstallImage("ghcr.io/siderolabs/installer:v1.13.4"))
	if err != nil {
		t.Fatal(err)
	}

	provider, err := generation.Config(input.machine)
	if err != nil {
		t.Fatal(err)
	}

	if len(input.patches) > 0 {
		patches, err := configpatcher.LoadPatches(input.patches)
		if err != nil {
			t.Fatal(err)
		}

		patched, err := configpatcher.Apply(configpatcher.WithConfig(provider), patches)
		if err != nil {
			t.Fatal(err)
		}

		if provider, err = patched.Config(); err != nil {
			t.Fatal(err)
		}
	}

	if _, err = provider.Validate(metalMode{}); err != nil {
		t.Fatalf("upstream's own config for %s does not validate: %v", input.name, err)
	}

	raw, err := provider.EncodeBytes(encoder.WithComments(encoder.CommentsDocs))
	if err != nil {
		t.Fatal(err)
	}

	if err = os.WriteFile(filepath.Join(dir, input.name+".yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}

	return provider
}

// deprecatedLeft names a v1alpha1 section the migration should have emptied, if the migrated config still has it.
func deprecatedLeft(t *testing.T, raw []byte) string {
	t.Helper()

	root := documentsByKey(t, raw)["v1alpha1"]
	for _, path := range []string{"machine.kubelet", "machine.network.hostname", "machine.network.nameservers",
		"machine.network.searchDomains", "machine.network.extraHostEntries", "machine.network.kubespan", "machine.install", "machine.time", "machine.nodeLabels",
		"cluster.clusterName", "cluster.controlPlane", "cluster.network", "cluster.apiServer", "cluster.ca", "cluster.discovery",
		"cluster.id", "cluster.secretboxEncryptionSecret", "cluster.serviceAccount", "machine.features.hostDNS", "machine.registries",
		"machine.udev", "machine.pods", "machine.env", "machine.sysctls", "machine.kernel", "machine.systemDiskEncryption",
		"machine.files"} {
		current := any(root)

		for _, key := range strings.Split(path, ".") {
			mapping, ok := current.(map[string]any)
			if !ok {
				current = nil

				break
			}

			current = mapping[key]
		}

		if current != nil {
			return "." + path
		}
	}

	return ""
}

// Accessors judged by hand below, or not part of what the documents feed (the v1alpha1 interface itself).
var judgedApart = []string{"Debug", "Machine", "Cluster", "UnattendedInstallConfig", "K8sAuthenticationConfig", "K8sAuthorizerConfigs",
	"K8sEtcdEncryptionConfig", "Environment", "EtcFileConfigs", "NetworkCommonLinkConfigs", "NetworkDHCPConfigs",
	"NetworkDHCPv4Configs", "NetworkDHCPv6Configs", "NetworkVirtualIPConfigs"}

// Where Talos v1.14 itself reads the documents otherwise than the legacy fields (v1alpha1_k8s_bridge.go): with a
// KubeAPIServerConfig document kube-apiserver gets startup probes, the host's CA roots mounted and an authentication
// config, and the authorizers are the documents, not the defaults the legacy path injects (the migration writes those
// out: judged below); with a KubeProxyConfig document kube-proxy reads a config file. A v1alpha1 manifest is named
// by its URL, which no document's name may be (its URL and headers are compared); the v1alpha1 CRI customization is
// named "customization", which no document's name may be (its content is compared). With a link document Talos stops
// the DHCP it runs by default on the links no configuration names (the migration warns).
var documentSemantics = []string{"K8sAPIServerConfig.StartupProbesEnabled", "K8sAPIServerConfig.UseAuthenticationConfig",
	"K8sAPIServerConfig.InjectDefaultAuthorizers", "K8sAPIServerConfig.ExtraVolumes", "K8sProxyConfig.UseConfigFile",
	"K8sExternalManifestConfigs[].Name", "CRICustomizationConfigs[].Name", "RunDefaultDHCPOperators"}

// What a worker cannot carry: Talos refuses Flannel's document on a worker, which applies no CNI manifests.
var controlPlaneOnly = []string{"K8sFlannelCNIConfig"}

func compareEffective(t *testing.T, before, after config.Provider) {
	t.Helper()

	configType := reflect.TypeFor[config.Config]()
	for index := range configType.NumMethod() {
		method := configType.Method(index)
		if slices.Contains(judgedApart, method.Name) || method.Type.NumIn() != 0 || method.Type.NumOut() != 1 {
			continue
		}

		if !before.Machine().Type().IsControlPlane() && slices.Contains(controlPlaneOnly, method.Name) {
			continue
		}

		was := accessorValue(reflect.ValueOf(before).MethodByName(method.Name).Call(nil)[0], method.Type.Out(0), 0)
		is := accessorValue(reflect.ValueOf(after).MethodByName(method.Name).Call(nil)[0], method.Type.Out(0), 0)

		if method.Name == "NetworkHostnameConfig" {
			was, is = staticHostnameWins(was), staticHostnameWins(is)
		}

		for _, difference := range valueDifferences(method.Name, was, is) {
			t.Errorf("%s", difference)
		}
	}

	// The environment is .machine.env under what EnvironmentConfig documents set.
	environment := map[string]string{}
	maps.Copy(environment, before.Machine().Env())

	if before.Environment() != nil {
		maps.Copy(environment, before.Environment().Variables())
	}

	if after.Environment() == nil || !maps.Equal(after.Environment().Variables(), environment) || len(after.Machine().Env()) != 0 {
		t.Errorf("environment: before %v, after %v", environment, after.Environment())
	}

	// STATE and EPHEMERAL are encrypted as their VolumeConfig says, or else as .machine.systemDiskEncryption says
	// (volumeconfig/system_volumes.go).
	for _, volume := range []string{"STATE", "EPHEMERAL"} {
		was := accessorValue(reflect.ValueOf(diskEncryption(before, volume)), reflect.TypeFor[configconfig.EncryptionConfig](), 0)
		is := accessorValue(reflect.ValueOf(diskEncryption(after, volume)), reflect.TypeFor[configconfig.EncryptionConfig](), 0)

		for _, difference := range valueDifferences(volume+" encryption", was, is) {
			t.Errorf("%s", difference)
		}
	}

	if was, is := effectiveNetwork(before), effectiveNetwork(after); !slices.Equal(was, is) {
		t.Errorf("network: before\n%s\nafter\n%s", strings.Join(was, "\n"), strings.Join(is, "\n"))
	}

	if was, is := etcFiles(t, before), etcFiles(t, after); !maps.Equal(was, is) {
		t.Errorf("files under /etc: before %v, after %v", was, is)
	}

	legacyInstall := before.Machine().Install()
	install := after.UnattendedInstallConfig()

	if install == nil {
		t.Fatal("the migrated config has no UnattendedInstallConfig")
	}

	if install.InstallerImage() != legacyInstall.Image() || install.VolumeWipe() != legacyInstall.Zero() ||
		install.VolumeSelector().String() != fmt.Sprintf("disk.dev_path == %q", legacyInstall.Disk()) {
		t.Errorf("install: image %q wipe %v selector %q, before image %q wipe %v disk %q", install.InstallerImage(), install.VolumeWipe(),
			install.VolumeSelector().String(), legacyInstall.Image(), legacyInstall.Zero(), legacyInstall.Disk())
	}

	if !before.Machine().Type().IsControlPlane() {
		return
	}

	// The legacy path authorizes with Node and RBAC before the config's own authorizers.
	var authorizers []string
	for _, authorizer := range after.K8sAuthorizerConfigs() {
		authorizers = append(authorizers, authorizer.Type()+"/"+authorizer.Name())
	}

	if want := []string{"Node/node", "RBAC/rbac"}; !slices.Equal(authorizers, want) || len(before.K8sAuthorizerConfigs()) != 0 {
		t.Errorf("authorizers %v, want %v", authorizers, want)
	}

	// What the legacy path renders for kube-apiserver's encryption: secretbox key2, aescbc key1, then identity.
	encryption := after.K8sEtcdEncryptionConfig()
	if encryption == nil || before.K8sEtcdEncryptionConfig() != nil {
		t.Fatal("the migrated control plane has no KubeEtcdEncryptionConfig, or the original had one")
	}

	var providers []any

	for _, provider := range []struct{ kind, key, secret string }{
		{"secretbox", "key2", before.Cluster().SecretboxEncryptionSecret()}, {"aescbc", "key1", before.Cluster().AESCBCEncryptionSecret()},
	} {
		if provider.secret != "" {
			providers = append(providers, map[string]any{provider.kind: map[string]any{"keys": []any{
				map[string]any{"name": provider.key, "secret": provider.secret},
			}}})
		}
	}

	want := map[string]any{"resources": []any{map[string]any{"resources": []any{"secrets"},
		"providers": append(providers, map[string]any{"identity": map[string]any{}})}}}

	if got := normalized(t, encryption.EtcdEncryptionConfig()); !reflect.DeepEqual(got, normalized(t, want)) {
		t.Errorf("etcd encryption config %v, want %v", got, want)
	}

	if after.K8sAuthenticationConfig() == nil {
		t.Error("the migrated control plane has no KubeAuthenticationConfig beside its KubeAPIServerConfig")
	}
}

// diskEncryption is how Talos encrypts a system volume: its VolumeConfig's encryption, else the v1alpha1 one.
func diskEncryption(cfg config.Provider, volume string) configconfig.EncryptionConfig {
	if document, ok := cfg.Volumes().ByName(volume); ok && document.Encryption() != nil {
		return document.Encryption()
	}

	return cfg.Machine().SystemDiskEncryption().Get(volume)
}

// effectiveNetwork is what Talos's network controllers make of a config's links (link_config.go, address_config.go,
// route_config.go, operator_config.go, operator_vip_config.go): links, addresses, routes, DHCP operators and VIPs, from
// the v1alpha1 interfaces as the legacy path reads them and from the documents, one sorted line each: a bond's options
// and links, a bridge's ports, a WireGuard link's keys and peers, a dummy link, a DHCPv6 DUID as link_config.go,
// network.go and operator_config.go read them. An interface picked by deviceSelector, or ignored, is its accessor's
// whole value.
func effectiveNetwork(cfg config.Provider) []string {
	var lines []string

	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	route := func(link string, destination netip.Prefix, gateway, source netip.Addr, metric, mtu uint32) {
		if metric == 0 {
			metric = 1024 // network.DefaultRouteMetric
		}

		if destination.Bits() == 0 {
			destination = netip.Prefix{}
		}

		add("route %s %v via %v src %v metric %d mtu %d table main", link, destination, gateway, source, metric, mtu)
	}
	legacyLink := func(link string, mtu uint32, addresses []string, hostPrefix bool, routes []configconfig.Route, dhcp bool,
		options configconfig.DHCPOptions, vip configconfig.VIPConfig,
	) {
		add("link %s up mtu %d", link, mtu)

		for _, address := range addresses {
			prefix, err := netip.ParsePrefix(address)
			if err != nil && hostPrefix {
				if addr, addrErr := netip.ParseAddr(address); addrErr == nil {
					prefix, err = netip.PrefixFrom(addr, addr.BitLen()), nil
				}
			}

			if err == nil {
				add("address %s %v", link, prefix)
			}
		}

		for _, r := range routes {
			destination, _ := netip.ParsePrefix(r.Network()) //nolint:errcheck
			gateway, _ := netip.ParseAddr(r.Gateway())       //nolint:errcheck
			source, _ := netip.ParseAddr(r.Source())         //nolint:errcheck
			route(link, destination, gateway, source, r.Metric(), r.MTU())
		}

		if dhcp && options.IPv4() {
			add("dhcp4 %s metric %d client-id none", link, cmp.Or(options.RouteMetric(), 1024))
		}

		if dhcp && options.IPv6() {
			// The DUID goes as hex text to the operator, which decodes it (operator/client_identifier.go).
			clientID := "none"
			if duid, err := hex.DecodeString(options.DUIDv6()); err == nil && len(duid) > 0 {
				clientID = "duid " + hex.EncodeToString(duid)
			}

			add("dhcp6 %s metric %d client-id %s", link, cmp.Or(options.RouteMetric(), 1024), clientID)
		}

		if vip != nil {
			token := ""
			if vip.HCloud() != nil {
				token = "hcloud " + vip.HCloud().APIToken()
			}

			add("vip %s %s %s", link, vip.IP(), token)
		}
	}

	for _, device := range cfg.Machine().Network().Devices() {
		if device.Selector() != nil || device.Ignore() {
			add("v1alpha1 %v", accessorValue(reflect.ValueOf(device), reflect.TypeFor[configconfig.Device](), 0))

			continue
		}

		legacyLink(device.Interface(), uint32(device.MTU()), device.Addresses(), true, device.Routes(), device.DHCP(),
			device.DHCPOptions(), device.VIPConfig())

		if bridge := device.Bridge(); bridge != nil {
			add("bridge %s stp %v filtering %v", device.Interface(), bridge.STP().Enabled(), bridge.VLAN().FilteringEnabled())

			for _, port := range bridge.Interfaces() {
				add("bridge-port %s master %s", port, device.Interface())
			}
		}

		if port := device.BridgePort(); port != nil {
			add("bridge-port %s master %s", device.Interface(), port.Master())
		}

		if bond := device.Bond(); bond != nil {
			add("%s", legacyBond(device.Interface(), bond))
		}

		if wireguard := device.WireguardConfig(); wireguard != nil {
			add("wireguard %s key %s port %d mark %d", device.Interface(), wireguard.PrivateKey(), wireguard.ListenPort(), wireguard.FirewallMark())

			for _, peer := range wireguard.Peers() {
				// wireguardLinkLegacy parses the allowed IPs as prefixes and sends no preshared key.
				allowed := make([]netip.Prefix, 0, len(peer.AllowedIPs()))
				for _, prefix := range peer.AllowedIPs() {
					allowed = append(allowed, netip.MustParsePrefix(prefix))
				}

				add("wireguard-peer %s %s psk %q endpoint %s keepalive %v allowed %v", device.Interface(), peer.PublicKey(), "",
					peer.Endpoint(), peer.PersistentKeepaliveInterval(), allowed)
			}
		}

		if device.Dummy() {
			add("dummy %s", device.Interface())
		}

		for _, vlan := range device.Vlans() {
			link := fmt.Sprintf("%s.%d", device.Interface(), vlan.ID())
			add("vlan %s parent %s id %d mode %s", link, device.Interface(), vlan.ID(), vlan.Mode())
			legacyLink(link, vlan.MTU(), vlan.Addresses(), false, vlan.Routes(), vlan.DHCP(), vlan.DHCPOptions(), vlan.VIPConfig())
		}
	}

	for _, link := range cfg.NetworkCommonLinkConfigs() {
		add("link %s up mtu %d", link.Name(), link.MTU().ValueOrZero())

		if !link.Up().ValueOr(true) {
			add("link %s down", link.Name())
		}

		if bridge, ok := link.(configconfig.NetworkBridgeConfig); ok {
			add("bridge %s stp %v filtering %v", link.Name(), bridge.STP().Enabled().ValueOrZero(),
				bridge.VLAN().FilteringEnabled().ValueOrZero())

			for _, port := range bridge.Links() {
				add("bridge-port %s master %s", port, link.Name())
			}
		}

		if bond, ok := link.(configconfig.NetworkBondConfig); ok {
			add("%s", documentBond(link.Name(), bond))
		}

		if wireguard, ok := link.(configconfig.NetworkWireguardConfig); ok {
			add("wireguard %s key %s port %d mark %d", link.Name(), wireguard.PrivateKey(), wireguard.ListenPort().ValueOrZero(),
				wireguard.FirewallMark().ValueOrZero())

			for _, peer := range wireguard.Peers() {
				add("wireguard-peer %s %s psk %q endpoint %s keepalive %v allowed %v", link.Name(), peer.PublicKey(),
					peer.PresharedKey().ValueOrZero(), peer.Endpoint().ValueOrZero(), peer.PersistentKeepalive().ValueOrZero(), peer.AllowedIPs())
			}
		}

		if _, ok := link.(configconfig.NetworkDummyLinkConfig); ok {
			add("dummy %s", link.Name())
		}

		if vlan, ok := link.(configconfig.NetworkVLANConfig); ok {
			add("vlan %s parent %s id %d mode %s", link.Name(), vlan.ParentLink(), vlan.VLANID(),
				vlan.VLANMode().ValueOr(nethelpers.VLANProtocol8021Q))
		}

		for _, address := range link.Addresses() {
			add("address %s %v", link.Name(), address.Address())
		}

		for _, r := range link.Routes() {
			if r.Table().ValueOr(nethelpers.TableMain) != nethelpers.TableMain {
				add("route %s in table %s", link.Name(), r.Table().ValueOrZero())
			}

			route(link.Name(), r.Destination().ValueOrZero(), r.Gateway().ValueOrZero(), r.Source().ValueOrZero(),
				r.Metric().ValueOrZero(), r.MTU().ValueOrZero())
		}
	}

	for _, dhcp := range cfg.NetworkDHCPv4Configs() {
		add("dhcp4 %s metric %d client-id %s", dhcp.Name(), dhcp.RouteMetric().ValueOr(1024), dhcp.ClientIdentifier())
	}

	for _, dhcp := range cfg.NetworkDHCPv6Configs() {
		clientID := dhcp.ClientIdentifier().String()
		if duid, ok := dhcp.DUIDRaw().Get(); ok {
			clientID += " " + hex.EncodeToString(duid)
		}

		add("dhcp6 %s metric %d client-id %s", dhcp.Name(), dhcp.RouteMetric().ValueOr(1024), clientID)
	}

	for _, vip := range cfg.NetworkVirtualIPConfigs() {
		token := ""
		if hcloud, ok := vip.(configconfig.NetworkHCloudVIPConfig); ok {
			token = "hcloud " + hcloud.HCloudAPIToken()
		}

		add("vip %s %s %s", vip.Link(), vip.VIP(), token)
	}

	slices.Sort(lines)

	return lines
}

// legacyBond is the bond SetBondMasterLegacy (controllers/network/network.go) builds from a v1alpha1 bond: its options
// by name (an empty one is the first), its primary link, no ARP or NS targets, no LACP active, no missed max; the
// links in order (their index is the slave's). useCarrier is left out: Talos forces it either way.
func legacyBond(name string, bond configconfig.Bond) string {
	mode, _ := nethelpers.BondModeByName(bond.Mode())                       //nolint:errcheck
	hash, _ := nethelpers.BondXmitHashPolicyByName(bond.HashPolicy())       //nolint:errcheck
	lacp, _ := nethelpers.LACPRateByName(bond.LACPRate())                   //nolint:errcheck
	validate, _ := nethelpers.ARPValidateByName(bond.ARPValidate())         //nolint:errcheck
	all, _ := nethelpers.ARPAllTargetsByName(bond.ARPAllTargets())          //nolint:errcheck
	reselect, _ := nethelpers.PrimaryReselectByName(bond.PrimaryReselect()) //nolint:errcheck
	failOver, _ := nethelpers.FailOverMACByName(bond.FailOverMac())         //nolint:errcheck
	adSelect, _ := nethelpers.ADSelectByName(bond.ADSelect())               //nolint:errcheck

	return fmt.Sprintf("bond %s links %v mode %s hash %s lacp %s arp-validate %s arp-all %s primary %q reselect %s failover %s "+
		"ad-select %s miimon %d updelay %d downdelay %d arp-interval %d arp-targets %v ns-targets %v resend-igmp %d min-links %d "+
		"lp-interval %d packets-per-slave %d peer-notif %d tlb %d all-active %d sys-prio %d port-key %d lacp-active %v "+
		"notify-delay %d missed-max %d",
		name, bond.Interfaces(), mode, hash, lacp, validate, all, bond.Primary(), reselect, failOver, adSelect, bond.MIIMon(),
		bond.UpDelay(), bond.DownDelay(), bond.ARPInterval(), []netip.Addr(nil), []netip.Addr(nil), bond.ResendIGMP(), bond.MinLinks(),
		bond.LPInterval(), bond.PacketsPerSlave(), bond.NumPeerNotif(), bond.TLBDynamicLB(), bond.AllSlavesActive(),
		bond.ADActorSysPrio(), bond.ADUserPortKey(), "unset", bond.PeerNotifyDelay(), 0)
}

// documentBond is the bond SendBondMaster builds from a BondConfig: what it leaves unset is zero, it has no primary link.
func documentBond(name string, bond configconfig.NetworkBondConfig) string {
	lacpActive := "unset"
	if active, ok := bond.ADLACPActive().Get(); ok {
		lacpActive = active.String()
	}

	return fmt.Sprintf("bond %s links %v mode %s hash %s lacp %s arp-validate %s arp-all %s primary %q reselect %s failover %s "+
		"ad-select %s miimon %d updelay %d downdelay %d arp-interval %d arp-targets %v ns-targets %v resend-igmp %d min-links %d "+
		"lp-interval %d packets-per-slave %d peer-notif %d tlb %d all-active %d sys-prio %d port-key %d lacp-active %v "+
		"notify-delay %d missed-max %d",
		name, bond.Links(), bond.Mode(), bond.XmitHashPolicy().ValueOrZero(), bond.LACPRate().ValueOrZero(),
		bond.ARPValidate().ValueOrZero(), bond.ARPAllTargets().ValueOrZero(), "", bond.PrimaryReselect().ValueOrZero(),
		bond.FailOverMAC().ValueOrZero(), bond.ADSelect().ValueOrZero(), bond.MIIMon().ValueOrZero(), bond.UpDelay().ValueOrZero(),
		bond.DownDelay().ValueOrZero(), bond.ARPInterval().ValueOrZero(), bond.ARPIPTargets(), bond.NSIP6Targets(),
		bond.ResendIGMP().ValueOrZero(), bond.MinLinks().ValueOrZero(), bond.LPInterval().ValueOrZero(),
		bond.PacketsPerSlave().ValueOrZero(), bond.NumPeerNotif().ValueOrZero(), bond.TLBDynamicLB().ValueOrZero(),
		bond.AllSlavesActive().ValueOrZero(), bond.ADActorSysPrio().ValueOrZero(), bond.ADUserPortKey().ValueOrZero(), lacpActive,
		bond.PeerNotifyDelay().ValueOrZero(), bond.MissedMax().ValueOrZero())
}

// etcFiles is what Talos writes under /etc from a config: the v1alpha1 files that replace one there (bind-mounted over
// it; the CRI customization is the CRI's), then the EtcFileConfig documents.
func etcFiles(t *testing.T, cfg config.Provider) map[string]string {
	t.Helper()

	files, err := cfg.Machine().Files()
	if err != nil {
		t.Fatal(err)
	}

	written := map[string]string{}

	for _, file := range files {
		if name, ok := strings.CutPrefix(file.Path(), "/etc/"); ok && file.Op() == "overwrite" && !strings.HasPrefix(name, "cri/") {
			written[name] = fmt.Sprintf("%v %q", file.Permissions(), file.Content())
		}
	}

	for _, file := range cfg.EtcFileConfigs() {
		written[file.Name()] = fmt.Sprintf("%v %q", file.Mode(), file.Content())
	}

	return written
}

// staticHostnameWins leaves out the automatic hostname's kind where a static hostname is set: the static one is the
// node's hostname either way, and a HostnameConfig cannot name both.
func staticHostnameWins(value any) any {
	fields, ok := value.(map[string]any)
	if !ok || empty(fields["Hostname"]) {
		return value
	}

	fields = maps.Clone(fields)
	delete(fields, "AutoHostname")

	return fields
}

func normalized(t *testing.T, value any) any {
	t.Helper()

	raw, err := json.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}

	var out any
	if err = json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}

	return out
}

// accessorValue is what a config accessor's result says, as plain values: every method without arguments of an
// interface it returns, read recursively; slices and maps item by item; anything else as it is (a Stringer as its
// text).
func accessorValue(value reflect.Value, static reflect.Type, depth int) any {
	if depth > 8 || !value.IsValid() {
		return nil
	}

	switch value.Kind() { //nolint:exhaustive
	case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if value.IsNil() {
			return nil
		}
	}

	if static.Kind() == reflect.Interface && static.NumMethod() > 0 {
		if stringer, ok := value.Interface().(fmt.Stringer); ok && static.NumMethod() == 1 {
			return stringer.String()
		}

		fields := map[string]any{}

		for index := range static.NumMethod() {
			method := static.Method(index)
			if method.Type.NumIn() != 0 || method.Type.NumOut() == 0 || method.Type.NumOut() > 2 || strings.HasSuffix(method.Name, "Signal") {
				continue
			}

			results := value.MethodByName(method.Name).Call(nil)
			fields[method.Name] = accessorValue(results[0], method.Type.Out(0), depth+1)
		}

		return fields
	}

	switch value.Kind() { //nolint:exhaustive
	case reflect.Interface:
		return accessorValue(value.Elem(), value.Elem().Type(), depth+1)
	case reflect.Pointer: // what it points to (a selector's *bool), never its address
		return accessorValue(value.Elem(), value.Type().Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if value.Type().Elem().Kind() == reflect.Uint8 {
			return string(value.Bytes())
		}

		items := make([]any, value.Len())
		for index := range value.Len() {
			items[index] = accessorValue(value.Index(index), value.Type().Elem(), depth+1)
		}

		return items
	case reflect.Map:
		items := map[string]any{}
		for _, key := range value.MapKeys() {
			items[fmt.Sprint(key.Interface())] = accessorValue(value.MapIndex(key), value.Type().Elem(), depth+1)
		}

		return items
	case reflect.Func, reflect.Chan:
		return nil
	}

	if stringer, ok := value.Interface().(fmt.Stringer); ok {
		return stringer.String()
	}

	return value.Interface()
}

// valueDifferences lists where two accessor values differ, by dotted path; absent and empty count alike, since a
// document's empty list or map is the legacy field's absence.
func valueDifferences(path string, was, is any) []string {
	var differences []string

	eachDifference(path, was, is, func(path string, was, is any) bool {
		return slices.Contains(documentSemantics, listIndex.ReplaceAllString(path, "[]")) || (empty(was) && empty(is))
	}, func(path string, was, is any) {
		differences = append(differences, fmt.Sprintf("%s: before %s, after %s", path, show(was), show(is)))
	})

	return differences
}

var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// empty: nothing, or a structure of nothing (an accessor's object whose every value is empty).
func empty(value any) bool {
	if value == nil {
		return true
	}

	if fields, ok := value.(map[string]any); ok {
		for _, field := range fields {
			if !empty(field) {
				return false
			}
		}

		return true
	}

	reflected := reflect.ValueOf(value)
	switch reflected.Kind() { //nolint:exhaustive
	case reflect.Slice, reflect.String:
		return reflected.Len() == 0
	}

	return reflected.IsZero()
}
