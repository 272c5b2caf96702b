package layers

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"
)

// digest is a well-formed sha256 digest made from a short label.
func digest(label string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(label)))
}

// document is a NodeLayerInventory as an agent publishes it.
func document(node string, layers string, images string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"layersched.io/v1alpha1","kind":"NodeLayerInventory",
		"metadata":{"name":%q,"resourceVersion":"7"},"runtime":"containerd://1.6.20",
		"source":"content-store","observedAt":"2026-11-24T10:00:00Z","truncated":false,
		"layers":[%s],"images":[%s]}`, node, layers, images))
}

func TestDecodeNodeLayerInventory(t *testing.T) {
	l1, l2 := digest("L1"), digest("L2")
	doc := document("n1",
		fmt.Sprintf(`{"digest":%q,"sizeBytes":100},{"digest":%q,"sizeBytes":0}`, l1, l2),
		`{"names":["reg:5000/img1:1"],"digest":"sha256:aa","layers":[1,0]},{"digest":"sha256:bb","layers":[]}`)
	inventory, err := DecodeNodeLayerInventory(doc)
	if err != nil {
		t.Fatal(err)
	}
	if inventory.Node != "n1" || len(inventory.Images) != 2 {
		t.Fatalf("got %+v", inventory)
	}
	// indexes resolve into the table, in manifest order
	want := []Layer{{l2, 0}, {l1, 100}}
	if fmt.Sprint(inventory.Images[0].Layers) != fmt.Sprint(want) {
		t.Errorf("layers %v, want %v", inventory.Images[0].Layers, want)
	}
	if inventory.Images[1].Names != nil || len(inventory.Images[1].Layers) != 0 {
		t.Errorf("an image without names or layers: %+v", inventory.Images[1])
	}
	if !inventory.ObservedAt.Equal(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("observedAt %v", inventory.ObservedAt)
	}
}

func TestDecodeNodeLayerInventoryRefusesWhatTheAgentCannotHaveMeant(t *testing.T) {
	l1 := digest("L1")
	layer := func(size string) string { return fmt.Sprintf(`{"digest":%q,"sizeBytes":%s}`, l1, size) }
	image := func(layers string) string { return `{"names":["a"],"digest":"sha256:aa","layers":[` + layers + `]}` }
	cases := []struct {
		name, doc, message string
	}{
		{"no name", `{"metadata":{},"layers":[],"images":[]}`, "without metadata.name"},
		{"not an object", `[1,2]`, "decoding"},
		{"bad digest", string(document("n1", `{"digest":"sha256:xyz","sizeBytes":1}`, "")), `layers[0].digest is "sha256:xyz"`},
		{"missing digest", string(document("n1", `{"sizeBytes":1}`, "")), "layers[0].digest is nothing"},
		{"negative size", string(document("n1", layer("-1"), "")), "layers[0].sizeBytes"},
		// the Python core refuses floats, as JSON numbers with a fraction or exponent are
		{"float size", string(document("n1", layer("1.0"), "")), "must be a non-negative integer"},
		{"exponent size", string(document("n1", layer("1e3"), "")), "must be a non-negative integer"},
		{"quoted size", string(document("n1", layer(`"12"`), "")), "must be a non-negative integer"},
		{"missing size", string(document("n1", fmt.Sprintf(`{"digest":%q}`, l1), "")), "sizeBytes"},
		// 1 TiB + 1: over the Python core's cap, so both refuse the object (issue 23)
		{"size over 1 TiB", string(document("n1", layer("1099511627777"), "")), "over the 1099511627776-byte cap"},
		{"index out of range", string(document("n1", layer("1"), image("1"))), "images[0].layers[0] = 1: not an index into layers (0..0)"},
		{"negative index", string(document("n1", layer("1"), image("-1"))), "not an index"},
		{"boolean index", string(document("n1", layer("1"), image("true"))), "not an index"},
		{"no image digest", string(document("n1", layer("1"), `{"names":["a"],"layers":[0]}`)), "images[0].digest is missing"},
		{"names not strings", string(document("n1", layer("1"), `{"names":[1],"digest":"d","layers":[0]}`)), "decoding"},
		// issue 30: the hostile object listed index 0 a thousand times per image; every
		// repeat was a layer slot copied into every answer it voted for
		{"repeated index", string(document("n1", layer("1"), image("0,0"))), "images[0].layers[1] = 0 repeats layers[0]"},
		{"names over the cap", string(document("n1", layer("1"), `{"names":["a","b","c","d","e","f","g","h","i"],"digest":"d","layers":[0]}`)),
			"images[0].names has 9 names, over the cap of 8"},
		{"layers over the cap", string(document("n1", manyLayers(MaxLayersPerImage+1), image(indexes(MaxLayersPerImage+1)))),
			"images[0].layers has 1001 layers, over the cap of 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeNodeLayerInventory([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("error %v, want one containing %q", err, c.message)
			}
		})
	}
}

func TestObservedAtThatIsNotRFC3339IsUnknown(t *testing.T) {
	doc := strings.Replace(string(document("n1", "", "")), "2026-11-24T10:00:00Z", "yesterday", 1)
	inventory, err := DecodeNodeLayerInventory([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !inventory.ObservedAt.IsZero() {
		t.Errorf("observedAt %v, want zero (unknown)", inventory.ObservedAt)
	}
}

// manyLayers is a layer table of count distinct layers; indexes lists 0..count-1.
func manyLayers(count int) string {
	parts := make([]string, count)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"digest":%q,"sizeBytes":1}`, digest(fmt.Sprint("layer", i)))
	}
	return strings.Join(parts, ",")
}

func indexes(count int) string {
	parts := make([]string, count)
	for i := range parts {
		parts[i] = fmt.Sprint(i)
	}
	return strings.Join(parts, ",")
}

func TestLookupKey(t *testing.T) {
	pinned := digest("nginx manifest")
	cases := []struct {
		image, want string
	}{
		// issue 30: kubelet pulls "nginx:1.25" as the runtime lists it
		{"nginx:1.25", "docker.io/library/nginx:1.25"},
		{"docker.io/library/nginx:1.25", "docker.io/library/nginx:1.25"},
		{"index.docker.io/library/nginx:1.25", "docker.io/library/nginx:1.25"},
		// no tag: ":latest"; a user's repository on Docker Hub has no "library/"
		{"busybox", "docker.io/library/busybox:latest"},
		{"someone/app", "docker.io/someone/app:latest"},
		// a registry port is no tag; localhost and a dotted first part are hosts
		{"reg:5000/app", "reg:5000/app:latest"},
		{"reg:5000/app:1", "reg:5000/app:1"},
		{"localhost/app", "localhost/app:latest"},
		{"ghcr.io/o/app:v2", "ghcr.io/o/app:v2"},
		// a digest reference is its digest alone, whatever repository or tag it names
		{"nginx@" + pinned, pinned},
		{"nginx:1.25@" + pinned, pinned},
		{"docker.io/library/nginx@" + pinned, pinned},
		// no reference (a malformed digest, upper case, spaces): as upstream matches it
		{"reg:5000/app@sha256:aa", "reg:5000/app@sha256:aa"},
		{"Nginx", "Nginx:latest"},
		{" nginx", " nginx:latest"},
		// a bare digest is no pod image: it parses as a repository "sha256" and a tag
		{"sha256:aa", "docker.io/library/sha256:aa"},
	}
	for _, c := range cases {
		if got := LookupKey(c.image); got != c.want {
			t.Errorf("LookupKey(%q) = %q, want %q", c.image, got, c.want)
		}
	}
}
