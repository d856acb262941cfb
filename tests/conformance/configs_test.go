// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// renderedConfig is one entry of render_configs.py's manifest: a config
// talos_machine_config generated (render_configs.yml) and the inputs it was generated from.
type renderedConfig struct {
	File              string   `json:"file"`
	Contract          string   `json:"contract"`
	MachineType       string   `json:"machine_type"`
	ClusterName       string   `json:"cluster_name"`
	ClusterEndpoint   string   `json:"cluster_endpoint"`
	KubernetesVersion string   `json:"kubernetes_version"`
	InstallDisk       string   `json:"install_disk"`
	InstallImage      string   `json:"install_image"`
	InstallHome       string   `json:"install_home"`
	AdditionalSANs    []string `json:"additional_sans"`
	Patches           []string `json:"patches_yaml"`
	WithDocs          bool     `json:"with_docs"`
	WithExamples      bool     `json:"with_examples"`
}

type renderManifest struct {
	Secrets       string           `json:"secrets"`
	Configs       []renderedConfig `json:"configs"`
	ModuleSamples []renderedConfig `json:"module_samples"`
}

var (
	renderOnce   sync.Once
	renderDir    string
	rendered     renderManifest
	renderFailed error
)

// collectionConfigs has the collection make, once per test run, a secrets bundle
// (talos_machine_secrets) and every planned config: a sample through
// talos_machine_config, all of them with the code that module runs.
func collectionConfigs(t *testing.T) (string, renderManifest) {
	t.Helper()

	renderOnce.Do(func() {
		renderDir, renderFailed = os.MkdirTemp("", "conformance-configs-")
		if renderFailed != nil {
			return
		}

		manifest := filepath.Join(renderDir, "manifest.json")

		renderer := filepath.Join(repoRoot, "tests", "conformance", "render_configs.py")

		if _, renderFailed = run(pythonCommand(), renderer, "plan", renderDir); renderFailed != nil {
			return
		}

		if _, renderFailed = runPlaybook("render_configs.yml", "-e", "@"+manifest, "-e", "out_dir="+renderDir); renderFailed != nil {
			return
		}

		if _, renderFailed = run(pythonCommand(), renderer, "render", renderDir); renderFailed != nil {
			return
		}

		var raw []byte

		if raw, renderFailed = os.ReadFile(manifest); renderFailed == nil {
			renderFailed = json.Unmarshal(raw, &rendered)
		}
	})

	if renderFailed != nil {
		t.Fatalf("rendering the collection's configs: %v", renderFailed)
	}

	return renderDir, rendered
}

// pythonCommand is the Python with the collection's requirements: $PYTHON, else python on PATH.
func pythonCommand() string {
	if python := os.Getenv("PYTHON"); python != "" {
		return python
	}

	return "python"
}

func run(name string, args ...string) ([]byte, error) {
	command := exec.Command(name, args...)
	command.Dir = repoRoot
	command.Env = append(os.Environ(), "ANSIBLE_NOCOLOR=1")

	output, err := command.CombinedOutput()
	if err != nil {
		return output, fmt.Errorf("%s %v: %w\n%s", filepath.Base(name), args, err, tail(output))
	}

	return output, nil
}

// runPlaybook runs one of this directory's playbooks on localhost with the Python on PATH,
// the one with the collection's requirements.
func runPlaybook(playbook string, args ...string) ([]byte, error) {
	python, err := exec.LookPath(pythonCommand())
	if err != nil {
		return nil, err
	}

	args = append([]string{"-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + python,
		filepath.Join(repoRoot, "tests", "conformance", playbook)}, args...)

	return run("ansible-playbook", args...)
}

func TestMain(m *testing.M) {
	code := m.Run()

	if renderDir != "" {
		os.RemoveAll(renderDir) //nolint:errcheck
	}

	os.Exit(code)
}

// TestModuleRendersLikeTheHarness: talos_machine_config's own output is byte-identical
// to the renderings the other tests judge.
func TestModuleRendersLikeTheHarness(t *testing.T) {
	dir, manifest := collectionConfigs(t)

	if len(manifest.ModuleSamples) == 0 {
		t.Fatal("no module samples")
	}

	for _, entry := range manifest.ModuleSamples {
		fromModule, err := os.ReadFile(filepath.Join(dir, "module-"+entry.File))
		if err != nil {
			t.Fatal(err)
		}

		rendered, err := os.ReadFile(filepath.Join(dir, entry.File))
		if err != nil {
			t.Fatal(err)
		}

		if !bytes.Equal(fromModule, rendered) {
			t.Errorf("%s: talos_machine_config wrote other bytes than the harness rendered", entry.File)
		}
	}
}

// metalMode is the runtime mode of an installed bare-metal (or VM) node, the mode
// talosctl validates generated configs for.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return true }
func (metalMode) InContainer() bool     { return false }

// TestCollectionConfigsPassUpstreamValidation loads every generated config with the
// machinery loader and validates it for metal in strict mode (warnings are failures);
// the "-documented" ones carry with_docs and with_examples comments.
func TestCollectionConfigsPassUpstreamValidation(t *testing.T) {
	dir, manifest := collectionConfigs(t)

	if len(manifest.Configs) == 0 {
		t.Fatal("the renderer produced no configs")
	}

	for _, entry := range manifest.Configs {
		t.Run(entry.File, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, entry.File))
			if err != nil {
				t.Fatal(err)
			}

			if entry.WithDocs && entry.WithExamples && (!bytes.Contains(raw, []byte("\n# ")) || !bytes.Contains(raw, []byte("# Example, "))) {
				t.Errorf("rendered with_docs and with_examples, but it holds no documentation or example comments")
			}

			provider, err := configloader.NewFromBytes(raw)
			if err != nil {
				t.Fatalf("the machinery loader refuses it: %v", err)
			}

			warnings, err := provider.Validate(metalMode{}, validation.WithStrict())
			if err != nil {
				t.Errorf("strict validation for metal fails: %v", err)
			}

			if len(warnings) > 0 {
				t.Errorf("validation warnings: %v", warnings)
			}

			wantType := machine.TypeWorker
			if entry.MachineType == "controlplane" {
				wantType = machine.TypeControlPlane
			}

			if got := provider.Machine().Type(); got != wantType {
				t.Errorf("machine type %s, want %s", got, wantType)
			}

			if got := provider.K8sClusterConfig().ClusterEndpoint(); got == nil || got.String() != entry.ClusterEndpoint {
				t.Errorf("cluster endpoint %v, want %s", got, entry.ClusterEndpoint)
			}
		})
	}
}

// TestCollectionConfigsMatchUpstreamGenerator loads the collection's secrets bundle with
// the machinery bundle loader, generates every config again with the machinery
// generator from the same inputs (and the same patches, with the machinery patcher)
// and compares document by document, parsed. Differences not in
// generator-allowlist.yaml fail the test.
func TestCollectionConfigsMatchUpstreamGenerator(t *testing.T) {
	dir, manifest := collectionConfigs(t)

	bundle, err := secrets.LoadBundle(filepath.Join(dir, manifest.Secrets))
	if err != nil {
		t.Fatalf("the machinery loader refuses the collection's secrets bundle: %v", err)
	}

	allowed := loadAllowList(t)
	used := map[int]bool{}

	for _, entry := range manifest.Configs {
		t.Run(entry.File, func(t *testing.T) {
			contract, err := config.ParseContractFromVersion(entry.Contract)
			if err != nil {
				t.Fatal(err)
			}

			if err = bundle.Validate(contract); err != nil {
				t.Fatalf("the collection's secrets bundle is invalid for %s: %v", entry.Contract, err)
			}

			upstream := upstreamConfig(t, bundle, contract, entry)

			ours, err := os.ReadFile(filepath.Join(dir, entry.File))
			if err != nil {
				t.Fatal(err)
			}

			for _, difference := range compareConfigs(t, upstream, ours) {
				index := allowed.match(entry, difference)
				if index < 0 {
					t.Errorf("%s", difference)

					continue
				}

				used[index] = true
			}
		})
	}

	for index, entry := range allowed {
		if !used[index] {
			t.Errorf("generator-allowlist.yaml entry %q %q no longer matches any difference: remove it", entry.Document, entry.Path)
		}
	}
}

// upstreamConfig is what machinery's generator makes for entry's inputs, patched alike.
func upstreamConfig(t *testing.T, bundle *secrets.Bundle, contract *config.VersionContract, entry renderedConfig) []byte {
	t.Helper()

	// machinery's generator has no option for .machine.install on a contract with the
	// UnattendedInstallConfig document: for install_home machine, it leaves the document out
	// and the section comes from what it writes for the last contract without the document.
	machineHome := entry.InstallHome == "machine" && contract.UnattendedInstallConfig()

	machineType, err := machine.ParseType(entry.MachineType)
	if err != nil {
		t.Fatal(err)
	}

	provider := generatedConfig(t, bundle, contract, entry, machineType, generate.WithSkipUnattendedInstallConfig(machineHome))

	if machineHome {
		install := generatedConfig(t, bundle, config.TalosVersion1_13, entry, machineType).RawV1Alpha1().MachineConfig.MachineInstall //nolint:staticcheck

		provider, err = provider.PatchV1Alpha1(func(cfg *v1alpha1.Config) error {
			cfg.MachineConfig.MachineInstall = install //nolint:staticcheck

			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	patches, err := configpatcher.LoadPatches(entry.Patches)
	if err != nil {
		t.Fatalf("the machinery patch loader refuses the collection's patches: %v", err)
	}

	patched, err := configpatcher.Apply(configpatcher.WithConfig(provider), patches)
	if err != nil {
		t.Fatalf("the machinery patcher: %v", err)
	}

	result, err := patched.Config()
	if err != nil {
		t.Fatal(err)
	}

	out, err := result.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return out
}

// generatedConfig is machinery's generator's config for entry's inputs under contract.
func generatedConfig(t *testing.T, bundle *secrets.Bundle, contract *config.VersionContract, entry renderedConfig,
	machineType machine.Type, options ...generate.Option,
) config.Provider {
	t.Helper()

	input, err := generate.NewInput(entry.ClusterName, entry.ClusterEndpoint, entry.KubernetesVersion,
		append([]generate.Option{
			generate.WithSecretsBundle(bundle),
			generate.WithVersionContract(contract),
			generate.WithInstallDisk(entry.InstallDisk),
			generate.WithInstallImage(entry.InstallImage),
			generate.WithAdditionalSubjectAltNames(entry.AdditionalSANs),
		}, options...)...,
	)
	if err != nil {
		t.Fatal(err)
	}

	provider, err := input.Config(machineType)
	if err != nil {
		t.Fatalf("the machinery generator: %v", err)
	}

	return provider
}

// difference is one place where our document differs from upstream's.
type difference struct {
	Document string
	Path     string
	Upstream any
	Ours     any
}

func (d difference) String() string {
	return fmt.Sprintf("document %s, %s: upstream %s, ours %s", d.Document, d.Path, show(d.Upstream), show(d.Ours))
}

func show(value any) string {
	if value == nil {
		return "(absent)"
	}

	out, err := json.Marshal(value)
	if err != nil {
		return fmt.Sprint(value)
	}

	if len(out) > 200 {
		return string(out[:200]) + "..."
	}

	return string(out)
}

// compareConfigs parses both multi-document configs and lists every difference,
// documents matched by kind and name (the v1alpha1 document by its version).
func compareConfigs(t *testing.T, upstream, ours []byte) []difference {
	t.Helper()

	upstreamDocs, ourDocs := documentsByKey(t, upstream), documentsByKey(t, ours)

	keys := map[string]bool{}
	for key := range upstreamDocs {
		keys[key] = true
	}

	for key := range ourDocs {
		keys[key] = true
	}

	sorted := make([]string, 0, len(keys))
	for key := range keys {
		sorted = append(sorted, key)
	}

	sort.Strings(sorted)

	var differences []difference

	for _, key := range sorted {
		upstreamDoc, inUpstream := upstreamDocs[key]
		ourDoc, inOurs := ourDocs[key]

		switch {
		case !inUpstream:
			differences = append(differences, difference{Document: key, Path: ".", Ours: "document"})
		case !inOurs:
			differences = append(differences, difference{Document: key, Path: ".", Upstream: "document"})
		default:
			diffValues(key, "", upstreamDoc, ourDoc, &differences)
		}
	}

	return differences
}

func documentsByKey(t *testing.T, raw []byte) map[string]any {
	t.Helper()

	documents := map[string]any{}
	decoder := yaml.NewDecoder(bytes.NewReader(raw))

	for {
		var document map[string]any
		if err := decoder.Decode(&document); err != nil {
			if err.Error() == "EOF" {
				return documents
			}

			t.Fatalf("parsing a config: %v", err)
		}

		if document == nil {
			continue
		}

		key := "v1alpha1"
		if kind, ok := document["kind"].(string); ok {
			key = kind
			if name, ok := document["name"].(string); ok {
				key += "/" + name
			}
		}

		documents[key] = document
	}
}

// diffValues walks two parsed YAML values; an empty map or list equals an absent one,
// as Talos decodes them alike.
func diffValues(document, path string, upstream, ours any, differences *[]difference) {
	eachDifference(path, upstream, ours, func(_ string, upstream, ours any) bool { return isEmpty(upstream) && isEmpty(ours) },
		func(path string, upstream, ours any) {
			*differences = append(*differences, difference{Document: document, Path: path, Upstream: upstream, Ours: ours})
		})
}

// eachDifference walks two plain values (maps by key, lists of one length item by item) and calls differ with the
// dotted path of each place where they differ; alike(path, a, b) says where a subtree counts as equal anyway.
func eachDifference(path string, a, b any, alike func(path string, a, b any) bool, differ func(path string, a, b any)) {
	if alike(path, a, b) {
		return
	}

	aMap, aIsMap := a.(map[string]any)
	bMap, bIsMap := b.(map[string]any)

	if aIsMap && bIsMap {
		keys := map[string]bool{}
		for key := range aMap {
			keys[key] = true
		}

		for key := range bMap {
			keys[key] = true
		}

		sorted := make([]string, 0, len(keys))
		for key := range keys {
			sorted = append(sorted, key)
		}

		sort.Strings(sorted)

		for _, key := range sorted {
			eachDifference(path+"."+key, aMap[key], bMap[key], alike, differ)
		}

		return
	}

	aList, aIsList := a.([]any)
	bList, bIsList := b.([]any)

	if aIsList && bIsList && len(aList) == len(bList) {
		for i := range aList {
			eachDifference(fmt.Sprintf("%s[%d]", path, i), aList[i], bList[i], alike, differ)
		}

		return
	}

	if !reflect.DeepEqual(a, b) {
		differ(path, a, b)
	}
}

func isEmpty(value any) bool {
	switch typed := value.(type) {
	case nil:
		return true
	case map[string]any:
		return len(typed) == 0
	case []any:
		return len(typed) == 0
	default:
		return false
	}
}

// allowedDifference is one justified entry of generator-allowlist.yaml.
type allowedDifference struct {
	Document     string   `yaml:"document"`
	Path         string   `yaml:"path"`
	Contracts    []string `yaml:"contracts"`
	MachineTypes []string `yaml:"machine_types"`
	Reason       string   `yaml:"reason"`
}

type allowList []allowedDifference

func loadAllowList(t *testing.T) allowList {
	t.Helper()

	raw, err := os.ReadFile("generator-allowlist.yaml")
	if err != nil {
		t.Fatal(err)
	}

	var list allowList
	if err = yaml.Unmarshal(raw, &list); err != nil {
		t.Fatalf("generator-allowlist.yaml: %v", err)
	}

	for _, entry := range list {
		if strings.TrimSpace(entry.Reason) == "" {
			t.Fatalf("generator-allowlist.yaml: the entry %q %q gives no reason", entry.Document, entry.Path)
		}
	}

	return list
}

// match returns the index of the entry allowing the difference, or -1.
func (list allowList) match(entry renderedConfig, d difference) int {
	for index, allowed := range list {
		if allowed.Document != d.Document || allowed.Path != d.Path {
			continue
		}

		if len(allowed.Contracts) > 0 && !slices.Contains(allowed.Contracts, entry.Contract) {
			continue
		}

		if len(allowed.MachineTypes) > 0 && !slices.Contains(allowed.MachineTypes, entry.MachineType) {
			continue
		}

		return index
	}

	return -1
}

// TestCompareConfigsFindsDifferences proves the comparison can fail: a changed value,
// a missing document and an extra one are reported; empty and absent are alike.
func TestCompareConfigsFindsDifferences(t *testing.T) {
	upstream := []byte("version: v1alpha1\nmachine:\n  type: worker\n  certSANs: []\n---\nkind: KubeletConfig\nimage: a\n---\nkind: VolumeConfig\nname: EPHEMERAL\n")
	ours := []byte("version: v1alpha1\nmachine:\n  type: controlplane\n---\nkind: KubeletConfig\nimage: a\n---\nkind: HostnameConfig\nauto: stable\n")

	var got []string
	for _, d := range compareConfigs(t, upstream, ours) {
		got = append(got, d.String())
	}

	want := []string{
		`document HostnameConfig, .: upstream (absent), ours "document"`,
		`document VolumeConfig/EPHEMERAL, .: upstream "document", ours (absent)`,
		`document v1alpha1, .machine.type: upstream "worker", ours "controlplane"`,
	}

	if !slices.Equal(got, want) {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
