package layers

import (
	"math"
	"slices"
	"time"
)

// Held is which nodes hold which layers, as the index was at one moment: the in-flight
// strategy's held and arriving bytes. The pod's own layers are asked of every node (each
// layer's holders walked: the cost is the sum of their holders, as Prepare's, in node
// ids, with no name hashed); the layers of a node's pending pods of that node alone (a
// binary search among its layer ids each: a popular base layer's thousands of holders
// are never walked for them). Built under one read lock; never modified once built, read
// without a lock.
type Held struct {
	layer map[string]int
	// names is the index's name table the ids come from (shared with Prepare: rebuilt
	// only when a node comes or goes), masks by node id which of the pod's first 64
	// layers each node with a fresh inventory holds (bit i: the layer at position i).
	names *NameTable
	masks []uint64
	// pairs are the (node, digest) pairs it holds of those asked of one node, and of the
	// pod's layers past the 64th.
	pairs map[nodeDigest]struct{}
	// epoch is the index's change count when it was built.
	epoch uint64
	// fresh are the nodes asked their own digests whose inventory was fresh (their
	// observed time, in the index's nanoseconds); a node absent was not fresh, and stays
	// so while the epoch is the same (time only ages an inventory).
	fresh map[string]int64
}

// MaskedLayers is how many of the digests asked of every node Mask answers for.
const MaskedLayers = 64

type nodeDigest struct{ node, digest string }

// Held answers for digests on every node and, for each node of byNode, for its digests
// on that node, counting the nodes whose inventory is fresh at now within maxAge (0: no
// bound), as Prepare does.
func (ix *Index) Held(digests []string, byNode map[string][]string, now time.Time, maxAge time.Duration) *Held {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	cutoff := int64(math.MinInt64)
	if maxAge > 0 {
		cutoff = clampedNanos(now.Add(-maxAge))
	}
	fresh := func(node int32) bool {
		observed := ix.observed[node]
		return observed >= cutoff && (maxAge <= 0 || observed != undatedNanos) && ix.nodes[node].live
	}
	held := &Held{
		layer: make(map[string]int, len(digests)), names: ix.nameTable(), masks: make([]uint64, len(ix.nodes)),
		pairs: map[nodeDigest]struct{}{}, epoch: ix.epoch, fresh: make(map[string]int64, len(byNode)),
	}
	for _, digest := range digests {
		if _, ok := held.layer[digest]; ok {
			continue
		}
		position := len(held.layer)
		held.layer[digest] = position
		id, ok := ix.layerID[digest]
		if !ok {
			continue
		}
		for _, node := range ix.layers[id].holders {
			if !fresh(node) {
				continue
			}
			if position < MaskedLayers {
				held.masks[node] |= 1 << position
			} else {
				held.pairs[nodeDigest{ix.nodes[node].name, digest}] = struct{}{}
			}
		}
	}
	for name, asked := range byNode {
		node, ok := ix.nodeID[name]
		if !ok || !fresh(node) {
			continue
		}
		held.fresh[name] = ix.observed[node]
		for _, digest := range asked {
			if id, ok := ix.layerID[digest]; ok {
				if _, found := slices.BinarySearch(ix.nodes[node].layers, id); found {
					held.pairs[nodeDigest{name, digest}] = struct{}{}
				}
			}
		}
	}
	return held
}

// Epoch is the index's change count when h was built (Index.Epoch).
func (h *Held) Epoch() uint64 {
	return h.epoch
}

// Observed is, for a node asked its own digests, its inventory's observed time (the
// index's nanoseconds) when the inventory was fresh; false when it was not, which it
// stays while the index's epoch is the same (time only ages an inventory).
func (h *Held) Observed(node string) (int64, bool) {
	observed, ok := h.fresh[node]
	return observed, ok
}

// StillFresh says whether an inventory observed at observed (Observed's) is still fresh
// at now within maxAge (0: no bound), by Held's own rule.
func StillFresh(observed int64, now time.Time, maxAge time.Duration) bool {
	return maxAge <= 0 || observed >= clampedNanos(now.Add(-maxAge))
}

// Holds says whether node holds digest (false for a digest Held was not asked about, for
// every node or for this one).
func (h *Held) Holds(node, digest string) bool {
	if position, ok := h.layer[digest]; ok && position < MaskedLayers {
		return h.Mask(node)&(1<<position) != 0
	}
	_, ok := h.pairs[nodeDigest{node, digest}]
	return ok
}

// Mask has bit i set when node holds the i-th distinct digest asked of every node, for
// the first MaskedLayers of them: one lookup a node instead of one a layer.
func (h *Held) Mask(node string) uint64 {
	return h.MaskByID(h.names.ID(node))
}

// Names is the name table h's ids come from: MaskByID reads ids of this table (==) only.
func (h *Held) Names() *NameTable {
	return h.names
}

// MaskByID is Mask for the node of id in h's name table (Names): a read, no lookup.
func (h *Held) MaskByID(id NodeID) uint64 {
	if id < 0 || int(id) >= len(h.masks) {
		return 0
	}
	return h.masks[id]
}
