package layerlocality

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"layersched.io/kube-scheduler/pkg/layers"
	"layersched.io/kube-scheduler/pkg/resolver"
)

// The test side of framework.go: how the shared tests drive the plugin through the
// framework of 1.35 and later.

const frameworkRelease = "kube-scheduler 1.35+"

// cycle runs PreScore then Score for each node through one CycleState, as the framework
// does; it returns the first failing status's message.
func cycle(pl *LayerLocality, pod *v1.Pod, preScore bool, nodes ...string) (map[string]int64, string) {
	state := framework.NewCycleState()
	if preScore {
		if status := pl.PreScore(context.Background(), state, pod, nil); !status.IsSuccess() {
			return nil, status.Message()
		}
	}
	// a node of the snapshot is scored twice: through its own NodeInfo (read by slot and
	// id when PreScore placed it) and through another NodeInfo of the same node (looked
	// up by name); the two must agree
	view, err := pl.snapshot()
	if err != nil {
		return nil, err.Error()
	}
	own := map[string]fwk.NodeInfo{}
	for _, info := range view.infos {
		own[info.Node().Name] = info
	}
	got := map[string]int64{}
	for _, node := range nodes {
		info := framework.NewNodeInfo()
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		value, status := pl.Score(context.Background(), state, pod, info)
		if !status.IsSuccess() {
			return nil, status.Message()
		}
		if info, ok := own[node]; ok {
			bySlot, status := pl.Score(context.Background(), state, pod, info)
			if !status.IsSuccess() {
				return nil, status.Message()
			}
			if bySlot != value {
				return nil, fmt.Sprintf("%s: %d through the snapshot's NodeInfo, %d by name", node, bySlot, value)
			}
		}
		got[node] = value
	}
	return got, ""
}

// decodeConfig decodes and validates a KubeSchedulerConfiguration as kube-scheduler
// loads its --config file, and returns each profile's LayerLocality args and whether the
// plugin is enabled at preScore and score.
func decodeConfig(document []byte) ([]profileUse, error) {
	object, _, err := scheme.Codecs.UniversalDecoder().Decode(document, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := object.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, errorf("decoded a %T", object)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, errorf("invalid: %v", err)
	}
	var uses []profileUse
	for _, profile := range cfg.Profiles {
		for _, pluginConfig := range profile.PluginConfig {
			if pluginConfig.Name == Name {
				uses = append(uses, profileUse{
					args:    pluginConfig.Args,
					enabled: enabled(profile.Plugins.PreScore, Name) && enabled(profile.Plugins.Score, Name),
				})
			}
		}
	}
	return uses, nil
}

func enabled(set config.PluginSet, name string) bool {
	for _, plugin := range set.Enabled {
		if plugin.Name == name {
			return true
		}
	}
	return false
}

// signPod is the plugin's signature fragments.
func signPod(pl *LayerLocality, pod *v1.Pod) ([]fwk.SignFragment, string) {
	fragments, status := pl.SignPod(context.Background(), pod)
	if !status.IsSuccess() {
		return nil, status.Message()
	}
	return fragments, ""
}

func TestSignPodSignsTheImagesTheScoreReads(t *testing.T) {
	pl := plugin(t, `{}`)
	cases := []struct {
		name string
		pod  *v1.Pod
		want []string
	}{
		// the score counts distinct layers: neither order, repetition nor the init/regular
		// split changes it, so neither changes the signature
		{name: "sorted, without repeats", pod: pod([]string{"b:1"}, "c:1", "a:1", "c:1"), want: []string{"a:1", "b:1", "c:1"}},
		{name: "same images, other places", pod: pod(nil, "a:1", "b:1", "c:1"), want: []string{"a:1", "b:1", "c:1"}},
		// a tag is part of the name a node published: no normalisation
		{name: "untagged stays untagged", pod: pod(nil, "a"), want: []string{"a"}},
		{name: "no containers", pod: pod(nil), want: []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fragments, message := signPod(pl, c.pod)
			if message != "" {
				t.Fatal(message)
			}
			if len(fragments) != 1 || fragments[0].Key != SignerName {
				t.Fatalf("fragments %+v, want one under %q", fragments, SignerName)
			}
			if got := fmt.Sprint(fragments[0].Value); got != fmt.Sprint(c.want) {
				t.Errorf("signed %s, want %v", got, c.want)
			}
		})
	}
}

// infosOf are NodeInfos of these node names, as a snapshot lists them.
func infosOf(names ...string) []fwk.NodeInfo {
	infos := make([]fwk.NodeInfo, len(names))
	for i, name := range names {
		info := framework.NewNodeInfo()
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		infos[i] = info
	}
	return infos
}

func TestTheSpreadFollowsTheSchedulersSnapshot(t *testing.T) {
	pl := plugin(t, `{"spread": true}`)
	all := infosOf("N1", "N2", "N3", "N4", "old")
	handle := &snapshotHandle{lister: newSnapshotLister(all)}
	pl.snapshot = snapshotNodes(handle)
	// as TestScores' spread: 5 nodes, L1 and L2 on N1 and N2 -> N2 31
	if got := score(t, pl, pod(nil, "reg:5000/img1:1"), "N2"); got["N2"] != 31 {
		t.Fatalf("N2 %d, want 31", got["N2"])
	}
	// N1 leaves the snapshot (a new list): L1, L2 on N2 alone of 4 nodes:
	// 40/4 + 30/4 = 17.5 -> floor(100*17.5/90) = 19
	handle.lister = newSnapshotLister([]fwk.NodeInfo{all[1], all[2], all[3], all[4]})
	if got := score(t, pl, pod(nil, "reg:5000/img1:1"), "N2"); got["N2"] != 19 {
		t.Errorf("N1 gone: N2 %d, want 19", got["N2"])
	}
	// back again, in a list of the same NodeInfos: 31 again
	handle.lister = newSnapshotLister(slices.Clone(all))
	if got := score(t, pl, pod(nil, "reg:5000/img1:1"), "N2"); got["N2"] != 31 {
		t.Errorf("N1 back: N2 %d, want 31", got["N2"])
	}
}

func TestASnapshotListKeepsItsVersionWhileItsNodesAreTheSame(t *testing.T) {
	var identity snapshotIdentity
	infos := infosOf("a", "b")
	first := identity.of(infos)
	if identity.of(slices.Clone(infos)) != first {
		t.Error("the same NodeInfos in another slice got a new version")
	}
	if identity.of(infos[:1]) == first || identity.of(infosOf("a", "b")) == first {
		t.Error("other NodeInfos kept the version")
	}
}

// snapshotHandle is the one part of the framework's handle the plugin reads: the
// scheduler's snapshot.
type snapshotHandle struct {
	fwk.Handle
	lister fwk.SharedLister
}

func (h *snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.lister }

// snapshotLister is a snapshot of these nodes, as kube-scheduler's lists and gets them.
type snapshotLister struct {
	fwk.SharedLister
	nodes nodeInfoLister
}

func newSnapshotLister(infos []fwk.NodeInfo) snapshotLister {
	byName := make(map[string]fwk.NodeInfo, len(infos))
	for _, info := range infos {
		byName[info.Node().Name] = info
	}
	return snapshotLister{nodes: nodeInfoLister{infos: infos, byName: byName}}
}

func (s snapshotLister) NodeInfos() fwk.NodeInfoLister { return s.nodes }

type nodeInfoLister struct {
	fwk.NodeInfoLister
	infos  []fwk.NodeInfo
	byName map[string]fwk.NodeInfo
}

func (l nodeInfoLister) List() ([]fwk.NodeInfo, error) { return l.infos, nil }

func (l nodeInfoLister) Get(name string) (fwk.NodeInfo, error) {
	if info, ok := l.byName[name]; ok {
		return info, nil
	}
	return nil, fmt.Errorf("nodeinfo not found for node name %q", name)
}

// inFlightNode is a NodeInfo of node name with pods (assumed or bound).
func inFlightNode(name string, pods ...*v1.Pod) fwk.NodeInfo {
	info := framework.NewNodeInfo(pods...)
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return info
}

// inFlightCycle is one scheduling cycle of p through the framework's calls: PreScore
// over infos, then Score on each; the scores by node.
func inFlightCycle(t *testing.T, pl *LayerLocality, p *v1.Pod, infos ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	state := framework.NewCycleState()
	if status := pl.PreScore(context.Background(), state, p, infos); !status.IsSuccess() {
		t.Fatal(status.Message())
	}
	got := map[string]int64{}
	for _, info := range infos {
		value, status := pl.Score(context.Background(), state, p, info)
		if !status.IsSuccess() {
			t.Fatal(status.Message())
		}
		got[info.Node().Name] = value
	}
	return got
}

// replicaOn is a replica of image assumed on node a moment ago (no PodScheduled yet: the
// plugin first sees it now), its containers not started.
func replicaOn(node, image string) *v1.Pod {
	replica := pod(nil, image)
	replica.Name, replica.UID, replica.Spec.NodeName = "replica-"+node, types.UID("uid-replica-"+node), node
	return replica
}

// The seed scenario through the framework with strategy: in-flight. Img1 (L1 40 + L2 30
// + L3 20 = 90 bytes) at 8 bits per second: 90 s on an empty node. N1 holds Img1 (1 s,
// the overhead), N2 Img2 (L1 + L2: 20 s to pull L3, + 1 + 0.25 x 20 = 26 s), N3 nothing
// (90 + 1 + 22.5 = 113.5 s). A replica assumed on N3 a moment ago (no PodScheduled yet:
// first seen now) has all of Img1 arriving there: N3 costs 90 + 1 = 91 s. Scores:
// floor(100 * 1 / c): N1 100, N2 3, N3 1 then, with nothing pending, 0.
func TestInFlightThroughTheFramework(t *testing.T) {
	pl := plugin(t, `{"strategy": "in-flight", "inFlight": {"defaultBandwidthBitsPerS": 8}}`)
	pl.inFlight = newInFlight(pl.args.InFlight, pl.imageLayers)
	newPod := pod(nil, "reg:5000/img1:1")
	idle := inFlightCycle(t, pl, newPod, inFlightNode("N1"), inFlightNode("N2"), inFlightNode("N3"))
	if want := map[string]int64{"N1": 100, "N2": 3, "N3": 0}; fmt.Sprint(idle) != fmt.Sprint(want) {
		t.Errorf("nothing in flight: %v, want %v", idle, want)
	}
	pulling := inFlightCycle(t, pl, newPod, inFlightNode("N1"), inFlightNode("N2"), inFlightNode("N3", replicaOn("N3", "reg:5000/img1:1")))
	if want := map[string]int64{"N1": 100, "N2": 3, "N3": 1}; fmt.Sprint(pulling) != fmt.Sprint(want) {
		t.Errorf("a replica pulling on N3: %v, want %v", pulling, want)
	}
	// in flight no pod is signed: a result of one pod must not serve the next
	if _, status := pl.SignPod(context.Background(), newPod); status.Code() != fwk.Unschedulable {
		t.Errorf("SignPod under in-flight: %v", status)
	}
}

// The burst the in-flight strategy is for: replicas of an image no node publishes. Its
// layers come from the registry resolver (L9, 60 bytes at 1 byte/s). The first replica
// finds the image unknown (queued): every node scores alike. 5 s later (a miss is kept
// that long), the registry having answered, with one replica pulling on N2 since it was
// first seen: N1 and N3 cost 60 + 1 + 0.25 x 60 = 76 s, N2 the replica's 55 s still to
// come + 1 = 56 s: N2 100, N1 and N3 floor(100 x 56 / 76) = 73.
func TestInFlightReadsTheRegistrysLayers(t *testing.T) {
	l9 := layers.Layer{Digest: digest("L9"), SizeBytes: 60}
	source := &tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img9:1"}: {l9},
	}}
	pl, r := registryPluginWith(t, `{"strategy": "in-flight", "inFlight": {"defaultBandwidthBitsPerS": 8}}`, source)
	pl.inFlight = newInFlight(pl.args.InFlight, pl.imageLayers)
	newPod := pod(nil, "reg:5000/img9:1")
	nodes := func() []fwk.NodeInfo {
		return []fwk.NodeInfo{inFlightNode("N1"), inFlightNode("N2", replicaOn("N2", "reg:5000/img9:1")), inFlightNode("N3")}
	}
	first := inFlightCycle(t, pl, newPod, nodes()...)
	if first["N1"] != first["N2"] || first["N2"] != first["N3"] {
		t.Errorf("before the registry answered: %v, want every node alike", first)
	}
	r.Wait()
	// the pending replica's image was a miss a moment ago (kept missTTL): a later cycle
	pl.now = func() time.Time { return now.Add(missTTL) }
	if want, got := map[string]int64{"N1": 73, "N2": 100, "N3": 73}, inFlightCycle(t, pl, newPod, nodes()...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("once the registry answered: %v, want %v", got, want)
	}
}

// Score reads a node of the snapshot by its slot and id, in the table of the index's
// nodes PreScore scored against: a node that comes into the index is placed anew, and
// scores as by name.
func TestScoreReadsTheSnapshotsNodesByIDAsTheIndexChanges(t *testing.T) {
	pl := plugin(t, `{"spread": false}`)
	view, err := pl.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]fwk.NodeInfo{}
	for _, info := range view.infos {
		own[info.Node().Name] = info
	}
	run := func() (map[string]int64, *slotTable) {
		state := framework.NewCycleState()
		p := pod(nil, "reg:5000/img1:1")
		if status := pl.PreScore(context.Background(), state, p, nil); !status.IsSuccess() {
			t.Fatal(status.Message())
		}
		data, err := state.Read(stateKey)
		if err != nil {
			t.Fatal(err)
		}
		slots, _ := data.(*preScoreState).slots.(*slotTable)
		got := map[string]int64{}
		for name, info := range own {
			got[name], _ = pl.Score(context.Background(), state, p, info)
		}
		return got, slots
	}
	before, first := run()
	if first == nil {
		t.Fatal("PreScore placed no node of the snapshot")
	}
	if want := map[string]int64{"N1": 100, "N2": 77, "N3": 0, "N4": 0, "old": 0}; fmt.Sprint(before) != fmt.Sprint(want) {
		t.Fatalf("by slot %v, want %v", before, want)
	}
	if _, again := run(); again != first {
		t.Error("the table was built again while the snapshot and the index's nodes stayed")
	}
	// N4 publishes Img1: the index's nodes change, so does the table
	pl.index.Upsert(&layers.NodeLayerInventory{Node: "N4", Images: []layers.NodeImage{img1}, ObservedAt: now})
	after, second := run()
	if second == first {
		t.Error("the table was kept across a new node in the index")
	}
	if after["N4"] != 100 || after["N1"] != 100 {
		t.Errorf("after N4 published Img1: %v, want N1 and N4 100", after)
	}
}

// In flight, candidates that are the snapshot's own NodeInfos are read by slot and id
// (no name looked up for an idle node, nor for Score), and score as those looked up by
// name (TestInFlightThroughTheFramework's case).
func TestInFlightReadsTheSnapshotsNodesBySlot(t *testing.T) {
	pl := plugin(t, `{"strategy": "in-flight", "inFlight": {"defaultBandwidthBitsPerS": 8}}`)
	pl.inFlight = newInFlight(pl.args.InFlight, pl.imageLayers)
	all := []fwk.NodeInfo{inFlightNode("N1"), inFlightNode("N2"), inFlightNode("N3", replicaOn("N3", "reg:5000/img1:1"))}
	pl.snapshot = snapshotNodes(&snapshotHandle{lister: newSnapshotLister(all)})
	newPod := pod(nil, "reg:5000/img1:1")
	state := framework.NewCycleState()
	if status := pl.PreScore(context.Background(), state, newPod, all); !status.IsSuccess() {
		t.Fatal(status.Message())
	}
	data, err := state.Read(stateKey)
	if err != nil {
		t.Fatal(err)
	}
	if kept := data.(*inFlightState); kept.slots == nil || kept.byName != nil {
		t.Fatalf("candidates of the snapshot kept by name: %+v", kept)
	}
	got := map[string]int64{}
	for _, info := range all {
		got[info.Node().Name], _ = pl.Score(context.Background(), state, newPod, info)
	}
	if want := map[string]int64{"N1": 100, "N2": 3, "N3": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("by slot %v, want %v", got, want)
	}
	byName := inFlightCycle(t, pl, newPod, inFlightNode("N1"), inFlightNode("N2"), inFlightNode("N3", replicaOn("N3", "reg:5000/img1:1")))
	if fmt.Sprint(byName) != fmt.Sprint(got) {
		t.Errorf("by name %v, by slot %v", byName, got)
	}
}
