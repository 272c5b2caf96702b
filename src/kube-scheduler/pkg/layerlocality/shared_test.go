package layerlocality

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The profiles of one scheduler share one index and one watch; another scheduler in the
// same process (upstream's scheduler_perf runs one after another, each on its own API
// server) gets its own; a scheduler's entry goes when its context ends.
func TestOneIndexPerSchedulerGoneWithIt(t *testing.T) {
	zero, quorum := int64(0), int64(2)
	args := &Args{InventorySyncTimeoutSeconds: &zero, ImageQuorum: &quorum}
	// nothing listens there: the watch retries in the background, the test needs no API
	config := &rest.Config{Host: "http://127.0.0.1:1"}
	first, stopFirst := context.WithCancel(context.Background())
	second, stopSecond := context.WithCancel(context.Background())
	defer stopSecond()
	a, err := sharedIndex(first, args, config)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sharedIndex(first, args, config)
	c, _ := sharedIndex(second, args, config)
	if a != b {
		t.Error("two profiles of one scheduler got two indexes")
	}
	if a == c {
		t.Error("a second scheduler got the first one's index (and its API server's watch)")
	}
	stopFirst()
	key := sharedKey{first.Done(), "", quorum}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sharedMu.Lock()
		_, held := shared[key]
		sharedMu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stopped scheduler's index is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d, _ := sharedIndex(second, args, config); d != c {
		t.Error("the running scheduler lost its index when another one stopped")
	}
}
