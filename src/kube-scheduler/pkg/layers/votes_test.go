package layers

import (
	"fmt"
	"testing"
	"time"
)

// The attack: nginx:1.25 is L1+L2+L3 (90 bytes); the liar publishes it as one
// layer of 10^15 bytes, which only it holds.
var (
	nginx = NodeImage{Names: []string{"nginx:1.25"}, Digest: "sha256:nginx", Layers: []Layer{l1, l2, l3}}
	lie   = NodeImage{Names: []string{"nginx:1.25"}, Digest: "sha256:nginx", Layers: []Layer{{digest("huge"), 1_000_000_000_000_000}}}
)

// nginxScores publishes each node's images in order, then scores an nginx pod on every
// node (and says how the image resolved).
func nginxScores(quorum int, published ...holding) (map[string]int64, Resolution) {
	ix := NewIndex(quorum)
	nodes := []string{}
	for _, p := range published {
		ix.Upsert(&NodeLayerInventory{Node: p.node, Images: p.images, ObservedAt: observed})
		nodes = append(nodes, p.node)
	}
	_, why := ix.ImageLayers("nginx:1.25", observed, 0)
	return scores(ix, []string{"nginx:1.25"}, nil, nodes...), why
}

type holding = struct {
	node   string
	images []NodeImage
}

func TestOneNodeCannotAttractEveryPodOfAnImage(t *testing.T) {
	cases := []struct {
		name      string
		quorum    int
		published []holding
		want      map[string]int64
		why       Resolution
	}{
		{
			// the liar writes last; one honest holder: neither answer has 2 nodes, the
			// image is Unknown and nobody is attracted (today: liar 100, honest 0)
			name:      "one liar, one honest holder, K=2",
			quorum:    2,
			published: []holding{{"honest1", []NodeImage{nginx}}, {"liar", []NodeImage{lie}}},
			want:      map[string]int64{"honest1": 0, "liar": 0},
			why:       WithoutQuorum,
		},
		{
			// two honest holders agree on L1+L2+L3 (90 bytes): both score 90/90 -> 100;
			// the liar holds none of them -> 0
			name:      "one liar, two honest holders, K=2",
			quorum:    2,
			published: []holding{{"honest1", []NodeImage{nginx}}, {"honest2", []NodeImage{nginx}}, {"liar", []NodeImage{lie}}},
			want:      map[string]int64{"honest1": 100, "honest2": 100, "liar": 0},
			why:       Agreed,
		},
		{
			// colluders: two liars reach the quorum as the two honest holders do; two
			// answers at the quorum -> trust neither
			name:   "two answers with a quorum each, K=2",
			quorum: 2,
			published: []holding{{"honest1", []NodeImage{nginx}}, {"honest2", []NodeImage{nginx}},
				{"liar1", []NodeImage{lie}}, {"liar2", []NodeImage{lie}}},
			want: map[string]int64{"honest1": 0, "honest2": 0, "liar1": 0, "liar2": 0},
			why:  WithoutQuorum,
		},
		{
			// K=1, one node: the old behaviour, its word resolves the image
			name:      "K=1, a single publisher",
			quorum:    1,
			published: []holding{{"only", []NodeImage{nginx}}, {"other", []NodeImage{img2}}},
			// other holds L1+L2 = 70 of 90 -> floor(7000/90) = 77
			want: map[string]int64{"only": 100, "other": 77},
			why:  Agreed,
		},
		{
			// K=1 with a liar: two answers at quorum 1 -> neither (never last-writer-wins)
			name:      "K=1, two answers",
			quorum:    1,
			published: []holding{{"honest1", []NodeImage{nginx}}, {"liar", []NodeImage{lie}}},
			want:      map[string]int64{"honest1": 0, "liar": 0},
			why:       WithoutQuorum,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := nginxScores(c.quorum, c.published...)
			if fmt.Sprint(got) != fmt.Sprint(c.want) || why != c.why {
				t.Errorf("scores %v (%v), want %v (%v)", got, why, c.want, c.why)
			}
		})
	}
}

func TestANodeVotesOncePerNameAndAnswer(t *testing.T) {
	// the liar lists the image twice, under two names that normalise alike: still one vote
	ix := NewIndex(2)
	twice := NodeImage{Names: []string{"nginx", "nginx:latest"}, Digest: lie.Digest, Layers: lie.Layers}
	ix.Upsert(&NodeLayerInventory{Node: "liar", Images: []NodeImage{twice, twice}, ObservedAt: observed})
	if _, why := ix.ImageLayers("nginx", observed, 0); why != WithoutQuorum {
		t.Errorf("one node's duplicates resolved the image: %v", why)
	}
}

func TestVotesLeaveWithTheirObject(t *testing.T) {
	ix := NewIndex(2)
	ix.Upsert(&NodeLayerInventory{Node: "a", Images: []NodeImage{nginx}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "b", Images: []NodeImage{nginx}, ObservedAt: observed})
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != Agreed {
		t.Fatalf("two holders: %v", why)
	}
	// b's object is replaced by one without nginx: one vote left, below the quorum
	ix.Upsert(&NodeLayerInventory{Node: "b", Images: []NodeImage{img2}, ObservedAt: observed})
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != WithoutQuorum {
		t.Errorf("after b's replacement: %v", why)
	}
	// c agrees with a: the quorum is back; then a's object is deleted
	ix.Upsert(&NodeLayerInventory{Node: "c", Images: []NodeImage{nginx}, ObservedAt: observed})
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != Agreed {
		t.Errorf("after c: %v", why)
	}
	ix.Remove("a")
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != WithoutQuorum {
		t.Errorf("after a's deletion: %v", why)
	}
	// a liar's answer leaves with its object too: a fresh pair of liars, then one goes
	ix.Upsert(&NodeLayerInventory{Node: "a", Images: []NodeImage{nginx}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "x", Images: []NodeImage{lie}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "y", Images: []NodeImage{lie}, ObservedAt: observed})
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != WithoutQuorum {
		t.Errorf("two answers at quorum: %v", why)
	}
	ix.Remove("y")
	if layers, why := ix.ImageLayers("nginx:1.25", observed, 0); why != Agreed || fmt.Sprint(layers) != fmt.Sprint(nginx.Layers) {
		t.Errorf("after y's deletion: %v %v", layers, why)
	}
	// every object gone: nothing is held for any name (memory follows the objects)
	for _, node := range []string{"a", "b", "c", "x"} {
		ix.Remove(node)
	}
	if len(ix.lookupID) != 0 || len(ix.answerID) != 0 || ix.usedBytes != 0 {
		t.Errorf("%d lookup keys, %d answers, %d bytes still held with no object held", len(ix.lookupID), len(ix.answerID), ix.usedBytes)
	}
}

func TestAStaleInventoryDoesNotVote(t *testing.T) {
	ix := NewIndex(2)
	ix.Upsert(&NodeLayerInventory{Node: "a", Images: []NodeImage{nginx}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "b", Images: []NodeImage{nginx}, ObservedAt: observed.Add(-2 * time.Hour)})
	if _, why := ix.ImageLayers("nginx:1.25", observed, time.Hour); why != WithoutQuorum {
		t.Errorf("b's two-hour-old object voted under a one-hour bound: %v", why)
	}
	if _, why := ix.ImageLayers("nginx:1.25", observed, 0); why != Agreed {
		t.Errorf("without a bound: %v", why)
	}
}

func TestACraftedDigestCannotJoinAnotherAnswer(t *testing.T) {
	// with a naive "digest|layer|size" key, this digest would spell the honest answer's key
	key := keyOf(&nginx)
	crafted := NodeImage{Names: nginx.Names, Digest: string(key[:]), Layers: nil}
	if keyOf(&crafted) == keyOf(&nginx) {
		t.Fatal("two answers share a key")
	}
}

func TestAgreementIsAMajorityOfPublishersAndAQuorum(t *testing.T) {
	pinned := nginx
	pinned.Digest = digest("nginx manifest")
	liarOnDigest := lie
	liarOnDigest.Digest = pinned.Digest // the real manifest digest, other layers
	cases := []struct {
		name         string
		pod          string
		honest, liar NodeImage
		honests      int
		liars        int
		why          Resolution
		honestScore  int64
	}{
		// issue 30: ten holders and two liars gave no answer at 2de96fd (two answers at
		// the quorum); ten of twelve is a majority: the holders score 100
		{"ten holders, two liars", "nginx:1.25", nginx, lie, 10, 2, Agreed, 100},
		// a digest-pinned pod image, the liars claiming the real digest: its content is
		// the registry's to confirm, and the plugin asks none, so any dissenting
		// publisher leaves it unknown (issue 44: fail closed)
		{"five holders, two liars, by digest", "nginx@" + pinned.Digest, pinned, liarOnDigest, 5, 2, WithoutQuorum, 0},
		// issue 44's case: one holder, two liars, by digest; at 40ab284 the liars'
		// answer (a majority and the quorum) resolved it
		{"one holder, two liars, by digest", "nginx@" + pinned.Digest, pinned, liarOnDigest, 1, 2, WithoutQuorum, 0},
		// no dissent: the holders' word is the answer
		{"three holders, no liar, by digest", "nginx@" + pinned.Digest, pinned, liarOnDigest, 3, 0, Agreed, 100},
		// two of four is no majority: nobody is attracted
		{"two against two", "nginx:1.25", nginx, lie, 2, 2, WithoutQuorum, 0},
		// the bound (docs/inventory.md, "Trust model"): two liars of three publishers are
		// a majority and the quorum; the honest holder then scores 0
		{"one holder, two liars", "nginx:1.25", nginx, lie, 1, 2, Agreed, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := NewIndex(2)
			for i := 0; i < c.honests; i++ {
				ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("h", i), Images: []NodeImage{c.honest}, ObservedAt: observed})
			}
			for i := 0; i < c.liars; i++ {
				ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("liar", i), Images: []NodeImage{c.liar}, ObservedAt: observed})
			}
			_, why := ix.ImageLayers(c.pod, observed, 0)
			got := scores(ix, []string{c.pod}, nil, "h0")
			if why != c.why || got["h0"] != c.honestScore {
				t.Errorf("%v, a holder scores %d; want %v, %d", why, got["h0"], c.why, c.honestScore)
			}
		})
	}
}

func TestAStaleVoterNeitherVotesNorCountsAsAPublisher(t *testing.T) {
	// two fresh holders and three liars whose objects are two hours old, under a one-hour
	// bound: the liars count for nothing, the holders are all the publishers
	ix := NewIndex(2)
	for i := 0; i < 2; i++ {
		ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("h", i), Images: []NodeImage{nginx}, ObservedAt: observed})
	}
	for i := 0; i < 3; i++ {
		ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("liar", i), Images: []NodeImage{lie}, ObservedAt: observed.Add(-2 * time.Hour)})
	}
	if layers, why := ix.ImageLayers("nginx:1.25", observed, time.Hour); why != Agreed || fmt.Sprint(layers) != fmt.Sprint(nginx.Layers) {
		t.Errorf("under the bound: %v %v", layers, why)
	}
	// without a bound the three liars are a majority of five and a quorum
	if layers, why := ix.ImageLayers("nginx:1.25", observed, 0); why != Agreed || fmt.Sprint(layers) != fmt.Sprint(lie.Layers) {
		t.Errorf("without the bound: %v %v", layers, why)
	}
}

func TestAShortNameMatchesTheRuntimesName(t *testing.T) {
	// issue 30: containerd lists what kubelet pulled for "nginx:1.25" as
	// "docker.io/library/nginx:1.25"; at 2de96fd the two never matched
	listed := nginx
	listed.Names = []string{"docker.io/library/nginx:1.25"}
	ix := NewIndex(2)
	ix.Upsert(&NodeLayerInventory{Node: "a", Images: []NodeImage{listed}, ObservedAt: observed})
	ix.Upsert(&NodeLayerInventory{Node: "b", Images: []NodeImage{nginx}, ObservedAt: observed})
	for _, pod := range []string{"nginx:1.25", "docker.io/library/nginx:1.25", "index.docker.io/library/nginx:1.25"} {
		if _, why := ix.ImageLayers(pod, observed, 0); why != Agreed {
			t.Errorf("%s: %v", pod, why)
		}
	}
}
