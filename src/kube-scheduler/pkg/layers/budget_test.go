package layers

import (
	"errors"
	"fmt"
	"testing"
)

// chargesAddUp checks the budget's invariant: the nodes' charges add up to the total,
// which stays within the budget.
func chargesAddUp(t *testing.T, ix *Index) {
	t.Helper()
	var sum int64
	for id := range ix.nodes {
		if ix.nodes[id].live {
			sum += ix.nodes[id].chargeBytes()
		}
	}
	if sum != ix.usedBytes || ix.usedBytes > ix.maxBytes {
		t.Fatalf("charges add up to %d, the total is %d, the budget %d", sum, ix.usedBytes, ix.maxBytes)
	}
}

// published is one node's object of count images, each its own answer of layers layers.
func published(node string, count, layers int) *NodeLayerInventory {
	inventory := &NodeLayerInventory{Node: node, ObservedAt: observed}
	for i := 0; i < count; i++ {
		image := NodeImage{Names: []string{fmt.Sprintf("reg:5000/%s/app%d:1", node, i)}, Digest: digest(fmt.Sprint(node, "/", i))}
		for j := 0; j < layers; j++ {
			image.Layers = append(image.Layers, Layer{digest(fmt.Sprint(node, "/", i, "/", j)), 1})
		}
		inventory.Images = append(inventory.Images, image)
	}
	return inventory
}

func TestTheIssuesHostileObjectIsRefusedAtDecoding(t *testing.T) {
	// 620 images of 8 one-letter names, index 0 a thousand times each: 308 MiB of heap
	// in the index at 2de96fd, accepted as valid
	_, err := DecodeNodeLayerInventory(hostileDocument("n1", false))
	if err == nil {
		t.Fatal("the hostile object was accepted")
	}
	// made legal (1,000 distinct layers per image), it decodes, and the index refuses it
	// for its size before hashing anything: the node has no inventory
	inventory, err := DecodeNodeLayerInventory(hostileDocument("n1", true))
	if err != nil {
		t.Fatal(err)
	}
	ix := NewIndex(2)
	ix.Upsert(&NodeLayerInventory{Node: "n1", Images: []NodeImage{nginx}, ObservedAt: observed})
	refused := ix.Upsert(inventory)
	if len(refused) != 1 || refused[0].Reason != ReasonObjectTooLarge || refused[0].ChargeBytes <= MaxObjectBytes {
		t.Fatalf("refusals %+v", refused)
	}
	if _, state := ix.Prepare(nil, nil, observed, 0).Score("n1"); state != OverBudget || ix.Nodes() != 0 || ix.usedBytes != 0 {
		t.Errorf("after the refusal: state %v, %d nodes, %d bytes held", state, ix.Nodes(), ix.usedBytes)
	}
	var wrapped error = refused[0]
	if !errors.As(wrapped, new(Refusal)) || wrapped.Error() == "" {
		t.Errorf("a refusal is an error naming the node: %v", wrapped)
	}
}

func TestOneAnswerIsKeptOnceWhoeverGivesItUnderWhicheverName(t *testing.T) {
	// 50 nodes publish nginx under 3 names each (and its digest): one answer, 4 keys
	ix := NewIndex(2)
	for n := 0; n < 50; n++ {
		named := nginx
		named.Names = []string{"nginx:1.25", "docker.io/library/nginx:1.25", fmt.Sprintf("mirror%d.example/nginx:1.25", n)}
		ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("n", n), Images: []NodeImage{named}, ObservedAt: observed})
	}
	// keys: docker.io/library/nginx:1.25, the digest, and the 50 mirrors' names
	if len(ix.answerID) != 1 || len(ix.lookupID) != 52 {
		t.Errorf("%d answers, %d lookup keys; want 1 and 52", len(ix.answerID), len(ix.lookupID))
	}
	chargesAddUp(t, ix)
}

func TestAFloodFromAFewNodesRefusesThemNotTheHonest(t *testing.T) {
	// a budget of 64 honest nodes of 5 images of 10 layers, plus room for 3 floods
	honest := planOf(published("x", 5, 10)).upperBytes
	flood := planOf(published("x", 40, 100)).upperBytes
	ix := NewIndex(1).WithBudget(64*honest+3*flood, 2*flood)
	for n := 0; n < 32; n++ {
		if refused := ix.Upsert(published(fmt.Sprint("honest", n), 5, 10)); len(refused) != 0 {
			t.Fatalf("honest%d refused: %v", n, refused)
		}
	}
	// ten flooding nodes: the first three fit, then each new one is refused (it would be
	// the largest) or evicts an equal one held before: never an honest node
	for n := 0; n < 10; n++ {
		for _, refusal := range ix.Upsert(published(fmt.Sprint("flood", n), 40, 100)) {
			if refusal.Node[:5] != "flood" {
				t.Fatalf("an honest node refused: %+v", refusal)
			}
		}
		chargesAddUp(t, ix)
	}
	// honest nodes keep joining, each under its fair share: floods are evicted for them
	evicted := 0
	for n := 32; n < 64; n++ {
		for _, refusal := range ix.Upsert(published(fmt.Sprint("honest", n), 5, 10)) {
			if refusal.Node[:5] != "flood" || !refusal.Evicted {
				t.Fatalf("refused %+v while floods were held", refusal)
			}
			evicted++
		}
		chargesAddUp(t, ix)
	}
	prepared := ix.Prepare(nil, nil, observed, 0)
	for n := 0; n < 64; n++ {
		if _, state := prepared.Score(fmt.Sprint("honest", n)); state != Scored {
			t.Errorf("honest%d: %v", n, state)
		}
	}
	if evicted == 0 {
		t.Error("no flood was evicted for the honest nodes: the test proves nothing")
	}
	// an object too large alone is refused outright, and holds nothing
	if refused := ix.Upsert(published("huge", 100, 100)); len(refused) != 1 || refused[0].Reason != ReasonObjectTooLarge {
		t.Errorf("an object over the per-object cap: %+v", refused)
	}
}

func TestChargesFollowTheirEntriesThroughChurn(t *testing.T) {
	// shared layers and answers change hands as their payers leave; the charges always
	// add up, and nothing is held once every object is gone
	ix := NewIndex(1)
	for round := 0; round < 3; round++ {
		for n := 0; n < 20; n++ {
			images := []NodeImage{img1, img2}
			if (n+round)%3 == 0 {
				images = []NodeImage{nginx, img2}
			}
			ix.Upsert(&NodeLayerInventory{Node: fmt.Sprint("n", n), Images: images, ObservedAt: observed})
			chargesAddUp(t, ix)
		}
		for n := round; n < 20; n += 2 {
			ix.Remove(fmt.Sprint("n", n))
			chargesAddUp(t, ix)
		}
	}
	ix.Replace(nil)
	if ix.usedBytes != 0 || len(ix.layerID) != 0 || len(ix.answerID) != 0 || len(ix.lookupID) != 0 {
		t.Errorf("after every object went: %d bytes, %d layers, %d answers, %d keys", ix.usedBytes, len(ix.layerID), len(ix.answerID), len(ix.lookupID))
	}
}
