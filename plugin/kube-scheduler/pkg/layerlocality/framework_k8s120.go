//go:build k8s120

package layerlocality

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The adapter for kube-scheduler 1.20 (k8s.io/kubernetes/pkg/scheduler/framework), built
// inside the 1.20 tree with the k8s120 tag (playbooks/tools/kubernetes_build.py).

// stateKey is where PreScore leaves the pod's prepared layers for Score.
const stateKey framework.StateKey = Name

// LayerLocality scores a node by the bytes of the pod's layers it already holds, read
// from the NodeLayerInventory objects the layersched agents publish.
type LayerLocality struct {
	scorer
	// nodes is the scheduler's snapshot of the cluster's nodes (the spread's node count).
	nodes func() (nodeSet, error)
}

var (
	_ framework.PreScorePlugin = &LayerLocality{}
	_ framework.ScorePlugin    = &LayerLocality{}
)

// New is the plugin factory kube-scheduler calls once per profile that enables it. 1.20's
// Handle gives a plugin no client configuration: without kubeConfigPath in the args the
// plugin uses the pod's service account.
func New(obj runtime.Object, handle framework.Handle) (framework.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	index, err := sharedIndex(args, nil)
	if err != nil {
		return nil, err
	}
	return &LayerLocality{scorer: newScorer(args, index), nodes: snapshotNodes(handle)}, nil
}

// snapshotNodes reads the scheduler's snapshot of this cycle.
func snapshotNodes(handle framework.Handle) func() (nodeSet, error) {
	return func() (nodeSet, error) {
		lister := handle.SnapshotSharedLister().NodeInfos()
		all, err := lister.List()
		if err != nil {
			return nodeSet{}, err
		}
		return nodeSet{count: len(all), contains: func(node string) bool {
			_, err := lister.Get(node)
			return err == nil
		}}, nil
	}
}

// Name is the plugin's name.
func (pl *LayerLocality) Name() string {
	return Name
}

// Clone: the state is never modified after PreScore.
func (s *preScoreState) Clone() framework.StateData {
	return s
}

// PreScore prepares the pod's layers once for every node.
func (pl *LayerLocality) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*v1.Node) *framework.Status {
	prepared, err := pl.prepare(pod, pl.nodes)
	if err != nil {
		return framework.AsStatus(err)
	}
	state.Write(stateKey, prepared)
	return nil
}

// Score looks the node up in the index.
func (pl *LayerLocality) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeName string) (int64, *framework.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, framework.AsStatus(noStateError(err))
	}
	prepared, ok := data.(*preScoreState)
	if !ok {
		return 0, framework.AsStatus(noStateError(fmt.Errorf("state of type %T", data)))
	}
	return pl.score(prepared, nodeName), nil
}

// ScoreExtensions: scores are already 0..MaxNodeScore, nothing to normalise.
func (pl *LayerLocality) ScoreExtensions() framework.ScoreExtensions {
	return nil
}
