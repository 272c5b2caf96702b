package layers

import "fmt"

// The index's memory is bounded by construction (issue 30: before it, one schema-valid
// 1.26 MiB object made kube-scheduler hold 308 MiB, and two got it OOM-killed at its
// 512 MiB limit, crash-looping since it relists the same objects on restart).
//
// Every entry the index keeps (a layer, an answer, a lookup key) is charged to one node
// holding it: the one that brought it, then, when that node lets go, another holder
// (so the charges always add up to what is held). A node is also charged what its own
// object keeps: its layer ids, its votes. An object is refused whole when
//   - its upper bound (every entry new) passes MaxObjectBytes: no honest object comes
//     near it; or
//   - the index would pass MaxIndexBytes: then the largest holders go first, and the
//     object itself is refused only when it would be the largest. A node charged at most
//     MaxIndexBytes / (nodes held) (its fair share) is never refused: if the total is
//     over the budget, some node is over its share and larger, and goes first. A flood
//     from a few nodes refuses those nodes, never the honest ones.
//
// A refused node scores as if it had no agent (OverBudget), until its next object fits.
//
// The constants below estimate each entry's heap bytes on amd64 (Go 1.26: a map slot,
// the struct, the slice it owns), from above: harness/bench/bench_index_memory.py measures the
// heap really held against the charge (harness/results/index_memory.json).
const (
	mib = 1 << 20
	// MaxIndexBytes is the index's budget: 5,000 nodes of the benchmark's shape (50
	// images each) are charged about 57 MiB (25 MiB of heap really held), so 128 MiB
	// holds some 11,000 such nodes, and keeps the index within a quarter of the plugin
	// scheduler's 512 MiB limit (kube-scheduler's own caches need the rest).
	MaxIndexBytes int64 = 128 * mib
	// MaxObjectBytes bounds one object's upper-bound charge (every entry new): a big real
	// node (500 images of 15 layers, kubelet reports 50) is charged ~1 MiB; the agent's
	// 1 MiB of JSON can say more only with thousands of many-layered images, which no
	// node holds. The hostile object, its repeats made distinct (290 images of
	// 1,000 layers each), is charged over 7 MiB.
	MaxObjectBytes int64 = 4 * mib

	// nodeBytes: a node's entry, its name and its map slot.
	nodeBytes = 160
	// layerBytes: a distinct layer's entry and map slot, beyond its digest's characters.
	layerBytes = 120
	// layerRefBytes: one held layer's ids (the node's sorted array and the layer's
	// holders), with append's slack.
	layerRefBytes = 16
	// answerBytes: an answer's entry and map slot (its 32-byte key twice), beyond its
	// digest and layers.
	answerBytes = 200
	// layerSlotBytes: one layer of an answer (a Layer: string header and size).
	layerSlotBytes = 24
	// lookupBytes: a lookup key's entry and map slot and its votes map, beyond its
	// characters.
	lookupBytes = 280
	// ballotBytes: one vote: the node's ballot, its id in the lookup's vote array and
	// the map slot for that answer, with slack.
	ballotBytes = 64
	// holderRefBytes: the node's id among an answer's holders or a lookup's publishers.
	holderRefBytes = 8
)

// charged is an entry's cost and who pays it.
type charged struct {
	payer     int32
	costBytes int64
}

func (ix *Index) charge(entry *charged, payer int32, cost int64) {
	entry.payer, entry.costBytes = payer, cost
	ix.nodes[payer].paidBytes += cost
	ix.usedBytes += cost
}

func (ix *Index) uncharge(entry *charged) {
	ix.nodes[entry.payer].paidBytes -= entry.costBytes
	ix.usedBytes -= entry.costBytes
}

// handOver passes entry's charge from leaving to holder when leaving paid it.
func (ix *Index) handOver(entry *charged, leaving, holder int32) {
	if entry.payer != leaving {
		return
	}
	ix.nodes[leaving].paidBytes -= entry.costBytes
	ix.nodes[holder].paidBytes += entry.costBytes
	entry.payer = holder
}

func layerCost(digest string) int64 { return layerBytes + int64(len(digest)) }
func answerCost(image *NodeImage) int64 {
	return answerBytes + int64(len(image.Digest)) + layerSlotBytes*int64(len(image.Layers))
}
func lookupCost(name string) int64 { return lookupBytes + int64(len(name)) }

// refsCost is what a node's own object keeps: its entry, layer ids and votes.
func refsCost(layers, ballots, lookups, answers int) int64 {
	return nodeBytes + layerRefBytes*int64(layers) + ballotBytes*int64(ballots) +
		holderRefBytes*int64(lookups+answers)
}

// Refusal is an object the index did not keep (or stopped keeping), and why.
type Refusal struct {
	Node string
	// Reason is ReasonObjectTooLarge or ReasonOverBudget.
	Reason string
	// ChargeBytes is what the object is (or was) charged.
	ChargeBytes int64
	// Evicted: the node's held object was dropped to make room for another node's, as
	// the largest holder when the budget ran out.
	Evicted bool
}

// Why an object is refused.
const (
	ReasonObjectTooLarge = "object_too_large"
	ReasonOverBudget     = "over_budget"
)

func (r Refusal) Error() string {
	switch {
	case r.Reason == ReasonObjectTooLarge:
		return fmt.Sprintf("node %s's %s would be charged up to %d bytes, over the %d-byte cap on one object: its agent is broken or hostile; the node scores as if it had none",
			r.Node, Kind, r.ChargeBytes, MaxObjectBytes)
	case r.Evicted:
		return fmt.Sprintf("node %s's %s (%d bytes) dropped: the index's %d-byte budget ran out and it was the largest holder; the node scores as if it had none until its object fits",
			r.Node, Kind, r.ChargeBytes, MaxIndexBytes)
	default:
		return fmt.Sprintf("node %s's %s (%d bytes) refused: the index's %d-byte budget is spent and it would be the largest holder; the node scores as if it had none until its object fits",
			r.Node, Kind, r.ChargeBytes, MaxIndexBytes)
	}
}

// plan is an inventory as the index would hold it, and what that would cost.
type plan struct {
	inventory *NodeLayerInventory
	// layers are the node's distinct layer digests.
	layers []string
	images []imagePlan
	// ballots counts the node's (lookup key, answer) votes (repeats within the object
	// included: an upper bound), lookups its distinct lookup keys.
	ballots, lookups, answers int
	// upperBytes is the charge if every entry were new.
	upperBytes int64
}

// planOf reads what inventory would hold, without touching the index and before any
// hashing: an object over MaxObjectBytes costs no more than its counting.
func planOf(inventory *NodeLayerInventory) *plan {
	p := &plan{inventory: inventory, images: make([]imagePlan, len(inventory.Images))}
	seen := map[string]bool{}
	lookups := map[string]bool{}
	for i := range inventory.Images {
		image := &inventory.Images[i]
		for _, layer := range image.Layers {
			if !seen[layer.Digest] {
				seen[layer.Digest] = true
				p.layers = append(p.layers, layer.Digest)
				p.upperBytes += layerCost(layer.Digest)
			}
		}
		p.images[i] = imagePlan{image: image, lookups: lookupKeys(image)}
		p.ballots += len(p.images[i].lookups)
		for _, name := range p.images[i].lookups {
			if !lookups[name] {
				lookups[name] = true
				p.upperBytes += lookupCost(name)
			}
		}
		p.upperBytes += answerCost(image)
	}
	p.lookups, p.answers = len(lookups), len(inventory.Images)
	p.upperBytes += refsCost(len(p.layers), p.ballots, p.lookups, p.answers)
	return p
}

// hash keys every image's answer (once the plan is known to fit an object).
func (p *plan) hash() {
	for i := range p.images {
		p.images[i].key = keyOf(p.images[i].image)
	}
}

// cost is what applying p for node id (-1: a new node) would add to the index's total,
// and the node's charge after it: the entries it brings, the ones it pays for already
// and keeps, and its own references.
func (ix *Index) cost(p *plan, id int32) (addedBytes, chargeBytes int64) {
	refs := refsCost(len(p.layers), p.ballots, p.lookups, p.answers)
	chargeBytes = refs
	addedBytes = refs
	if id >= 0 {
		addedBytes -= ix.nodes[id].refsBytes
	}
	count := func(entry *charged, exists bool, cost int64) {
		switch {
		case !exists:
			addedBytes += cost
			chargeBytes += cost
		case entry.payer == id:
			chargeBytes += cost
		}
	}
	for _, digest := range p.layers {
		l, ok := ix.layerID[digest]
		var entry *charged
		if ok {
			entry = &ix.layers[l].charged
		}
		count(entry, ok, layerCost(digest))
	}
	answers := map[answerKey]bool{}
	lookups := map[string]bool{}
	for i := range p.images {
		image := &p.images[i]
		if !answers[image.key] { // a repeated answer within the object is one entry
			answers[image.key] = true
			a, ok := ix.answerID[image.key]
			var entry *charged
			if ok {
				entry = &ix.answers[a].charged
			}
			count(entry, ok, answerCost(image.image))
		}
		for _, name := range image.lookups {
			if lookups[name] {
				continue
			}
			lookups[name] = true
			l, ok := ix.lookupID[name]
			var entry *charged
			if ok {
				entry = &ix.lookups[l].charged
			}
			count(entry, ok, lookupCost(name))
		}
	}
	return addedBytes, chargeBytes
}

// admit decides whether p may be applied for node name, dropping the largest holders
// first when the budget would be passed; the refusals say what was refused (p's node
// last, if it was).
func (ix *Index) admit(p *plan, name string) (bool, []Refusal) {
	if p.upperBytes > ix.maxObjectBytes {
		return false, []Refusal{{Node: name, Reason: ReasonObjectTooLarge, ChargeBytes: p.upperBytes}}
	}
	p.hash()
	var refused []Refusal
	for {
		id, held := ix.nodeID[name]
		if !held {
			id = -1
		}
		added, charge := ix.cost(p, id)
		if ix.usedBytes+added <= ix.maxBytes {
			return true, refused
		}
		largest, largestCharge := int32(-1), int64(-1)
		for other := range ix.nodes {
			entry := &ix.nodes[other]
			if entry.live && int32(other) != id && entry.chargeBytes() > largestCharge {
				largest, largestCharge = int32(other), entry.chargeBytes()
			}
		}
		if largest < 0 || charge >= largestCharge {
			return false, append(refused, Refusal{Node: name, Reason: ReasonOverBudget, ChargeBytes: charge})
		}
		evicted := ix.nodes[largest].name
		refused = append(refused, Refusal{Node: evicted, Reason: ReasonOverBudget, ChargeBytes: largestCharge, Evicted: true})
		ix.remove(evicted)
		ix.refuse(refused[len(refused)-1])
	}
}

// chargeBytes is what the node is charged: its references and the entries it pays for.
func (node *nodeEntry) chargeBytes() int64 {
	return node.refsBytes + node.paidBytes
}

// UsedBytes is the index's total charge (never above its budget after an Upsert).
func (ix *Index) UsedBytes() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.usedBytes
}

// Refused are the nodes whose object the index does not hold for its size, and why.
func (ix *Index) Refused() []Refusal {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]Refusal, 0, len(ix.refused))
	for _, refusal := range ix.refused {
		out = append(out, refusal)
	}
	return out
}
