package layers

// The in-flight rule: a pod's estimated start on a node, the pulls in flight there
// counted. This is a port of the Python core's layersched.core.inflight (node_backlog,
// start_cost_s) and of its strategy's mapping (pull-time's ratio), held to it by
// TestInFlightParityWithThePythonCore on vectors the Python core writes
// (docs/in-flight.md has the formula and why each term).
//
// Every float operation is done in the Python core's order. A product that feeds an
// addition is converted explicitly (float64(a*b)): the Go spec lets a compiler fuse
// x*y+z into one rounding (FMA, as on arm64), which Python never does; an explicit
// conversion rounds the product first.

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// PullMode is how a node's kubelet pulls images.
type PullMode string

const (
	// Serial: one pull at a time (serializeImagePulls: true, the kubelet's default).
	Serial PullMode = "serial"
	// Parallel: pulls share the link (serializeImagePulls: false).
	Parallel PullMode = "parallel"
)

// Bounds and defaults of the rule (the Python core's, by the same names).
const (
	// BitsPerByte converts a link's bits per second to bytes.
	BitsPerByte = 8
	// DefaultMaxPendingAgeSeconds: a pending pull stops counting this long after its bind.
	DefaultMaxPendingAgeSeconds = 600.0
	// MaxPendingPullsPerNode are counted per node, the earliest bound first.
	MaxPendingPullsPerNode = 64
	// MaxLayersPerPendingPod are counted per pending pod, the first ones.
	MaxLayersPerPendingPod = 128
	// DefaultNewBytesWeight is how much the link time of the pod's own new bytes counts
	// again, for the later pods on the node.
	DefaultNewBytesWeight = 0.25
	// DefaultOverheadSeconds is the start cost added to every estimate.
	DefaultOverheadSeconds = 1.0
	// DefaultBandwidthBitsPerS is a node's link when no label or annotation says.
	DefaultBandwidthBitsPerS = 100_000_000.0
	// BandwidthKey is the node label (preferred) or annotation carrying its link rate.
	BandwidthKey = "layersched.io/bandwidth-bits-per-s"
)

// PendingPull is a pod bound (or assumed) to a node whose containers have not started.
type PendingPull struct {
	// Key identifies the pod (its uid) and orders pulls bound at the same instant.
	Key string
	// BoundAt is when it was bound, in seconds on the clock now is on.
	BoundAt float64
	// Layers are its distinct layers.
	Layers []Layer
}

// Backlog is a node's pending pulls summed up at the last one's bind.
type Backlog struct {
	// Since is when the last counted pull was bound; BacklogBytes what was still to
	// come right after it (W).
	Since        float64
	BacklogBytes float64
	// EnqueuedBytes (E) are the new bytes the counted pulls brought in all, Pulls (k)
	// the pulls that brought any.
	EnqueuedBytes int64
	Pulls         int
	// Arriving are the layers on their way: digest -> size.
	Arriving map[string]int64
	// Expires is when the earliest counted pull stops counting (+Inf: none counted).
	Expires float64
}

// Idle is a node without pending pulls.
var Idle = Backlog{Expires: math.Inf(1)}

// Remaining is W(now): the bytes still to come at now.
func (b *Backlog) Remaining(bytesPerS, now float64) float64 {
	if b.Pulls == 0 {
		return 0
	}
	return math.Max(0, b.BacklogBytes-float64(bytesPerS*(now-b.Since)))
}

// CountedPulls are the pulls the rule counts at now, in bound order (key breaks ties):
// bound no longer than maxAge ago (a bind time after now is taken as now), the first
// MaxPendingPullsPerNode, each with its first MaxLayersPerPendingPod layers.
func CountedPulls(pulls []PendingPull, now, maxAge float64) []PendingPull {
	fresh := make([]PendingPull, 0, len(pulls))
	for _, pull := range pulls {
		bound := math.Min(pull.BoundAt, now)
		if now-bound <= maxAge {
			layers := pull.Layers
			if len(layers) > MaxLayersPerPendingPod {
				layers = layers[:MaxLayersPerPendingPod]
			}
			fresh = append(fresh, PendingPull{Key: pull.Key, BoundAt: bound, Layers: layers})
		}
	}
	sort.Slice(fresh, func(i, j int) bool {
		if fresh[i].BoundAt != fresh[j].BoundAt {
			return fresh[i].BoundAt < fresh[j].BoundAt
		}
		return fresh[i].Key < fresh[j].Key
	})
	if len(fresh) > MaxPendingPullsPerNode {
		fresh = fresh[:MaxPendingPullsPerNode]
	}
	return fresh
}

// NodeBacklog is the node's backlog from its pending pulls, the layers it holds and its
// rate in bytes per second, as counted at now.
func NodeBacklog(pulls []PendingPull, holds func(digest string) bool, bytesPerS, now, maxAge float64) Backlog {
	counted := CountedPulls(pulls, now, maxAge)
	if len(counted) == 0 {
		return Idle
	}
	arriving := map[string]int64{}
	backlog := 0.0
	var enqueued int64
	brought := 0
	previous := counted[0].BoundAt
	for _, pull := range counted {
		backlog = math.Max(0, backlog-float64(bytesPerS*(pull.BoundAt-previous)))
		var newBytes int64
		for _, layer := range pull.Layers {
			if _, ok := arriving[layer.Digest]; ok || holds(layer.Digest) {
				continue
			}
			arriving[layer.Digest] = layer.SizeBytes
			newBytes += layer.SizeBytes
		}
		backlog = backlog + float64(newBytes)
		enqueued += newBytes
		if newBytes > 0 {
			brought++
		}
		previous = pull.BoundAt
	}
	expires := counted[0].BoundAt + maxAge
	if brought == 0 {
		return Backlog{Expires: expires}
	}
	return Backlog{
		Since: previous, BacklogBytes: backlog, EnqueuedBytes: enqueued, Pulls: brought,
		Arriving: arriving, Expires: expires,
	}
}

// SplitMasked is SplitBytes for a pod of at most MaskedLayers distinct layers whose
// holding on the node is the mask held (bit i: the node holds layers[i], as Held.Mask
// answers): one mask for the node instead of a lookup a layer; the arriving ones are
// looked up among those not held only.
func SplitMasked(layers []Layer, held uint64, b *Backlog) (heldBytes, arriving, total int64) {
	for i, layer := range layers {
		total += layer.SizeBytes
		if i < MaskedLayers && held&(1<<i) != 0 {
			heldBytes += layer.SizeBytes
		} else if _, ok := b.Arriving[layer.Digest]; ok {
			arriving += layer.SizeBytes
		}
	}
	return heldBytes, arriving, total
}

// SplitBytes are the held, arriving and total bytes of a pod's distinct layers on a node.
func SplitBytes(layers []Layer, holds func(digest string) bool, b *Backlog) (held, arriving, total int64) {
	for _, layer := range layers {
		total += layer.SizeBytes
		if holds(layer.Digest) {
			held += layer.SizeBytes
		} else if _, ok := b.Arriving[layer.Digest]; ok {
			arriving += layer.SizeBytes
		}
	}
	return held, arriving, total
}

// CostArgs are the rule's settings (the Python core's InFlightArgs).
type CostArgs struct {
	Mode            PullMode
	OverheadSeconds float64
	NewBytesWeight  float64
}

// StartCost is the cost in seconds of starting a pod on a node: its total bytes, of
// which the node holds held and has arriving arriving, against the node's backlog
// (remaining = W(now), enqueued = E, pulls = k) and its link in bits per second.
func StartCost(held, arriving, total int64, remaining float64, enqueued int64, pulls int, bitsPerS float64, args CostArgs) float64 {
	own := float64(total - held - arriving)
	left := 0.0
	if enqueued != 0 {
		left = float64(float64(arriving)*remaining) / float64(enqueued)
	}
	var wait float64
	if args.Mode == Serial {
		wait = remaining + own
	} else {
		ahead := own + left
		wait = ahead + math.Min(math.Max(0, remaining-left), float64(float64(pulls)*ahead))
	}
	start := float64(wait*BitsPerByte)/bitsPerS + args.OverheadSeconds
	return start + float64(args.NewBytesWeight*float64(float64(own*BitsPerByte)/bitsPerS))
}

// RatioScores map costs to scores as pull-time does: floor(100 * min / cost); when the
// least cost is 0, the nodes costing 0 score 100 and the others 0.
func RatioScores(costs []float64) []int64 {
	scores := make([]int64, len(costs))
	if len(costs) == 0 {
		return scores
	}
	least := costs[0]
	for _, cost := range costs[1:] {
		least = math.Min(least, cost)
	}
	for i, cost := range costs {
		switch {
		case least == 0 && cost == 0:
			scores[i] = MaxNodeScore
		case least == 0:
			scores[i] = 0
		default:
			scores[i] = int64(math.Floor(float64(MaxNodeScore*least) / cost))
		}
	}
	return scores
}

// Bandwidth is a node's link in bits per second: its label, else its annotation (the
// Python core's node_bandwidth_bits_per_s), else def. A value that is not a positive
// finite number is skipped.
func Bandwidth(labels, annotations map[string]string, def float64) float64 {
	for _, values := range []map[string]string{labels, annotations} {
		if raw, ok := values[BandwidthKey]; ok {
			if parsed, ok := ParseBandwidth(raw); ok {
				return parsed
			}
		}
	}
	return def
}

// ParseBandwidth reads a bandwidth as Python's float() does for the values a label or
// an annotation may hold: surrounding space ignored, underscores between digits
// allowed, no hexadecimal; ok only for a positive finite number.
func ParseBandwidth(raw string) (float64, bool) {
	text := strings.TrimSpace(raw)
	if strings.ContainsAny(text, "xXpP") {
		return 0, false
	}
	if strings.Contains(text, "_") {
		for i := 0; i < len(text); i++ {
			if text[i] == '_' && (i == 0 || i == len(text)-1 || !isDigit(text[i-1]) || !isDigit(text[i+1])) {
				return 0, false
			}
		}
		text = strings.ReplaceAll(text, "_", "")
	}
	value, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(value, 0) || math.IsNaN(value) || value <= 0 {
		return 0, false
	}
	return value, true
}

func isDigit(c byte) bool {
	return c >= '0' && c <= '9'
}

// ScoreCosts are the candidates' scores from their costs: RatioScores, or 0 everywhere
// for a pod whose layers weigh nothing (no preference, as layer-locality).
func ScoreCosts(costs []float64, totalBytes int64) []int64 {
	if totalBytes == 0 {
		return make([]int64, len(costs))
	}
	return RatioScores(costs)
}
