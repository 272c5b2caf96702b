package layers

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The Python core's worked table (tests/unit/test_in_flight.py), node by node: 80 Mbit/s
// links (10 MB/s), 1 s overhead, weight 0.25; the pod's image is L1 + L2 = 80 MB.
const (
	mb     = 1_000_000
	link   = 80e6
	rateBs = link / BitsPerByte
	now    = 1000.0
)

var (
	f1    = Layer{digest("F1"), 40 * mb}
	f2    = Layer{digest("F2"), 40 * mb}
	fy    = Layer{digest("FY"), 80 * mb}
	small = Layer{digest("SMALL"), 8 * mb}
	image = []Layer{f1, f2}
)

func pull(key string, ago float64, layers ...Layer) PendingPull {
	return PendingPull{Key: key, BoundAt: now - ago, Layers: layers}
}

func heldOf(layers ...Layer) func(string) bool {
	set := map[string]bool{}
	for _, layer := range layers {
		set[layer.Digest] = true
	}
	return func(digest string) bool { return set[digest] }
}

func cost(pod []Layer, pulls []PendingPull, held func(string) bool, bits float64, args CostArgs) float64 {
	backlog := NodeBacklog(pulls, held, bits/BitsPerByte, now, DefaultMaxPendingAgeSeconds)
	h, a, total := SplitBytes(pod, held, &backlog)
	return StartCost(h, a, total, backlog.Remaining(bits/BitsPerByte, now), backlog.EnqueuedBytes, backlog.Pulls, bits, args)
}

func TestInFlightWorkedCosts(t *testing.T) {
	serial := CostArgs{Mode: Serial, OverheadSeconds: 1, NewBytesWeight: 0.25}
	parallel := CostArgs{Mode: Parallel, OverheadSeconds: 1, NewBytesWeight: 0.25}
	none := heldOf()
	cases := []struct {
		name  string
		pod   []Layer
		pulls []PendingPull
		held  func(string) bool
		bits  float64
		args  CostArgs
		want  float64
	}{
		// idle: 80 MB -> 8 s + 1 s + 0.25 x 8 s = 11 s
		{"idle", image, nil, none, link, serial, 11},
		// a replica bound 4 s ago has 40 of 80 MB left: 4 + 1 = 5 s
		{"half-way", image, []PendingPull{pull("u1", 4, f1, f2)}, none, link, serial, 5},
		// a replica bound just now: 8 + 1 = 9 s (beats the idle node's 11 through the weight)
		{"just bound", image, []PendingPull{pull("u2", 0, f1, f2)}, none, link, serial, 9},
		// 80 MB of another image first, then its own 80: 16 + 1 + 2 = 19 s
		{"other image first", image, []PendingPull{pull("u3", 0, fy)}, none, link, serial, 19},
		// holds L1: its own 40 MB: 4 + 1 + 1 = 6 s
		{"holds half", image, nil, heldOf(f1), link, serial, 6},
		// 20 Mbit/s, a replica just bound: 32 + 1 = 33 s
		{"slow link pulling", image, []PendingPull{pull("u1", 0, f1, f2)}, none, 20e6, serial, 33},
		// parallel: 8 MB shares the link with 80 MB: 8 + min(80, 8) = 16 MB -> 1.6 + 1 + 0.2
		{"parallel shares", []Layer{small}, []PendingPull{pull("u1", 0, fy)}, none, link, parallel, 2.8},
		// serial: 80 + 8 = 88 MB -> 8.8 + 1 + 0.2 = 10 s
		{"serial waits", []Layer{small}, []PendingPull{pull("u1", 0, fy)}, none, link, serial, 10},
		// parallel, arriving a quarter done: N_left = 80 x 60 / 80 = 60 MB -> 6 + 1 = 7 s
		{"parallel arriving", image, []PendingPull{pull("u1", 2, f1, f2)}, none, link, parallel, 7},
		// p1 (40 MB) bound 12 s ago is done; p2 (L1) bound 2 s ago has 20 MB left; own L2:
		// 20 + 40 = 60 MB -> 6 + 1 + 1 = 8 s
		{"drains between binds", image, []PendingPull{pull("p1", 12, Layer{digest("FY2"), 40 * mb}), pull("p2", 2, f1)}, none, link, serial, 8},
		// bound 601 s ago: no longer counted, the node is idle
		{"aged out", image, []PendingPull{pull("u1", 601, f1, f2)}, none, link, serial, 11},
	}
	for _, c := range cases {
		got := cost(c.pod, c.pulls, c.held, c.bits, c.args)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: cost %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInFlightRatioScores(t *testing.T) {
	// idle 11, half 5, fresh 9, other 19 -> floor(100 * 5 / c): 45, 100, 55, 26
	got := RatioScores([]float64{11, 5, 9, 19})
	want := []int64{45, 100, 55, 26}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scores %v, want %v", got, want)
	}
	if got := RatioScores([]float64{0, 3, 0}); fmt.Sprint(got) != "[100 0 100]" {
		t.Errorf("zero costs: %v", got)
	}
	if got := RatioScores(nil); len(got) != 0 {
		t.Errorf("no candidates: %v", got)
	}
}

func TestInFlightBacklogCountsEachDigestOnce(t *testing.T) {
	backlog := NodeBacklog([]PendingPull{pull("a", 0, f1, f2), pull("b", 0, f2, f1)}, heldOf(), rateBs, now, DefaultMaxPendingAgeSeconds)
	if backlog.EnqueuedBytes != 80*mb || backlog.Pulls != 1 || backlog.BacklogBytes != 80e6 || len(backlog.Arriving) != 2 {
		t.Errorf("backlog %+v", backlog)
	}
	// a bind time ahead of now is now
	future := NodeBacklog([]PendingPull{pull("a", -5, f1)}, heldOf(), rateBs, now, DefaultMaxPendingAgeSeconds)
	if future.Since != now || future.Remaining(rateBs, now) != 40e6 {
		t.Errorf("future bind: %+v", future)
	}
	// held layers bring nothing: no pull counts, nothing remains
	held := NodeBacklog([]PendingPull{pull("a", 0, f1)}, heldOf(f1), rateBs, now, DefaultMaxPendingAgeSeconds)
	if held.Pulls != 0 || held.Remaining(rateBs, now) != 0 || held.Expires != now+DefaultMaxPendingAgeSeconds {
		t.Errorf("held: %+v", held)
	}
	if idle := NodeBacklog(nil, heldOf(), rateBs, now, 600); idle.Pulls != 0 || !math.IsInf(idle.Expires, 1) {
		t.Errorf("idle: %+v", idle)
	}
}

func TestInFlightBounds(t *testing.T) {
	many := make([]PendingPull, 100)
	for i := range many {
		many[i] = pull(fmt.Sprintf("p%03d", i), 0, Layer{digest(fmt.Sprintf("M%d", i)), mb})
	}
	if got := NodeBacklog(many, heldOf(), rateBs, now, 600).Pulls; got != MaxPendingPullsPerNode {
		t.Errorf("pulls counted: %d", got)
	}
	wide := make([]Layer, MaxLayersPerPendingPod+50)
	for i := range wide {
		wide[i] = Layer{digest(fmt.Sprintf("W%d", i)), mb}
	}
	if got := NodeBacklog([]PendingPull{pull("w", 0, wide...)}, heldOf(), rateBs, now, 600).EnqueuedBytes; got != MaxLayersPerPendingPod*mb {
		t.Errorf("layers counted: %d bytes", got)
	}
}

func TestParseBandwidthAsPython(t *testing.T) {
	cases := map[string]float64{
		"100000000": 1e8, "1e8": 1e8, " 2.5e7 ": 2.5e7, "1_000_000": 1e6, "+4e7": 4e7, ".5": 0.5,
		"0": 0, "-1": 0, "nan": 0, "inf": 0, "1e400": 0, "0x10": 0, "1__0": 0, "_1": 0, "1_": 0,
		"fast": 0, "": 0, "1e-400": 0,
	}
	for raw, want := range cases {
		got, ok := ParseBandwidth(raw)
		if want == 0 && ok || want != 0 && (!ok || got != want) {
			t.Errorf("%q: %v %v, want %v", raw, got, ok, want)
		}
	}
	labels := map[string]string{BandwidthKey: "bad"}
	annotations := map[string]string{BandwidthKey: "2e7"}
	if got := Bandwidth(labels, annotations, 1); got != 2e7 {
		t.Errorf("an unreadable label falls back to the annotation: %v", got)
	}
	if got := Bandwidth(nil, nil, 5); got != 5 {
		t.Errorf("the default: %v", got)
	}
}

func TestHeldFollowsTheInventoriesAndTheirAge(t *testing.T) {
	ix := seedIndex() // N1 holds Img1 (L1 L2 L3), N2 Img2 (L1 L2 L4), N3 nothing
	// the pod's L1 L3 L4 on every node; N1's pending L4 and L2, N2's L3 and L4, N3's L1,
	// on that node alone
	byNode := map[string][]string{"N1": {l4.Digest, l2.Digest}, "N2": {l3.Digest, l4.Digest}, "N3": {l1.Digest}}
	held := ix.Held([]string{l1.Digest, l3.Digest, l4.Digest, "sha256:nowhere"}, byNode, observed, 0)
	for _, c := range []struct {
		node, digest string
		want         bool
	}{
		{"N1", l1.Digest, true}, {"N1", l3.Digest, true}, {"N1", l4.Digest, false},
		{"N2", l4.Digest, true}, {"N2", l3.Digest, false}, {"N3", l1.Digest, false},
		{"N1", "sha256:nowhere", false},
		{"N1", l2.Digest, true},  // asked of N1 alone
		{"N2", l2.Digest, false}, // L2 not asked of N2
	} {
		if got := held.Holds(c.node, c.digest); got != c.want {
			t.Errorf("%s holds %s: %v", c.node, c.digest, got)
		}
	}
	// inventories observed an hour before, under a 30 min bound: nobody holds anything
	stale := ix.Held([]string{l1.Digest}, map[string][]string{"N1": {l2.Digest}}, observed.Add(time.Hour), 30*time.Minute)
	if stale.Holds("N1", l1.Digest) || stale.Holds("N1", l2.Digest) {
		t.Error("a stale inventory's layers count")
	}
}

// Held walks holders by node id: a Held built before a node left keeps answering as the
// index was, and one built after answers for the node now holding the freed id.
func TestHeldAnswersByNameAcrossNodesComingAndGoing(t *testing.T) {
	ix := seedIndex() // N1 holds Img1 (L1 L2 L3), N2 Img2 (L1 L2 L4), N3 nothing
	digests := []string{l1.Digest, l3.Digest, l4.Digest}
	before := ix.Held(digests, nil, observed, 0)
	ix.Remove("N1")
	ix.Upsert(&NodeLayerInventory{Node: "N4", Images: []NodeImage{img2}, ObservedAt: observed}) // N1's id, freed
	after := ix.Held(digests, nil, observed, 0)
	for _, c := range []struct {
		held         *Held
		node, digest string
		want         bool
	}{
		{before, "N1", l3.Digest, true}, {before, "N4", l4.Digest, false}, {before, "N2", l4.Digest, true},
		{after, "N1", l3.Digest, false}, {after, "N1", l1.Digest, false},
		{after, "N4", l4.Digest, true}, {after, "N4", l3.Digest, false}, {after, "N2", l1.Digest, true},
		{after, "nowhere", l1.Digest, false},
	} {
		if got := c.held.Holds(c.node, c.digest); got != c.want {
			t.Errorf("%s holds %s: %v", c.node, c.digest, got)
		}
	}
	if before.Mask("N1") != 0b011 || after.Mask("N1") != 0 || after.Mask("N4") != 0b101 {
		t.Errorf("masks: N1 %b then %b, N4 %b", before.Mask("N1"), after.Mask("N1"), after.Mask("N4"))
	}
}

func TestHeldPastTheSixtyFourthLayer(t *testing.T) {
	// a pod of 70 layers: N1 holds every one, N2 the even ones; the first 64 are bits,
	// the rest pairs
	var all, even []Layer
	var digests []string
	for i := range 70 {
		layer := Layer{Digest: digest(fmt.Sprint("many-", i)), SizeBytes: 10}
		all, digests = append(all, layer), append(digests, layer.Digest)
		if i%2 == 0 {
			even = append(even, layer)
		}
	}
	ix := NewIndex(1)
	ix.Upsert(&NodeLayerInventory{Node: "N1", Images: []NodeImage{{Names: []string{"reg/all:1"}, Digest: digest("all"), Layers: all}}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "N2", Images: []NodeImage{{Names: []string{"reg/even:1"}, Digest: digest("even"), Layers: even}}, ObservedAt: observed})
	held := ix.Held(digests, nil, observed, 0)
	for i, d := range digests {
		if !held.Holds("N1", d) || held.Holds("N2", d) != (i%2 == 0) || held.Holds("N3", d) {
			t.Errorf("layer %d: N1 %v, N2 %v, N3 %v", i, held.Holds("N1", d), held.Holds("N2", d), held.Holds("N3", d))
		}
	}
}

// SplitMasked, given the mask of the layers the node holds, splits as SplitBytes does
// with the lookup, on random pods, holdings and arriving layers (a pod past
// MaskedLayers included: its later layers are never held by the mask).
func TestSplitMaskedIsSplitBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 29))
	for round := 0; round < 500; round++ {
		var pod []Layer
		set := map[string]bool{}
		var mask uint64
		backlog := Backlog{Arriving: map[string]int64{}}
		for i := 0; i < 1+rng.IntN(MaskedLayers+6); i++ {
			layer := Layer{Digest: fmt.Sprintf("sha256:%d-%d", round, i), SizeBytes: 1 + rng.Int64N(1<<30)}
			pod = append(pod, layer)
			switch rng.IntN(3) {
			case 0:
				if i < MaskedLayers {
					set[layer.Digest] = true
					mask |= 1 << i
				}
			case 1:
				backlog.Arriving[layer.Digest] = layer.SizeBytes
			}
		}
		h, a, total := SplitBytes(pod, func(digest string) bool { return set[digest] }, &backlog)
		mh, ma, mtotal := SplitMasked(pod, mask, &backlog)
		if h != mh || a != ma || total != mtotal {
			t.Fatalf("round %d: SplitBytes %d %d %d, SplitMasked %d %d %d", round, h, a, total, mh, ma, mtotal)
		}
	}
}
