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

func TestAReusedLayerIDIsNotMistakenForTheOldLayer(t *testing.T) {
	ix := seedIndex()
	prepared := ix.Prepare(ix.ResolvePod([]string{"reg:5000/img2:1"}, observed, 0), nil, observed, 0)
	// after PreScore, L4's only holder drops it, and a new layer takes L4's id
	l5 := Layer{digest("L5"), 10}
	ix.Upsert(&NodeLayerInventory{Node: "N2", Images: []NodeImage{{Names: []string{"x:1"}, Digest: "sha256:x", Layers: []Layer{l1, l2, l5}}}, ObservedAt: observed})
	// N2 holds L1+L2 = 70 of 80, not L4: floor(7000/80) = 87, not 100
	if score, _ := ix.Score(prepared, "N2", observed, 0); score != 87 {
		t.Errorf("N2 scored %d, want 87", score)
	}
}

func TestScoresAreReadWhileEventsArrive(t *testing.T) {
	// 16 readers (kube-scheduler's Score workers) and one writer (the watch); with
	// `go test -race` this also proves the locking
	ix := seedIndex()
	prepared := ix.Prepare(ix.ResolvePod([]string{"reg:5000/img1:1"}, observed, 0), nil, observed, 0)
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
				// N2 holds Img1 (100) or Img2 (77), never anything in between
				if score, _ := ix.Score(prepared, "N2", observed, 0); score != 100 && score != 77 {
					failures <- fmt.Sprintf("N2 scored %d", score)
					return
				}
				if score, _ := ix.Score(prepared, "N1", observed, 0); score != 100 {
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
