// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

// Package conformance judges the collection's Talos API emulator and its
// generated configuration with the official Talos Go library
// (github.com/siderolabs/talos/pkg/machinery). It is a test-only module and
// never ships in the collection.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// repoRoot is the collection's checkout: this module lives in tests/conformance.
var repoRoot = func() string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}

	return root
}()

// emulatedNode is one entry of the emulator's state.json.
type emulatedNode struct {
	Name     string `json:"name"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Endpoint string `json:"endpoint"`
	Role     string `json:"role"`
}

// emulatedCluster is a cluster run by tests/talos-emulator in a state directory.
type emulatedCluster struct {
	StateDir string         `json:"state_dir"`
	Name     string         `json:"name"`
	Endpoint string         `json:"endpoint"`
	Nodes    []emulatedNode `json:"nodes"`
}

// startCluster runs `tests/talos-emulator up` and stops the cluster when the test ends.
func startCluster(t *testing.T, args ...string) *emulatedCluster {
	t.Helper()

	stateDir := t.TempDir()
	emulator(t, append([]string{"up", "--state-dir", stateDir}, args...)...)
	t.Cleanup(func() { emulator(t, "down", "--state-dir", stateDir) })

	raw, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatalf("reading the emulator state: %v", err)
	}

	var cluster emulatedCluster
	if err = json.Unmarshal(raw, &cluster); err != nil {
		t.Fatalf("parsing the emulator state: %v", err)
	}

	return &cluster
}

func emulator(t *testing.T, args ...string) {
	t.Helper()

	command := exec.Command(filepath.Join(repoRoot, "tests", "talos-emulator"), args...)
	command.Dir = repoRoot

	if output, err := command.CombinedOutput(); err != nil {
		t.Fatalf("tests/talos-emulator %v: %v\n%s", args, err, output)
	}
}

func (c *emulatedCluster) node(name string) emulatedNode {
	for _, node := range c.Nodes {
		if node.Name == name {
			return node
		}
	}

	panic("no emulated node " + name)
}

func (c *emulatedCluster) byRole(role string) []emulatedNode {
	var nodes []emulatedNode

	for _, node := range c.Nodes {
		if node.Role == role {
			nodes = append(nodes, node)
		}
	}

	return nodes
}

func (c *emulatedCluster) path(name string) string {
	return filepath.Join(c.StateDir, name)
}

// client opens the talosconfig the emulator wrote for role (admin, operator, reader)
// with the machinery loader and connects through the first control plane only.
func (c *emulatedCluster) client(t *testing.T, role string) *client.Client {
	t.Helper()

	name := "talosconfig"
	if role != "admin" {
		name += "-" + role
	}

	config, err := clientconfig.Open(c.path(name))
	if err != nil {
		t.Fatalf("machinery cannot load the emulator's %s: %v", name, err)
	}

	talos, err := client.New(context.Background(), client.WithConfig(config), client.WithEndpoints(c.Endpoint))
	if err != nil {
		t.Fatalf("machinery cannot build a client from the emulator's %s: %v", name, err)
	}

	t.Cleanup(func() { talos.Close() }) //nolint:errcheck

	return talos
}

// eventually retries check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()

	deadline := time.Now().Add(timeout)

	for {
		err := check()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, timeout, err)
		}

		time.Sleep(50 * time.Millisecond)
	}
}

func callContext(t *testing.T) context.Context {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	return ctx
}

func errorf(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}
