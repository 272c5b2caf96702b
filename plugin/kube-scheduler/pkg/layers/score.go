package layers

import (
	"math"
	"math/big"
	"math/bits"
	"time"
)

// MaxNodeScore is the top of the framework's score range (framework.MaxNodeScore).
const MaxNodeScore = 100

// exactFloatInts is 2^53: every integer up to it is a float64 exactly.
const exactFloatInts = 1 << 53

// PodLayers is what a pod needs: its distinct layers, init containers' images first, each
// layer counted once at its first occurrence (the Python core's pod_layers).
type PodLayers struct {
	Layers []Layer
	// TotalBytes is the sum of Layers' sizes; Overflow is true when it does not fit an
	// int64 (only a hostile object says so) and the pod is then not scored.
	TotalBytes int64
	Overflow   bool
	// Unknown are the pod's images no quorum of nodes agrees on (see votes.go): the
	// plugin makes no registry call, so their layers count neither as present nor as
	// needed. WithoutQuorum are those of them some node did publish.
	Unknown       []string
	WithoutQuorum []string
}

// ResolvePod is the pod's layers from the images a quorum of agents agree on (nodes
// whose inventory is fresh at now within maxAge), looked up by name or digest as the
// Python extender's image_layers does.
func (ix *Index) ResolvePod(images []string, now time.Time, maxAge time.Duration) PodLayers {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var pod PodLayers
	seen := map[string]bool{}
	for _, image := range images {
		layers, resolution := ix.imageLayers(image, now, maxAge)
		if resolution != Agreed {
			pod.Unknown = append(pod.Unknown, image)
			if resolution == WithoutQuorum {
				pod.WithoutQuorum = append(pod.WithoutQuorum, image)
			}
			continue
		}
		for _, layer := range layers {
			if seen[layer.Digest] {
				continue
			}
			seen[layer.Digest] = true
			pod.Layers = append(pod.Layers, layer)
			sum, carry := bits.Add64(uint64(pod.TotalBytes), uint64(layer.SizeBytes), 0)
			if carry != 0 || sum > math.MaxInt64 {
				pod.Overflow = true
			}
			pod.TotalBytes = int64(sum)
		}
	}
	return pod
}

// Spread asks for upstream ImageLocality's scaling against node heating: each present
// layer counts size * holders / nodes, where nodes is the cluster's node count and
// holders the nodes that hold the layer and count (in the scheduler's snapshot, with a
// fresh inventory).
type Spread struct {
	Nodes  int
	Counts func(node string) bool
}

// Prepared is a pod ready to be scored on any node: computed once per pod (PreScore),
// read by every Score.
type Prepared struct {
	layers     []preparedLayer
	totalBytes int64
	spread     bool
}

type preparedLayer struct {
	// id is the layer's index id when some node held it at preparation (noLayer if none);
	// ids are reused, so digest tells a reused id apart.
	id        int32
	digest    string
	sizeBytes int64
	// weight is size * holders / nodes under spread.
	weight float64
}

// Skip says whether the pod scores 0 everywhere: none of its layers is known, they weigh
// nothing, or their sum overflows.
func (p *Prepared) Skip() bool {
	return p.totalBytes <= 0
}

// TotalBytes is the pod's distinct layers' bytes.
func (p *Prepared) TotalBytes() int64 {
	return p.totalBytes
}

// Prepare readies pod for scoring; spread nil scores without the spread factor, at
// time now, counting holders whose inventory is fresh within maxAge.
func (ix *Index) Prepare(pod PodLayers, spread *Spread, now time.Time, maxAge time.Duration) *Prepared {
	prepared := &Prepared{spread: spread != nil}
	if pod.Overflow || pod.TotalBytes == 0 {
		return prepared
	}
	prepared.totalBytes = pod.TotalBytes
	prepared.layers = make([]preparedLayer, len(pod.Layers))
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for i, layer := range pod.Layers {
		entry := preparedLayer{id: noLayer, digest: layer.Digest, sizeBytes: layer.SizeBytes}
		if id, ok := ix.layerID[layer.Digest]; ok {
			entry.id = id
			entry.digest = ix.layers[id].digest // the index's string: Score compares pointers
			if spread != nil && spread.Nodes > 0 {
				holders := 0
				for _, node := range ix.layers[id].holders {
					held := &ix.nodes[node]
					if held.fresh(now, maxAge) && (spread.Counts == nil || spread.Counts(held.name)) {
						holders++
					}
				}
				entry.weight = spreadWeight(layer.SizeBytes, holders, spread.Nodes)
			}
		}
		prepared.layers[i] = entry
	}
	return prepared
}

// NodeState is why a node scored what it did.
type NodeState int

const (
	// Scored: the node's inventory was read.
	Scored NodeState = iota
	// NoInventory: the node has no NodeLayerInventory (no agent, or a malformed object).
	NoInventory
	// Stale: its inventory was observed longer ago than the bound allows.
	Stale
	// OverBudget: its object was refused for its size (budget.go): too large alone, or
	// the largest when the index's budget ran out.
	OverBudget
)

// Score is the node's layer-locality score 0..100 for a prepared pod: a read-only lookup
// (safe for kube-scheduler's parallel Score workers). A node without a usable inventory
// scores 0 and says why.
func (ix *Index) Score(p *Prepared, nodeName string, now time.Time, maxAge time.Duration) (int64, NodeState) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.nodeID[nodeName]
	if !ok {
		if _, refused := ix.refused[nodeName]; refused {
			return 0, OverBudget
		}
		return 0, NoInventory
	}
	node := &ix.nodes[id]
	if !node.fresh(now, maxAge) {
		return 0, Stale
	}
	if p.Skip() {
		return 0, Scored
	}
	if p.spread {
		weighted := 0.0
		for _, layer := range p.layers {
			if ix.held(node, layer) {
				weighted += layer.weight
			}
		}
		return SpreadScore(weighted, p.totalBytes), Scored
	}
	var present int64
	for _, layer := range p.layers {
		if ix.held(node, layer) {
			present += layer.sizeBytes // <= totalBytes, which fits
		}
	}
	return PresentScore(present, p.totalBytes), Scored
}

func (ix *Index) held(node *nodeEntry, layer preparedLayer) bool {
	return layer.id != noLayer && ix.layers[layer.id].digest == layer.digest && node.holds(layer.id)
}

// PresentScore is floor(100 * present / total) in integers, the Python core's
// (MAX_NODE_SCORE * present) // total_bytes without spread; 0 when total is 0.
func PresentScore(present, total int64) int64 {
	if total <= 0 || present <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(present), MaxNodeScore)
	if hi >= uint64(total) { // only when present > total: a caller's error
		return MaxNodeScore
	}
	quotient, _ := bits.Div64(hi, lo, uint64(total))
	return clamp(int64(quotient))
}

// SpreadScore is floor(100 * weighted / total) in float64, the Python core's
// np.floor(MAX_NODE_SCORE * chosen / total_bytes) under spread.
func SpreadScore(weighted float64, total int64) int64 {
	if total <= 0 {
		return 0
	}
	return clamp(int64(math.Floor(MaxNodeScore * weighted / float64(total))))
}

// spreadWeight is size * holders / nodes as Python's int / int is: the float64 nearest to
// the exact quotient (the product is exact in float64 up to 2^53; past that, big.Rat).
func spreadWeight(sizeBytes int64, holders, nodes int) float64 {
	if holders <= 0 || nodes <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(sizeBytes), uint64(holders))
	if hi == 0 && lo <= exactFloatInts && nodes <= exactFloatInts {
		return float64(lo) / float64(nodes)
	}
	product := new(big.Int).Mul(big.NewInt(sizeBytes), big.NewInt(int64(holders)))
	weight, _ := new(big.Rat).SetFrac(product, big.NewInt(int64(nodes))).Float64()
	return weight
}

func clamp(score int64) int64 {
	if score < 0 {
		return 0
	}
	if score > MaxNodeScore {
		return MaxNodeScore
	}
	return score
}
