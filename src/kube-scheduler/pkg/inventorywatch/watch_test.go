package inventorywatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"layersched.io/kube-scheduler/pkg/layers"
)

const waitFor = 10 * time.Second

func digest(label string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(label)))
}

// object is a NodeLayerInventory holding one image of the given layers (index bad: one
// index past the table, as a broken agent would write).
func object(node, image string, bad bool, labels ...string) *unstructured.Unstructured {
	table := []interface{}{}
	indexes := []interface{}{}
	for i, label := range labels {
		table = append(table, map[string]interface{}{"digest": digest(label), "sizeBytes": int64(10 * (i + 1))})
		indexes = append(indexes, int64(i))
	}
	if bad {
		indexes = append(indexes, int64(len(labels)))
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": layers.Group + "/" + layers.Version,
		"kind":       layers.Kind,
		"metadata":   map[string]interface{}{"name": node},
		"observedAt": "2026-11-24T10:00:00Z",
		"layers":     table,
		"images":     []interface{}{map[string]interface{}{"names": []interface{}{image}, "digest": digest(image), "layers": indexes}},
	}}
}

func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", waitFor, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func holds(index *layers.Index, node, image string) bool {
	score, state := index.Prepare([]string{image}, nil, time.Time{}, 0).Score(node)
	return state == layers.Scored && score == layers.MaxNodeScore
}

// watchOpened tells on the returned channel each time a watch is registered with the
// fake's tracker. Unlike an API server, the fake does not replay what changed between a
// list and the watch that follows it, so a test changes objects only once one is open.
func watchOpened(client *fake.FakeDynamicClient) <-chan struct{} {
	opened := make(chan struct{}, 1)
	client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, apiwatch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		select {
		case opened <- struct{}{}:
		default:
		}
		return true, w, nil
	})
	return opened
}

func TestTheIndexFollowsEveryEvent(t *testing.T) {
	client := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GroupVersionResource: layers.Kind + "List"},
		object("n1", "a:1", false, "L1", "L2"), object("n2", "b:1", true, "L3"))
	opened := watchOpened(client)
	// quorum 1: each node's own image resolves from its object alone
	index := layers.NewIndex(1)
	var mu sync.Mutex
	invalid := []string{}
	stop := make(chan struct{})
	defer close(stop)
	watch := Start(client, index, Hooks{Invalid: func(node string, err error) {
		mu.Lock()
		defer mu.Unlock()
		invalid = append(invalid, node)
	}}, stop)
	if !watch.WaitForSync(waitFor) || !watch.HasSynced() {
		t.Fatal("the first list was not indexed")
	}
	// the list: n1 indexed, n2 malformed (told, and not indexed)
	if index.Nodes() != 1 || !holds(index, "n1", "a:1") {
		t.Fatalf("after the list: %d nodes", index.Nodes())
	}
	mu.Lock()
	if fmt.Sprint(invalid) != "[n2]" {
		t.Errorf("invalid: %v", invalid)
	}
	mu.Unlock()
	select {
	case <-opened:
	case <-time.After(waitFor):
		t.Fatalf("no watch opened within %s", waitFor)
	}
	resource := client.Resource(GroupVersionResource)
	ctx := context.Background()
	// added
	if _, err := resource.Create(ctx, object("n3", "c:1", false, "L4"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n3 added", func() bool { return holds(index, "n3", "c:1") })
	// changed: n1 now holds c:1's layer only
	if _, err := resource.Update(ctx, object("n1", "c:1", false, "L4"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n1 updated", func() bool { return holds(index, "n1", "c:1") && !holds(index, "n1", "a:1") })
	// deleted
	if err := resource.Delete(ctx, "n3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n3 deleted", func() bool { return index.Nodes() == 1 })
	// broken by an update: the node loses its inventory, the others keep theirs
	if _, err := resource.Create(ctx, object("n4", "d:1", false, "L5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n4 added", func() bool { return holds(index, "n4", "d:1") })
	if _, err := resource.Update(ctx, object("n4", "d:1", true, "L5"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n4 forgotten", func() bool { return !holds(index, "n4", "d:1") && holds(index, "n1", "c:1") })
}

func TestWaitForSyncGivesUp(t *testing.T) {
	// a list that never succeeds (the CRD is not installed: 404): the wait ends at its
	// timeout, and the watch keeps trying
	client := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GroupVersionResource: layers.Kind + "List"})
	lists := make(chan struct{}, 100)
	client.PrependReactor("list", layers.Resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		lists <- struct{}{}
		return true, nil, apierrors.NewNotFound(GroupVersionResource.GroupResource(), "")
	})
	stop := make(chan struct{})
	defer close(stop)
	watch := Start(client, layers.NewIndex(1), Hooks{}, stop)
	started := time.Now()
	if watch.WaitForSync(200*time.Millisecond) || watch.HasSynced() {
		t.Fatal("synced without a list")
	}
	if elapsed := time.Since(started); elapsed < 200*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("waited %s", elapsed)
	}
	select {
	case <-lists:
	case <-time.After(waitFor):
		t.Error("the watch never listed")
	}
}
