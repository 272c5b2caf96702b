package layers

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// referenceScore is the score as the plugin computed it before issue 43, node by node:
// the pod's distinct layers (first occurrence, by digest), each layer's spread weight
// from its holders that count, then, for the node, the sum over the layers it holds.
// Prepare's walk of the holders must give the same bits.
func referenceScore(ix *Index, images []string, spread *Spread, now time.Time, maxAge time.Duration, node string) (int64, NodeState) {
	ix.mu.RLock()
	id, held := ix.nodeID[node]
	_, refused := ix.refused[node]
	ix.mu.RUnlock()
	switch {
	case !held && refused:
		return 0, OverBudget
	case !held:
		return 0, NoInventory
	}
	fresh := func(id int32) bool {
		observed := ix.observed[id]
		return maxAge <= 0 || (observed != undatedNanos && now.Sub(time.Unix(0, observed)) <= maxAge)
	}
	if !fresh(id) {
		return 0, Stale
	}
	var layers []Layer
	seen := map[string]bool{}
	var total int64
	for _, image := range images {
		resolved, why := ix.ImageLayers(image, now, maxAge)
		if why != Agreed {
			continue
		}
		for _, layer := range resolved {
			if !seen[layer.Digest] {
				seen[layer.Digest] = true
				layers = append(layers, layer)
				total += layer.SizeBytes
			}
		}
	}
	if total <= 0 {
		return 0, Scored
	}
	var present int64
	weighted := 0.0
	for _, layer := range layers {
		holders := ix.layers[ix.layerID[layer.Digest]].holders
		holds := false
		counted := 0
		for _, holder := range holders {
			holds = holds || holder == id
			if fresh(holder) && (spread == nil || spread.Counts == nil || spread.Counts(ix.nodes[holder].name)) {
				counted++
			}
		}
		if !holds {
			continue
		}
		present += layer.SizeBytes
		if spread != nil && spread.Nodes > 0 {
			weighted += spreadWeight(layer.SizeBytes, counted, spread.Nodes)
		}
	}
	if spread != nil {
		return SpreadScore(weighted, total), Scored
	}
	return PresentScore(present, total), Scored
}

func TestPrepareGivesTheNodeByNodeScores(t *testing.T) {
	// random clusters: 40 nodes (some stale, some undated, some removed, some outside
	// the snapshot), 30 images on 6 bases, quorum 1 to 3, with and without spread and
	// an age bound; every node's score and state as the node-by-node reference says
	random := rand.New(rand.NewPCG(43, 2026))
	bases := make([][]Layer, 6)
	for i := range bases {
		for j := 0; j < 1+random.IntN(3); j++ {
			bases[i] = append(bases[i], Layer{digest(fmt.Sprint("base", i, j)), 1 + random.Int64N(1<<30)})
		}
	}
	images := make([]NodeImage, 30)
	for i := range images {
		layers := append([]Layer(nil), bases[random.IntN(len(bases))]...)
		for n := random.IntN(4); n >= 0; n-- {
			layers = append(layers, Layer{digest(fmt.Sprint("own", i, n)), 1 + random.Int64N(1<<28)})
		}
		images[i] = NodeImage{Names: []string{fmt.Sprintf("reg:5000/app%d:1", i)}, Digest: digest(fmt.Sprint("image", i)), Layers: layers}
	}
	compared := 0
	for round := 0; round < 60; round++ {
		ix := NewIndex(1 + random.IntN(3))
		var nodes []string
		for n := 0; n < 40; n++ {
			name := fmt.Sprint("n", n)
			nodes = append(nodes, name)
			var held []NodeImage
			for k := random.IntN(8); k > 0; k-- {
				held = append(held, images[random.IntN(len(images))])
			}
			observedAt := observed.Add(-time.Duration(random.IntN(60)) * time.Minute)
			if n%13 == 0 {
				observedAt = time.Time{}
			}
			ix.Upsert(&NodeLayerInventory{Node: name, Images: held, ObservedAt: observedAt})
		}
		for n := 0; n < 40; n += 7 {
			ix.Remove(fmt.Sprint("n", n))
		}
		// a node taking a removed node's id: a removed node must leave every holders
		// list, or the pass that skips counting holders (every node fresh and counted:
		// the odd rounds without an age bound) would count it
		nodes = append(nodes, "reused")
		ix.Upsert(&NodeLayerInventory{Node: "reused", Images: []NodeImage{images[random.IntN(len(images))]}, ObservedAt: observed})
		outside := map[string]bool{"n3": true, "n11": random.IntN(2) == 0}
		var spread *Spread
		switch round % 3 {
		case 1:
			spread = &Spread{Nodes: 40}
		case 2:
			spread = &Spread{Nodes: 38, Counts: func(node string) bool { return !outside[node] }, CountsVersion: round}
		}
		maxAge := time.Duration(0)
		if round%2 == 0 {
			maxAge = 30 * time.Minute
		}
		pod := []string{images[random.IntN(len(images))].Names[0], images[random.IntN(len(images))].Names[0], "reg:5000/unknown:1"}
		prepared := ix.Prepare(pod, spread, observed, maxAge)
		for _, node := range append(nodes, "never") {
			score, state := prepared.Score(node)
			wantScore, wantState := referenceScore(ix, pod, spread, observed, maxAge, node)
			if score != wantScore || state != wantState {
				t.Fatalf("round %d, %s: (%d, %v), the node-by-node reference (%d, %v)", round, node, score, state, wantScore, wantState)
			}
			compared++
		}
	}
	t.Logf("%d node scores equal", compared)
}

func TestTheSnapshotIsAskedOncePerNodeWhileItIsTheSame(t *testing.T) {
	ix := seedIndex()
	asked := 0
	counts := func(node string) bool { asked++; return node != "N1" }
	spread := &Spread{Nodes: 2, Counts: counts, CountsVersion: "v1"}
	for pod := 0; pod < 3; pod++ {
		// N1 outside the snapshot: N2 = 40/2 + 30/2 = 35 -> floor(100*35/90) = 38
		if score, _ := ix.Prepare([]string{"reg:5000/img1:1"}, spread, observed, 0).Score("N2"); score != 38 {
			t.Fatalf("pod %d: N2 %d, want 38", pod, score)
		}
	}
	if asked != 3 { // N1, N2, N3, once
		t.Errorf("the snapshot was asked %d times, want 3", asked)
	}
	// a new node in the index: asked again, for every node
	ix.Upsert(&NodeLayerInventory{Node: "N5", ObservedAt: observed})
	ix.Prepare([]string{"reg:5000/img1:1"}, spread, observed, 0)
	if asked != 7 {
		t.Errorf("after the index changed: asked %d times, want 7", asked)
	}
	// another snapshot (N1 back in it): its own answers; L1 and L2 have 2 holders of 3
	// nodes: N2 = 40*2/3 + 30*2/3 = 46.67 -> floor(100*46.67/90) = 51
	back := &Spread{Nodes: 3, Counts: func(string) bool { return true }, CountsVersion: "v2"}
	if score, _ := ix.Prepare([]string{"reg:5000/img1:1"}, back, observed, 0).Score("N2"); score != 51 {
		t.Errorf("with N1 back: N2 %d, want 51", score)
	}
}

func TestScoreAllocatesNothing(t *testing.T) {
	ix := seedIndex()
	prepared := ix.Prepare([]string{"reg:5000/img1:1"}, &Spread{Nodes: 3}, observed, time.Hour)
	if allocs := testing.AllocsPerRun(100, func() {
		for _, node := range []string{"N1", "N2", "N3", "N4"} {
			prepared.Score(node)
		}
	}); allocs != 0 {
		t.Errorf("Score allocated %v times a run", allocs)
	}
}
