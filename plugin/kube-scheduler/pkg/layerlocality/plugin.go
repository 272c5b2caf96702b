// Package layerlocality is the LayerLocality score plugin for kube-scheduler 1.20: the
// thin adapter between the scheduling framework of that release and package layers,
// which holds everything else (the index, the pod's layers, the arithmetic). It is the
// one package to rewrite for another framework version (docs/kube-scheduler-plugin.md).
package layerlocality

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"layersched.io/kube-scheduler/pkg/inventorywatch"
	"layersched.io/kube-scheduler/pkg/layers"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "LayerLocality"

// stateKey is where PreScore leaves the pod's prepared layers for Score.
const stateKey framework.StateKey = Name

// userAgent names the plugin's API requests in the API server's logs and audit.
const userAgent = "kube-scheduler/LayerLocality"

// LayerLocality scores a node by the bytes of the pod's layers it already holds, read
// from the NodeLayerInventory objects the layersched agents publish.
type LayerLocality struct {
	args   *Args
	maxAge time.Duration
	index  *layers.Index
	// nodes is the scheduler's snapshot of the cluster's nodes (the spread's node count).
	nodes func() framework.SharedLister
	now   func() time.Time
}

var (
	_ framework.PreScorePlugin = &LayerLocality{}
	_ framework.ScorePlugin    = &LayerLocality{}
)

// New is the plugin factory kube-scheduler calls once per profile that enables it.
func New(obj runtime.Object, handle framework.Handle) (framework.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	index, err := sharedIndex(args)
	if err != nil {
		return nil, err
	}
	return newPlugin(args, index, handle.SnapshotSharedLister), nil
}

func newPlugin(args *Args, index *layers.Index, nodes func() framework.SharedLister) *LayerLocality {
	register()
	return &LayerLocality{
		args:   args,
		maxAge: time.Duration(*args.InventoryMaxAgeSeconds) * time.Second,
		index:  index,
		nodes:  nodes,
		now:    time.Now,
	}
}

// Name is the plugin's name.
func (pl *LayerLocality) Name() string {
	return Name
}

// preScoreState is the pod's layers, ready for every node, and the moment the cycle
// judges inventories' age at.
type preScoreState struct {
	prepared *layers.Prepared
	now      time.Time
}

// Clone: the state is never modified after PreScore.
func (s *preScoreState) Clone() framework.StateData {
	return s
}

// PreScore computes the pod's distinct layers once, from the images the agents
// published; a pod none of whose layers is known is scored 0 everywhere without any
// lookup.
func (pl *LayerLocality) PreScore(_ context.Context, state *framework.CycleState, pod *v1.Pod, _ []*v1.Node) *framework.Status {
	now := pl.now()
	podLayers := pl.index.ResolvePod(podImages(pod), now, pl.maxAge)
	if len(podLayers.Unknown) > 0 {
		podImagesUnknown.Add(float64(len(podLayers.Unknown)))
		klog.V(4).Infof("%s: pod %s/%s: no quorum of %d nodes agrees on %v (published without one: %v): scoring its other images' layers",
			Name, pod.Namespace, pod.Name, *pl.args.ImageQuorum, podLayers.Unknown, podLayers.WithoutQuorum)
	}
	if len(podLayers.WithoutQuorum) > 0 {
		podImagesWithoutQuorum.Add(float64(len(podLayers.WithoutQuorum)))
	}
	var spread *layers.Spread
	if pl.args.Spread {
		lister := pl.nodes().NodeInfos()
		all, err := lister.List()
		if err != nil {
			return framework.AsStatus(fmt.Errorf("listing the snapshot's nodes for the spread: %w", err))
		}
		spread = &layers.Spread{Nodes: len(all), Counts: func(node string) bool {
			_, err := lister.Get(node)
			return err == nil
		}}
	}
	prepared := pl.index.Prepare(podLayers, spread, now, pl.maxAge)
	klog.V(5).Infof("%s: pod %s/%s: %d distinct layers, %d bytes", Name, pod.Namespace, pod.Name, len(podLayers.Layers), prepared.TotalBytes())
	state.Write(stateKey, &preScoreState{prepared: prepared, now: now})
	return nil
}

// Score is a read-only lookup into the index (kube-scheduler runs it on 16 workers in
// parallel): no API call, no lock but the index's read lock.
func (pl *LayerLocality) Score(_ context.Context, state *framework.CycleState, _ *v1.Pod, nodeName string) (int64, *framework.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, framework.AsStatus(fmt.Errorf("%s: no PreScore state (enable %s at preScore as well as score): %w", Name, Name, err))
	}
	prepared, ok := data.(*preScoreState)
	if !ok {
		return 0, framework.AsStatus(fmt.Errorf("%s: PreScore state of type %T", Name, data))
	}
	score, why := pl.index.Score(prepared.prepared, nodeName, prepared.now, pl.maxAge)
	switch why {
	case layers.NoInventory:
		nodesWithoutInventory.WithLabelValues(ReasonMissing).Inc()
	case layers.Stale:
		nodesWithoutInventory.WithLabelValues(ReasonStale).Inc()
	}
	return score, nil
}

// ScoreExtensions: scores are already 0..MaxNodeScore, nothing to normalise.
func (pl *LayerLocality) ScoreExtensions() framework.ScoreExtensions {
	return nil
}

// podImages are the pod's images in upstream order: init containers, then containers.
func podImages(pod *v1.Pod) []string {
	images := make([]string, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, container := range pod.Spec.InitContainers {
		images = append(images, container.Image)
	}
	for _, container := range pod.Spec.Containers {
		images = append(images, container.Image)
	}
	return images
}

// One index and one watch per kube-scheduler process, credentials and image quorum,
// whichever profiles enable the plugin.
type sharedKey struct {
	kubeConfigPath string
	imageQuorum    int64
}

var (
	sharedMu sync.Mutex
	shared   = map[sharedKey]*layers.Index{}
)

func sharedIndex(args *Args) (*layers.Index, error) {
	register()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	key := sharedKey{args.KubeConfigPath, *args.ImageQuorum}
	if index, ok := shared[key]; ok {
		return index, nil
	}
	config, err := restConfig(args.KubeConfigPath)
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(rest.AddUserAgent(config, userAgent))
	if err != nil {
		return nil, fmt.Errorf("%s: a client for NodeLayerInventory objects: %w", Name, err)
	}
	index := layers.NewIndex(int(*args.ImageQuorum))
	watch := inventorywatch.Start(client, index, inventorywatch.Hooks{
		Invalid: func(string, error) { invalidInventories.Inc() },
		Applied: func() { inventoryNodes.Set(float64(index.Nodes())) },
	}, wait.NeverStop)
	timeout := time.Duration(*args.InventorySyncTimeoutSeconds) * time.Second
	if watch.WaitForSync(timeout) {
		klog.Infof("%s: %d nodes' NodeLayerInventory indexed", Name, index.Nodes())
	} else {
		klog.Warningf("%s: no list of NodeLayerInventory objects within %s (is the CRD installed, and may this scheduler list %s.%s?): nodes score 0 until it comes",
			Name, timeout, layers.Resource, layers.Group)
	}
	shared[key] = index
	return index, nil
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		config, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%s: not in a pod (%v): set the plugin's kubeConfigPath arg to the scheduler's kubeconfig", Name, err)
		}
		return config, nil
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("%s: kubeConfigPath %s: %w", Name, path, err)
	}
	return config, nil
}
