package layers

import "strings"

// defaultTag is what a reference without a tag means.
const defaultTag = "latest"

// NormalizedImageName is upstream ImageLocality's rule (and the Python core's
// normalized_image_name): append ":latest" when the name carries no tag. A tag is there
// when the last ":" comes after the last "/", so a registry port ("host:5000/app") is
// not taken for one. Nothing else is normalised (no "docker.io/library/").
func NormalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		return name + ":" + defaultTag
	}
	return name
}

// LookupNames are the keys an image is known by, in the order they are tried: the name as
// written, its normalised form when that differs, and the digest alone for a digest
// reference ("repo@sha256:..."). The Python extender's _lookup_names
// (extender/_watch.py), the same for the same name.
func LookupNames(image string) []string {
	names := make([]string, 1, 3)
	names[0] = image
	if normalized := NormalizedImageName(image); normalized != image {
		names = append(names, normalized)
	}
	if at := strings.LastIndex(image, "@"); at >= 0 {
		names = append(names, image[at+1:])
	}
	return names
}
