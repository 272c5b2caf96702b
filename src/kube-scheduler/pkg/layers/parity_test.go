package layers

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"testing"
)

// ParityCasesEnv names the JSON file of cases the Python core scored
// (tests/integration/test_kube_scheduler_plugin.py writes it and runs this test).
const ParityCasesEnv = "LAYERSCHED_PARITY_CASES"

type parityCase struct {
	ID     string `json:"id"`
	Spread bool   `json:"spread"`
	// Quorum is the image quorum both sides resolve pod images with (0: the default).
	Quorum int `json:"quorum"`
	// Nodes are the cluster's nodes (the spread's node count), with or without an object.
	Nodes []string `json:"nodes"`
	// Inventories are the NodeLayerInventory objects in the order they are applied, and
	// Valid says which ones the Python core's parse_document accepted.
	Inventories []json.RawMessage `json:"inventories"`
	Valid       []bool            `json:"valid"`
	// Images are the pod's images, init containers first.
	Images []string `json:"images"`
	// Scores are layersched.core's, by node.
	Scores map[string]int64 `json:"scores"`
}

func TestParityWithThePythonCore(t *testing.T) {
	path := os.Getenv(ParityCasesEnv)
	if path == "" {
		t.Skip(ParityCasesEnv + " is not set: tests/integration/test_kube_scheduler_plugin.py " +
			"generates the cases with layersched.core and runs this test with it")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []parityCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(file.Cases) == 0 {
		t.Fatalf("%s holds no case", path)
	}
	compared, differing := 0, 0
	for _, c := range file.Cases {
		for _, difference := range scoreParityCase(c) {
			differing++
			if differing <= 20 {
				t.Errorf("case %s: %s", c.ID, difference)
			}
		}
		compared += len(c.Nodes)
	}
	if differing > 0 {
		t.Fatalf("%d differences over %d cases", differing, len(file.Cases))
	}
	// the Python side reads this line: how many cases and node scores agreed
	t.Logf("parity: %d cases, %d node scores, all equal", len(file.Cases), compared)
}

func scoreParityCase(c parityCase) []string {
	var differences []string
	quorum := c.Quorum
	if quorum == 0 {
		quorum = DefaultImageQuorum
	}
	ix := NewIndex(quorum)
	for i, document := range c.Inventories {
		inventory, err := DecodeNodeLayerInventory(document)
		if (err == nil) != c.Valid[i] {
			differences = append(differences, fmt.Sprintf("inventories[%d]: Python valid=%v, Go error %v", i, c.Valid[i], err))
		}
		if err == nil {
			ix.Upsert(inventory)
		}
	}
	var spread *Spread
	if c.Spread {
		spread = &Spread{Nodes: len(c.Nodes)}
	}
	prepared := ix.Prepare(c.Images, spread, observed, 0)
	nodes := append([]string(nil), c.Nodes...)
	sort.Strings(nodes)
	for _, node := range nodes {
		score, _ := prepared.Score(node)
		if want, ok := c.Scores[node]; !ok || score != want {
			differences = append(differences, fmt.Sprintf("node %s: Go %d, Python %d (present: %v)", node, score, want, ok))
		}
	}
	return differences
}
