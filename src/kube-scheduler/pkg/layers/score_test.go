package layers

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The seed scenario's images: Img1 = L1+L2+L3, Img2 = L1+L2+L4 (sizes in bytes).
var (
	l1, l2, l3, l4 = Layer{digest("L1"), 40}, Layer{digest("L2"), 30}, Layer{digest("L3"), 20}, Layer{digest("L4"), 10}
	img1           = NodeImage{Names: []string{"reg:5000/img1:1"}, Digest: digest("img1"), Layers: []Layer{l1, l2, l3}}
	img2           = NodeImage{Names: []string{"reg:5000/img2:1"}, Digest: digest("img2"), Layers: []Layer{l1, l2, l4}}
	observed       = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
)

// seedIndex: N1 holds Img1 (P1 runs there), N2 holds Img2 (P2 ran there), N3 published
// an empty inventory, N4 has none (no agent).
//
// Quorum 1: each image is published by one node, and these tests are about the
// arithmetic; votes_test.go holds the quorum.
func seedIndex() *Index {
	ix := NewIndex(1)
	ix.Upsert(&NodeLayerInventory{Node: "N1", Images: []NodeImage{img1}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "N2", Images: []NodeImage{img2}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "N3", ObservedAt: observed})
	return ix
}

func scores(ix *Index, images []string, spread *Spread, nodes ...string) map[string]int64 {
	prepared := ix.Prepare(images, spread, observed, 0)
	got := map[string]int64{}
	for _, node := range nodes {
		got[node], _ = prepared.Score(node)
	}
	return got
}

func TestLayerLocalityScores(t *testing.T) {
	cases := []struct {
		name   string
		images []string
		spread *Spread
		want   map[string]int64
	}{
		{
			// t3 of the seed scenario: total = 40+30+20 = 90
			// N1: 90/90 -> 100; N2: L1+L2 = 70 -> floor(7000/90) = 77; N3 holds nothing -> 0
			name:   "P1-again",
			images: []string{"reg:5000/img1:1"},
			want:   map[string]int64{"N1": 100, "N2": 77, "N3": 0, "N4": 0},
		},
		{
			// init container first, then a repeated image: distinct layers L1 L2 L4 L3,
			// total 100; N1 holds L1 L2 L3 = 90 -> 90; N2 holds L1 L2 L4 = 80 -> 80
			name:   "init container and a repeated image",
			images: []string{"reg:5000/img2:1", "reg:5000/img1:1", "reg:5000/img1:1"},
			want:   map[string]int64{"N1": 90, "N2": 80, "N3": 0},
		},
		{
			// spread over 3 nodes: L1 on 2 -> 40*2/3 = 26.67, L2 on 2 -> 30*2/3 = 20,
			// L3 on 1 -> 20/3 = 6.67; N1: 53.33 -> floor(100*53.33/90) = 59;
			// N2: 46.67 -> floor(51.85) = 51
			name:   "spread",
			images: []string{"reg:5000/img1:1"},
			spread: &Spread{Nodes: 3},
			want:   map[string]int64{"N1": 59, "N2": 51, "N3": 0},
		},
		{
			// an image no agent published counts neither present nor needed: total 90
			// from Img1 alone, as in P1-again
			name:   "an unknown image",
			images: []string{"reg:5000/img1:1", "reg:5000/unknown:1"},
			want:   map[string]int64{"N1": 100, "N2": 77},
		},
		{
			// by digest: "repo@<Img2's digest>" is looked up by its digest alone
			// total L1+L2+L4 = 80; N2: 80 -> 100; N1: 70 -> floor(7000/80) = 87
			name:   "by digest",
			images: []string{"elsewhere/img2@" + img2.Digest},
			want:   map[string]int64{"N1": 87, "N2": 100},
		},
		{
			// nothing known: every node scores 0
			name:   "no known image",
			images: []string{"reg:5000/unknown:1"},
			want:   map[string]int64{"N1": 0, "N2": 0, "N3": 0},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nodes := make([]string, 0, len(c.want))
			for node := range c.want {
				nodes = append(nodes, node)
			}
			if got := scores(seedIndex(), c.images, c.spread, nodes...); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("scores %v, want %v", got, c.want)
			}
		})
	}
}

func TestWhyANodeScoresZero(t *testing.T) {
	ix := seedIndex()
	stale := observed.Add(-time.Hour)
	ix.Upsert(&NodeLayerInventory{Node: "old", Images: []NodeImage{img1}, ObservedAt: stale})
	ix.Upsert(&NodeLayerInventory{Node: "undated", Images: []NodeImage{img1}})
	// the age bound is PreScore's: the cycle judges every node at one time
	prepared := ix.Prepare([]string{"reg:5000/img1:1"}, nil, observed, 30*time.Minute)
	cases := []struct {
		node  string
		score int64
		state NodeState
	}{
		{"N1", 100, Scored},
		{"N4", 0, NoInventory},
		// observed an hour ago, bound 30 min: as if it had none
		{"old", 0, Stale},
		// an inventory that does not say when it was observed is of unknown age
		{"undated", 0, Stale},
	}
	for _, c := range cases {
		score, state := prepared.Score(c.node)
		if score != c.score || state != c.state {
			t.Errorf("%s: (%d, %v), want (%d, %v)", c.node, score, state, c.score, c.state)
		}
	}
	// without a bound, age does not matter
	if score, state := ix.Prepare([]string{"reg:5000/img1:1"}, nil, observed, 0).Score("old"); score != 100 || state != Scored {
		t.Errorf("old without a bound: (%d, %v)", score, state)
	}
}

func TestSpreadCountsOnlyHoldersThatCount(t *testing.T) {
	ix := seedIndex()
	// N1 is not in the scheduler's snapshot (or stale): L1 and L2 have one holder each
	// out of 2 nodes: N2: 40/2 + 30/2 = 35 -> floor(100*35/90) = 38
	spread := &Spread{Nodes: 2, Counts: func(node string) bool { return node != "N1" }}
	got := scores(ix, []string{"reg:5000/img1:1"}, spread, "N2")
	if got["N2"] != 38 {
		t.Errorf("N2 %d, want 38", got["N2"])
	}
}

func TestArithmeticMatchesPython(t *testing.T) {
	// Python's int / int is the float nearest the exact quotient; a float64 product of
	// 895117579861552 * 1258 (past 2^53) divided by 5000 would be 225211583093166.5
	if got := spreadWeight(895117579861552, 1258, 5000); got != 225211583093166.47 {
		t.Errorf("weight %v, want 225211583093166.47", got)
	}
	// under 2^53 the float64 division is exact Python: 40 * 2 / 3
	if got := spreadWeight(40, 2, 3); got != 80.0/3.0 {
		t.Errorf("weight %v", got)
	}
	cases := []struct {
		present, total, want int64
	}{
		{70, 90, 77},  // 7000 // 90 = 77
		{90, 90, 100}, // all present
		{0, 90, 0},
		{5, 0, 0}, // nothing needed: 0, not a division by zero
		// 100 * present overflows an int64 here; the quotient does not
		{math.MaxInt64 / 2, math.MaxInt64, 49},
	}
	for _, c := range cases {
		if got := PresentScore(c.present, c.total); got != c.want {
			t.Errorf("PresentScore(%d, %d) = %d, want %d", c.present, c.total, got, c.want)
		}
	}
	// floor, never round: 100 * 53.333 / 90 = 59.26 -> 59
	if got := SpreadScore(160.0/3.0, 90); got != 59 {
		t.Errorf("SpreadScore = %d", got)
	}
}

func TestAPodWhoseLayersWeighNothingOrOverflowIsSkipped(t *testing.T) {
	ix := NewIndex(1)
	empty := Layer{digest("empty"), 0}
	huge := Layer{digest("huge"), math.MaxInt64}
	ix.Upsert(&NodeLayerInventory{Node: "n", ObservedAt: observed, Images: []NodeImage{
		{Names: []string{"empty:1"}, Digest: "sha256:e", Layers: []Layer{empty}},
		{Names: []string{"huge:1"}, Digest: "sha256:h", Layers: []Layer{huge, l1}},
	}})
	for _, image := range []string{"empty:1", "huge:1"} {
		prepared := ix.Prepare([]string{image}, nil, observed, 0)
		if !prepared.Skip() {
			t.Errorf("%s: not skipped (%d layers, %d bytes)", image, prepared.LayerCount, prepared.TotalBytes())
		}
		if score, state := prepared.Score("n"); score != 0 || state != Scored {
			t.Errorf("%s: (%d, %v)", image, score, state)
		}
	}
}
