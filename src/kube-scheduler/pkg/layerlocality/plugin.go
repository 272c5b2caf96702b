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
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"layersched.io/kube-scheduler/pkg/inventorywatch"
	"layersched.io/kube-scheduler/pkg/layers"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "LayerLocality"

// userAgent names the plugin's API requests in the API server's logs and audit.
const userAgent = "kube-scheduler/LayerLocality"

// scorer is the plugin's work, whatever the framework: the pod's terms by node prepared
// once per cycle (PreScore), then one lookup per node (Score).
type scorer struct {
	args   *Args
	maxAge time.Duration
	index  *layers.Index
	now    func() time.Time
	// registry resolves pod images the nodes do not agree on (registry.go); nil: off.
	registry *registrySet
	// withoutInventory are the metric's counters by why a node scored 0, resolved once
	// (a label lookup per Score would take the vector's lock).
	withoutInventory [layers.OverBudget + 1]metrics.CounterMetric
}

func newScorer(args *Args, index *layers.Index) scorer {
	register()
	return scorer{
		args:   args,
		maxAge: time.Duration(*args.InventoryMaxAgeSeconds) * time.Second,
		index:  index,
		now:    time.Now,
		withoutInventory: [...]metrics.CounterMetric{
			layers.NoInventory: nodesWithoutInventory.WithLabelValues(ReasonMissing),
			layers.Stale:       nodesWithoutInventory.WithLabelValues(ReasonStale),
			layers.OverBudget:  nodesWithoutInventory.WithLabelValues(ReasonOverBudget),
		},
	}
}

// preScoreState is what PreScore prepares once for every node of the cycle; it is never
// modified after PreScore. Another per-node term of the pod joins here, prepared by
// node in PreScore and read by Score without a lock.
type preScoreState struct {
	// prepared is the pod's layer terms by node, as the index was at PreScore, and the
	// age judgement at PreScore's time.
	prepared *layers.Prepared
	// byNode are the terms of the nodes of another platform than the registry's default
	// (registry.go), when the pod needed the registry; nil otherwise.
	byNode map[string]*layers.Prepared
	// slots, when not nil, is the framework adapter's placement of the snapshot's nodes
	// (framework.go's slotTable) with their ids in prepared's name table: Score reads
	// them by id (scoreByID). nil when byNode is not (those are read by name).
	slots any
}

// nodeSet is what the spread needs of the scheduler's snapshot: how many nodes it holds,
// whether it holds a given one, and the identity of that set (equal, with ==, while the
// snapshot's nodes are the same; nil: unknown), so that the index asks contains once
// per node while the snapshot's nodes stay the same.
type nodeSet struct {
	count    int
	contains func(node string) bool
	version  any
}

// imagesPool holds the pod image lists PreScore reads the pod into (none leaves it).
var imagesPool = sync.Pool{New: func() any { return new([]string) }}

// prepare computes the pod's terms once for every node, from the images the agents
// published (and, with registry resolution, what the registry answered); a pod none of
// whose layers is known is scored 0 everywhere. nodes is called only when the args ask
// for the spread; candidates (the cycle's nodes; nil: unknown) only when the pod needed
// the registry; ctx ends a wait for the registry's answers (registrySet.await).
func (s *scorer) prepare(ctx context.Context, pod *v1.Pod, nodes func() (nodeSet, error), candidates func() []*v1.Node) (*preScoreState, error) {
	var spread *layers.Spread
	if *s.args.Spread {
		set, err := nodes()
		if err != nil {
			return nil, fmt.Errorf("listing the snapshot's nodes for the spread: %w", err)
		}
		spread = &layers.Spread{Nodes: set.count, Counts: set.contains, CountsVersion: set.version}
	}
	buffer := imagesPool.Get().(*[]string)
	images := appendPodImages((*buffer)[:0], pod)
	var prepared *layers.Prepared
	var byNode map[string]*layers.Prepared
	if s.registry == nil {
		prepared = s.index.Prepare(images, spread, s.now(), s.maxAge)
	} else {
		prepared, byNode = s.registry.prepare(ctx, s.index, images, spread, s.now(), s.maxAge, candidates)
	}
	clear(images) // the pool keeps no pod's strings
	*buffer = images[:0]
	imagesPool.Put(buffer)
	if len(prepared.Unknown) > 0 {
		podImagesUnknown.Add(float64(len(prepared.Unknown)))
		if v := klog.V(4); v.Enabled() {
			v.Infof("%s: pod %s/%s: no quorum of %d nodes agrees on %v (published without one: %v): scoring its other images' layers",
				Name, pod.Namespace, pod.Name, *s.args.ImageQuorum, prepared.Unknown, prepared.WithoutQuorum)
		}
	}
	if len(prepared.WithoutQuorum) > 0 {
		podImagesWithoutQuorum.Add(float64(len(prepared.WithoutQuorum)))
	}
	if v := klog.V(5); v.Enabled() {
		v.Infof("%s: pod %s/%s: %d distinct layers, %d bytes", Name, pod.Namespace, pod.Name, prepared.LayerCount, prepared.TotalBytes())
	}
	return &preScoreState{prepared: prepared, byNode: byNode}, nil
}

// score is a lookup into what PreScore prepared (kube-scheduler runs it on 16 workers in
// parallel): no API call, no lock, no allocation; a counter only for a node without a
// usable inventory.
func (s *scorer) score(state *preScoreState, nodeName string) int64 {
	prepared := state.prepared
	if other, ok := state.byNode[nodeName]; ok {
		prepared = other
	}
	score, why := prepared.Score(nodeName)
	if why != layers.Scored {
		s.withoutInventory[why].Inc()
	}
	return score
}

// scoreByID is score for the node of id in state.prepared's name table, when byNode is
// nil: a read, no lookup.
func (s *scorer) scoreByID(state *preScoreState, id layers.NodeID) int64 {
	score, why := state.prepared.ScoreByID(id)
	if why != layers.Scored {
		s.withoutInventory[why].Inc()
	}
	return score
}

// noStateError is Score's error when PreScore left nothing: a configuration that enables
// the plugin at score but not at preScore.
func noStateError(err error) error {
	return fmt.Errorf("%s: no PreScore state (enable %s at preScore as well as score): %w", Name, Name, err)
}

// appendPodImages appends the pod's images in upstream order: init containers, then
// containers.
func appendPodImages(images []string, pod *v1.Pod) []string {
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
