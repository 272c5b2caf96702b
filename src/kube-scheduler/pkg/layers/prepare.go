package layers

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// A pod is scored in two steps, as kube-scheduler runs a score plugin: Prepare once per
// pod (PreScore), then Score once per node (on kube-scheduler's 16 parallel workers).
// Prepare does the work once: under one read lock it resolves the pod's images to its
// distinct layers (ids, not digests), then walks each layer's holders and adds the
// layer's bytes (and, under spread, its weight) to each holder's sums, so its cost is
// the sum of the holders of the pod's layers, not nodes × layers. Prepared keeps the
// result by node id, with the name table the ids came from: Score is one map lookup
// and one read, with no lock and no allocation, and sees the index as PreScore saw it
// (an event arriving during the cycle counts from the next pod on).

// staleNode marks, in a pod's terms, a node whose inventory does not count at the
// cycle's time (or a free id): it scores 0 (Stale).
const staleNode = -1

// undatedNanos is the observation time of an inventory that does not say: stale under
// any age bound.
const undatedNanos = math.MinInt64

// refusedNode marks, in the name table, a node whose object the budget refused.
const refusedNode = -1

// Spread asks for upstream ImageLocality's scaling against node heating: each present
// layer counts size * holders / nodes, where nodes is the cluster's node count and
// holders the nodes that hold the layer and count (in the scheduler's snapshot, with a
// fresh inventory).
type Spread struct {
	Nodes int
	// Counts says whether a node counts (is in the scheduler's snapshot); nil: every node
	// does.
	Counts func(node string) bool
	// CountsVersion, when not nil, names Counts' answers: while it is the same (==) and
	// the index holds the same nodes, the index asks Counts once per node, not once per
	// pod (the plugin gives its snapshot's node list's identity).
	CountsVersion any
}

// Terms is what a pod's cycle knows of one node with a fresh inventory.
type Terms struct {
	// PresentBytes are the bytes of the pod's distinct layers the node holds.
	PresentBytes int64
	// WeightedBytes is, under spread, the sum over those layers of size * holders /
	// nodes, added in the pod's layer order (as the Python core sums them).
	WeightedBytes float64
}

// Prepared is a pod ready to be scored on any node: computed once per pod (PreScore),
// read by every Score, never modified after Prepare returns.
type Prepared struct {
	// Unknown are the pod's images no quorum of nodes agrees on (see votes.go): the
	// plugin makes no registry call, so their layers count neither as present nor as
	// needed. WithoutQuorum are those of them some node did publish.
	Unknown       []string
	WithoutQuorum []string
	// LayerCount is the number of the pod's distinct known layers.
	LayerCount int
	// With an ImageSource (source.go): Consulted says whether the source was asked at
	// all, FromSource how many images were scored with its layers, Disputed how many
	// pinned images it serves otherwise than the nodes agree.
	Consulted  bool
	FromSource int
	Disputed   int

	names      *NameTable
	terms      []Terms
	totalBytes int64
	spread     bool
}

// NameTable is the index's node names as of one version: each node's id, or
// refusedNode. It is never modified once built (Prepared and Held share it without a
// lock), and the index keeps it while its nodes are the same, so a caller may resolve
// names to ids once (NodeID) and read a Prepared or a Held built on the same table
// (==) by id: no name hashed per node.
type NameTable struct {
	version uint64
	ids     map[string]int32
}

// NodeID is a node's id in one NameTable: NoNode for a name the table does not hold.
type NodeID int32

// NoNode is the id of a name a NameTable does not hold (a node without an inventory).
const NoNode NodeID = -2

// ID is node's id in the table (NoNode: not there; a refused node's is refusedNode).
func (t *NameTable) ID(node string) NodeID {
	if id, ok := t.ids[node]; ok {
		return NodeID(id)
	}
	return NoNode
}

// NameTable is the name table of the index's current nodes (the one a Prepare or Held
// built now reads by), taken under the read lock.
func (ix *Index) NameTable() *NameTable {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.nameTable()
}

// spreadMembers is, by node id, whether Spread.Counts counts the node, for one
// CountsVersion and one version of the index's nodes; never modified once built.
type spreadMembers struct {
	countsVersion any
	namesVersion  uint64
	counts        []bool
	// all: every live node counts (a layer's counted holders are then all its holders,
	// when no inventory is stale).
	all bool
}

// layerRef is one layer of an answer, by the index's id.
type layerRef struct {
	id        int32
	sizeBytes int64
}

// scratch is what Prepare needs only while it runs (pooled: it never leaves Prepare).
type scratch struct {
	// seen[id] == generation: the layer is the pod's already.
	seen       []uint32
	generation uint32
	layers     []layerRef
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reset readies the scratch for a pod over an index of layerIDs layer ids.
func (s *scratch) reset(layerIDs int) {
	s.layers = s.layers[:0]
	if len(s.seen) < layerIDs {
		s.seen = make([]uint32, layerIDs+layerIDs/4)
		s.generation = 0
	}
	s.generation++
	if s.generation == 0 { // wrapped: every old mark could read as this pod's
		clear(s.seen)
		s.generation = 1
	}
}

// Skip says whether the pod scores 0 everywhere: none of its layers is known, they weigh
// nothing, or their sum overflows.
func (p *Prepared) Skip() bool {
	return p.totalBytes <= 0
}

// TotalBytes is the pod's distinct known layers' bytes.
func (p *Prepared) TotalBytes() int64 {
	return p.totalBytes
}

// Names is the name table p's ids come from: NodeByID and ScoreByID read ids of this
// table (==) only.
func (p *Prepared) Names() *NameTable {
	return p.names
}

// Node is what the cycle knows of node, and whether its inventory counts: a lookup, safe
// on any number of goroutines, with no lock and no allocation.
func (p *Prepared) Node(node string) (Terms, NodeState) {
	return p.NodeByID(p.names.ID(node))
}

// NodeByID is Node for the node of id in p's name table (Names): a read, no lookup.
func (p *Prepared) NodeByID(id NodeID) (Terms, NodeState) {
	switch {
	case id == NoNode || id < refusedNode || int(id) >= len(p.terms):
		return Terms{}, NoInventory
	case id == refusedNode:
		return Terms{}, OverBudget
	}
	terms := p.terms[id]
	if terms.PresentBytes == staleNode {
		return Terms{}, Stale
	}
	return terms, Scored
}

// Score is the node's layer-locality score 0..100 for the pod. A node without a usable
// inventory scores 0 and says why.
func (p *Prepared) Score(node string) (int64, NodeState) {
	return p.ScoreByID(p.names.ID(node))
}

// ScoreByID is Score for the node of id in p's name table (Names): a read, no lookup.
func (p *Prepared) ScoreByID(id NodeID) (int64, NodeState) {
	terms, state := p.NodeByID(id)
	if state != Scored || p.Skip() {
		return 0, state
	}
	if p.spread {
		return SpreadScore(terms.WeightedBytes, p.totalBytes), Scored
	}
	return PresentScore(terms.PresentBytes, p.totalBytes), Scored
}

// Prepare readies a pod for scoring on every node: images in upstream order (init
// containers first), resolved from what a quorum of agents agree on; spread nil scores
// without the spread factor; at time now, counting inventories observed within maxAge
// (0: no bound). The index's read lock is taken once.
func (ix *Index) Prepare(images []string, spread *Spread, now time.Time, maxAge time.Duration) *Prepared {
	return ix.PrepareFrom(images, nil, spread, now, maxAge)
}

// PrepareFrom is Prepare with the answers of source (a registry, source.go) merged with
// the nodes' as the extender merges them; nil: the nodes' alone, as Prepare.
func (ix *Index) PrepareFrom(images []string, source ImageSource, spread *Spread, now time.Time, maxAge time.Duration) *Prepared {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	p := &Prepared{names: ix.nameTable(), spread: spread != nil, terms: make([]Terms, len(ix.nodes))}
	staleNodes := ix.markStale(p.terms, now, maxAge)
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	s.reset(len(ix.layers))
	var total uint64
	overflow := false
	var perImage [][]layerRef
	if source != nil {
		perImage = ix.mergeSource(images, source, p)
	}
	for i, image := range images {
		var refs []layerRef
		if perImage != nil {
			refs = perImage[i]
		} else {
			var resolution Resolution
			refs, resolution = ix.imageLayers(image, p.terms)
			if resolution != Agreed {
				p.Unknown = append(p.Unknown, image)
				if resolution == WithoutQuorum {
					p.WithoutQuorum = append(p.WithoutQuorum, image)
				}
				continue
			}
		}
		// each distinct layer once, at its first occurrence (the Python core's pod_layers)
		for _, ref := range refs {
			if ref.id == absentLayer {
				// no node holds it: needed, never present (mergeSource counted it once)
			} else if s.seen[ref.id] == s.generation {
				continue
			} else {
				s.seen[ref.id] = s.generation
			}
			s.layers = append(s.layers, ref)
			sum, carry := bits.Add64(total, uint64(ref.sizeBytes), 0)
			overflow = overflow || carry != 0 || sum > math.MaxInt64
			total = sum
		}
	}
	p.LayerCount = len(s.layers)
	if overflow || total == 0 {
		return p
	}
	p.totalBytes = int64(total)
	var counts []bool
	allCounted := true
	if spread != nil && spread.Counts != nil && spread.Nodes > 0 {
		counts, allCounted = ix.spreadCounts(spread, p.names)
	}
	// holders are live nodes only (remove drops a node from them): with no live node
	// stale and every one counted, a layer's counted holders are all of them, and the
	// pass that counts them (the larger part of Prepare on a large cluster) is skipped
	everyHolderCounts := staleNodes == 0 && allCounted
	for _, ref := range s.layers {
		if ref.id == absentLayer {
			continue
		}
		holders := ix.layers[ref.id].holders
		weight := 0.0
		if spread != nil && spread.Nodes > 0 {
			counted := len(holders)
			if !everyHolderCounts {
				counted = countedHolders(holders, p.terms, counts)
			}
			weight = spreadWeight(ref.sizeBytes, counted, spread.Nodes)
		}
		for _, holder := range holders {
			terms := &p.terms[holder]
			if terms.PresentBytes == staleNode {
				continue // scores 0 (Stale) whatever it holds
			}
			terms.PresentBytes += ref.sizeBytes // within total, which fits
			terms.WeightedBytes += weight
		}
	}
	return p
}

// countedHolders is how many of holders count for the spread: fresh at the cycle's time
// (not marked stale in terms) and, with counts, in the scheduler's snapshot.
func countedHolders(holders []int32, terms []Terms, counts []bool) int {
	counted := 0
	for _, holder := range holders {
		if terms[holder].PresentBytes != staleNode && (counts == nil || counts[holder]) {
			counted++
		}
	}
	return counted
}

// markStale marks, in terms by node id, the nodes whose inventory does not count at now
// (observed longer than maxAge ago, or undated, under a bound; a free id always), and
// says how many live nodes it marked.
func (ix *Index) markStale(terms []Terms, now time.Time, maxAge time.Duration) int {
	cutoff := int64(math.MinInt64)
	if maxAge > 0 {
		// now - observed <= maxAge, as nodeEntry.fresh says, is observed >= now - maxAge
		cutoff = clampedNanos(now.Add(-maxAge))
	}
	marked := 0
	for id, observed := range ix.observed {
		live := ix.nodes[id].live
		if observed < cutoff || (maxAge > 0 && observed == undatedNanos) || !live {
			terms[id].PresentBytes = staleNode
			if live {
				marked++
			}
		}
	}
	return marked
}

// clampedNanos is t in Unix nanoseconds, held within int64 (past 2262 or before 1678,
// which no honest agent writes, the nearest end: the order against any cutoff is kept).
func clampedNanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64+1)):
		return math.MinInt64 + 1
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// observedNanos is an inventory's observation time as markStale reads it.
func observedNanos(observedAt time.Time) int64 {
	if observedAt.IsZero() {
		return undatedNanos
	}
	return clampedNanos(observedAt)
}

// nameTable is the name table of the index's current nodes, rebuilt when they changed
// since the last one (a node came, went, or was refused): called under the read lock.
func (ix *Index) nameTable() *NameTable {
	ix.namesMu.Lock()
	defer ix.namesMu.Unlock()
	if ix.names != nil && ix.names.version == ix.namesVersion {
		return ix.names
	}
	ids := make(map[string]int32, len(ix.nodeID)+len(ix.refused))
	for name, id := range ix.nodeID {
		ids[name] = id
	}
	for name := range ix.refused {
		ids[name] = refusedNode
	}
	ix.names = &NameTable{version: ix.namesVersion, ids: ids}
	return ix.names
}

// spreadCounts is, by node id, whether spread.Counts counts each node, and whether it
// counts every live one: kept while the
// snapshot (CountsVersion) and the index's nodes are the same. Called under the read
// lock.
func (ix *Index) spreadCounts(spread *Spread, names *NameTable) (counts []bool, all bool) {
	ix.namesMu.Lock()
	defer ix.namesMu.Unlock()
	if cached := ix.members; spread.CountsVersion != nil && cached != nil &&
		cached.countsVersion == spread.CountsVersion && cached.namesVersion == names.version {
		return cached.counts, cached.all
	}
	counts, all = make([]bool, len(ix.nodes)), true
	for id := range ix.nodes {
		if node := &ix.nodes[id]; node.live {
			counts[id] = spread.Counts(node.name)
			all = all && counts[id]
		}
	}
	if spread.CountsVersion != nil {
		ix.members = &spreadMembers{countsVersion: spread.CountsVersion, namesVersion: names.version, counts: counts, all: all}
	}
	return counts, all
}
