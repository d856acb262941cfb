// GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

package conformance

import (
	"encoding/json"
	"os"
	"testing"

	"gopkg.in/yaml.v3"
)

// scalarVector is one entry of tests/unit/plugins/module_utils/common/go_yaml_scalars.json: a string and
// the text the collection's YAML writer (go_yaml.py) must give for it, which the unit tests check.
type scalarVector struct {
	Value    string `json:"value"`
	Mapping  string `json:"mapping"`
	Sequence string `json:"sequence"`
}

// TestYAMLScalarVectorsAreGoOutput holds those vectors against yaml.v3, the encoder the Image
// Factory hashes schematics with. (Talos's yaml v4 differs on YAML 1.1 booleans: it single-quotes
// "yes" where yaml.v3 double-quotes it.)
func TestYAMLScalarVectorsAreGoOutput(t *testing.T) {
	data, err := os.ReadFile("../unit/plugins/module_utils/common/go_yaml_scalars.json")
	if err != nil {
		t.Fatal(err)
	}

	var vectors []scalarVector
	if err = json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}

	if len(vectors) == 0 {
		t.Fatal("no vectors")
	}

	for _, vector := range vectors {
		for _, c := range []struct {
			document any
			want     string
		}{
			{map[string]any{"v": vector.Value}, vector.Mapping},
			{map[string]any{"w": []any{map[string]any{"k": vector.Value}, vector.Value}}, vector.Sequence},
		} {
			got, err := yaml.Marshal(c.document)
			if err != nil {
				t.Fatalf("%q: %v", vector.Value, err)
			}

			if string(got) != c.want {
				t.Errorf("yaml.v3 writes %q as %q, the vector says %q", vector.Value, got, c.want)
			}
		}
	}
}
