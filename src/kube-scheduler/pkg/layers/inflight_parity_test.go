package layers

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// InFlightParityCasesEnv names the JSON file of in-flight cases the Python core scored
// (tests/integration/test_kube_scheduler_plugin.py writes it and runs this test).
const InFlightParityCasesEnv = "LAYERSCHED_IN_FLIGHT_PARITY_CASES"

type parityLayer struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

type parityPending struct {
	Key     string        `json:"key"`
	BoundAt float64       `json:"bound_at"`
	Layers  []parityLayer `json:"layers"`
}

type parityNode struct {
	Name        string            `json:"name"`
	Held        []parityLayer     `json:"held"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Pending     []parityPending   `json:"pending"`
}

type inFlightCase struct {
	ID               string        `json:"id"`
	Mode             PullMode      `json:"mode"`
	OverheadSeconds  float64       `json:"overhead_s"`
	NewBytesWeight   float64       `json:"new_bytes_weight"`
	DefaultBandwidth float64       `json:"default_bandwidth_bits_per_s"`
	MaxPendingAge    float64       `json:"max_pending_age_s"`
	Now              float64       `json:"now"`
	Nodes            []parityNode  `json:"nodes"`
	Pod              []parityLayer `json:"pod"`
	// Costs and Scores are layersched.core's, by node.
	Costs  map[string]float64 `json:"costs"`
	Scores map[string]int64   `json:"scores"`
}

func layersOf(entries []parityLayer) []Layer {
	layers := make([]Layer, len(entries))
	for i, entry := range entries {
		layers[i] = Layer{Digest: entry.Digest, SizeBytes: entry.Size}
	}
	return layers
}

func TestInFlightParityWithThePythonCore(t *testing.T) {
	path := os.Getenv(InFlightParityCasesEnv)
	if path == "" {
		t.Skip(InFlightParityCasesEnv + " is not set: tests/integration/test_kube_scheduler_plugin.py " +
			"generates the cases with layersched.core and runs this test with it")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []inFlightCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(file.Cases) == 0 {
		t.Fatalf("%s holds no case", path)
	}
	compared, differing := 0, 0
	for _, c := range file.Cases {
		for _, difference := range inFlightParityCase(c) {
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
	// the Python side reads this line: how many cases and node costs agreed
	t.Logf("in-flight parity: %d cases, %d nodes, costs bit for bit and scores all equal", len(file.Cases), compared)
}

func inFlightParityCase(c inFlightCase) []string {
	args := CostArgs{Mode: c.Mode, OverheadSeconds: c.OverheadSeconds, NewBytesWeight: c.NewBytesWeight}
	pod := layersOf(c.Pod)
	costs := make([]float64, len(c.Nodes))
	var total int64
	for i, node := range c.Nodes {
		held := heldOf(layersOf(node.Held)...)
		bits := Bandwidth(node.Labels, node.Annotations, c.DefaultBandwidth)
		pulls := make([]PendingPull, len(node.Pending))
		for j, pending := range node.Pending {
			pulls[j] = PendingPull{Key: pending.Key, BoundAt: pending.BoundAt, Layers: layersOf(pending.Layers)}
		}
		backlog := NodeBacklog(pulls, held, bits/BitsPerByte, c.Now, c.MaxPendingAge)
		h, a, podTotal := SplitBytes(pod, held, &backlog)
		total = podTotal
		remaining := backlog.Remaining(bits/BitsPerByte, c.Now)
		costs[i] = StartCost(h, a, podTotal, remaining, backlog.EnqueuedBytes, backlog.Pulls, bits, args)
	}
	var differences []string
	scores := ScoreCosts(costs, total)
	for i, node := range c.Nodes {
		want, ok := c.Costs[node.Name]
		if !ok || math.Float64bits(want) != math.Float64bits(costs[i]) {
			differences = append(differences, fmt.Sprintf("node %s: cost Go %v, Python %v (present: %v)", node.Name, costs[i], want, ok))
		}
		if wantScore, ok := c.Scores[node.Name]; !ok || wantScore != scores[i] {
			differences = append(differences, fmt.Sprintf("node %s: score Go %d, Python %d (present: %v)", node.Name, scores[i], wantScore, ok))
		}
	}
	return differences
}
