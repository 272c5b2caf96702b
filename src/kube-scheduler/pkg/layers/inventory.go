// Package layers is the LayerLocality plugin's scheduler-independent core: the
// NodeLayerInventory wire format, the index every watch event updates, a pod's layers
// and the layer-locality arithmetic, the same as the Python core's
// (layersched.core.strategies.layer_locality). It imports the standard library only:
// the kube-scheduler adapter (package layerlocality) is the one part bound to a
// scheduler framework version, and package inventorywatch the one part bound to
// client-go.
package layers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// The custom resource the layersched node agents publish, one per node, named after it
// (src/layersched/core/nodelayersbuilder.py writes it, src/layersched/kube/_crd.py
// defines it, src/layersched/core/nodelayers.py reads it as this file does).
const (
	Group    = "layersched.io"
	Version  = "v1alpha1"
	Resource = "nodelayerinventories"
	Kind     = "NodeLayerInventory"
)

// MaxSizeBytes caps every layer size read, 1 TiB: the Python core's MAX_SIZE_BYTES
// (core/layers.py check_size), which parse_document applies to a NodeLayerInventory. No
// real layer is that large; the cap keeps every sum far from int64, and an object over it
// is refused whole, as the Python core refuses it.
const MaxSizeBytes int64 = 1 << 40

// Per-image bounds, the CRD's (the Python core's LIMITS, core/nodelayers.py, which the
// schema is generated from): the decoder holds an object to them as the API server does,
// so an object stored before a bound was tightened, or served by a server that skipped
// the schema, costs no more than a valid one.
const (
	// MaxLayersPerImage is LIMITS.max_layers_per_image: far past real images (~127 at most
	// under overlayfs's lower-dir limit).
	MaxLayersPerImage = 1_000
	// MaxNamesPerImage is LIMITS.max_names_per_image: kubelet keeps 5 names per image;
	// every name is a vote the index keeps, so an object may not make thousands per image.
	MaxNamesPerImage = 8
)

// digestPattern is the Python core's layer digest check (core/layers.py _DIGEST) and the
// CRD schema's pattern: an algorithm, a colon and at least 32 hex digits.
var digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$`)

// Layer is one compressed layer: its blob digest and its compressed size.
type Layer struct {
	Digest    string
	SizeBytes int64
}

// NodeImage is one image a node holds: its names, its manifest digest and its layers in
// manifest order (the Python core's layersched.core.nodeimages.NodeImage).
type NodeImage struct {
	Names  []string
	Digest string
	Layers []Layer
}

// NodeLayerInventory is one parsed NodeLayerInventory object: what a node's runtime
// holds (the Python core's layersched.core.nodelayers.NodeLayerInventory).
type NodeLayerInventory struct {
	// Node is the object's name: the node it describes.
	Node   string
	Images []NodeImage
	// ObservedAt is when the agent last read the runtime; zero when the object does not
	// say (or says it in a form that is not RFC 3339).
	ObservedAt time.Time
}

// wireNodeLayerInventory mirrors the object as the API serves it; numbers stay raw JSON so that a
// size or an index written as 1.0, 1e3 or "1" is refused, as the Python core refuses
// anything but an integer.
type wireNodeLayerInventory struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	ObservedAt string      `json:"observedAt"`
	Layers     []wireLayer `json:"layers"`
	Images     []wireImage `json:"images"`
}

type wireLayer struct {
	Digest    *string         `json:"digest"`
	SizeBytes json.RawMessage `json:"sizeBytes"`
}

type wireImage struct {
	Names  []string          `json:"names"`
	Digest *string           `json:"digest"`
	Layers []json.RawMessage `json:"layers"`
}

// DecodeNodeLayerInventory reads one NodeLayerInventory object (JSON), with the checks of the
// Python core's parse_document (core/nodelayers.py) that the CRD schema cannot express:
// an image's layer indexes must point into the node's layer table. The error names the
// node and the field, and says the agent that wrote it is at fault.
func DecodeNodeLayerInventory(data []byte) (*NodeLayerInventory, error) {
	var wire wireNodeLayerInventory
	if err := json.Unmarshal(data, &wire); err != nil {
		return nil, fmt.Errorf("decoding a %s: %v", Kind, err)
	}
	if wire.Metadata.Name == "" {
		return nil, fmt.Errorf("a %s without metadata.name: the object is named after its node", Kind)
	}
	where := fmt.Sprintf("%s %q", Kind, wire.Metadata.Name)
	table := make([]Layer, len(wire.Layers))
	for i, raw := range wire.Layers {
		if raw.Digest == nil || !digestPattern.MatchString(*raw.Digest) {
			got := "nothing"
			if raw.Digest != nil {
				got = strconv.Quote(*raw.Digest)
			}
			return nil, fmt.Errorf("%s: layers[%d].digest is %s, not a digest ('sha256:' and 64 hex digits)", where, i, got)
		}
		size, ok := integer(raw.SizeBytes)
		if !ok || size < 0 {
			return nil, fmt.Errorf("%s: layers[%d].sizeBytes %q must be a non-negative integer (bytes)", where, i, raw.SizeBytes)
		}
		if size > MaxSizeBytes {
			return nil, fmt.Errorf("%s: layers[%d].sizeBytes %d is over the %d-byte cap on a layer: no real one is that large, so the agent that wrote it is broken or hostile",
				where, i, size, MaxSizeBytes)
		}
		table[i] = Layer{Digest: *raw.Digest, SizeBytes: size}
	}
	inventory := &NodeLayerInventory{Node: wire.Metadata.Name, Images: make([]NodeImage, len(wire.Images))}
	for i, raw := range wire.Images {
		if raw.Digest == nil || *raw.Digest == "" {
			return nil, fmt.Errorf("%s: images[%d].digest is missing: the image's manifest digest", where, i)
		}
		if len(raw.Names) > MaxNamesPerImage {
			return nil, fmt.Errorf("%s: images[%d].names has %d names, over the cap of %d: the agent that wrote it is broken or hostile",
				where, i, len(raw.Names), MaxNamesPerImage)
		}
		if len(raw.Layers) > MaxLayersPerImage {
			return nil, fmt.Errorf("%s: images[%d].layers has %d layers, over the cap of %d: the agent that wrote it is broken or hostile",
				where, i, len(raw.Layers), MaxLayersPerImage)
		}
		image := NodeImage{Names: raw.Names, Digest: *raw.Digest, Layers: make([]Layer, len(raw.Layers))}
		first := make(map[int64]int, len(raw.Layers))
		for j, number := range raw.Layers {
			index, ok := integer(number)
			if !ok || index < 0 || index >= int64(len(table)) {
				return nil, fmt.Errorf(
					"%s: images[%d].layers[%d] = %s: not an index into layers (0..%d): the agent that wrote it is broken",
					where, i, j, number, len(table)-1)
			}
			if earlier, repeated := first[index]; repeated {
				return nil, fmt.Errorf(
					"%s: images[%d].layers[%d] = %d repeats layers[%d]: an image lists each distinct layer once (the agent that wrote it is broken or hostile)",
					where, i, j, index, earlier)
			}
			first[index] = j
			image.Layers[j] = table[index]
		}
		inventory.Images[i] = image
	}
	if observed, err := time.Parse(time.RFC3339, wire.ObservedAt); err == nil {
		inventory.ObservedAt = observed
	}
	return inventory, nil
}

// integer reads a JSON integer literal (no fraction, no exponent, no quotes) that fits an
// int64.
func integer(raw json.RawMessage) (int64, bool) {
	text := string(bytes.TrimSpace(raw))
	if text == "" || (text[0] != '-' && (text[0] < '0' || text[0] > '9')) {
		return 0, false
	}
	value, err := strconv.ParseInt(text, 10, 64)
	return value, err == nil
}
