// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// writeUpstreamArtifacts writes, with Talos's own generator, what a talosctl user would
// hand the collection: a secrets bundle (gen secrets), configs for the emulated cluster
// from the cluster's bundle for a multi-document (v1.14) and a single-document (v1.11)
// contract (gen config: a config of another CA would lock the talosconfig out, which the
// collection refuses), and a talosconfig for the emulated cluster from the cluster's
// bundle. It returns the secret strings that must never appear in the collection's output.
func writeUpstreamArtifacts(t *testing.T, dir string, emu *emulatedCluster) []string {
	t.Helper()

	latest, err := config.ParseContractFromVersion("v1.14")
	if err != nil {
		t.Fatal(err)
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), latest)
	if err != nil {
		t.Fatal(err)
	}

	raw, err := yaml.Marshal(bundle)
	if err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(dir, "secrets.yaml"), raw)

	clusterBundle, err := secrets.LoadBundle(emu.path("secrets.yaml"))
	if err != nil {
		t.Fatalf("the machinery loader refuses the emulator's secrets bundle: %v", err)
	}

	for _, version := range []string{"v1.14", "v1.11"} {
		contract, err := config.ParseContractFromVersion(version)
		if err != nil {
			t.Fatal(err)
		}

		input, err := generate.NewInput("upstream", "https://cp.upstream.example:6443", "1.37.0",
			generate.WithSecretsBundle(clusterBundle), generate.WithVersionContract(contract))
		if err != nil {
			t.Fatal(err)
		}

		for _, machineType := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
			provider, err := input.Config(machineType)
			if err != nil {
				t.Fatal(err)
			}

			// As talosctl writes it: with documentation comments.
			out, err := provider.EncodeBytes(encoder.WithComments(encoder.CommentsAll))
			if err != nil {
				t.Fatal(err)
			}

			writeFile(t, filepath.Join(dir, version+"-"+machineType.String()+".yaml"), out)
		}
	}

	input, err := generate.NewInput(emu.Name, "https://"+emu.Nodes[0].Address+":6443", "1.37.0",
		generate.WithSecretsBundle(clusterBundle), generate.WithEndpointList([]string{emu.Endpoint}))
	if err != nil {
		t.Fatal(err)
	}

	talosconfig, err := input.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}

	if err = talosconfig.Save(filepath.Join(dir, "talosconfig")); err != nil {
		t.Fatal(err)
	}

	clientKey := talosconfig.Contexts[talosconfig.Context].Key
	decodedKey, err := base64.StdEncoding.DecodeString(clientKey)
	if err != nil {
		t.Fatal(err)
	}

	secretValues := []string{clientKey}
	keys := [][]byte{decodedKey}

	for _, each := range []*secrets.Bundle{bundle, clusterBundle} {
		secretValues = append(secretValues, each.Secrets.BootstrapToken, each.Secrets.SecretboxEncryptionSecret,
			each.TrustdInfo.Token, each.Cluster.Secret)
		keys = append(keys, each.Certs.OS.Key, each.Certs.K8s.Key, each.Certs.Etcd.Key, each.Certs.K8sAggregator.Key,
			each.Certs.K8sServiceAccount.Key)
	}

	for _, pem := range keys {
		secretValues = append(secretValues, base64.StdEncoding.EncodeToString(pem), pemBody(pem))
	}

	return secretValues
}

// pemBody is the first line of a PEM block's base64 body: enough to spot a leaked key.
func pemBody(pem []byte) string {
	lines := strings.Split(string(pem), "\n")
	if len(lines) < 2 {
		return string(pem)
	}

	return lines[1]
}

func writeFile(t *testing.T, path string, content []byte) {
	t.Helper()

	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkUpstreamArtifacts runs upstream_artifacts.yml: the collection's modules load the
// upstream bundle (talos_machine_secrets) and talosconfig (talos_client_config keeps its
// certificate; talos_apply_config connects with it) and dry-run patched upstream configs
// on a node, in check mode with --diff, at -vvv, and nothing secret shows in the output.
func checkUpstreamArtifacts(t *testing.T, emu *emulatedCluster, node string) {
	t.Helper()

	dir := t.TempDir()
	secretValues := writeUpstreamArtifacts(t, dir, emu)

	output, err := runPlaybook("upstream_artifacts.yml", "-vvv", "-e", "upstream_dir="+dir, "-e", "node="+node,
		"-e", "state_dir="+emu.StateDir, "-e", "cluster_name="+emu.Name, "-e", "endpoint="+emu.Endpoint)
	if err != nil {
		t.Fatal(err)
	}

	text := string(output)
	for _, secret := range secretValues {
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("a secret of the upstream artifacts appears in the playbook output (%d characters)", len(secret))
		}
	}

	if !strings.Contains(text, "<redacted") {
		t.Errorf("the diff shows no redacted secret at all:\n%s", tail(output))
	}
}

func tail(output []byte) string {
	if len(output) > 6000 {
		return string(output[len(output)-6000:])
	}

	return string(output)
}
