package layers

import (
	"sort"
	"sync"
)

// noLayer marks a pod layer that no node holds.
const noLayer = -1

// Index is what every NodeLayerInventory event updates and every PreScore reads: which
// layers each node holds, which nodes hold each layer, and, for each published image
// name, which nodes vote for which answer (see votes.go). Writers (the watch) take the
// write lock for one node's change; readers (PreScore, once per pod: prepare.go) share
// the read lock, so a reader never sees half a change; Score reads what PreScore
// prepared, without the lock. It holds
// no API object: only ids, the layer digests, and the votes of the objects it holds
// (they leave with their object), within a budget (budget.go): its memory is bounded by
// construction, whatever the objects say.
type Index struct {
	mu sync.RWMutex

	nodeID    map[string]int32
	nodes     []nodeEntry
	freeNodes []int32
	// observed is each node's observedNanos by id (a free id's is undated): dense, so
	// that a pod's freshness pass reads 8 bytes a node.
	observed []int64

	layerID    map[string]int32
	layers     []layerEntry
	freeLayers []int32

	// quorum is how many distinct nodes must give the same answer for a pod image.
	quorum int
	// answers are kept once each, by the hash of their content.
	answerID    map[answerKey]int32
	answers     []answerEntry
	freeAnswers []int32
	// lookups are the keys images are published under, with their votes.
	lookupID    map[string]int32
	lookups     []lookupEntry
	freeLookups []int32

	// maxBytes and maxObjectBytes are the budget (MaxIndexBytes, MaxObjectBytes unless
	// WithBudget says otherwise), usedBytes what is charged now.
	maxBytes, maxObjectBytes, usedBytes int64
	// refused are the nodes whose latest object is not held for its size.
	refused map[string]Refusal

	// namesVersion counts the changes to nodeID and refused (under the write lock);
	// names is the name table of one version and members the spread's counts of one
	// (prepare.go), both rebuilt by readers under namesMu when out of date.
	namesVersion uint64
	namesMu      sync.Mutex
	names        *NameTable
	members      *spreadMembers

	// epoch counts every change (Upsert, Remove, Replace; under the write lock): what a
	// reader derived from the index at one epoch holds while the epoch is the same (the
	// in-flight strategy's per-node backlogs, held.go).
	epoch uint64
}

// Epoch is the index's change count (see Index.epoch).
func (ix *Index) Epoch() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.epoch
}

type nodeEntry struct {
	name string
	// layers are the ids of the node's distinct layers, sorted.
	layers []int32
	live   bool
	// ballots are the node's votes, one per (lookup key, answer), sorted; lookups and
	// answers count the distinct ones.
	ballots          []ballot
	lookups, answers int
	// refsBytes is what its own object keeps (refsCost), paidBytes the entries it is
	// charged for.
	refsBytes, paidBytes int64
}

type layerEntry struct {
	digest string
	// holders are the ids of the nodes holding the layer, sorted.
	holders []int32
	charged
}

// NewIndex is an empty index resolving a pod image only when quorum distinct nodes
// publish the same answer for it (DefaultImageQuorum unless the args say otherwise;
// 1 trusts any single node), within MaxIndexBytes. A quorum below 1 is a caller's
// error: it panics.
func NewIndex(quorum int) *Index {
	if quorum < 1 {
		panic("layers.NewIndex: the image quorum is at least 1")
	}
	return &Index{
		nodeID:         map[string]int32{},
		layerID:        map[string]int32{},
		quorum:         quorum,
		answerID:       map[answerKey]int32{},
		lookupID:       map[string]int32{},
		maxBytes:       MaxIndexBytes,
		maxObjectBytes: MaxObjectBytes,
		refused:        map[string]Refusal{},
	}
}

// WithBudget sets the index's budget in all and per object (bytes, as charged); for an
// empty index.
func (ix *Index) WithBudget(totalBytes, objectBytes int64) *Index {
	ix.maxBytes, ix.maxObjectBytes = totalBytes, objectBytes
	return ix
}

// Nodes is how many nodes have an inventory in the index.
func (ix *Index) Nodes() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.nodeID)
}

// Upsert records a node's inventory, replacing what the index held for that node; the
// cost is the node's own size, never the cluster's. The refusals say which objects the
// budget refused: this one (the node then has none), or larger ones held before.
func (ix *Index) Upsert(inventory *NodeLayerInventory) []Refusal {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.epoch++
	return ix.upsert(inventory)
}

// Remove forgets a node's inventory (its object was deleted, or is malformed); false when
// the index held none. Its votes for images go with it.
func (ix *Index) Remove(node string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.epoch++
	ix.unrefuse(node)
	return ix.remove(node)
}

// Replace makes the index hold exactly these inventories (a full list), applied in order;
// the nodes it held that are not listed are forgotten.
func (ix *Index) Replace(inventories []*NodeLayerInventory) []Refusal {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.epoch++
	listed := make(map[string]bool, len(inventories))
	for _, inventory := range inventories {
		listed[inventory.Node] = true
	}
	for name := range ix.nodeID {
		if !listed[name] {
			ix.remove(name)
		}
	}
	for name := range ix.refused {
		if !listed[name] {
			ix.unrefuse(name)
		}
	}
	var refused []Refusal
	for _, inventory := range inventories {
		refused = append(refused, ix.upsert(inventory)...)
	}
	return refused
}

func (ix *Index) upsert(inventory *NodeLayerInventory) []Refusal {
	p := planOf(inventory)
	admitted, refused := ix.admit(p, inventory.Node)
	if !admitted {
		ix.remove(inventory.Node)
		ix.refuse(refused[len(refused)-1])
		return refused
	}
	ix.unrefuse(inventory.Node)
	id, ok := ix.nodeID[inventory.Node]
	if !ok {
		id = ix.newNode(inventory.Node)
	}
	held := make([]int32, 0, len(p.layers))
	for _, digest := range p.layers {
		held = append(held, ix.layerOf(digest, id))
	}
	sort.Slice(held, func(a, b int) bool { return held[a] < held[b] })
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
	ix.observed[id] = observedNanos(inventory.ObservedAt)
	ix.vote(id, p.images)
	ix.setRefs(id)
	return refused
}

// setRefs charges node id what its own object keeps now.
func (ix *Index) setRefs(id int32) {
	node := &ix.nodes[id]
	refs := refsCost(len(node.layers), len(node.ballots), node.lookups, node.answers)
	ix.usedBytes += refs - node.refsBytes
	node.refsBytes = refs
}

func (ix *Index) remove(name string) bool {
	id, ok := ix.nodeID[name]
	if !ok {
		return false
	}
	for _, layer := range ix.nodes[id].layers {
		ix.dropHolder(layer, id)
	}
	ix.nodes[id].layers = nil
	ix.vote(id, nil)
	ix.setRefs(id)
	ix.usedBytes -= ix.nodes[id].refsBytes // a node's entry goes too
	delete(ix.nodeID, name)
	ix.nodes[id] = nodeEntry{}
	ix.observed[id] = undatedNanos
	ix.freeNodes = append(ix.freeNodes, id)
	ix.namesVersion++
	return true
}

// refuse records that the budget does not hold a node's object (the node then has
// none); unrefuse forgets it (its object was admitted, or deleted).
func (ix *Index) refuse(refusal Refusal) {
	ix.refused[refusal.Node] = refusal
	ix.namesVersion++
}

func (ix *Index) unrefuse(node string) {
	if _, ok := ix.refused[node]; ok {
		delete(ix.refused, node)
		ix.namesVersion++
	}
}

// slot is the id for a new entry of entries: one freed earlier (free), or one appended.
func slot[T any](entries *[]T, free *[]int32) int32 {
	if n := len(*free); n > 0 {
		id := (*free)[n-1]
		*free = (*free)[:n-1]
		return id
	}
	var zero T
	*entries = append(*entries, zero)
	return int32(len(*entries) - 1)
}

// leave removes node from an entry's holders; true when none is left (the caller
// forgets the entry), else another holder is charged for it if node was.
func (ix *Index) leave(holders *[]int32, entry *charged, node int32) bool {
	*holders = removeSorted(*holders, node)
	if len(*holders) > 0 {
		ix.handOver(entry, node, (*holders)[0])
		return false
	}
	ix.uncharge(entry)
	return true
}

func (ix *Index) newNode(name string) int32 {
	id := slot(&ix.nodes, &ix.freeNodes)
	ix.nodes[id] = nodeEntry{name: name, live: true}
	if int(id) == len(ix.observed) {
		ix.observed = append(ix.observed, undatedNanos)
	}
	ix.nodeID[name] = id
	ix.namesVersion++
	return id
}

// layerOf is the id of layer digest, made (and charged to node) if no node holds it yet.
func (ix *Index) layerOf(digest string, node int32) int32 {
	if id, ok := ix.layerID[digest]; ok {
		return id
	}
	id := slot(&ix.layers, &ix.freeLayers)
	ix.layers[id] = layerEntry{digest: digest}
	ix.layerID[digest] = id
	ix.charge(&ix.layers[id].charged, node, layerCost(digest))
	return id
}

// dropHolder removes node from layer's holders; a layer nobody holds is forgotten (its
// id is reused), else another holder is charged for it if node was.
func (ix *Index) dropHolder(layer, node int32) {
	entry := &ix.layers[layer]
	if ix.leave(&entry.holders, &entry.charged, node) {
		delete(ix.layerID, entry.digest)
		*entry = layerEntry{}
		ix.freeLayers = append(ix.freeLayers, layer)
	}
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
