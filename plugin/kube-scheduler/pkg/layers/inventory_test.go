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

func TestDecodeInventory(t *testing.T) {
	l1, l2 := digest("L1"), digest("L2")
	doc := document("n1",
		fmt.Sprintf(`{"digest":%q,"sizeBytes":100},{"digest":%q,"sizeBytes":0}`, l1, l2),
		`{"names":["reg:5000/img1:1"],"digest":"sha256:aa","layers":[0,1,0]},{"digest":"sha256:bb","layers":[]}`)
	inventory, err := DecodeInventory(doc)
	if err != nil {
		t.Fatal(err)
	}
	if inventory.Node != "n1" || len(inventory.Images) != 2 {
		t.Fatalf("got %+v", inventory)
	}
	// indexes resolve into the table, in manifest order, repeats kept (the table dedupes)
	want := []Layer{{l1, 100}, {l2, 0}, {l1, 100}}
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

func TestDecodeInventoryRefusesWhatTheAgentCannotHaveMeant(t *testing.T) {
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeInventory([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("error %v, want one containing %q", err, c.message)
			}
		})
	}
}

func TestObservedAtThatIsNotRFC3339IsUnknown(t *testing.T) {
	doc := strings.Replace(string(document("n1", "", "")), "2026-11-24T10:00:00Z", "yesterday", 1)
	inventory, err := DecodeInventory([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !inventory.ObservedAt.IsZero() {
		t.Errorf("observedAt %v, want zero (unknown)", inventory.ObservedAt)
	}
}

func TestLookupNames(t *testing.T) {
	cases := []struct {
		image string
		want  []string
	}{
		// no tag after the last "/": ":latest" is what kube-scheduler and the kubelet mean
		{"busybox", []string{"busybox", "busybox:latest"}},
		// a registry port is no tag
		{"reg:5000/app", []string{"reg:5000/app", "reg:5000/app:latest"}},
		{"reg:5000/app:1", []string{"reg:5000/app:1"}},
		// a digest reference is looked up by the digest alone too; its ":" is after the "/"
		{"reg:5000/app@sha256:aa", []string{"reg:5000/app@sha256:aa", "sha256:aa"}},
		{"sha256:aa", []string{"sha256:aa"}},
	}
	for _, c := range cases {
		if got := LookupNames(c.image); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("LookupNames(%q) = %v, want %v", c.image, got, c.want)
		}
	}
}
