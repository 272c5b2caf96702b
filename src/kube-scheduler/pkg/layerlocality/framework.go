package layerlocality

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"layersched.io/kube-scheduler/pkg/layers"
)

// stateKey is where PreScore leaves the pod's prepared layers for Score.
const stateKey fwk.StateKey = Name

// unsignedInFlight says why the in-flight strategy signs no pod (opportunistic batching
// stays on for the pods of profiles that do not run it).
const unsignedInFlight = "in-flight scores change with each pod placed: not batched"

// SignerName keys the plugin's fragment of a pod's signature: the pod's container and
// init-container images, the only pod fields the score reads.
const SignerName = "layersched.io/LayerLocality: v1.Pod.Spec.{InitContainers,Containers}.Image"

// LayerLocality scores a node by the bytes of the pod's layers it already holds, read
// from the NodeLayerInventory objects the layersched agents publish.
type LayerLocality struct {
	scorer
	// inFlight is the in-flight strategy's state (inflight.go); nil under layer-locality.
	inFlight *inFlight
	// snapshot reads the scheduler's snapshot of the cluster's nodes (the spread's node
	// count, and the NodeInfos slots places).
	snapshot func() (snapshotView, error)
	// slots places the snapshot's NodeInfos for Score (slotTable).
	slots slotCache
}

var (
	_ fwk.PreScorePlugin = &LayerLocality{}
	_ fwk.ScorePlugin    = &LayerLocality{}
	// Without SignPod, opportunistic batching (KEP-5598) is off for the whole profile.
	_ fwk.SignPlugin = &LayerLocality{}
)

// New is the plugin factory kube-scheduler calls once per profile that enables it, with
// the scheduler's context (the inventories' watch ends with it). With no kubeConfigPath
// in the args, the plugin lists NodeLayerInventory objects with the scheduler's own
// client configuration.
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	index, err := sharedIndex(ctx, args, handle.KubeConfig())
	if err != nil {
		return nil, err
	}
	pl := &LayerLocality{scorer: newScorer(args, index), snapshot: snapshotNodes(handle)}
	if pl.registry, err = sharedRegistry(ctx, args.Registry); err != nil {
		return nil, err
	}
	if args.Strategy == StrategyInFlight {
		pl.inFlight = newInFlight(args.InFlight, pl.imageLayers)
	}
	return pl, nil
}

// snapshotView is the scheduler's snapshot of this cycle: its nodes as the spread reads
// them, its NodeInfos in the snapshot's order, and the identity of that list.
type snapshotView struct {
	set     nodeSet
	infos   []fwk.NodeInfo
	version *snapshotVersion
}

// snapshotNodes reads the scheduler's snapshot of this cycle.
func snapshotNodes(handle fwk.Handle) func() (snapshotView, error) {
	var identity snapshotIdentity
	return func() (snapshotView, error) {
		lister := handle.SnapshotSharedLister().NodeInfos()
		all, err := lister.List()
		if err != nil {
			return snapshotView{}, err
		}
		version := identity.of(all)
		return snapshotView{
			set: nodeSet{count: len(all), version: version, contains: func(node string) bool {
				_, err := lister.Get(node)
				return err == nil
			}},
			infos:   all,
			version: version,
		}, nil
	}
}

// slotTable places the snapshot's NodeInfos: each one's slot (its position in the
// snapshot's list) and its id in one of the index's name tables. kube-scheduler calls
// Score once per candidate and pod on 16 goroutines; with the table, Score finds the
// node's answer by the NodeInfo (one pointer hashed) instead of by its name (a string
// hashed and compared, in a table of every node's name). kube-scheduler's snapshot keeps
// one NodeInfo per node, updated in place, so the table holds while the snapshot's list
// (snapshotIdentity) and the index's nodes (its name table, ==) are the same. Never
// modified once built.
type slotTable struct {
	version *snapshotVersion
	names   *layers.NameTable
	slot    map[fwk.NodeInfo]int32
	// ids are the nodes' ids in names, by slot.
	ids []layers.NodeID
}

// slotCache keeps the last slotTable.
type slotCache struct {
	mu    sync.Mutex
	table *slotTable
}

// of is the table of view's NodeInfos with their ids in names: the last one while both
// are the same, else built again (a name lookup a node, once). nil for a snapshot
// without an identity.
func (c *slotCache) of(view snapshotView, names *layers.NameTable) *slotTable {
	if view.version == nil || names == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.table; t != nil && t.version == view.version && t.names == names {
		return t
	}
	t := &slotTable{version: view.version, names: names,
		slot: make(map[fwk.NodeInfo]int32, len(view.infos)), ids: make([]layers.NodeID, len(view.infos))}
	for i, info := range view.infos {
		t.ids[i] = layers.NoNode
		if node := info.Node(); node != nil {
			t.slot[info] = int32(i)
			t.ids[i] = names.ID(node.Name)
		}
	}
	c.table = t
	return t
}

// snapshotIdentity names a snapshot's node list: the same version while the list holds
// the same NodeInfos in the same order. kube-scheduler's snapshot keeps one NodeInfo per
// node name (updated in place) and makes a new list whenever a node comes or goes, so
// an unchanged list is an unchanged set of names; the check is one comparison of
// pointers a node, instead of one name lookup a node.
type snapshotIdentity struct {
	mu      sync.Mutex
	infos   []fwk.NodeInfo
	version *snapshotVersion
}

// snapshotVersion is one version's identity (not of size zero: distinct pointers).
type snapshotVersion struct{ _ byte }

func (s *snapshotIdentity) of(infos []fwk.NodeInfo) *snapshotVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == nil || !slices.Equal(s.infos, infos) {
		s.infos = slices.Clone(infos)
		s.version = &snapshotVersion{}
	}
	return s.version
}

// Name is the plugin's name.
func (pl *LayerLocality) Name() string {
	return Name
}

// Clone: the state is never modified after PreScore.
func (s *preScoreState) Clone() fwk.StateData {
	return s
}

// Clone: the state is never modified after PreScore.
func (s *inFlightState) Clone() fwk.StateData {
	return s
}

// SignPod returns the one pod field the score depends on: its container and
// init-container images, sorted and without repeats (the score counts distinct layers,
// so neither order nor repetition changes it). Pods that sign alike may share one
// scoring result under opportunistic batching; the node side (the inventories) is the
// scheduler's snapshot's concern, as for every plugin.
func (pl *LayerLocality) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if pl.inFlight != nil {
		// in flight, a pod's scores depend on the pods placed just before it (the pulls
		// they started): no result may be reused for the next pod that signs alike
		return nil, fwk.NewStatus(fwk.Unschedulable, unsignedInFlight)
	}
	images := appendPodImages(nil, pod)
	slices.Sort(images)
	return []fwk.SignFragment{{Key: SignerName, Value: slices.Compact(images)}}, nil
}

// PreScore prepares the pod's layers once for every node (under in-flight, its score on
// every candidate), after a bounded wait for the registry's answers when the pod is the
// first of an image nothing knows yet (registrySet.await; ctx ends it too).
func (pl *LayerLocality) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	view, viewErr := pl.snapshot()
	if pl.inFlight != nil {
		var slots *slotTable
		if viewErr == nil {
			slots = pl.slots.of(view, pl.index.NameTable())
		}
		pending := pendingNodes(nodes, slots)
		scores := pl.inFlight.prepare(pl.index, pod, pending, slots.placement(), pl.now(), pl.maxAge, pl.awaitRegistry(ctx))
		state.Write(stateKey, newInFlightState(pending, slots, scores))
		return nil
	}
	prepared, err := pl.prepare(ctx, pod, func() (nodeSet, error) { return view.set, viewErr }, candidates(nodes))
	if err != nil {
		return fwk.AsStatus(err)
	}
	if viewErr == nil && prepared.byNode == nil {
		// the registry's other platforms are scored by name (their own name tables)
		prepared.slots = pl.slots.of(view, prepared.prepared.Names())
	}
	state.Write(stateKey, prepared)
	return nil
}

// candidates are the cycle's nodes, read only when the pod needs the registry (their
// platforms).
func candidates(nodes []fwk.NodeInfo) func() []*v1.Node {
	return func() []*v1.Node {
		found := make([]*v1.Node, 0, len(nodes))
		for _, info := range nodes {
			if node := info.Node(); node != nil {
				found = append(found, node)
			}
		}
		return found
	}
}

// Score looks the node up in the index.
func (pl *LayerLocality) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(noStateError(err))
	}
	switch prepared := data.(type) {
	case *preScoreState:
		if slots, ok := prepared.slots.(*slotTable); ok {
			if slot, ok := slots.slot[nodeInfo]; ok {
				return pl.scoreByID(prepared, slots.ids[slot]), nil
			}
		}
		return pl.score(prepared, nodeInfo.Node().Name), nil
	case *inFlightState:
		return prepared.score(nodeInfo), nil
	}
	return 0, fwk.AsStatus(noStateError(fmt.Errorf("state of type %T", data)))
}

// pendingNodes are the candidates as the in-flight strategy reads them, from
// kube-scheduler's NodeInfos: the Node's metadata (read when needed), generation, pods
// (assumed and bound), and, when slots places the NodeInfo, its slot and its id in
// slots' name table. One allocation for all of them: each node's pods are read through
// a pointer into one slice of NodeInfos.
func pendingNodes(infos []fwk.NodeInfo, slots *slotTable) []pendingNode {
	nodes := make([]pendingNode, 0, len(infos))
	lists := make([]nodeInfoPods, len(infos))
	for i, info := range infos {
		node := info.Node()
		if node == nil {
			continue
		}
		lists[i].info = info
		pending := pendingNode{meta: &node.ObjectMeta, slot: -1, generation: info.GetGeneration(), pods: &lists[i]}
		if slots != nil {
			if at, ok := slots.slot[info]; ok {
				pending.slot, pending.id, pending.placed = at, slots.ids[at], true
			}
		}
		nodes = append(nodes, pending)
	}
	return nodes
}

// placement is where t places nodes (the zero placement for no table).
func (t *slotTable) placement() placement {
	if t == nil {
		return placement{}
	}
	return placement{names: t.names, version: t, slots: len(t.ids)}
}

// inFlightState is what PreScore leaves for Score under the in-flight strategy: every
// candidate's score, by its slot in slots (bySlot), or by name for a candidate the
// table does not place (byName; nil when every one is); never modified after PreScore.
type inFlightState struct {
	slots  *slotTable
	bySlot []int64
	byName map[string]int64
}

// newInFlightState keeps scores (by candidate, as nodes) by slot (the placed nodes') or
// by name.
func newInFlightState(nodes []pendingNode, slots *slotTable, scores []int64) *inFlightState {
	state := &inFlightState{slots: slots}
	if slots != nil {
		state.bySlot = make([]int64, len(slots.ids))
	}
	for i := range nodes {
		if nodes[i].placed {
			state.bySlot[nodes[i].slot] = scores[i]
			continue
		}
		if state.byName == nil {
			state.byName = map[string]int64{}
		}
		state.byName[nodes[i].name()] = scores[i]
	}
	return state
}

// score is the NodeInfo's score: a read by its slot, else a lookup by name.
func (s *inFlightState) score(info fwk.NodeInfo) int64 {
	if s.slots != nil {
		if slot, ok := s.slots.slot[info]; ok {
			return s.bySlot[slot]
		}
	}
	return s.byName[info.Node().Name]
}

// nodeInfoPods lists a NodeInfo's pods.
type nodeInfoPods struct {
	info fwk.NodeInfo
}

func (n *nodeInfoPods) list() []*v1.Pod {
	pods := make([]*v1.Pod, 0, len(n.info.GetPods()))
	for _, pod := range n.info.GetPods() {
		pods = append(pods, pod.GetPod())
	}
	return pods
}

// ScoreExtensions: scores are already 0..MaxNodeScore, nothing to normalise.
func (pl *LayerLocality) ScoreExtensions() fwk.ScoreExtensions {
	return nil
}
