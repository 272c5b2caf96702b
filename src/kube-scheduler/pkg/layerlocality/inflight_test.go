package layerlocality

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"layersched.io/kube-scheduler/pkg/layers"
)

// PendingPodsCasesEnv names the JSON file of pods whose pending images the Python core
// worked out (tests/integration/test_kube_scheduler_plugin.py writes it and runs
// TestPendingPodsParityWithThePythonCore with it).
const PendingPodsCasesEnv = "LAYERSCHED_PENDING_PODS_CASES"

func status(name, imageID string, state v1.ContainerState) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, ImageID: imageID, State: state}
}

func waitingFor(reason string) v1.ContainerState {
	return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}
}

// The Python core's table (tests/unit/test_extender_in_flight.py): init container
// reg/init:1, containers a (reg/a:1), b (reg/b:1) and again (reg/a:1 repeated), an image
// volume reg/vol:1.
func TestPendingImages(t *testing.T) {
	base := func() *v1.Pod {
		return &v1.Pod{
			Spec: v1.PodSpec{
				NodeName:       "n1",
				InitContainers: []v1.Container{{Name: "init", Image: "reg/init:1"}},
				Containers: []v1.Container{
					{Name: "a", Image: "reg/a:1"}, {Name: "b", Image: "reg/b:1"}, {Name: "again", Image: "reg/a:1"},
				},
				Volumes: []v1.Volume{
					{Name: "v", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "reg/vol:1"}}},
					{Name: "e"},
				},
			},
			Status: v1.PodStatus{Phase: v1.PodPending},
		}
	}
	terminated := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}
	cases := []struct {
		name   string
		change func(*v1.Pod)
		want   []string
	}{
		{"nothing started", func(*v1.Pod) {}, []string{"reg/init:1", "reg/a:1", "reg/b:1", "reg/vol:1"}},
		{"not bound", func(p *v1.Pod) { p.Spec.NodeName = "" }, nil},
		{"running", func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }, nil},
		{"init done", func(p *v1.Pod) {
			p.Status.InitContainerStatuses = []v1.ContainerStatus{status("init", "sha256:i", terminated)}
		}, []string{"reg/a:1", "reg/b:1"}},
		{"one created", func(p *v1.Pod) {
			p.Status.ContainerStatuses = []v1.ContainerStatus{status("a", "sha256:a", waitingFor("CreateContainerError"))}
		}, []string{"reg/init:1", "reg/b:1"}},
		{"container creating", func(p *v1.Pod) {
			p.Status.ContainerStatuses = []v1.ContainerStatus{status("a", "", waitingFor("ContainerCreating"))}
		}, []string{"reg/init:1", "reg/a:1", "reg/b:1", "reg/vol:1"}},
		{"image pull backoff", func(p *v1.Pod) {
			p.Status.ContainerStatuses = []v1.ContainerStatus{status("b", "", waitingFor("ImagePullBackOff"))}
		}, nil},
		{"err image pull", func(p *v1.Pod) {
			p.Status.InitContainerStatuses = []v1.ContainerStatus{status("init", "", waitingFor("ErrImagePull"))}
		}, nil},
	}
	for _, c := range cases {
		pod := base()
		c.change(pod)
		if got := pendingImages(pod); !reflect.DeepEqual(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBoundAt(t *testing.T) {
	at := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	pod := &v1.Pod{Status: v1.PodStatus{Conditions: []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
	}}}
	if got, ok := boundAt(pod); !ok || got != float64(at.Unix()) {
		t.Errorf("bound at %v %v", got, ok)
	}
	if _, ok := boundAt(&v1.Pod{}); ok {
		t.Error("an assumed pod says no bind time")
	}
}

func TestInFlightArgs(t *testing.T) {
	decode := func(raw string) (*Args, error) {
		return DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
	}
	args, err := decode(`{"strategy": "in-flight", "inFlight": {"pullMode": "parallel"}}`)
	if err != nil {
		t.Fatal(err)
	}
	got := args.InFlight
	if got.PullMode != "parallel" || *got.NewBytesWeight != 0.25 || *got.OverheadSeconds != 1 ||
		*got.DefaultBandwidthBitsPerS != 1e8 || *got.MaxPendingAgeSeconds != 600 {
		t.Errorf("defaults: %+v", got)
	}
	if args, err := decode(`{"strategy": "in-flight"}`); err != nil || args.InFlight.PullMode != "serial" {
		t.Errorf("in-flight without its args: %v %v", args, err)
	}
	for raw, want := range map[string]string{
		`{"strategy": "in-flight", "inFlight": {"pullMode": "lazy"}}`:            "inFlight.pullMode",
		`{"strategy": "in-flight", "inFlight": {"newBytesWeight": -1}}`:          "inFlight.newBytesWeight",
		`{"strategy": "in-flight", "inFlight": {"maxPendingAgeSeconds": 0}}`:     "inFlight.maxPendingAgeSeconds",
		`{"strategy": "in-flight", "inFlight": {"defaultBandwidthBitsPerS": 0}}`: "inFlight.defaultBandwidthBitsPerS",
		`{"inFlight": {"pullMode": "serial"}}`:                                   `applies to strategy "in-flight" only`,
		`{"strategy": "in-flight", "inFlight": {"lazy": true}}`:                  "unknown field",
		`{"strategy": "pull-time"}`:                                              "strategy",
	} {
		if _, err := decode(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", raw, err, want)
		}
	}
}

// fakeNode is a candidate node of the worked case: 80 Mbit/s, its pods.
func fakeNode(name string, generation int64, pods ...*v1.Pod) pendingNode {
	return pendingNode{
		meta:       &metav1.ObjectMeta{Name: name, Labels: map[string]string{layers.BandwidthKey: "80000000"}},
		generation: generation,
		pods:       podList(pods),
	}
}

// holdsNothing: no node holds any layer.
type holdsNothing struct{}

func (holdsNothing) Holds(string, string) bool     { return false }
func (holdsNothing) Mask(string) uint64            { return 0 }
func (holdsNothing) Epoch() uint64                 { return 0 }
func (holdsNothing) Observed(string) (int64, bool) { return 0, false }
func (holdsNothing) MaskByID(layers.NodeID) uint64 { return 0 }
func (holdsNothing) Names() *layers.NameTable      { return nil }

// byName are scores (as nodes lists them) by node name.
func byName(nodes []pendingNode, scores []int64) map[string]int64 {
	named := make(map[string]int64, len(nodes))
	for i, node := range nodes {
		named[node.name()] = scores[i]
	}
	return named
}

// podList lists fixed pods.
type podList []*v1.Pod

func (p podList) list() []*v1.Pod { return p }

func replica(uid, node string, bound time.Time, image string) *v1.Pod {
	pod := &v1.Pod{Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: image}}}}
	pod.UID = types.UID("uid-" + uid)
	pod.Status.Phase = v1.PodPending
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)}}
	return pod
}

// The worked table's first case, through the plugin's reading of NodeInfos: idle 11 s,
// half-way 5 s, just bound 9 s, another image first 19 s -> 45, 100, 55, 26.
func TestInFlightScoresFromTheNodesPods(t *testing.T) {
	now := time.Date(2027, 1, 15, 8, 0, 10, 0, time.UTC)
	mb := int64(1_000_000)
	l1, l2, y := layers.Layer{Digest: "sha256:l1", SizeBytes: 40 * mb}, layers.Layer{Digest: "sha256:l2", SizeBytes: 40 * mb}, layers.Layer{Digest: "sha256:y", SizeBytes: 80 * mb}
	images := map[string][]layers.Layer{"reg/x:1": {l1, l2}, "reg/y:1": {y}}
	asked := 0
	resolve := func(image string, _ time.Time) ([]layers.Layer, bool) {
		asked++
		found, ok := images[image]
		return found, ok
	}
	args := &InFlightArgs{}
	args.setDefaults()
	f := newInFlight(args, resolve)
	nodes := []pendingNode{
		fakeNode("idle", 1),
		fakeNode("half", 1, replica("h", "half", now.Add(-4*time.Second), "reg/x:1")),
		fakeNode("fresh", 1, replica("f", "fresh", now, "reg/x:1")),
		fakeNode("other", 1, replica("o", "other", now, "reg/y:1")),
	}
	nothing := func([]string, map[string][]string) holdings { return holdsNothing{} }
	pod := podTerms{layers: []layers.Layer{l1, l2}, total: 80 * mb, heldOf: nothing}
	want := map[string]int64{"idle": 45, "half": 100, "fresh": 55, "other": 26}
	if got := byName(nodes, f.scores(now, nodes, placement{}, pod)); !reflect.DeepEqual(got, want) {
		t.Errorf("scores %v, want %v", got, want)
	}
	// the same generations again: nothing read or resolved again
	before := asked
	f.scores(now, nodes, placement{}, pod)
	if asked != before {
		t.Errorf("resolved %d images again for unchanged nodes", asked-before)
	}
	// the half-way replica started (a new generation): that node is idle again
	nodes[1] = fakeNode("half", 2)
	if got := byName(nodes, f.scores(now, nodes, placement{}, pod))["half"]; got != 81 { // 9 s (fresh) / 11 s
		t.Errorf("half after its replica started: %d, want 81", got)
	}
}

// holdsSet holds the (node, digest) pairs listed; Mask by the pod's layer positions.
type holdsSet struct {
	pairs   map[[2]string]bool
	digests []string
}

func (h holdsSet) Holds(node, digest string) bool { return h.pairs[[2]string{node, digest}] }
func (h holdsSet) Epoch() uint64                  { return 0 }
func (h holdsSet) Observed(string) (int64, bool)  { return 0, false }
func (h holdsSet) MaskByID(layers.NodeID) uint64  { return 0 }
func (h holdsSet) Names() *layers.NameTable       { return nil }
func (h holdsSet) Mask(node string) uint64 {
	var mask uint64
	for i, digest := range h.digests {
		if i < layers.MaskedLayers && h.pairs[[2]string{node, digest}] {
			mask |= 1 << i
		}
	}
	return mask
}

// An idle node's score (read from one mask) is the rule's: SplitBytes and StartCost with
// layers.Idle, on random holdings and links, serial and parallel.
func TestInFlightIdleNodesScoreAsTheRule(t *testing.T) {
	now := time.Date(2027, 1, 15, 8, 0, 10, 0, time.UTC)
	rng := rand.New(rand.NewPCG(7, 43))
	for _, mode := range []string{string(layers.Serial), string(layers.Parallel)} {
		args := &InFlightArgs{PullMode: mode}
		args.setDefaults()
		f := newInFlight(args, func(string, time.Time) ([]layers.Layer, bool) { return nil, false })
		for round := 0; round < 50; round++ {
			pod := podTerms{}
			for j := 0; j < 1+rng.IntN(70); j++ {
				layer := layers.Layer{Digest: fmt.Sprintf("sha256:%d", j), SizeBytes: 1 + rng.Int64N(1<<30)}
				pod.layers = append(pod.layers, layer)
				pod.total += layer.SizeBytes
			}
			held := holdsSet{pairs: map[[2]string]bool{}}
			for _, layer := range pod.layers {
				held.digests = append(held.digests, layer.Digest)
			}
			var nodes []pendingNode
			for n := 0; n < 20; n++ {
				name := fmt.Sprintf("n%d", n)
				node := pendingNode{generation: int64(round), pods: podList(nil), meta: &metav1.ObjectMeta{Name: name,
					Labels: map[string]string{layers.BandwidthKey: fmt.Sprint(1 + rng.IntN(1_000_000_000))}}}
				nodes = append(nodes, node)
				for _, layer := range pod.layers {
					if rng.IntN(2) == 0 {
						held.pairs[[2]string{name, layer.Digest}] = true
					}
				}
			}
			pod.heldOf = func([]string, map[string][]string) holdings { return held }
			got := byName(nodes, f.scores(now, nodes, placement{}, pod))
			costs := make([]float64, len(nodes))
			for i, node := range nodes {
				holds := func(digest string) bool { return held.Holds(node.name(), digest) }
				h, a, total := layers.SplitBytes(pod.layers, holds, &layers.Idle)
				bits := layers.Bandwidth(node.meta.Labels, nil, 0)
				costs[i] = layers.StartCost(h, a, total, 0, 0, 0, bits, f.args)
			}
			for i, score := range layers.ScoreCosts(costs, pod.total) {
				if got[nodes[i].name()] != score {
					t.Fatalf("%s round %d node %s: %d, the rule %d (%d layers)",
						mode, round, nodes[i].name(), got[nodes[i].name()], score, len(pod.layers))
				}
			}
		}
	}
}

func TestPendingPodsParityWithThePythonCore(t *testing.T) {
	path := os.Getenv(PendingPodsCasesEnv)
	if path == "" {
		t.Skip(PendingPodsCasesEnv + " is not set: tests/integration/test_kube_scheduler_plugin.py " +
			"generates the pods with layersched.core and runs this test with it")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Pod     json.RawMessage `json:"pod"`
			Images  []string        `json:"images"`
			BoundAt *float64        `json:"bound_at"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	differing := 0
	for i, c := range file.Cases {
		var pod v1.Pod
		if err := json.Unmarshal(c.Pod, &pod); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := pendingImages(&pod)
		bound, ok := boundAt(&pod)
		sameBound := (c.BoundAt == nil && !ok) || (c.BoundAt != nil && ok && *c.BoundAt == bound)
		if fmt.Sprint(got) != fmt.Sprint(c.Images) && !(len(got) == 0 && len(c.Images) == 0) || !sameBound {
			differing++
			if differing <= 20 {
				t.Errorf("case %d: Go %v (bound %v %v), Python %v (bound %v)", i, got, bound, ok, c.Images, c.BoundAt)
			}
		}
	}
	if differing > 0 {
		t.Fatalf("%d of %d pods differ", differing, len(file.Cases))
	}
	t.Logf("pending pods parity: %d pods, all equal", len(file.Cases))
}

// Backlogs kept between cycles score as computed afresh: one inFlight kept across cycles
// against a new one each cycle, on a real index, while the clock crosses pulls' expiry
// and inventories' age bound, inventories are replaced (the index's epoch), nodes' pods
// change (their generation), and a pull's bind time lies ahead of the clock.
func TestKeptBacklogsScoreAsComputedAgain(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261129, 42))
	const nodeCount, imageCount = 12, 8
	images := map[string][]layers.Layer{}
	var catalogue []layers.NodeImage
	for i := 0; i < imageCount; i++ {
		var imageLayers []layers.Layer
		for j := 0; j < 1+rng.IntN(4); j++ {
			// shared bases (b0-b2) and layers of their own
			label := fmt.Sprintf("own-%d-%d", i, j)
			if j == 0 {
				label = fmt.Sprintf("base-%d", rng.IntN(3))
			}
			imageLayers = append(imageLayers, layers.Layer{Digest: digest(label), SizeBytes: 1_000_000 + int64(len(label))*7_000_000})
		}
		name := fmt.Sprintf("reg/app%d:1", i)
		images[name] = imageLayers
		catalogue = append(catalogue, layers.NodeImage{Names: []string{name}, Digest: digest("manifest-" + name), Layers: imageLayers})
	}
	resolve := func(image string, _ time.Time) ([]layers.Layer, bool) {
		found, ok := images[image]
		return found, ok
	}
	args := &InFlightArgs{PullMode: string(layers.Serial)}
	args.setDefaults()
	index := layers.NewIndex(1)
	now := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	inventoryAge := 300 * time.Second
	upsert := func(node string) {
		var held []layers.NodeImage
		for _, image := range catalogue {
			if rng.IntN(3) == 0 {
				held = append(held, image)
			}
		}
		observed := now.Add(-time.Duration(rng.IntN(400)) * time.Second)
		index.Upsert(&layers.NodeLayerInventory{Node: node, Images: held, ObservedAt: observed})
	}
	nodes := make([]pendingNode, nodeCount)
	pods := make([][]*v1.Pod, nodeCount)
	for n := range nodes {
		name := fmt.Sprintf("n%02d", n)
		upsert(name)
		nodes[n] = pendingNode{generation: 1, pods: podList(nil), meta: &metav1.ObjectMeta{Name: name,
			Labels: map[string]string{layers.BandwidthKey: fmt.Sprint(10_000_000 * (1 + rng.IntN(8)))}}}
	}
	kept := newInFlight(args, resolve)
	hits := 0
	for cycle := 0; cycle < 400; cycle++ {
		now = now.Add(time.Duration(rng.IntN(90_000)) * time.Millisecond)
		switch rng.IntN(6) {
		case 0: // an inventory replaced: the epoch moves
			upsert(nodes[rng.IntN(nodeCount)].name())
		case 1, 2: // a pod bound, up to 15 min ago or (rarely) ahead of the clock
			n := rng.IntN(nodeCount)
			bound := now.Add(-time.Duration(rng.IntN(900)) * time.Second)
			if rng.IntN(8) == 0 {
				bound = now.Add(time.Duration(1+rng.IntN(5)) * time.Second)
			}
			image := catalogue[rng.IntN(imageCount)].Names[0]
			pods[n] = append(pods[n], replica(fmt.Sprint(cycle), nodes[n].name(), bound, image))
			nodes[n].generation++
			nodes[n].pods = podList(append([]*v1.Pod(nil), pods[n]...))
		case 3: // a node's pods started
			n := rng.IntN(nodeCount)
			pods[n] = nil
			nodes[n].generation++
			nodes[n].pods = podList(nil)
		}
		p := pod(nil, catalogue[rng.IntN(imageCount)].Names[0])
		before := 0
		for _, facts := range kept.bySlot {
			if facts != nil && facts.kept != nil {
				before++
			}
		}
		// kept backlogs, nodes placed (facts by slot, idle ones read by id); against
		// afresh, every node by name
		names := index.NameTable()
		placed := make([]pendingNode, len(nodes))
		for n := range nodes {
			placed[n] = nodes[n]
			placed[n].slot, placed[n].id, placed[n].placed = int32(n), names.ID(nodes[n].name()), true
		}
		got := kept.prepare(index, p, placed, placement{names: names, version: names, slots: len(nodes)}, now, inventoryAge, nil)
		want := newInFlight(args, resolve).prepare(index, p, nodes, placement{}, now, inventoryAge, nil)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("cycle %d at %s: kept %v, afresh %v", cycle, now, got, want)
		}
		hits += before
	}
	// the backlogs were kept and used, not recomputed every cycle
	if hits == 0 {
		t.Fatal("no backlog was kept between cycles")
	}
}

// The index's epoch moves with every change, and a Held says which epoch it was built at
// and which asked nodes were fresh.
func TestTheIndexEpochMovesWithEveryChange(t *testing.T) {
	index := layers.NewIndex(1)
	now := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	start := index.Epoch()
	index.Upsert(&layers.NodeLayerInventory{Node: "a", Images: []layers.NodeImage{img1}, ObservedAt: now})
	index.Upsert(&layers.NodeLayerInventory{Node: "b", Images: []layers.NodeImage{img2}, ObservedAt: now.Add(-time.Hour)})
	index.Remove("missing")
	if got := index.Epoch(); got != start+3 {
		t.Fatalf("epoch %d after three changes from %d", got, start)
	}
	held := index.Held([]string{l1.Digest}, map[string][]string{"a": {l3.Digest}, "b": {l4.Digest}}, now, 30*time.Minute)
	if held.Epoch() != index.Epoch() {
		t.Errorf("held at epoch %d, index at %d", held.Epoch(), index.Epoch())
	}
	if observed, fresh := held.Observed("a"); !fresh || !layers.StillFresh(observed, now.Add(29*time.Minute), 30*time.Minute) ||
		layers.StillFresh(observed, now.Add(31*time.Minute), 30*time.Minute) {
		t.Errorf("a: fresh %v until about 30 min on", fresh)
	}
	if _, fresh := held.Observed("b"); fresh {
		t.Error("b's hour-old inventory counted as fresh")
	}
	index.Replace(nil)
	if index.Epoch() != start+4 {
		t.Errorf("Replace did not move the epoch")
	}
}
