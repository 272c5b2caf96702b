package layers

import "strings"

// An ImageSource answers pod images' layers from outside the index: the plugin's
// registry resolver, which never waits (an image it has not resolved yet is queued and
// answered for a later pod). PrepareFrom merges its answers with the nodes' as the
// Python extender does for a NodeNames request (extender/_pod_layers.py
// PodLayers.resolve):
//
//  1. each image's layers as a quorum of nodes agrees on them; a digest-pinned image's
//     checked against the source's answer for the digest once it has one, which is
//     then used (a digest names its content: agreeing liars are outvoted; Disputed
//     counts a difference);
//  2. every image agreed on: those layers;
//  3. otherwise, when the source has answered for every image of the pod, every
//     image's layers from the source (FromSource counts them), as the extender
//     resolves the whole pod there;
//  4. otherwise the nodes' agreed layers alone, the other images Unknown, as without a
//     source (the source was asked for every image, so it queues what it lacks).
//
// A layer of the source's answer no node holds (absentLayer) counts in the pod's total,
// never as present.

// ImageSource answers pod images' layers without waiting.
type ImageSource interface {
	// Layers is image's layers when the source has them (ok); asking may have the source
	// fetch them in the background for a later call.
	Layers(image string) ([]Layer, bool)
}

// absentLayer marks, in a pod's layer refs, a layer of a source's answer no node holds.
const absentLayer = noLayer

// mergeSource is each image's layers by the rule above, in image order (nil: the image
// is Unknown); called under the read lock, with p's stale marks set.
func (ix *Index) mergeSource(images []string, source ImageSource, p *Prepared) [][]layerRef {
	absent := map[string]bool{}
	agreed := make([][]layerRef, len(images))
	for i, image := range images {
		refs, resolution := ix.imageLayers(image, p.terms)
		if resolution != Agreed {
			p.Unknown = append(p.Unknown, image)
			if resolution == WithoutQuorum {
				p.WithoutQuorum = append(p.WithoutQuorum, image)
			}
			continue
		}
		if strings.Contains(image, "@") && Pinned(image) { // a digest needs an "@": parse only then
			if served, ok := source.Layers(image); ok {
				p.Consulted = true
				if !ix.sameAnswer(refs, served) {
					p.Disputed++
				}
				refs = ix.refsOf(served, absent)
			} else {
				p.Consulted = true
			}
		}
		agreed[i] = refs
	}
	if len(p.Unknown) == 0 {
		return agreed
	}
	p.Consulted = true
	absent = map[string]bool{} // the served answer's own: agreed's marks are not its
	served := make([][]layerRef, len(images))
	complete := true
	for i, image := range images { // every image asked: the source queues what it lacks
		found, ok := source.Layers(image)
		if !ok {
			complete = false
			continue
		}
		served[i] = ix.refsOf(found, absent)
	}
	if !complete {
		return agreed
	}
	p.FromSource = len(images)
	p.Unknown, p.WithoutQuorum = nil, nil
	return served
}

// refsOf is a source's layers as refs: the index's id where some node holds the layer,
// absentLayer (once per pod: absent remembers it) where none does.
func (ix *Index) refsOf(found []Layer, absent map[string]bool) []layerRef {
	refs := make([]layerRef, 0, len(found))
	for _, layer := range found {
		if id, ok := ix.layerID[layer.Digest]; ok {
			refs = append(refs, layerRef{id: id, sizeBytes: layer.SizeBytes})
			continue
		}
		if absent[layer.Digest] {
			continue
		}
		absent[layer.Digest] = true
		refs = append(refs, layerRef{id: absentLayer, sizeBytes: layer.SizeBytes})
	}
	return refs
}

// sameAnswer says whether the nodes' agreed refs are served, layer by layer.
func (ix *Index) sameAnswer(refs []layerRef, served []Layer) bool {
	if len(refs) != len(served) {
		return false
	}
	for i, ref := range refs {
		if ix.layers[ref.id].digest != served[i].Digest || ref.sizeBytes != served[i].SizeBytes {
			return false
		}
	}
	return true
}
