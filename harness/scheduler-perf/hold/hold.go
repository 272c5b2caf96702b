// Package hold is a PreEnqueue plugin for the benchmark only: it keeps a workload's
// measured pods out of the scheduling queue until all of them exist, then lets them in
// at once, so that scheduler_perf measures the scheduler draining a full queue rather
// than the scheduler and the test's own pod creation sharing the process's cores.
//
// A pod is held when it carries the label CountLabel, whose value is how many such pods
// the workload creates (the pod template sets it from scheduler_perf's .Count). The gate
// opens when the plugin has seen that many distinct held pods: the last one passes, and
// the ones gated before it are activated (moved from the unschedulable pool to the active
// queue). Pods without the label pass untouched, so the plugin costs the other pods one
// label lookup.
package hold

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "LayerschedBenchHold"

// CountLabel holds a pod until this many pods carrying it have been seen.
const CountLabel = "layersched.io/bench-hold-until"

// Hold gates the labelled pods until the last of them arrives.
type Hold struct {
	activator fwk.PodActivator
	mu        sync.Mutex
	held      map[types.UID]*v1.Pod
	open      bool
}

var (
	_ fwk.PreEnqueuePlugin  = &Hold{}
	_ fwk.EnqueueExtensions = &Hold{}
)

// New is the plugin's factory; it takes no arguments.
func New(_ context.Context, _ runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	return newHold(handle), nil
}

func newHold(activator fwk.PodActivator) *Hold {
	return &Hold{activator: activator, held: map[types.UID]*v1.Pod{}}
}

// Name returns the plugin's name.
func (h *Hold) Name() string { return Name }

// PreEnqueue lets through every pod without CountLabel, and a labelled pod once the
// gate is open; the pod that opens it passes, and the ones it held are activated.
func (h *Hold) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	value, labelled := pod.Labels[CountLabel]
	if !labelled {
		return nil
	}
	want, err := strconv.Atoi(value)
	if err != nil || want < 1 {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("label %s=%q is not a positive count of pods", CountLabel, value))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return nil
	}
	h.held[pod.UID] = pod
	if len(h.held) < want {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("held until %d pods labelled %s exist (%d so far)", want, CountLabel, len(h.held)))
	}
	h.open = true
	waiting := make(map[string]*v1.Pod, len(h.held))
	for uid, held := range h.held {
		if uid != pod.UID {
			waiting[string(uid)] = held
		}
	}
	h.held = nil
	// The queue calls PreEnqueue under its own lock, which Activate takes: activate once
	// this call has returned. The pods gated before this one are in the unschedulable
	// pool by then (the queue adds pods one at a time under that lock).
	logger := klog.FromContext(ctx)
	go h.activator.Activate(logger, waiting)
	return nil
}

// EventsToRegister registers no event: a held pod comes back only when the gate opens
// (Activate), never because some cluster event might have made it schedulable.
func (h *Hold) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return nil, nil
}
