package layers

import (
	"math"
	"math/big"
	"math/bits"
)

// MaxNodeScore is the top of the framework's score range (framework.MaxNodeScore).
const MaxNodeScore = 100

// exactFloatInts is 2^53: every integer up to it is a float64 exactly.
const exactFloatInts = 1 << 53

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
