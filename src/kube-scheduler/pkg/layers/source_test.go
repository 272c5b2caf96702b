package layers

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

// mapSource answers the images it has; it records every image it was asked for.
type mapSource struct {
	mu      sync.Mutex
	answers map[string][]Layer
	asked   []string
}

func (m *mapSource) Layers(image string) ([]Layer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, image)
	found, ok := m.answers[image]
	return found, ok
}

func TestPrepareFromMergesASourceAsTheExtenderDoes(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := func(label string, size int64) Layer { return Layer{Digest: digest(label), SizeBytes: size} }
	l1, l2, l3, l4, l5 := l("L1", 40), l("L2", 30), l("L3", 20), l("L4", 10), l("L5", 5)
	pinned := "reg/app@" + digest("manifest")
	ix := NewIndex(1)
	ix.Upsert(&NodeLayerInventory{Node: "N1", ObservedAt: now, Images: []NodeImage{
		{Names: []string{"reg/img1:1"}, Digest: digest("img1"), Layers: []Layer{l1, l2, l3}}}})
	ix.Upsert(&NodeLayerInventory{Node: "N2", ObservedAt: now, Images: []NodeImage{
		{Names: []string{pinned}, Digest: digest("manifest"), Layers: []Layer{l1, l2, l4}}}})
	for _, tc := range []struct {
		name    string
		images  []string
		answers map[string][]Layer
		// scores of N1 and N2 (no spread), what is unknown, what the source was asked
		n1, n2     int64
		unknown    []string
		asked      []string
		fromSource int
		disputed   int
	}{
		{
			// every image agreed and none pinned: the source is not asked
			name: "agreed", images: []string{"reg/img1:1"}, n1: 100, n2: 77,
		},
		{
			// img3 unknown and not answered: the agreed img1 alone (as without a source),
			// and the source asked for every image (it queues what it lacks)
			name: "unanswered", images: []string{"reg/img1:1", "reg/img3:1"},
			answers: map[string][]Layer{"reg/img1:1": {l1, l2, l3}},
			n1:      100, n2: 77, unknown: []string{"reg/img3:1"}, asked: []string{"reg/img1:1", "reg/img3:1"},
		},
		{
			// answered for every image: the source's layers for the whole pod, L1 L2 L3 L5
			// (L5 on no node: needed, never present) = 95; N1 90 -> 94, N2 70 -> 73
			name: "answered", images: []string{"reg/img1:1", "reg/img3:1"},
			answers: map[string][]Layer{"reg/img1:1": {l1, l2, l3}, "reg/img3:1": {l1, l5}},
			n1:      94, n2: 73, asked: []string{"reg/img1:1", "reg/img3:1"}, fromSource: 2,
		},
		{
			// the whole pod from the source, even an image the nodes agree on otherwise:
			// img1 served as L1 L4 (the extender resolves the whole pod there) = 55;
			// N1 40 -> 72, N2 50 -> 90
			name: "whole pod", images: []string{"reg/img1:1", "reg/img3:1"},
			answers: map[string][]Layer{"reg/img1:1": {l1, l4}, "reg/img3:1": {l1, l5}},
			n1:      72, n2: 90, asked: []string{"reg/img1:1", "reg/img3:1"}, fromSource: 2,
		},
		{
			// a pinned image the nodes agree on, before the source answered: theirs
			name: "pinned, unanswered", images: []string{pinned}, n1: 87, n2: 100, asked: []string{pinned},
		},
		{
			// answered otherwise (L1 L3): the source's, disputed; N1 100, N2 40/60 -> 66
			name: "pinned, disputed", images: []string{pinned}, answers: map[string][]Layer{pinned: {l1, l3}},
			n1: 100, n2: 66, asked: []string{pinned}, disputed: 1,
		},
	} {
		source := &mapSource{answers: tc.answers}
		p := ix.PrepareFrom(tc.images, source, nil, now, 0)
		n1, _ := p.Score("N1")
		n2, _ := p.Score("N2")
		if n1 != tc.n1 || n2 != tc.n2 || !reflect.DeepEqual(p.Unknown, tc.unknown) || !reflect.DeepEqual(source.asked, tc.asked) ||
			p.FromSource != tc.fromSource || p.Disputed != tc.disputed || p.Consulted != (len(tc.asked) > 0) {
			t.Errorf("%s: N1 %d N2 %d unknown %v asked %v from source %d disputed %d consulted %v", tc.name, n1, n2, p.Unknown,
				source.asked, p.FromSource, p.Disputed, p.Consulted)
		}
	}
	// without a source: Prepare, unchanged
	a, b := ix.Prepare([]string{"reg/img1:1", "reg/img3:1"}, nil, now, 0), ix.PrepareFrom([]string{"reg/img1:1", "reg/img3:1"}, nil, nil, now, 0)
	if !reflect.DeepEqual(a.Unknown, b.Unknown) || a.TotalBytes() != b.TotalBytes() {
		t.Fatalf("Prepare %+v, PrepareFrom(nil) %+v", a, b)
	}
}

func TestASourcesLayersCountUnderSpread(t *testing.T) {
	// spread over 4 nodes: L1 (40) on N1 and N2 -> 40 * 2 / 4 = 20 each; L9 (60) on no
	// node counts in the total only: N1 floor(100 * 20 / 100) = 20
	now := time.Unix(1_000_000, 0)
	l1, l9 := Layer{Digest: digest("L1"), SizeBytes: 40}, Layer{Digest: digest("L9"), SizeBytes: 60}
	ix := NewIndex(1)
	for _, node := range []string{"N1", "N2"} {
		ix.Upsert(&NodeLayerInventory{Node: node, ObservedAt: now, Images: []NodeImage{{Names: []string{"reg/base:1"}, Digest: digest("base"), Layers: []Layer{l1}}}})
	}
	p := ix.PrepareFrom([]string{"reg/new:1"}, &mapSource{answers: map[string][]Layer{"reg/new:1": {l1, l9, l9}}}, &Spread{Nodes: 4}, now, 0)
	if got, _ := p.Score("N1"); got != 20 || p.TotalBytes() != 100 {
		t.Fatalf("N1 %d, total %d", got, p.TotalBytes())
	}
}
