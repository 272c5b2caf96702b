package layers

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// holders is who holds layer digest, by name, as the index says.
func holders(ix *Index, layer Layer) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.layerID[layer.Digest]
	if !ok {
		return nil
	}
	names := []string{}
	for _, node := range ix.layers[id].holders {
		names = append(names, ix.nodes[node].name)
	}
	return names
}

func TestEveryEventKeepsBothDirectionsOfTheIndex(t *testing.T) {
	ix := seedIndex()
	if got := fmt.Sprint(holders(ix, l1), holders(ix, l3), holders(ix, l4)); got != "[N1 N2] [N1] [N2]" {
		t.Fatalf("after the seed: %s", got)
	}
	// N2 evicts Img2 and pulls Img1: L4 has no holder left and is forgotten
	ix.Upsert(&NodeLayerInventory{Node: "N2", Images: []NodeImage{img1}, ObservedAt: observed})
	if got := fmt.Sprint(holders(ix, l3), holders(ix, l4)); got != "[N1 N2] []" {
		t.Errorf("after N2's update: %s", got)
	}
	// N1's object is deleted: its layers lose it as a holder
	if !ix.Remove("N1") || ix.Remove("N1") {
		t.Errorf("Remove reports what it removed")
	}
	if got := fmt.Sprint(holders(ix, l1), holders(ix, l3)); got != "[N2] [N2]" {
		t.Errorf("after N1's removal: %s", got)
	}
	// a full list: N3 and N5 only; N2 was not listed, so it is gone
	ix.Replace([]*NodeLayerInventory{{Node: "N3", ObservedAt: observed}, {Node: "N5", Images: []NodeImage{img2}, ObservedAt: observed}})
	if ix.Nodes() != 2 || fmt.Sprint(holders(ix, l1), holders(ix, l3)) != "[N5] []" {
		t.Errorf("after a relist: %d nodes, L1 %v, L3 %v", ix.Nodes(), holders(ix, l1), holders(ix, l3))
	}
	// votes leave with their objects: no node held now publishes Img1, N5 publishes Img2
	if _, why := ix.ImageLayers("reg:5000/img1:1", observed, 0); why != Unpublished {
		t.Errorf("Img1 still resolved (%v) after its publishers went", why)
	}
	if _, why := ix.ImageLayers("reg:5000/img2:1", observed, 0); why != Agreed {
		t.Errorf("Img2: %v", why)
	}
}

func TestAPreparedPodIsTheIndexAsPreScoreSawIt(t *testing.T) {
	ix := seedIndex()
	prepared := ix.Prepare([]string{"reg:5000/img2:1", "reg:5000/img1:1"}, nil, observed, 0)
	// after PreScore, L4's only holder drops it (a new layer takes L4's id), N1's object
	// goes and N5 comes
	l5 := Layer{digest("L5"), 10}
	ix.Upsert(&NodeLayerInventory{Node: "N2", Images: []NodeImage{img1, {Names: []string{"x:1"}, Digest: "sha256:x", Layers: []Layer{l1, l2, l5}}}, ObservedAt: observed})
	ix.Remove("N1")
	ix.Upsert(&NodeLayerInventory{Node: "N5", Images: []NodeImage{img2}, ObservedAt: observed})
	// this cycle: total L1+L2+L4+L3 = 100; N2 held L1 L2 L4 = 80; N1 L1 L2 L3 = 90; N5
	// had no object yet
	for node, want := range map[string]int64{"N1": 90, "N2": 80} {
		if score, state := prepared.Score(node); score != want || state != Scored {
			t.Errorf("this cycle: %s (%d, %v), want %d", node, score, state, want)
		}
	}
	if _, state := prepared.Score("N5"); state != NoInventory {
		t.Errorf("this cycle: N5 %v, want NoInventory", state)
	}
	// the next cycle sees the events: Img2 is N5's alone now, total L1+L2+L4 = 80; N2
	// holds L1 L2 (L5 reused L4's id, and is not L4): floor(7000/80) = 87; N1 is gone
	next := ix.Prepare([]string{"reg:5000/img2:1"}, nil, observed, 0)
	for node, want := range map[string]int64{"N2": 87, "N5": 100} {
		if score, _ := next.Score(node); score != want {
			t.Errorf("next cycle: %s scored %d, want %d", node, score, want)
		}
	}
	if _, state := next.Score("N1"); state != NoInventory {
		t.Errorf("next cycle: N1 %v, want NoInventory", state)
	}
}

func TestScoresAreReadWhileEventsArrive(t *testing.T) {
	// 16 readers (each a PreScore, then Score as kube-scheduler's workers do) and one
	// writer (the watch); with `go test -race` this also proves the locking
	ix := seedIndex()
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			images := []NodeImage{img1}
			if i%2 == 1 {
				images = []NodeImage{img2}
			}
			ix.Upsert(&NodeLayerInventory{Node: "N2", Images: images, ObservedAt: observed})
			ix.Upsert(&NodeLayerInventory{Node: fmt.Sprintf("churn-%d", i%50), Images: images, ObservedAt: observed})
		}
	}()
	var readers sync.WaitGroup
	failures := make(chan string, 16)
	for w := 0; w < 16; w++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				prepared := ix.Prepare([]string{"reg:5000/img1:1"}, nil, observed, 0)
				// N2 holds Img1 (100) or Img2 (77), never anything in between
				if score, _ := prepared.Score("N2"); score != 100 && score != 77 {
					failures <- fmt.Sprintf("N2 scored %d", score)
					return
				}
				if score, _ := prepared.Score("N1"); score != 100 {
					failures <- fmt.Sprintf("N1 scored %d", score)
					return
				}
			}
		}()
	}
	readers.Wait()
	close(stop)
	writer.Wait()
	close(failures)
	for failure := range failures {
		t.Error(failure)
	}
}
