package layers

import (
	"regexp"
	"strings"
)

// defaultTag is what a reference without a tag means.
const defaultTag = "latest"

// The registry a name without a host means, and the prefix of its official images:
// kubelet (through the runtime) pulls "nginx:1.25" as "docker.io/library/nginx:1.25".
const (
	defaultDomain       = "docker.io"
	legacyDefaultDomain = "index.docker.io"
	officialRepoPrefix  = "library/"
)

// The Python core's reference grammar (core/reference.py, docker/distribution's rules),
// the same expressions: a name either side refuses is matched as written.
var (
	pathComponentPattern = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	tagPattern           = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	domainPattern        = regexp.MustCompile(`^(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$`)
)

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

// LookupKey is the one key an image name is matched by between a pod and the nodes'
// published images, as kubelet and the runtime normalise it (the Python core's
// lookup_key, the same for the same name): a digest reference is its digest alone (the
// content, whatever the repository or tag says: "nginx:1.25@sha256:…" and the runtime's
// "docker.io/library/nginx@sha256:…" are one image); any other is its canonical form,
// host, repository and tag ("nginx:1.25" is "docker.io/library/nginx:1.25", "busybox" is
// "docker.io/library/busybox:latest"). A name that is no valid reference is matched as
// upstream's ImageLocality matches it (NormalizedImageName).
func LookupKey(name string) string {
	domain, path, tag, digest, ok := parseReference(name)
	switch {
	case !ok:
		return NormalizedImageName(name)
	case digest != "":
		return digest
	case tag == "":
		tag = defaultTag
	}
	return domain + "/" + path + ":" + tag
}

// isPinned is whether name names its content by digest ("repo@sha256:…"), as the Python
// core's is_pinned: a name no parser accepts pins nothing.
func isPinned(name string) bool {
	_, _, _, digest, ok := parseReference(name)
	return ok && digest != ""
}

// Reference is a parsed image reference, as the Python core's ImageReference holds it:
// the registry's domain ("docker.io" for a name without one), the repository path
// ("library/nginx" for "nginx"), the tag and the digest as written ("" when absent).
type Reference struct {
	Domain, Path, Tag, Digest string
}

// ParseReference parses "[domain/]path[:tag][@digest]" by docker/distribution's rules
// (the Python core's ImageReference.parse); ok is false where that raises.
func ParseReference(text string) (ref Reference, ok bool) {
	ref.Domain, ref.Path, ref.Tag, ref.Digest, ok = parseReference(text)
	return ref, ok
}

// Name is what to ask a registry for: the digest when one pins the reference, else
// the tag (default "latest"), the Python core's ImageReference.reference.
func (r Reference) Name() string {
	switch {
	case r.Digest != "":
		return r.Digest
	case r.Tag != "":
		return r.Tag
	}
	return defaultTag
}

// Canonical is the fully qualified form ("docker.io/library/nginx:latest"), the Python
// core's ImageReference.canonical.
func (r Reference) Canonical() string {
	name := r.Domain + "/" + r.Path
	switch {
	case r.Digest != "" && r.Tag != "":
		return name + ":" + r.Tag + "@" + r.Digest
	case r.Digest != "":
		return name + "@" + r.Digest
	case r.Tag != "":
		return name + ":" + r.Tag
	}
	return name + ":" + defaultTag
}

// Pinned says whether name names its content by digest ("repo@sha256:..."): immutable.
// A name no parser accepts pins nothing (the Python core's is_pinned).
func Pinned(name string) bool {
	_, _, _, digest, ok := parseReference(name)
	return ok && digest != ""
}

// parseReference splits "[domain/]path[:tag][@digest]" as the Python core's
// ImageReference.parse does; ok is false where it raises.
func parseReference(text string) (domain, path, tag, digest string, ok bool) {
	if text == "" || strings.TrimSpace(text) != text {
		return "", "", "", "", false
	}
	if before, after, found := strings.Cut(text, "@"); found {
		if !digestPattern.MatchString(after) {
			return "", "", "", "", false
		}
		text, digest = before, after
	}
	if colon := strings.LastIndex(text, ":"); colon > strings.LastIndex(text, "/") {
		text, tag = text[:colon], text[colon+1:]
		if !tagPattern.MatchString(tag) {
			return "", "", "", "", false
		}
	}
	first, rest, slashed := strings.Cut(text, "/")
	if slashed && (strings.Contains(first, ".") || strings.Contains(first, ":") || first == "localhost" || strings.ToLower(first) != first) {
		domain, path = first, rest
		if !domainPattern.MatchString(domain) {
			return "", "", "", "", false
		}
	} else {
		domain, path = defaultDomain, text
	}
	if domain == legacyDefaultDomain {
		domain = defaultDomain
	}
	if domain == defaultDomain && !strings.Contains(path, "/") {
		path = officialRepoPrefix + path
	}
	if path == "" {
		return "", "", "", "", false
	}
	for _, component := range strings.Split(path, "/") {
		if !pathComponentPattern.MatchString(component) {
			return "", "", "", "", false
		}
	}
	return domain, path, tag, digest, true
}
