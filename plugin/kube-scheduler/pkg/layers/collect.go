package layers

import (
	"math"
	"math/bits"
)

// Collect is a pod's layers from its images' (perImage, in the pod's image order: init
// containers first; a nil entry contributes nothing): the distinct layers, each counted
// once at its first occurrence (the Python core's pod_layers), their total and whether it
// overflows; unknown and withoutQuorum are carried as given.
func Collect(perImage [][]Layer, unknown, withoutQuorum []string) PodLayers {
	pod := PodLayers{Unknown: unknown, WithoutQuorum: withoutQuorum}
	seen := map[string]bool{}
	for _, found := range perImage {
		for _, layer := range found {
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
