package layers

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

// IndexMemoryEnv names the JSON file BenchmarkIndexMemoryUnderHostileObjects writes its
// figures to (harness/bench/bench_index_memory.py sets it, runs the benchmark once on this tree and
// on an older one, and records both). The benchmark uses the package's exported API only
// (DecodeNodeLayerInventory, NewIndex, Upsert, Remove), so the same file measures any version.
const IndexMemoryEnv = "LAYERSCHED_INDEX_MEMORY_OUT"

// IndexFloodEnv is how many nodes flood the index with objects each just under its
// per-object cap (default 100; the benchmark gives an older version 3: at 2de96fd, 100
// such objects hold some 15 GiB).
const IndexFloodEnv = "LAYERSCHED_INDEX_MEMORY_FLOOD"

// The honest cluster the hostile objects arrive in: the extender benchmark's shape
// (harness/bench/corpus.py): 5,000 nodes of 50 images each, drawn by Zipf popularity from
// 2,000 images of 3 to 11 layers on shared bases.
const (
	honestNodes         = 5_000
	honestImagesPerNode = 50
	corpusImages        = 2_000
	corpusBases         = 40
	// hostileLayers is the CRD's cap on an image's layers (MaxLayersPerImage, spelled
	// out: older versions of the package, which the benchmark also runs, lack it).
	hostileLayers = 1_000
)

// hostileDocument is issue 30's object: 620 images of 8 one-letter names each, whose
// layers list index 0 a thousand times (1.26 MiB, schema-valid). With distinct set,
// the same object made legal: each image lists 1,000 distinct layers (290 images fit
// the same size).
func hostileDocument(node string, distinct bool) []byte {
	if distinct {
		return hostileImages(node, true, 290)
	}
	return hostileImages(node, false, 620)
}

// hostileImages is such an object of images images.
func hostileImages(node string, distinct bool, images int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"apiVersion":"layersched.io/v1alpha1","kind":"NodeLayerInventory","metadata":{"name":%q},`+
		`"runtime":"containerd://2.1.9","source":"content-store","observedAt":"2026-11-27T09:00:00Z","layers":[`, node)
	tableSize := 1
	if distinct {
		tableSize = hostileLayers
	}
	for i := 0; i < tableSize; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"digest":%q,"sizeBytes":1}`, digest(fmt.Sprint(node, "/hostile-layer-", i)))
	}
	b.WriteString(`],"images":[`)
	for i := 0; i < images; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"names":["a","b","c","d","e","f","g","h"],"digest":%q,"layers":[`, digest(fmt.Sprint(node, "/hostile-image-", i)))
		for j := 0; j < hostileLayers; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			if distinct {
				fmt.Fprint(&b, j)
			} else {
				b.WriteByte('0')
			}
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// corpus is the honest images: each a base of 2 to 4 shared layers and its own.
type corpusImage struct {
	name, digest string
	layers       []Layer
}

func honestCorpus() []corpusImage {
	random := rand.New(rand.NewPCG(20261127, 30))
	bases := make([][]Layer, corpusBases)
	for i := range bases {
		for j := 0; j < 2+random.IntN(3); j++ {
			bases[i] = append(bases[i], Layer{digest(fmt.Sprint("base-", i, "-", j)), 1_000_000 + random.Int64N(50_000_000)})
		}
	}
	images := make([]corpusImage, corpusImages)
	for i := range images {
		layers := append([]Layer(nil), bases[random.IntN(corpusBases)]...)
		for len(layers) < 3+random.IntN(9) {
			layers = append(layers, Layer{digest(fmt.Sprint("image-", i, "-", len(layers))), 1_000 + random.Int64N(30_000_000)})
		}
		images[i] = corpusImage{fmt.Sprintf("registry.example:5000/team%d/app%d:v%d", i%37, i, i%5), digest(fmt.Sprint("manifest-", i)), layers}
	}
	return images
}

// honestDocument is node n's object: 50 distinct images by Zipf popularity, named as
// kubelet lists them (repo@digest, repo:tag), in the agent's layout.
func honestDocument(images []corpusImage, n int, seed uint64) []byte {
	random := rand.New(rand.NewPCG(seed, uint64(n)))
	zipf := rand.NewZipf(random, 1.1, 1, uint64(len(images)-1))
	chosen := map[uint64]bool{}
	for len(chosen) < honestImagesPerNode {
		chosen[zipf.Uint64()] = true
	}
	type wireLayer struct {
		Digest    string `json:"digest"`
		SizeBytes int64  `json:"sizeBytes"`
	}
	type wireImage struct {
		Names  []string `json:"names"`
		Digest string   `json:"digest"`
		Layers []int    `json:"layers"`
	}
	var table []wireLayer
	index := map[string]int{}
	var entries []wireImage
	for i := range chosen {
		image := images[i]
		repo := image.name[:strings.LastIndex(image.name, ":")]
		entry := wireImage{Names: []string{repo + "@" + image.digest, image.name}, Digest: image.digest}
		for _, layer := range image.layers {
			at, ok := index[layer.Digest]
			if !ok {
				at = len(table)
				index[layer.Digest] = at
				table = append(table, wireLayer{layer.Digest, layer.SizeBytes})
			}
			entry.Layers = append(entry.Layers, at)
		}
		entries = append(entries, entry)
	}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "layersched.io/v1alpha1", "kind": "NodeLayerInventory",
		"metadata":   map[string]string{"name": fmt.Sprintf("node-%05d", n)},
		"observedAt": "2026-11-27T09:00:00Z", "layers": table, "images": entries,
	})
	if err != nil {
		panic(err)
	}
	return data
}

// heapSampler follows the heap's objects between settled measurements (runtime/metrics:
// no stop-the-world).
type heapSampler struct {
	sample []metrics.Sample
	peak   uint64
}

func newHeapSampler() *heapSampler {
	return &heapSampler{sample: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}}
}

func (h *heapSampler) observe() {
	metrics.Read(h.sample)
	if value := h.sample[0].Value.Uint64(); value > h.peak {
		h.peak = value
	}
}

// settled is the live heap once garbage is collected.
func settled() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}

func mibOf(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// apply decodes one object and gives it to the index, as the watch does (a malformed
// object removes the node's inventory).
func apply(ix *Index, data []byte) bool {
	inventory, err := DecodeNodeLayerInventory(data)
	if err != nil {
		var named struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if json.Unmarshal(data, &named) == nil {
			ix.Remove(named.Metadata.Name)
		}
		return false
	}
	ix.Upsert(inventory)
	return true
}

// BenchmarkIndexMemoryUnderHostileObjects measures the index's heap through issue 30's
// phases (honest cluster, hostile objects, a flood, the honest objects again): a memory
// measurement, so a benchmark, never a test (go test -bench
// BenchmarkIndexMemoryUnderHostileObjects -benchtime 1x). Each phase's settled and peak
// MiB are reported as metrics, and written as JSON to $LAYERSCHED_INDEX_MEMORY_OUT when set.
func BenchmarkIndexMemoryUnderHostileObjects(b *testing.B) {
	for range b.N {
		phases, version := measureIndexMemory(b)
		for _, name := range []string{"honest", "flood", "republished"} {
			phase := phases[name].(map[string]any)
			b.ReportMetric(phase["settled_mib"].(float64), name+"-settled-MiB")
		}
		out := os.Getenv(IndexMemoryEnv)
		if out == "" {
			continue
		}
		data, err := json.MarshalIndent(map[string]any{"phases": phases, "go": version}, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// measureIndexMemory runs the phases once and returns each phase's figures.
func measureIndexMemory(b *testing.B) (map[string]any, string) {
	b.Helper()
	images := honestCorpus()
	sampler := newHeapSampler()
	started := settled()
	phases := map[string]any{}
	record := func(name string, extra map[string]any) {
		live := settled()
		phase := map[string]any{"settled_mib": mibOf(live - min(live, started)), "peak_mib": mibOf(sampler.peak - min(sampler.peak, started))}
		for key, value := range extra {
			phase[key] = value
		}
		phases[name] = phase
		sampler.peak = 0
		b.Logf("%s: %v", name, phase)
	}
	ix := NewIndex(DefaultImageQuorum)
	begin := time.Now()
	for n := 0; n < honestNodes; n++ {
		apply(ix, honestDocument(images, n, 1))
		sampler.observe()
	}
	record("honest", map[string]any{"nodes": ix.Nodes(), "seconds": time.Since(begin).Seconds()})
	// the object, then two and three of them (three nodes' agents compromised)
	for k, node := range []string{"node-00000", "node-00001", "node-00002"} {
		begin = time.Now()
		document := hostileDocument(node, false)
		accepted := apply(ix, document)
		sampler.observe()
		record(fmt.Sprintf("hostile_%d", k+1), map[string]any{"accepted": accepted, "object_bytes": len(document), "seconds": time.Since(begin).Seconds()})
	}
	// the same object made legal (distinct layers), from 3 nodes
	begin = time.Now()
	decoded := 0
	for n := 0; n < 3; n++ {
		if apply(ix, hostileDocument(fmt.Sprintf("node-%05d", n), true)) {
			decoded++
		}
		sampler.observe()
	}
	record("distinct_3", map[string]any{"decoded": decoded, "nodes": ix.Nodes(), "seconds": time.Since(begin).Seconds()})
	// a flood: objects of 150 such images (charged just under the per-object cap)
	flood := 100
	if value, err := strconv.Atoi(os.Getenv(IndexFloodEnv)); err == nil {
		flood = value
	}
	begin = time.Now()
	for n := 0; n < flood; n++ {
		apply(ix, hostileImages(fmt.Sprintf("node-%05d", n), true, 150))
		sampler.observe()
	}
	record("flood", map[string]any{"flooding_nodes": flood, "nodes": ix.Nodes(), "seconds": time.Since(begin).Seconds()})
	// the flooding nodes' agents republish honest objects
	for n := 0; n < max(flood, 3); n++ {
		apply(ix, honestDocument(images, n, 1))
		sampler.observe()
	}
	record("republished", map[string]any{"nodes": ix.Nodes()})
	if used, ok := any(ix).(interface{ UsedBytes() int64 }); ok {
		phases["republished"].(map[string]any)["charged_mib"] = float64(used.UsedBytes()) / (1 << 20)
	}
	return phases, runtime.Version()
}
