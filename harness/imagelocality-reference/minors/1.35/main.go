// Command imagelocality-reference scores cases (JSON on stdin) with upstream kube-scheduler's
// ImageLocality plugin as compiled from Kubernetes 1.35, the release go.mod pins, and writes
// the scores (JSON on stdout): layersched.io/imagelocality-reference.
package main

import (
	"context"

	"k8s.io/kubernetes/pkg/scheduler/backend/cache"

	reference "layersched.io/imagelocality-reference"
)

func main() {
	reference.Main(newCache)
}

// newCache makes the cache as 1.35's scheduler.New does: the assumed-pod TTL is 0 there
// (assumed pods never expire), and the API dispatcher (async API calls, off by default)
// is not needed to hold nodes.
func newCache(ctx context.Context) cache.Cache {
	return cache.New(ctx, 0, nil)
}
