// Package reference scores pods on nodes with upstream kube-scheduler's ImageLocality
// plugin, compiled from the k8s.io/kubernetes release a program is built against, in
// process and with no API server: the scores layersched's Python port is held to.
//
// A case's nodes go into the scheduler's own cache (AddNode, in the order given), one
// snapshot is taken after the last, and the plugin (imagelocality.New, on a framework
// handle serving that snapshot) scores every pod on every node. So the image states are
// the cache's: one entry per name in status.images[*].names, the size from the first node
// reporting the name, and the number of nodes reporting it as of the snapshot (a node's
// summary is read when its NodeInfo is snapshotted, and every NodeInfo is new at the
// first snapshot, so no count is stale).
//
// Only the cache's constructor differs between the minors this package is built with
// (1.35 takes an assumed-pod TTL; 1.36 and 1.37 feature flags instead): each program
// passes its own (NewCache), see minors/.
package reference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/imagelocality"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// KubernetesModule is the module whose release a program scores with.
const KubernetesModule = "k8s.io/kubernetes"

// NewCache returns an empty scheduler cache of the release the program is built against,
// called as that release's scheduler calls it; it stops when ctx is done.
type NewCache func(ctx context.Context) cache.Cache

// Input is what a program reads: cases, each scored on its own cluster.
type Input struct {
	Cases []Case `json:"cases"`
}

// Case is one cluster (v1 Nodes with status.images) and the pods scored on it.
type Case struct {
	Name  string    `json:"name"`
	Nodes []v1.Node `json:"nodes"`
	Pods  []v1.Pod  `json:"pods"`
}

// Output is what a program writes: the release it scored with, and every case's scores.
type Output struct {
	KubernetesVersion string       `json:"kubernetesVersion"`
	Cases             []CaseScores `json:"cases"`
}

// CaseScores holds one case's scores by pod name, then by node name (0..100).
type CaseScores struct {
	Name   string                      `json:"name"`
	Scores map[string]map[string]int64 `json:"scores"`
}

// Score runs ImageLocality's Score for every pod of c on every node of c.
func Score(ctx context.Context, newCache NewCache, c *Case) (map[string]map[string]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := klog.FromContext(ctx)
	// the cache updates the scheduler's metrics: registered first, as scheduler.New does
	// (once per process)
	metrics.Register()

	nodes := make([]string, 0, len(c.Nodes))
	seen := make(map[string]bool, len(c.Nodes))
	schedulerCache := newCache(ctx)
	for i := range c.Nodes {
		node := &c.Nodes[i]
		if node.Name == "" || seen[node.Name] {
			return nil, fmt.Errorf("case %q: node %d: name %q is empty or repeated (the cache would take it for an update)", c.Name, i, node.Name)
		}
		seen[node.Name] = true
		nodes = append(nodes, node.Name)
		schedulerCache.AddNode(logger, node)
	}
	snapshot := cache.NewEmptySnapshot()
	if err := schedulerCache.UpdateSnapshot(logger, snapshot); err != nil {
		return nil, fmt.Errorf("case %q: snapshotting the scheduler cache: %w", c.Name, err)
	}

	handle, err := frameworkruntime.NewFramework(ctx, nil, nil, frameworkruntime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		return nil, fmt.Errorf("case %q: a framework handle: %w", c.Name, err)
	}
	plugin, err := imagelocality.New(ctx, nil, handle)
	if err != nil {
		return nil, fmt.Errorf("case %q: imagelocality.New: %w", c.Name, err)
	}
	scorer, ok := plugin.(fwk.ScorePlugin)
	if !ok {
		return nil, fmt.Errorf("%s is no score plugin in this release", plugin.Name())
	}

	scores := make(map[string]map[string]int64, len(c.Pods))
	for i := range c.Pods {
		pod := &c.Pods[i]
		if pod.Name == "" || scores[pod.Name] != nil {
			return nil, fmt.Errorf("case %q: pod %d: name %q is empty or repeated", c.Name, i, pod.Name)
		}
		byNode := make(map[string]int64, len(nodes))
		state := framework.NewCycleState()
		for _, name := range nodes {
			nodeInfo, err := snapshot.NodeInfos().Get(name)
			if err != nil {
				return nil, fmt.Errorf("case %q: node %q is not in the snapshot: %w", c.Name, name, err)
			}
			score, status := scorer.Score(ctx, state, pod, nodeInfo)
			if !status.IsSuccess() {
				return nil, fmt.Errorf("case %q: scoring pod %q on node %q: %w", c.Name, pod.Name, name, status.AsError())
			}
			byNode[name] = score
		}
		scores[pod.Name] = byNode
	}
	return scores, nil
}

// Run reads an Input from r, scores every case and writes the Output, naming the release
// version, to w.
func Run(ctx context.Context, newCache NewCache, version string, r io.Reader, w io.Writer) error {
	decoder := json.NewDecoder(r)
	// a field the generator misspells must not vanish silently
	decoder.DisallowUnknownFields()
	var in Input
	if err := decoder.Decode(&in); err != nil {
		return fmt.Errorf("reading cases (JSON {\"cases\": [{\"name\", \"nodes\": [v1 Node], \"pods\": [v1 Pod]}]}): %w", err)
	}
	out := Output{KubernetesVersion: version, Cases: make([]CaseScores, 0, len(in.Cases))}
	for i := range in.Cases {
		scores, err := Score(ctx, newCache, &in.Cases[i])
		if err != nil {
			return err
		}
		out.Cases = append(out.Cases, CaseScores{Name: in.Cases[i].Name, Scores: scores})
	}
	return json.NewEncoder(w).Encode(out)
}

// Main is a program's main: cases on stdin, scores on stdout (with the release compiled
// in), an error on stderr and exit status 1.
func Main(newCache NewCache) {
	version, err := KubernetesVersion()
	if err == nil {
		err = Run(context.Background(), newCache, version, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagelocality-reference: %v\n", err)
		os.Exit(1)
	}
}

// KubernetesVersion is the k8s.io/kubernetes release compiled into the running program,
// read from its build information (a replace's version when the module is replaced). A
// test binary lists no dependencies there (golang/go#33976): it has no answer.
func KubernetesVersion() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("the program carries no build information: build it with module support")
	}
	for _, dep := range info.Deps {
		if dep.Path != KubernetesModule {
			continue
		}
		if dep.Replace != nil {
			return dep.Replace.Version, nil
		}
		return dep.Version, nil
	}
	return "", fmt.Errorf("the program is not built against %s", KubernetesModule)
}
