// Command imagelocality-reference scores cases (JSON on stdin) with upstream kube-scheduler's
// ImageLocality plugin as compiled from Kubernetes 1.36, the release go.mod pins, and writes
// the scores (JSON on stdout): layersched.io/imagelocality-reference.
package main

import (
	"context"

	"k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"

	reference "layersched.io/imagelocality-reference"
)

func main() {
	reference.Main(newCache)
}

// newCache makes the cache as 1.36's scheduler.New does (the GenericWorkload gate at its
// default); the API dispatcher (async API calls, off by default) is not needed to hold
// nodes.
func newCache(ctx context.Context) cache.Cache {
	return cache.New(ctx, nil, feature.DefaultFeatureGate.Enabled(features.GenericWorkload))
}
