package layers

import (
	"sort"
	"sync"
	"time"
)

// noLayer marks a pod layer that no node holds.
const noLayer = -1

// Index is what every NodeLayerInventory event updates and every Score reads: which
// layers each node holds, which nodes hold each layer, and, for each published image
// name, which nodes vote for which answer (see votes.go). Writers (the watch) take the write lock for one node's change;
// readers (PreScore, and Score from kube-scheduler's parallel workers) share the read
// lock, so a reader never sees half a change. It holds no API object: only ids, the
// layer digests, and the votes of the objects it holds (they leave with their object, so
// its memory is bounded by what the objects held now say).
type Index struct {
	mu sync.RWMutex

	nodeID    map[string]int32
	nodes     []nodeEntry
	freeNodes []int32

	layerID    map[string]int32
	layers     []layerEntry
	freeLayers []int32

	// quorum is how many distinct nodes must give the same answer for a pod image.
	quorum int
	// tally is, by lookup name, the answers nodes give for it, by answer key.
	tally map[string]map[string]*answer
}

type nodeEntry struct {
	name string
	// layers are the ids of the node's distinct layers, sorted.
	layers     []int32
	observedAt time.Time
	live       bool
	// ballots are the node's votes, one per (lookup name, answer).
	ballots []ballot
}

type layerEntry struct {
	digest string
	// holders are the ids of the nodes holding the layer, sorted.
	holders []int32
}

// NewIndex is an empty index resolving a pod image only when quorum distinct nodes
// publish the same answer for it (DefaultImageQuorum unless the args say otherwise;
// 1 trusts any single node). A quorum below 1 is a caller's error: it panics.
func NewIndex(quorum int) *Index {
	if quorum < 1 {
		panic("layers.NewIndex: the image quorum is at least 1")
	}
	return &Index{
		nodeID:  map[string]int32{},
		layerID: map[string]int32{},
		quorum:  quorum,
		tally:   map[string]map[string]*answer{},
	}
}

// Nodes is how many nodes have an inventory in the index.
func (ix *Index) Nodes() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.nodeID)
}

// Upsert records a node's inventory, replacing what the index held for that node; the
// cost is the node's own size, never the cluster's.
func (ix *Index) Upsert(inventory *Inventory) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.upsert(inventory)
}

// Remove forgets a node's inventory (its object was deleted, or is malformed); false when
// the index held none. Its votes for images go with it.
func (ix *Index) Remove(node string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.remove(node)
}

// Replace makes the index hold exactly these inventories (a full list), applied in order;
// the nodes it held that are not listed are forgotten.
func (ix *Index) Replace(inventories []*Inventory) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	listed := make(map[string]bool, len(inventories))
	for _, inventory := range inventories {
		ix.upsert(inventory)
		listed[inventory.Node] = true
	}
	for name := range ix.nodeID {
		if !listed[name] {
			ix.remove(name)
		}
	}
}

func (ix *Index) upsert(inventory *Inventory) {
	seen := map[string]bool{}
	var held []int32
	for _, image := range inventory.Images {
		for _, layer := range image.Layers {
			if !seen[layer.Digest] {
				seen[layer.Digest] = true
				held = append(held, ix.layerOf(layer.Digest))
			}
		}
	}
	sort.Slice(held, func(a, b int) bool { return held[a] < held[b] })
	id, ok := ix.nodeID[inventory.Node]
	if !ok {
		id = ix.newNode(inventory.Node)
	}
	node := &ix.nodes[id]
	old := node.layers
	// both sorted: walk them together, touching only the layers that changed
	i, j := 0, 0
	for i < len(old) || j < len(held) {
		switch {
		case j == len(held) || (i < len(old) && old[i] < held[j]):
			ix.dropHolder(old[i], id)
			i++
		case i == len(old) || held[j] < old[i]:
			ix.layers[held[j]].holders = insertSorted(ix.layers[held[j]].holders, id)
			j++
		default:
			i++
			j++
		}
	}
	node.layers = held
	node.observedAt = inventory.ObservedAt
	ix.vote(id, inventory.Images)
}

func (ix *Index) remove(name string) bool {
	id, ok := ix.nodeID[name]
	if !ok {
		return false
	}
	for _, layer := range ix.nodes[id].layers {
		ix.dropHolder(layer, id)
	}
	ix.vote(id, nil)
	delete(ix.nodeID, name)
	ix.nodes[id] = nodeEntry{}
	ix.freeNodes = append(ix.freeNodes, id)
	return true
}

// reuse pops an id freed earlier; false when there is none.
func reuse(free *[]int32) (int32, bool) {
	n := len(*free)
	if n == 0 {
		return 0, false
	}
	id := (*free)[n-1]
	*free = (*free)[:n-1]
	return id, true
}

func (ix *Index) newNode(name string) int32 {
	id, ok := reuse(&ix.freeNodes)
	if !ok {
		id = int32(len(ix.nodes))
		ix.nodes = append(ix.nodes, nodeEntry{})
	}
	ix.nodes[id] = nodeEntry{name: name, live: true}
	ix.nodeID[name] = id
	return id
}

// layerOf is the id of layer digest, made if no node holds it yet.
func (ix *Index) layerOf(digest string) int32 {
	if id, ok := ix.layerID[digest]; ok {
		return id
	}
	id, ok := reuse(&ix.freeLayers)
	if !ok {
		id = int32(len(ix.layers))
		ix.layers = append(ix.layers, layerEntry{})
	}
	ix.layers[id] = layerEntry{digest: digest}
	ix.layerID[digest] = id
	return id
}

// dropHolder removes node from layer's holders; a layer nobody holds is forgotten (its
// id is reused: readers check the digest, see Prepared).
func (ix *Index) dropHolder(layer, node int32) {
	entry := &ix.layers[layer]
	entry.holders = removeSorted(entry.holders, node)
	if len(entry.holders) == 0 {
		delete(ix.layerID, entry.digest)
		*entry = layerEntry{}
		ix.freeLayers = append(ix.freeLayers, layer)
	}
}

// fresh says whether a node's inventory counts at now: observed within maxAge (0: no
// bound). An inventory that does not say when it was observed is of unknown age: stale
// under a bound.
func (node *nodeEntry) fresh(now time.Time, maxAge time.Duration) bool {
	if maxAge <= 0 {
		return true
	}
	return !node.observedAt.IsZero() && now.Sub(node.observedAt) <= maxAge
}

// holds says whether node holds layer id (its sorted ids, binary search).
func (node *nodeEntry) holds(layer int32) bool {
	low, high := 0, len(node.layers)
	for low < high {
		middle := int(uint(low+high) >> 1)
		if node.layers[middle] < layer {
			low = middle + 1
		} else {
			high = middle
		}
	}
	return low < len(node.layers) && node.layers[low] == layer
}

func insertSorted(ids []int32, id int32) []int32 {
	at := sort.Search(len(ids), func(i int) bool { return ids[i] >= id })
	if at < len(ids) && ids[at] == id {
		return ids
	}
	ids = append(ids, 0)
	copy(ids[at+1:], ids[at:])
	ids[at] = id
	return ids
}

func removeSorted(ids []int32, id int32) []int32 {
	at := sort.Search(len(ids), func(i int) bool { return ids[i] >= id })
	if at == len(ids) || ids[at] != id {
		return ids
	}
	return append(ids[:at], ids[at+1:]...)
}
