// Package layerlocality is the LayerLocality score plugin: a thin adapter between the
// scheduling framework and package layers, which holds everything else (the index, the
// pod's layers, the arithmetic).
//
// What does not depend on the framework's types lives in this file; framework.go is the
// adapter for kube-scheduler 1.35 and later (k8s.io/kube-scheduler/framework: Score takes
// a NodeInfo, the factory a context, SignPod keeps opportunistic batching on). Another
// framework generation is another adapter file (docs/kube-scheduler-plugin.md).
package layerlocality

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"layersched.io/kube-scheduler/pkg/inventorywatch"
	"layersched.io/kube-scheduler/pkg/layers"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "LayerLocality"

// userAgent names the plugin's API requests in the API server's logs and audit.
const userAgent = "kube-scheduler/LayerLocality"

// scorer is the plugin's work, whatever the framework: the pod's layers prepared once
// per cycle, then one read-only lookup per node.
type scorer struct {
	args   *Args
	maxAge time.Duration
	index  *layers.Index
	now    func() time.Time
}

func newScorer(args *Args, index *layers.Index) scorer {
	register()
	return scorer{
		args:   args,
		maxAge: time.Duration(*args.InventoryMaxAgeSeconds) * time.Second,
		index:  index,
		now:    time.Now,
	}
}

// preScoreState is the pod's layers, ready for every node, and the moment the cycle
// judges inventories' age at. It is never modified after PreScore.
type preScoreState struct {
	prepared *layers.Prepared
	now      time.Time
}

// nodeSet is what the spread needs of the scheduler's snapshot: how many nodes it holds,
// and whether it holds a given one.
type nodeSet struct {
	count    int
	contains func(node string) bool
}

// prepare computes the pod's distinct layers once, from the images the agents published;
// a pod none of whose layers is known is scored 0 everywhere without any lookup. nodes
// is called only when the args ask for the spread.
func (s *scorer) prepare(pod *v1.Pod, nodes func() (nodeSet, error)) (*preScoreState, error) {
	now := s.now()
	podLayers := s.index.ResolvePod(podImages(pod), now, s.maxAge)
	if len(podLayers.Unknown) > 0 {
		podImagesUnknown.Add(float64(len(podLayers.Unknown)))
		klog.V(4).Infof("%s: pod %s/%s: no quorum of %d nodes agrees on %v (published without one: %v): scoring its other images' layers",
			Name, pod.Namespace, pod.Name, *s.args.ImageQuorum, podLayers.Unknown, podLayers.WithoutQuorum)
	}
	if len(podLayers.WithoutQuorum) > 0 {
		podImagesWithoutQuorum.Add(float64(len(podLayers.WithoutQuorum)))
	}
	var spread *layers.Spread
	if *s.args.Spread {
		set, err := nodes()
		if err != nil {
			return nil, fmt.Errorf("listing the snapshot's nodes for the spread: %w", err)
		}
		spread = &layers.Spread{Nodes: set.count, Counts: set.contains}
	}
	prepared := s.index.Prepare(podLayers, spread, now, s.maxAge)
	klog.V(5).Infof("%s: pod %s/%s: %d distinct layers, %d bytes", Name, pod.Namespace, pod.Name, len(podLayers.Layers), prepared.TotalBytes())
	return &preScoreState{prepared: prepared, now: now}, nil
}

// score is a read-only lookup into the index (kube-scheduler runs it on 16 workers in
// parallel): no API call, no lock but the index's read lock.
func (s *scorer) score(state *preScoreState, nodeName string) int64 {
	score, why := s.index.Score(state.prepared, nodeName, state.now, s.maxAge)
	switch why {
	case layers.NoInventory:
		nodesWithoutInventory.WithLabelValues(ReasonMissing).Inc()
	case layers.Stale:
		nodesWithoutInventory.WithLabelValues(ReasonStale).Inc()
	case layers.OverBudget:
		nodesWithoutInventory.WithLabelValues(ReasonOverBudget).Inc()
	}
	return score
}

// noStateError is Score's error when PreScore left nothing: a configuration that enables
// the plugin at score but not at preScore.
func noStateError(err error) error {
	return fmt.Errorf("%s: no PreScore state (enable %s at preScore as well as score): %w", Name, Name, err)
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

// One index and one watch per scheduler, credentials and image quorum, whichever
// profiles enable the plugin. A scheduler is its context's Done channel (a context
// itself may not be comparable): the profiles of one kube-scheduler share it, and a
// process that runs one scheduler after another (upstream's scheduler_perf, one API
// server per workload) gets a fresh watch on each scheduler's API server, stopped with
// the scheduler.
type sharedKey struct {
	scheduler      <-chan struct{}
	kubeConfigPath string
	imageQuorum    int64
}

var (
	sharedMu sync.Mutex
	shared   = map[sharedKey]*layers.Index{}
)

// sharedIndex is the scheduler's index for these args, its watch started on first use
// and stopped when the scheduler's context ends. fallback is the client configuration
// when the args name no kubeconfig (nil: the pod's service account).
func sharedIndex(ctx context.Context, args *Args, fallback *rest.Config) (*layers.Index, error) {
	register()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	key := sharedKey{ctx.Done(), args.KubeConfigPath, *args.ImageQuorum}
	if index, ok := shared[key]; ok {
		return index, nil
	}
	config, err := restConfig(args.KubeConfigPath, fallback)
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
		Refused: func(refusal layers.Refusal) { refusedInventories.WithLabelValues(refusal.Reason).Inc() },
		Applied: func() {
			inventoryNodes.Set(float64(index.Nodes()))
			inventoryBytes.Set(float64(index.UsedBytes()))
		},
	}, ctx.Done())
	go func() {
		<-ctx.Done()
		sharedMu.Lock()
		defer sharedMu.Unlock()
		delete(shared, key)
	}()
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

func restConfig(path string, fallback *rest.Config) (*rest.Config, error) {
	if path == "" {
		if fallback != nil {
			return rest.CopyConfig(fallback), nil
		}
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
