package layers

import (
	"strconv"
	"strings"
	"time"
)

// DefaultImageQuorum is how many distinct nodes must publish the same answer for a pod
// image by default: the Python extender's DEFAULT_IMAGE_QUORUM (extender/_trust.py).
const DefaultImageQuorum = 2

// A node's NodeLayerInventory is trusted for what the node says about itself (the layers
// it holds). It also names, for each image it holds, the image's manifest digest and
// layers, and the plugin resolves a *pod's* images from that: a claim about an image any
// node may run, so one node must not make it alone. A node publishing "nginx:1.25" as
// one huge layer would otherwise make every nginx pod score it 100 and the real holders
// 0 (issue 23). The rule is the Python extender's (extender/_trust.py, docs/inventory.md
// "Trust model"): a pod image resolves to an answer (manifest digest, layers) only when
// at least quorum distinct nodes, each with a fresh inventory, publish that answer under
// one of the image's lookup names, and no other answer reaches the quorum too. Otherwise
// the image is Unknown: its layers count neither present nor needed (the plugin makes no
// registry call). A node votes once per (lookup name, answer), and its votes go with its
// object (replaced or deleted).

// answer is what some nodes say an image is, and who says it.
type answer struct {
	digest string
	layers []Layer
	// voters are the ids of the nodes giving this answer under one lookup name.
	voters map[int32]struct{}
}

// ballot is one vote of a node: an answer (by key) under a lookup name.
type ballot struct {
	lookup string
	key    string
}

// answerKey encodes (digest, layers) injectively: every string is length-prefixed, so no
// crafted digest can make two different answers share a key.
func answerKey(image *Image) string {
	var b strings.Builder
	b.Grow(len(image.Digest) + len(image.Layers)*96 + 8)
	writeField := func(text string) {
		b.WriteString(strconv.Itoa(len(text)))
		b.WriteByte(':')
		b.WriteString(text)
	}
	writeField(image.Digest)
	for _, layer := range image.Layers {
		writeField(layer.Digest)
		b.WriteString(strconv.FormatInt(layer.SizeBytes, 10))
		b.WriteByte(';')
	}
	return b.String()
}

// vote makes node id's votes those of images (nil: none), touching only the ballots that
// changed; the cost is the node's own size.
func (ix *Index) vote(id int32, images []Image) {
	node := &ix.nodes[id]
	cast := make(map[ballot]*Image, len(node.ballots))
	for i := range images {
		image := &images[i]
		key := answerKey(image)
		for _, name := range append(append([]string(nil), image.Names...), image.Digest) {
			for _, lookup := range LookupNames(name) {
				cast[ballot{lookup, key}] = image
			}
		}
	}
	kept := node.ballots[:0]
	for _, old := range node.ballots {
		if _, still := cast[old]; still {
			delete(cast, old) // already counted
			kept = append(kept, old)
			continue
		}
		ix.withdraw(old, id)
	}
	for fresh, image := range cast {
		ix.add(fresh, image, id)
		kept = append(kept, fresh)
	}
	if len(kept) == 0 {
		kept = nil // a node that votes for nothing keeps no array
	}
	node.ballots = kept
}

func (ix *Index) add(vote ballot, image *Image, id int32) {
	answers := ix.tally[vote.lookup]
	if answers == nil {
		answers = map[string]*answer{}
		ix.tally[vote.lookup] = answers
	}
	entry := answers[vote.key]
	if entry == nil {
		// a copy of its own: the tally must not keep the whole inventory it came in alive
		entry = &answer{digest: image.Digest, layers: append([]Layer(nil), image.Layers...), voters: map[int32]struct{}{}}
		answers[vote.key] = entry
	}
	entry.voters[id] = struct{}{}
}

func (ix *Index) withdraw(vote ballot, id int32) {
	answers := ix.tally[vote.lookup]
	entry := answers[vote.key]
	if entry == nil { // a bug: every vote withdrawn was cast
		return
	}
	delete(entry.voters, id)
	if len(entry.voters) == 0 {
		delete(answers, vote.key)
		if len(answers) == 0 {
			delete(ix.tally, vote.lookup)
		}
	}
}

// Resolution is how a pod image was resolved from the nodes' votes.
type Resolution int

const (
	// Agreed: exactly one answer has a quorum of nodes.
	Agreed Resolution = iota
	// Unpublished: no node published the image under any of its lookup names.
	Unpublished
	// WithoutQuorum: nodes published it, but no answer has a quorum, or two answers do.
	WithoutQuorum
)

// ImageLayers are the layers of pod image name when a quorum of nodes whose inventory is
// fresh at now (within maxAge; 0: no bound) agree on one answer for it, by name or by
// digest; otherwise nil and why not.
func (ix *Index) ImageLayers(image string, now time.Time, maxAge time.Duration) ([]Layer, Resolution) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.imageLayers(image, now, maxAge)
}

func (ix *Index) imageLayers(image string, now time.Time, maxAge time.Duration) ([]Layer, Resolution) {
	var agreed *answer
	agreedKey := ""
	published := false
	for _, lookup := range LookupNames(image) {
		answers := ix.tally[lookup]
		if len(answers) > 0 {
			published = true
		}
		for key, entry := range answers {
			if !ix.reaches(entry, now, maxAge) {
				continue
			}
			if agreed != nil && agreedKey != key {
				return nil, WithoutQuorum // two answers reach the quorum: trust neither
			}
			agreed, agreedKey = entry, key
		}
	}
	switch {
	case agreed != nil:
		return agreed.layers, Agreed
	case published:
		return nil, WithoutQuorum
	default:
		return nil, Unpublished
	}
}

// reaches says whether quorum of answer's voters have a fresh inventory (stopping there).
func (ix *Index) reaches(entry *answer, now time.Time, maxAge time.Duration) bool {
	if len(entry.voters) < ix.quorum {
		return false
	}
	fresh := 0
	for id := range entry.voters {
		if ix.nodes[id].fresh(now, maxAge) {
			fresh++
			if fresh >= ix.quorum {
				return true
			}
		}
	}
	return false
}
