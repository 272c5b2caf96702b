package layerlocality

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
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
	// nodes is the scheduler's snapshot of the cluster's nodes (the spread's node count).
	nodes func() (nodeSet, error)
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
	pl := &LayerLocality{scorer: newScorer(args, index), nodes: snapshotNodes(handle)}
	if pl.registry, err = sharedRegistry(ctx, args.Registry); err != nil {
		return nil, err
	}
	if args.Strategy == StrategyInFlight {
		pl.inFlight = newInFlight(args.InFlight, pl.imageLayers)
	}
	return pl, nil
}

// snapshotNodes reads the scheduler's snapshot of this cycle.
func snapshotNodes(handle fwk.Handle) func() (nodeSet, error) {
	var identity snapshotIdentity
	return func() (nodeSet, error) {
		lister := handle.SnapshotSharedLister().NodeInfos()
		all, err := lister.List()
		if err != nil {
			return nodeSet{}, err
		}
		return nodeSet{count: len(all), version: identity.of(all), contains: func(node string) bool {
			_, err := lister.Get(node)
			return err == nil
		}}, nil
	}
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
	if pl.inFlight != nil {
		state.Write(stateKey, pl.inFlight.prepare(pl.index, pod, pendingNodes(nodes), pl.now(), pl.maxAge, pl.awaitRegistry(ctx)))
		return nil
	}
	prepared, err := pl.prepare(ctx, pod, pl.nodes, candidates(nodes))
	if err != nil {
		return fwk.AsStatus(err)
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
		return pl.score(prepared, nodeInfo.Node().Name), nil
	case *inFlightState:
		return prepared.scores[nodeInfo.Node().Name], nil
	}
	return 0, fwk.AsStatus(noStateError(fmt.Errorf("state of type %T", data)))
}

// pendingNodes are the candidates as the in-flight strategy reads them: name,
// generation, link labels and pods (assumed and bound), from kube-scheduler's NodeInfos.
// One allocation for all of them: each node's pods are read through a pointer into one
// slice of NodeInfos.
func pendingNodes(infos []fwk.NodeInfo) []pendingNode {
	nodes := make([]pendingNode, 0, len(infos))
	lists := make([]nodeInfoPods, len(infos))
	for i, info := range infos {
		node := info.Node()
		if node == nil {
			continue
		}
		lists[i].info = info
		nodes = append(nodes, pendingNode{
			name:        node.Name,
			generation:  info.GetGeneration(),
			labels:      node.Labels,
			annotations: node.Annotations,
			pods:        &lists[i],
		})
	}
	return nodes
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
