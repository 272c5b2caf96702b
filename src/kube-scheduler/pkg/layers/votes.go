package layers

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"time"
)

// DefaultImageQuorum is how many distinct nodes must publish the same answer for a pod
// image by default: the Python core's DEFAULT_IMAGE_QUORUM (core/votes.py).
const DefaultImageQuorum = 2

// A node's NodeLayerInventory is trusted for what the node says about itself (the layers
// it holds). It also names, for each image it holds, the image's manifest digest and
// layers, and the plugin resolves a *pod's* images from that: a claim about an image any
// node may run, so one node must not make it alone. A node publishing "nginx:1.25" as
// one huge layer would otherwise make every nginx pod score it 100 and the real holders
// 0 (issue 23). The rule is the Python core's (core/votes.py, docs/inventory.md
// "Trust model"): a pod image is matched by its LookupKey (as kubelet normalises it), and
// resolves to an answer (manifest digest, layers) only when the nodes giving that answer
// are at least the quorum AND a strict majority of the nodes publishing anything under
// that key, each with a fresh inventory (issue 30: ten honest holders outvote two liars;
// a count alone let two liars veto them). A digest-pinned image names content only the
// registry can confirm, and the plugin asks none: its answer must have no dissenting
// fresh publisher at all (issue 44: two liars beat one honest holder of a pinned image
// whenever the registry could not answer). Otherwise the image is Unknown: its layers
// count neither present nor needed (the plugin makes no registry call). A node votes once
// per (key, answer), and its votes go with its object (replaced, deleted or refused).
//
// Memory is bounded by construction (issue 30): an answer is kept once, whoever gives it
// under whichever name, keyed by a hash of its content (32 bytes, whatever the answer's
// size); a vote is two int32 ids; and every entry is charged to one node (budget.go).

// answerKey is the sha256 of an answer's content: its digest, then each layer's digest
// and size, every string length-prefixed (no crafted digest spells another answer).
type answerKey [sha256.Size]byte

func keyOf(image *NodeImage) answerKey {
	hash := sha256.New()
	var scratch [binary.MaxVarintLen64]byte
	writeString := func(text string) {
		hash.Write(scratch[:binary.PutUvarint(scratch[:], uint64(len(text)))])
		hash.Write([]byte(text))
	}
	writeString(image.Digest)
	for _, layer := range image.Layers {
		writeString(layer.Digest)
		hash.Write(scratch[:binary.PutVarint(scratch[:], layer.SizeBytes)])
	}
	var key answerKey
	hash.Sum(key[:0])
	return key
}

// answerEntry is what some nodes say an image is, kept once.
type answerEntry struct {
	key    answerKey
	digest string
	// layers are the answer's layers by the index's ids (every node giving the answer
	// holds them, so they live as long as it does), in manifest order.
	layers []layerRef
	// holders are the nodes giving this answer under any name, sorted.
	holders []int32
	charged
}

// lookupEntry is one lookup key's votes: by answer id, the nodes giving it, sorted.
type lookupEntry struct {
	name  string
	votes map[int32][]int32
	// publishers are the nodes voting anything under this key, sorted: the majority's
	// denominator.
	publishers []int32
	charged
}

// ballot is one vote of a node: an answer under a lookup key (both ids).
type ballot struct {
	lookup, answer int32
}

func ballotLess(a, b ballot) bool {
	return a.lookup < b.lookup || (a.lookup == b.lookup && a.answer < b.answer)
}

// imagePlan is one published image as the index will hold it: its answer's key and the
// lookup keys it is published under (its names' and its digest).
type imagePlan struct {
	image   *NodeImage
	key     answerKey
	lookups []string
}

// lookupKeys are the keys an image is published under: each name's LookupKey, and its
// manifest digest as written (a bare digest is no reference).
func lookupKeys(image *NodeImage) []string {
	keys := make([]string, 0, len(image.Names)+1)
	seen := make(map[string]bool, len(image.Names)+1)
	for _, name := range append(append(make([]string, 0, len(image.Names)+1), image.Names...), "") {
		key := image.Digest
		if name != "" {
			key = LookupKey(name)
		}
		if !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	return keys
}

// vote makes node id's votes those of plans (nil: none), touching only the ballots that
// changed; the cost is the node's own size. The node's layers are indexed already.
func (ix *Index) vote(id int32, plans []imagePlan) {
	node := &ix.nodes[id]
	var cast []ballot
	for i := range plans {
		answer := ix.answerOf(&plans[i], id)
		for _, name := range plans[i].lookups {
			cast = append(cast, ballot{ix.lookupOf(name, id), answer})
		}
	}
	sort.Slice(cast, func(a, b int) bool { return ballotLess(cast[a], cast[b]) })
	cast = dedupeBallots(cast)
	old := node.ballots
	// both sorted: walk them together
	i, j := 0, 0
	for i < len(old) || j < len(cast) {
		switch {
		case j == len(cast) || (i < len(old) && ballotLess(old[i], cast[j])):
			ix.withdraw(old[i], id)
			i++
		case i == len(old) || ballotLess(cast[j], old[i]):
			votes := ix.lookups[cast[j].lookup].votes
			votes[cast[j].answer] = insertSorted(votes[cast[j].answer], id)
			j++
		default:
			i++
			j++
		}
	}
	// which lookups and answers the node holds, before and after
	oldLookups, newLookups := lookupsOf(old), lookupsOf(cast)
	oldAnswers, newAnswers := answersOf(old), answersOf(cast)
	for _, l := range newLookups {
		entry := &ix.lookups[l]
		entry.publishers = insertSorted(entry.publishers, id)
	}
	for _, a := range newAnswers {
		entry := &ix.answers[a]
		entry.holders = insertSorted(entry.holders, id)
	}
	for _, l := range minus(oldLookups, newLookups) {
		ix.leaveLookup(l, id)
	}
	for _, a := range minus(oldAnswers, newAnswers) {
		ix.leaveAnswer(a, id)
	}
	if len(cast) == 0 {
		cast = nil // a node that votes for nothing keeps no array
	}
	node.ballots = cast
	node.lookups, node.answers = len(newLookups), len(newAnswers)
}

func dedupeBallots(sorted []ballot) []ballot {
	kept := sorted[:0]
	for i, b := range sorted {
		if i == 0 || b != sorted[i-1] {
			kept = append(kept, b)
		}
	}
	return append([]ballot(nil), kept...) // exactly sized: it is kept as long as the object
}

// lookupsOf and answersOf are the distinct ids of sorted ballots, sorted.
func lookupsOf(ballots []ballot) []int32 {
	var ids []int32
	for i, b := range ballots {
		if i == 0 || b.lookup != ballots[i-1].lookup {
			ids = append(ids, b.lookup)
		}
	}
	return ids
}

func answersOf(ballots []ballot) []int32 {
	ids := make([]int32, 0, len(ballots))
	for _, b := range ballots {
		ids = append(ids, b.answer)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	kept := ids[:0]
	for i, id := range ids {
		if i == 0 || id != ids[i-1] {
			kept = append(kept, id)
		}
	}
	return kept
}

// minus is what of sorted a is not in sorted b.
func minus(a, b []int32) []int32 {
	var out []int32
	j := 0
	for _, id := range a {
		for j < len(b) && b[j] < id {
			j++
		}
		if j == len(b) || b[j] != id {
			out = append(out, id)
		}
	}
	return out
}

func (ix *Index) withdraw(vote ballot, id int32) {
	votes := ix.lookups[vote.lookup].votes
	left := removeSorted(votes[vote.answer], id)
	if len(left) == 0 {
		delete(votes, vote.answer)
	} else {
		votes[vote.answer] = left
	}
}

// answerOf is the id of plan's answer, made (and charged to node id) if nobody gives it.
func (ix *Index) answerOf(plan *imagePlan, id int32) int32 {
	if a, ok := ix.answerID[plan.key]; ok {
		return a
	}
	a := slot(&ix.answers, &ix.freeAnswers)
	layers := make([]layerRef, len(plan.image.Layers))
	for i, layer := range plan.image.Layers {
		layers[i] = layerRef{id: ix.layerID[layer.Digest], sizeBytes: layer.SizeBytes}
	}
	ix.answers[a] = answerEntry{key: plan.key, digest: plan.image.Digest, layers: layers}
	ix.answerID[plan.key] = a
	ix.charge(&ix.answers[a].charged, id, answerCost(plan.image))
	return a
}

// lookupOf is the id of lookup key name, made (and charged to node id) if new.
func (ix *Index) lookupOf(name string, id int32) int32 {
	if l, ok := ix.lookupID[name]; ok {
		return l
	}
	l := slot(&ix.lookups, &ix.freeLookups)
	ix.lookups[l] = lookupEntry{name: name, votes: map[int32][]int32{}}
	ix.lookupID[name] = l
	ix.charge(&ix.lookups[l].charged, id, lookupCost(name))
	return l
}

// leaveLookup: node id votes nothing under lookup l any more; the entry goes with its
// last publisher, or its charge passes to another.
func (ix *Index) leaveLookup(l, id int32) {
	entry := &ix.lookups[l]
	if !ix.leave(&entry.publishers, &entry.charged, id) {
		return
	}
	delete(ix.lookupID, entry.name)
	*entry = lookupEntry{}
	ix.freeLookups = append(ix.freeLookups, l)
}

// leaveAnswer: node id gives answer a under no name any more.
func (ix *Index) leaveAnswer(a, id int32) {
	entry := &ix.answers[a]
	if !ix.leave(&entry.holders, &entry.charged, id) {
		return
	}
	delete(ix.answerID, entry.key)
	*entry = answerEntry{}
	ix.freeAnswers = append(ix.freeAnswers, a)
}

// Resolution is how a pod image was resolved from the nodes' votes.
type Resolution int

const (
	// Agreed: one answer has a quorum of nodes and a majority of its publishers.
	Agreed Resolution = iota
	// Unpublished: no node published the image under its lookup key.
	Unpublished
	// WithoutQuorum: nodes published it, but no answer has both a quorum and a majority
	// of them (or two answers do: a node voting twice).
	WithoutQuorum
)

// ImageLayers are the layers of pod image name when a quorum of nodes whose inventory is
// fresh at now (within maxAge; 0: no bound), and a majority of those publishing under
// its key, agree on one answer for it; otherwise nil and why not.
func (ix *Index) ImageLayers(image string, now time.Time, maxAge time.Duration) ([]Layer, Resolution) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	terms := make([]Terms, len(ix.nodes))
	ix.markStale(terms, now, maxAge)
	refs, resolution := ix.imageLayers(image, terms)
	if resolution != Agreed {
		return nil, resolution
	}
	layers := make([]Layer, len(refs))
	for i, ref := range refs {
		layers[i] = Layer{Digest: ix.layers[ref.id].digest, SizeBytes: ref.sizeBytes}
	}
	return layers, Agreed
}

// imageLayers resolves image by the votes of the nodes whose terms are not stale.
func (ix *Index) imageLayers(image string, terms []Terms) ([]layerRef, Resolution) {
	l, ok := ix.lookupID[LookupKey(image)]
	if !ok {
		return nil, Unpublished
	}
	entry := &ix.lookups[l]
	publishers := freshCount(entry.publishers, terms)
	// a majority of the fresh publishers; for a pinned image, every one of them
	needed := publishers/2 + 1
	if isPinned(image) {
		needed = publishers
	}
	agreed := int32(noLayer)
	for a, voters := range entry.votes {
		if len(voters) < ix.quorum || len(voters) < needed {
			continue // too few, even if all were fresh
		}
		fresh := freshCount(voters, terms)
		if fresh < ix.quorum || fresh < needed {
			continue
		}
		if agreed != noLayer {
			return nil, WithoutQuorum // two answers pass: a node votes for both; trust neither
		}
		agreed = a
	}
	if agreed == noLayer {
		return nil, WithoutQuorum
	}
	return ix.answers[agreed].layers, Agreed
}

// freshCount is how many of nodes are not stale in terms.
func freshCount(nodes []int32, terms []Terms) int {
	fresh := 0
	for _, id := range nodes {
		if terms[id].PresentBytes != staleNode {
			fresh++
		}
	}
	return fresh
}
