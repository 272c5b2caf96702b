package layerlocality

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"

	"layersched.io/kube-scheduler/pkg/layers"
)

func digest(label string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(label)))
}

// The seed scenario's images: Img1 = L1+L2+L3, Img2 = L1+L2+L4 (bytes).
var (
	l1, l2, l3, l4 = layers.Layer{Digest: digest("L1"), SizeBytes: 40}, layers.Layer{Digest: digest("L2"), SizeBytes: 30},
		layers.Layer{Digest: digest("L3"), SizeBytes: 20}, layers.Layer{Digest: digest("L4"), SizeBytes: 10}
	img1 = layers.NodeImage{Names: []string{"reg:5000/img1:1"}, Digest: "sha256:img1", Layers: []layers.Layer{l1, l2, l3}}
	img2 = layers.NodeImage{Names: []string{"reg:5000/img2:1"}, Digest: "sha256:img2", Layers: []layers.Layer{l1, l2, l4}}
	now  = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
)

// snapshot is the scheduler's node snapshot of these names, as the plugin reads it.
func snapshot(names ...string) func() (snapshotView, error) {
	return snapshotNodes(&snapshotHandle{lister: newSnapshotLister(infosOf(names...))})
}

func errorf(format string, args ...interface{}) error {
	return fmt.Errorf(format, args...)
}

// profileUse is one profile's LayerLocality in a decoded configuration.
type profileUse struct {
	args    runtime.Object
	enabled bool
}

// plugin is LayerLocality over the seed's index: N1 holds Img1, N2 Img2, N3 nothing,
// "old" Img1 observed two hours ago; N4 (in the snapshot) published no object.
func plugin(t *testing.T, rawArgs string) *LayerLocality {
	t.Helper()
	args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(rawArgs), ContentType: runtime.ContentTypeJSON})
	if err != nil {
		t.Fatal(err)
	}
	// quorum 1 whatever the args say: each seed image is published by one node (the
	// quorum itself is pkg/layers' votes_test.go)
	index := layers.NewIndex(1)
	index.Upsert(&layers.NodeLayerInventory{Node: "N1", Images: []layers.NodeImage{img1}, ObservedAt: now})
	index.Upsert(&layers.NodeLayerInventory{Node: "N2", Images: []layers.NodeImage{img2}, ObservedAt: now})
	index.Upsert(&layers.NodeLayerInventory{Node: "N3", ObservedAt: now})
	index.Upsert(&layers.NodeLayerInventory{Node: "old", Images: []layers.NodeImage{img1}, ObservedAt: now.Add(-2 * time.Hour)})
	pl := &LayerLocality{scorer: newScorer(args, index), snapshot: snapshot("N1", "N2", "N3", "N4", "old")}
	pl.now = func() time.Time { return now }
	return pl
}

func pod(init []string, containers ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}
	for i, image := range init {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: fmt.Sprintf("i%d", i), Image: image})
	}
	for i, image := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i), Image: image})
	}
	return p
}

func score(t *testing.T, pl *LayerLocality, p *v1.Pod, nodes ...string) map[string]int64 {
	t.Helper()
	got, message := cycle(pl, p, true, nodes...)
	if message != "" {
		t.Fatal(message)
	}
	return got
}

func TestScores(t *testing.T) {
	cases := []struct {
		name string
		args string
		pod  *v1.Pod
		want map[string]int64
	}{
		{
			// t3: total 90; N1 90 -> 100; N2 L1+L2 = 70 -> floor(7000/90) = 77; N3 0;
			// N4 published nothing -> 0; "old" is 2 h old, past the default 30 min -> 0
			name: "P1-again",
			args: `{"spread": false}`,
			pod:  pod(nil, "reg:5000/img1:1"),
			want: map[string]int64{"N1": 100, "N2": 77, "N3": 0, "N4": 0, "old": 0},
		},
		{
			// without an age bound "old" counts: 100
			name: "no age bound",
			args: `{"inventoryMaxAgeSeconds": 0, "spread": false}`,
			pod:  pod(nil, "reg:5000/img1:1"),
			want: map[string]int64{"old": 100},
		},
		{
			// init container Img2, then Img1: distinct L1 L2 L4 L3 = 100 bytes;
			// N1 holds 90 -> 90, N2 80 -> 80
			name: "init containers",
			args: `{"spread": false}`,
			pod:  pod([]string{"reg:5000/img2:1"}, "reg:5000/img1:1", "reg:5000/img1:1"),
			want: map[string]int64{"N1": 90, "N2": 80},
		},
		{
			// the snapshot has 5 nodes; fresh holders only ("old" is stale): L1 and L2
			// on N1, N2 -> x2/5; L3 on N1 -> x1/5. N1: 16+12+4 = 32 -> floor(3200/90) = 35;
			// N2: 28 -> floor(2800/90) = 31
			name: "spread",
			args: `{"spread": true}`,
			pod:  pod(nil, "reg:5000/img1:1"),
			want: map[string]int64{"N1": 35, "N2": 31, "N3": 0},
		},
		{
			// issue 30: the spread is the default (the same as above)
			name: "spread by default",
			args: `{}`,
			pod:  pod(nil, "reg:5000/img1:1"),
			want: map[string]int64{"N1": 35, "N2": 31, "N3": 0},
		},
		{
			// no image known: 0 everywhere
			name: "unknown",
			args: `{"spread": false}`,
			pod:  pod(nil, "nowhere:1"),
			want: map[string]int64{"N1": 0, "N2": 0},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pl := plugin(t, c.args)
			nodes := make([]string, 0, len(c.want))
			for node := range c.want {
				nodes = append(nodes, node)
			}
			if got := score(t, pl, c.pod, nodes...); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("scores %v, want %v", got, c.want)
			}
		})
	}
}

func TestANodeWithoutInventoryCountsInTheMetric(t *testing.T) {
	pl := plugin(t, `{}`)
	missing, _ := testutil.GetCounterMetricValue(nodesWithoutInventory.WithLabelValues(ReasonMissing))
	stale, _ := testutil.GetCounterMetricValue(nodesWithoutInventory.WithLabelValues(ReasonStale))
	score(t, pl, pod(nil, "reg:5000/img1:1"), "N1", "N4", "N4", "old")
	afterMissing, _ := testutil.GetCounterMetricValue(nodesWithoutInventory.WithLabelValues(ReasonMissing))
	afterStale, _ := testutil.GetCounterMetricValue(nodesWithoutInventory.WithLabelValues(ReasonStale))
	// N4 scored twice without an object, "old" once stale, N1 not counted; cycle scores
	// each node of the snapshot twice (by its own NodeInfo's slot, and by name)
	if afterMissing-missing != 4 || afterStale-stale != 2 {
		t.Errorf("missing +%v, stale +%v; want +4, +2", afterMissing-missing, afterStale-stale)
	}
}

func TestScoreWithoutPreScoreSaysHowToFixTheConfiguration(t *testing.T) {
	pl := plugin(t, `{}`)
	_, message := cycle(pl, pod(nil, "x:1"), false, "N1")
	if !strings.Contains(message, "enable LayerLocality at preScore") {
		t.Errorf("%s: Score without PreScore said %q", frameworkRelease, message)
	}
}

func TestScoreRunsOnSixteenWorkers(t *testing.T) {
	// kube-scheduler scores nodes on 16 goroutines; each cycle here shares its state
	// between its nodes, as the framework's does
	pl := plugin(t, `{"spread": false}`)
	p := pod(nil, "reg:5000/img1:1")
	var wg sync.WaitGroup
	errors := make(chan string, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if got, message := cycle(pl, p, true, "N2", "N2", "N2", "N2", "N2"); got["N2"] != 77 {
					errors <- fmt.Sprintf("N2 scored %d (%s)", got["N2"], message)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errors)
	for err := range errors {
		t.Error(err)
	}
}

func TestDecodeArgs(t *testing.T) {
	cases := []struct {
		name, raw, contentType, message string
		want                            Args
	}{
		// issue 30: the spread is on unless the args turn it off
		{name: "defaults", raw: ``, want: Args{Strategy: StrategyLayerLocality, Spread: boolp(true)}},
		{name: "every field", raw: `{"strategy":"layer-locality","spread":false,"inventoryMaxAgeSeconds":0,
			"inventorySyncTimeoutSeconds":5,"kubeConfigPath":"/etc/k"}`,
			want: Args{Strategy: StrategyLayerLocality, Spread: boolp(false), KubeConfigPath: "/etc/k"}},
		{name: "yaml", raw: "spread: true\n", contentType: runtime.ContentTypeYAML,
			want: Args{Strategy: StrategyLayerLocality, Spread: boolp(true)}},
		// strict: a misspelt field is named, not ignored
		{name: "unknown field", raw: `{"spred": true}`, message: `unknown field "spred"`},
		{name: "other strategy", raw: `{"strategy":"pull-time"}`, message: `strategy: Unsupported value: "pull-time"`},
		{name: "negative age", raw: `{"inventoryMaxAgeSeconds":-1}`, message: "inventoryMaxAgeSeconds: Invalid value: -1"},
		{name: "age past a week", raw: `{"inventoryMaxAgeSeconds":604801}`, message: "between 0 and 604800"},
		{name: "sync past 10 min", raw: `{"inventorySyncTimeoutSeconds":601}`, message: "inventorySyncTimeoutSeconds"},
		// a quorum of 0 would resolve an image nobody published: refused
		{name: "quorum 0", raw: `{"imageQuorum":0}`, message: "imageQuorum: Invalid value: 0"},
		{name: "quorum 3", raw: `{"imageQuorum":3}`, want: Args{Strategy: StrategyLayerLocality, Spread: boolp(true), ImageQuorum: int64p(3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(c.raw), ContentType: c.contentType})
			if c.message != "" {
				if err == nil || !strings.Contains(err.Error(), c.message) {
					t.Fatalf("error %v, want one containing %q", err, c.message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantQuorum := DefaultImageQuorum
			if c.want.ImageQuorum != nil {
				wantQuorum = *c.want.ImageQuorum
			}
			if args.Strategy != c.want.Strategy || args.Spread == nil || *args.Spread != *c.want.Spread || args.KubeConfigPath != c.want.KubeConfigPath ||
				args.ImageQuorum == nil || *args.ImageQuorum != wantQuorum {
				t.Errorf("args %+v, want %+v", args, c.want)
			}
			if args.InventoryMaxAgeSeconds == nil || args.InventorySyncTimeoutSeconds == nil {
				t.Errorf("not defaulted: %+v", args)
			}
		})
	}
	// nil args: every default
	args, err := DecodeArgs(nil)
	if err != nil || *args.InventoryMaxAgeSeconds != DefaultInventoryMaxAgeSeconds || *args.InventorySyncTimeoutSeconds != DefaultInventorySyncTimeoutSeconds {
		t.Errorf("nil args: %+v, %v", args, err)
	}
}

func int64p(value int64) *int64 {
	return &value
}

// GeneratedConfigsEnv names a JSON object of KubeSchedulerConfigurations layersched's
// generator wrote (tests/integration/test_kube_scheduler_plugin.py sets it).
const GeneratedConfigsEnv = "LAYERSCHED_GENERATED_CONFIGS"

func TestArgsFromTheGenerator(t *testing.T) {
	path := os.Getenv(GeneratedConfigsEnv)
	if path == "" {
		t.Skip(GeneratedConfigsEnv + " is not set: tests/integration/test_kube_scheduler_plugin.py " +
			"writes the generator's configurations and runs this test with it")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var configs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &configs); err != nil {
		t.Fatal(err)
	}
	for name, document := range configs {
		uses, err := decodeConfig(document)
		if err != nil {
			t.Fatalf("%s: %s refuses it: %v", name, frameworkRelease, err)
		}
		if len(uses) == 0 {
			t.Errorf("%s: no pluginConfig for %s", name, Name)
		}
		for _, use := range uses {
			if _, err := DecodeArgs(use.args); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if !use.enabled {
				t.Errorf("%s: %s is not enabled at both preScore and score", name, Name)
			}
		}
	}
	t.Logf("decoded %d generated configurations", len(configs))
}

func boolp(value bool) *bool {
	return &value
}
