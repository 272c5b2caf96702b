package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"layersched.io/kube-scheduler/pkg/layers"
)

// Media types (OCI image spec v1, Docker image manifest v2 schema 2), as the Python
// core's core/manifest.py names them.
const (
	OCIManifest            = "application/vnd.oci.image.manifest.v1+json"
	OCIIndex               = "application/vnd.oci.image.index.v1+json"
	DockerManifest         = "application/vnd.docker.distribution.manifest.v2+json"
	DockerManifestList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerSchema1          = "application/vnd.docker.distribution.manifest.v1+json"
	dockerSchema1Signed    = "application/vnd.docker.distribution.manifest.v1+prettyjws"
	schemaVersion          = 2
	schema1Version         = 1
	maxNestedErrorExamples = 8
)

// ManifestAccept is the Accept header of manifest requests: every type parsed, indexes
// too (the Python core's MANIFEST_ACCEPT, in the same order).
var ManifestAccept = strings.Join([]string{OCIManifest, DockerManifest, OCIIndex, DockerManifestList}, ", ")

// genericContentTypes say nothing about a manifest's kind: the body's mediaType decides.
var genericContentTypes = map[string]bool{"": true, "application/json": true, "application/octet-stream": true, "text/plain": true}

var (
	platformPart = regexp.MustCompile(`^[a-z0-9_]+$`)
	// digestPattern is the Python core's digest check (core/layers.py DIGEST_PATTERN).
	digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$`)
	// archAliases are spellings runtimes accept for one architecture (GOARCH names win).
	archAliases = map[string]string{"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "armhf": "arm"}
	// defaultVariants: arm64 images are v8 unless they say otherwise.
	defaultVariants = map[string]string{"arm64": "v8"}
)

// Platform is an OCI platform: os/architecture and an optional variant.
type Platform struct {
	OS, Architecture, Variant string
}

// DefaultPlatform is what is resolved for when nothing says otherwise (the Python
// core's DEFAULT_PLATFORM and the extender's --platform default).
var DefaultPlatform = Platform{OS: "linux", Architecture: "amd64"}

// ParsePlatform reads "os/arch[/variant]" ("linux/amd64", "linux/arm64/v8"), normalised.
func ParsePlatform(text string) (Platform, error) {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(text)), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Platform{}, fmt.Errorf("platform %q is malformed: write os/architecture[/variant], e.g. 'linux/amd64' or 'linux/arm64/v8'", text)
	}
	for _, part := range parts {
		if !platformPart.MatchString(part) {
			return Platform{}, fmt.Errorf("platform %q is malformed: write os/architecture[/variant], e.g. 'linux/amd64' or 'linux/arm64/v8'", text)
		}
	}
	platform := Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		platform.Variant = parts[2]
	}
	return platform.Normalized(), nil
}

// Normalized folds architecture aliases (aarch64 -> arm64) and drops a default variant.
func (p Platform) Normalized() Platform {
	arch := p.Architecture
	if alias, ok := archAliases[arch]; ok {
		arch = alias
	}
	variant := p.Variant
	if variant != "" && defaultVariants[arch] == variant {
		variant = ""
	}
	return Platform{OS: p.OS, Architecture: arch, Variant: variant}
}

// Matches says whether candidate (from an index) serves this wanted platform: os and
// architecture equal, the variant only when this platform names one.
func (p Platform) Matches(candidate Platform) bool {
	want, have := p.Normalized(), candidate.Normalized()
	if want.OS != have.OS || want.Architecture != have.Architecture {
		return false
	}
	return want.Variant == "" || want.Variant == have.Variant
}

func (p Platform) String() string {
	if p.Variant == "" {
		return p.OS + "/" + p.Architecture
	}
	return p.OS + "/" + p.Architecture + "/" + p.Variant
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	mediaType string
	digest    string
	sizeBytes int64
	platform  *Platform
}

// manifest is a parsed image manifest (layers set) or index (manifests set).
type manifest struct {
	mediaType string
	index     bool
	layers    []layers.Layer
	manifests []descriptor
}

func mediaTypeOf(contentType string) string {
	bare, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(bare))
}

// parseManifest reads a manifest or index as the Python core's parse_manifest does: the
// kind from the Content-Type when it names a manifest type, else from the document's
// mediaType, else from its shape; schema 1 refused; an image manifest listing more than
// maxLayers layers refused before any of them is read. source prefixes errors.
func parseManifest(body []byte, contentType, source string, maxLayers int) (*manifest, error) {
	var doc map[string]json.RawMessage
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	if err := decoder.Decode(&doc); err != nil || doc == nil {
		if err == nil {
			err = fmt.Errorf("not a JSON object")
		}
		return nil, manifestErrorf("%s: the manifest is not a JSON object (%v)", source, err)
	}
	kind, err := manifestKind(doc, mediaTypeOf(contentType), source)
	if err != nil {
		return nil, err
	}
	if kind == OCIIndex || kind == DockerManifestList {
		manifests, err := descriptorList(doc, "manifests", source, -1)
		if err != nil {
			return nil, err
		}
		return &manifest{mediaType: kind, index: true, manifests: manifests}, nil
	}
	if _, err := parseDescriptor(doc["config"], source+": config"); err != nil {
		return nil, err
	}
	list, err := descriptorList(doc, "layers", source, maxLayers)
	if err != nil {
		return nil, err
	}
	found := make([]layers.Layer, len(list))
	for i, d := range list {
		found[i] = layers.Layer{Digest: d.digest, SizeBytes: d.sizeBytes}
	}
	return &manifest{mediaType: kind, layers: found}, nil
}

func stringField(doc map[string]json.RawMessage, key string) (string, bool) {
	raw, ok := doc[key]
	if !ok {
		return "", false
	}
	var text string
	if json.Unmarshal(raw, &text) != nil {
		return "", false
	}
	return text, true
}

func schemaOf(doc map[string]json.RawMessage) (int64, bool) {
	var number json.Number
	if raw, ok := doc["schemaVersion"]; !ok || json.Unmarshal(raw, &number) != nil {
		return 0, false
	}
	value, err := number.Int64()
	return value, err == nil && !strings.ContainsAny(number.String(), ".eE")
}

func manifestKind(doc map[string]json.RawMessage, header, source string) (string, error) {
	field, _ := stringField(doc, "mediaType")
	field = strings.ToLower(field)
	version, integral := schemaOf(doc)
	if header == dockerSchema1 || header == dockerSchema1Signed || field == dockerSchema1 || field == dockerSchema1Signed || (integral && version == schema1Version) {
		return "", manifestErrorf("%s: is a Docker schema 1 manifest, which layersched does not read (it has no layer sizes): re-push the image with a current tool, e.g. 'skopeo copy --format v2s2' or 'docker push'", source)
	}
	if !integral || version != schemaVersion {
		written := strings.TrimSpace(string(doc["schemaVersion"]))
		if written == "" {
			written = "missing"
		}
		return "", manifestErrorf("%s: schemaVersion is %s, expected 2 (an OCI or Docker schema 2 manifest)", source, written)
	}
	known := map[string]bool{OCIManifest: true, DockerManifest: true, OCIIndex: true, DockerManifestList: true}
	if known[header] {
		return header, nil
	}
	if !genericContentTypes[header] {
		return "", manifestErrorf("%s: Content-Type %q is not a manifest type; expected one of %s", source, header, ManifestAccept)
	}
	if known[field] {
		return field, nil
	}
	if field != "" {
		return "", manifestErrorf("%s: mediaType %q is not an image manifest or index", source, field)
	}
	if _, ok := doc["manifests"]; ok {
		return OCIIndex, nil
	}
	if _, ok := doc["layers"]; ok {
		return OCIManifest, nil
	}
	return "", manifestErrorf("%s: has neither 'layers' nor 'manifests'; not an image manifest", source)
}

func descriptorList(doc map[string]json.RawMessage, key, source string, maxItems int) ([]descriptor, error) {
	var raw []json.RawMessage
	if value, ok := doc[key]; !ok || json.Unmarshal(value, &raw) != nil || raw == nil {
		return nil, manifestErrorf("%s: '%s' must be a list of descriptors", source, key)
	}
	if maxItems >= 0 && len(raw) > maxItems {
		return nil, manifestErrorf("%s: the manifest lists %d layers, more than the %d an image may have (real images stop near 127, at overlayfs' stacking limit): the image or its registry is broken or hostile",
			source, len(raw), maxItems)
	}
	found := make([]descriptor, len(raw))
	for i, item := range raw {
		d, err := parseDescriptor(item, fmt.Sprintf("%s: %s[%d]", source, key, i))
		if err != nil {
			return nil, err
		}
		found[i] = d
	}
	return found, nil
}

func parseDescriptor(raw json.RawMessage, where string) (descriptor, error) {
	var doc map[string]json.RawMessage
	if raw == nil || json.Unmarshal(raw, &doc) != nil || doc == nil {
		return descriptor{}, manifestErrorf("%s: expected a descriptor object", where)
	}
	var d descriptor
	if value, ok := doc["mediaType"]; ok {
		if json.Unmarshal(value, &d.mediaType) != nil {
			return descriptor{}, manifestErrorf("%s.mediaType: expected a string", where)
		}
	}
	digest, _ := stringField(doc, "digest")
	if !digestPattern.MatchString(digest) {
		return descriptor{}, manifestErrorf("%s.digest: %s is not a digest; expected 'sha256:' followed by 64 hex digits", where, strings.TrimSpace(string(doc["digest"])))
	}
	d.digest = digest
	size, err := sizeOf(doc["size"])
	if err != nil {
		return descriptor{}, manifestErrorf("%s.size: %v", where, err)
	}
	d.sizeBytes = size
	if value, ok := doc["platform"]; ok && string(value) != "null" {
		var platform map[string]json.RawMessage
		if json.Unmarshal(value, &platform) != nil || platform == nil {
			return descriptor{}, manifestErrorf("%s.platform: expected an object", where)
		}
		osName, osOK := stringField(platform, "os")
		arch, archOK := stringField(platform, "architecture")
		if !osOK || !archOK {
			return descriptor{}, manifestErrorf("%s.platform: 'os' and 'architecture' must be strings", where)
		}
		p := Platform{OS: osName, Architecture: arch}
		if variant, ok := platform["variant"]; ok && string(variant) != "null" {
			if json.Unmarshal(variant, &p.Variant) != nil {
				return descriptor{}, manifestErrorf("%s.platform.variant: expected a string", where)
			}
		}
		d.platform = &p
	}
	return d, nil
}

// sizeOf is a layer or image size: an integer from 0 to layers.MaxSizeBytes (the Python
// core's check_size).
func sizeOf(raw json.RawMessage) (int64, error) {
	var number json.Number
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	if raw == nil || decoder.Decode(&number) != nil {
		return 0, fmt.Errorf("size %s must be a non-negative integer (bytes)", strings.TrimSpace(string(raw)))
	}
	size, err := number.Int64()
	if err != nil || size < 0 || strings.ContainsAny(number.String(), ".eE") {
		return 0, fmt.Errorf("size %s must be a non-negative integer (bytes)", number)
	}
	if size > layers.MaxSizeBytes {
		return 0, fmt.Errorf("size %d bytes is over the %d-byte cap on a layer or image: no real one is that large, so the data is wrong or hostile", size, layers.MaxSizeBytes)
	}
	return size, nil
}

// selectPlatform is the index entry a node of platform would pull: os and architecture
// equal (aliases folded), a wanted variant equal too; without a wanted variant an entry
// without one is preferred, else the first match, as runtimes do.
func selectPlatform(index *manifest, platform Platform, source string) (descriptor, error) {
	var candidates []descriptor
	for _, d := range index.manifests {
		if d.platform != nil && platform.Matches(*d.platform) {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) == 0 {
		var offered []string
		for i, d := range index.manifests {
			if i == maxNestedErrorExamples {
				offered = append(offered, "...")
				break
			}
			if d.platform == nil {
				offered = append(offered, "(no platform)")
			} else {
				offered = append(offered, d.platform.String())
			}
		}
		list := strings.Join(offered, ", ")
		if list == "" {
			list = "none"
		}
		return descriptor{}, manifestErrorf("%s: the image index has no manifest for platform %s (available: %s)", source, platform, list)
	}
	for _, d := range candidates {
		if d.platform.Normalized().Variant == "" {
			return d, nil
		}
	}
	return candidates[0], nil
}
