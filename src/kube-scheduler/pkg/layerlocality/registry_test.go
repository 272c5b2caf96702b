package layerlocality

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"layersched.io/kube-scheduler/pkg/layers"
	"layersched.io/kube-scheduler/pkg/registry"
	"layersched.io/kube-scheduler/pkg/resolver"
)

func TestRegistryArgs(t *testing.T) {
	decode := func(raw string) (*Args, error) {
		return DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
	}
	// omitted: off, every other field defaulted (the extender's defaults)
	args, err := decode(``)
	if err != nil || args.Registry.on() || !reflect.DeepEqual(args.Registry.AllowRegistries, DefaultAllowRegistries) ||
		*args.Registry.TimeoutSeconds != 10 || *args.Registry.DeadlineSeconds != 30 || *args.Registry.Retries != 3 ||
		*args.Registry.Workers != 4 || *args.Registry.QueueSize != 256 || *args.Registry.MaxCachedImages != 65_536 ||
		*args.Registry.MaxCachedBytes != 64<<20 || *args.Registry.CacheTTLSeconds != 300 || *args.Registry.FailureTTLSeconds != 10 ||
		*args.Registry.ResolveWaitMilliseconds != 200 || args.Registry.Platform != "linux/amd64" {
		t.Fatalf("defaults: %+v %v", args.Registry, err)
	}
	args, err = decode(`{"registry": {"enabled": true, "allowRegistries": ["10.250.61.1:5000"], "insecureRegistries": ["10.250.61.1:5000"],
		"tokenHosts": ["reg.example.com=auth.example.com"], "authFiles": ["/etc/layersched/registry/config.json"], "platform": "linux/arm64",
		"timeoutSeconds": 2, "deadlineSeconds": 5, "retries": 0, "workers": 1, "queueSize": 16, "maxCachedImages": 100,
		"maxCachedBytes": 1048576, "cacheTTLSeconds": 60, "failureTTLSeconds": 5, "resolveWaitMilliseconds": 0}}`)
	if err != nil || !args.Registry.on() || args.Registry.AllowRegistries[0] != "10.250.61.1:5000" || *args.Registry.Retries != 0 ||
		*args.Registry.ResolveWaitMilliseconds != 0 {
		t.Fatalf("every field: %+v %v", args.Registry, err)
	}
	for _, tc := range []struct{ raw, message string }{
		{`{"registry": {"enabeld": true}}`, `unknown field "enabeld"`},
		{`{"registry": {"allowRegistries": ["https://ghcr.io"]}}`, `registry.allowRegistries[0]: Invalid value: "https://ghcr.io"`},
		{`{"registry": {"insecureRegistries": ["reg/path"]}}`, `registry.insecureRegistries[0]`},
		{`{"registry": {"enabled": true, "allowRegistries": []}}`, `registry.allowRegistries: Required value`},
		{`{"registry": {"tokenHosts": ["reg.example.com"]}}`, `expected REGISTRY=HOST`},
		{`{"registry": {"authFiles": ["config.json"]}}`, `must be an absolute path`},
		{`{"registry": {"platform": "linux"}}`, `registry.platform`},
		{`{"registry": {"timeoutSeconds": 0}}`, `registry.timeoutSeconds: Invalid value: 0`},
		{`{"registry": {"workers": 65}}`, `between 1 and 64 workers`},
		{`{"registry": {"maxCachedBytes": 1024}}`, `registry.maxCachedBytes`},
		{`{"registry": {"retries": -1}}`, `registry.retries`},
		{`{"registry": {"resolveWaitMilliseconds": 5000}}`, `registry.resolveWaitMilliseconds: Invalid value: 5000: must be between 0 (never wait`},
		{`{"registry": {"resolveWaitMilliseconds": -1}}`, `and 1000 milliseconds`},
		{`{"registry": {"resolveWait": 100}}`, `resolveWaitMilliseconds}`},
	} {
		if _, err := decode(tc.raw); err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: error %v, want one saying %q", tc.raw, err, tc.message)
		}
	}
}

func node(name string, labels map[string]string, info v1.NodeSystemInfo) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: v1.NodeStatus{NodeInfo: info}}
}

func TestNodePlatforms(t *testing.T) {
	p := newPlatforms("linux/amd64")
	for _, tc := range []struct {
		node *v1.Node
		want string
	}{
		{node("a", map[string]string{osLabel: "linux", archLabel: "arm64"}, v1.NodeSystemInfo{}), "linux/arm64"},
		// no labels: the kubelet's nodeInfo; aliases folded
		{node("b", nil, v1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "aarch64"}), "linux/arm64"},
		// nothing said, or nonsense: the default
		{node("c", nil, v1.NodeSystemInfo{}), "linux/amd64"},
		{node("d", map[string]string{osLabel: "lin ux", archLabel: "x"}, v1.NodeSystemInfo{}), "linux/amd64"},
		{nil, "linux/amd64"},
	} {
		if got := p.key(tc.node); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.node, got, tc.want)
		}
	}
	// at most 8 platforms: the ninth and later are resolved in the default one
	for i := range 10 {
		p.key(node("n", map[string]string{osLabel: "linux", archLabel: fmt.Sprintf("arch%d", i)}, v1.NodeSystemInfo{}))
	}
	if got := p.key(node("n", map[string]string{osLabel: "linux", archLabel: "arch9"}, v1.NodeSystemInfo{})); got != "linux/amd64" || len(p.known) != maxPlatforms {
		t.Fatalf("%s, %d platforms known", got, len(p.known))
	}
}

// tableSource answers from a table (a missing image fails as a 404 would).
type tableSource struct {
	mu      sync.Mutex
	answers map[resolver.Key][]layers.Layer
	fetches int
}

func (s *tableSource) fetched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

func (s *tableSource) Fetch(_ context.Context, key resolver.Key) (resolver.Fetched, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetches++
	found, ok := s.answers[key]
	if !ok {
		return resolver.Fetched{}, &registry.Error{Kind: registry.RegistryFailure, Message: key.Image + ": 404 – is the image pushed?"}
	}
	return resolver.Fetched{Layers: found}, nil
}

func (s *tableSource) CurrentDigest(context.Context, resolver.Key) (string, error) {
	return "", errors.New("no HEAD here")
}

// registryPlugin is the seed's plugin (N1 Img1, N2 Img2, N3 nothing; quorum 1, no
// spread) with registry resolution over source, its workers stopped with the test.
func registryPlugin(t *testing.T, source resolver.Source) (*LayerLocality, *resolver.Resolver) {
	t.Helper()
	return registryPluginWith(t, `{"spread": false}`, source)
}

// registryPluginWith is registryPlugin with rawArgs.
func registryPluginWith(t *testing.T, rawArgs string, source resolver.Source) (*LayerLocality, *resolver.Resolver) {
	t.Helper()
	pl := plugin(t, rawArgs)
	registerRegistry()
	r := resolver.New(source, resolver.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.Start(ctx)
	pl.registry = &registrySet{resolver: r, platforms: newPlatforms("linux/amd64")}
	return pl, r
}

func TestUnpublishedImagesScoreOnceTheRegistryAnswered(t *testing.T) {
	// img3 = L1 + L5 is on no node; its registry answers (amd64); a pod of img1 (agreed
	// by N1) and img3
	l5 := layers.Layer{Digest: digest("L5"), SizeBytes: 10}
	source := &tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img3:1"}: {l1, l5},
		{Platform: "linux/amd64", Image: "reg:5000/img1:1"}: {l1, l2, l3},
	}}
	pl, r := registryPlugin(t, source)
	p := pod(nil, "reg:5000/img1:1", "reg:5000/img3:1")
	// the first pod: img3 unknown, the agreed img1 alone (total 90): N1 100, N2 77, and
	// both images queued
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 100 || got["N2"] != 77 || got["N3"] != 0 {
		t.Fatalf("first pod %v", got)
	}
	r.Wait()
	// the next: the registry's layers for the whole pod, L1 L2 L3 L5 = 100 bytes:
	// N1 90, N2 L1+L2 = 70
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 90 || got["N2"] != 70 || got["N3"] != 0 {
		t.Fatalf("next pod %v", got)
	}
	// a pod of agreed images only never asks the registry
	before := source.fetched()
	score(t, pl, pod(nil, "reg:5000/img2:1"), "N1")
	r.Wait()
	if source.fetched() != before {
		t.Fatal("an agreed image was resolved from the registry")
	}
}

func TestNodesOfAnotherPlatformAreScoredWithItsLayers(t *testing.T) {
	// img3 on arm64 is L1 + L2 (all of it on N2's L1 L2); on amd64 L4 + L5
	l5 := layers.Layer{Digest: digest("L5"), SizeBytes: 10}
	source := &tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img3:1"}: {l4, l5},
		{Platform: "linux/arm64", Image: "reg:5000/img3:1"}: {l1, l2},
	}}
	pl, r := registryPlugin(t, source)
	arm := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "N2", Labels: map[string]string{osLabel: "linux", archLabel: "arm64"}}}
	amd := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "N1"}}
	nodes := func() []*v1.Node { return []*v1.Node{amd, arm} }
	p := pod(nil, "reg:5000/img3:1")
	run := func() map[string]int64 {
		state, err := pl.prepare(context.Background(), p, snapshotSet(pl), nodes)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]int64{"N1": pl.score(state, "N1"), "N2": pl.score(state, "N2")}
	}
	// the first cycle queues img3 for each platform of the cycle's nodes
	if got := run(); got["N1"] != 0 || got["N2"] != 0 {
		t.Fatalf("before the registry answered %v", got)
	}
	r.Wait()
	// N2 (arm64) holds all of its platform's L1 L2: 100; N1 (amd64) none of L4 L5: 0
	if got := run(); got["N2"] != 100 || got["N1"] != 0 {
		t.Fatalf("by platform %v", got)
	}
}

func TestConcurrentCyclesWhileResolutionsLand(t *testing.T) {
	answers := map[resolver.Key][]layers.Layer{{Platform: "linux/amd64", Image: "reg:5000/img1:1"}: {l1, l2, l3}}
	for i := range 30 {
		answers[resolver.Key{Platform: "linux/amd64", Image: fmt.Sprintf("reg:5000/app%d:1", i)}] = []layers.Layer{l1, {Digest: digest(fmt.Sprint(i)), SizeBytes: 7}}
	}
	pl, r := registryPlugin(t, &tableSource{answers: answers})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				p := pod(nil, fmt.Sprintf("reg:5000/app%d:1", (g+i)%30), "reg:5000/img1:1")
				got, message := cycle(pl, p, true, "N1", "N2", "N3")
				if message != "" {
					t.Error(message)
					return
				}
				// whether or not app's answer is in: N1 holds everything but app's own layer
				if got["N1"] < got["N2"] || got["N3"] != 0 {
					t.Errorf("scores %v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
	r.Wait()
}

func TestOutcomeLabels(t *testing.T) {
	for _, tc := range []struct {
		outcome resolver.Outcome
		want    string
	}{
		{resolver.Outcome{}, OutcomeResolved},
		{resolver.Outcome{Unchanged: true}, OutcomeUnchanged},
		{resolver.Outcome{Err: errors.New("x"), Kept: true}, OutcomeKept},
		{resolver.Outcome{Err: &registry.Error{Kind: registry.NotAllowed}}, "not_allowed"},
		{resolver.Outcome{Err: fmt.Errorf("wrapped: %w", &registry.Error{Kind: registry.ManifestInvalid})}, "manifest_error"},
		{resolver.Outcome{Err: errors.New("other")}, OutcomeCancelled},
	} {
		if got := outcomeLabel(tc.outcome); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.outcome, got, tc.want)
		}
	}
}

// gatedSource is a tableSource whose fetches wait for gate (closed by the test, or when
// it ends); started gets each key as its fetch begins.
type gatedSource struct {
	tableSource
	gate    chan struct{}
	started chan resolver.Key
}

func (s *gatedSource) Fetch(ctx context.Context, key resolver.Key) (resolver.Fetched, error) {
	if s.started != nil {
		s.started <- key
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return resolver.Fetched{}, ctx.Err()
	}
	return s.tableSource.Fetch(ctx, key)
}

// handBound is a wait bound the test ends by hand (reach), not a timer.
type handBound struct {
	reached chan struct{}
	calls   int
}

func newHandBound() *handBound { return &handBound{reached: make(chan struct{})} }

func (b *handBound) bound(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
	b.calls++
	bounded, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-b.reached:
			cancel()
		case <-bounded.Done():
		}
	}()
	return bounded, cancel
}

func counterValue(t *testing.T, counter metrics.CounterMetric) float64 {
	t.Helper()
	value, err := testutil.GetCounterMetricValue(counter)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

// img3 = L1 + L5 on no node, img1 agreed by N1 (the seed): a pod of both.
func firstPodSource() (*gatedSource, *v1.Pod) {
	l5 := layers.Layer{Digest: digest("L5"), SizeBytes: 10}
	return &gatedSource{gate: make(chan struct{}), started: make(chan resolver.Key, 8), tableSource: tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img3:1"}: {l1, l5},
		{Platform: "linux/amd64", Image: "reg:5000/img1:1"}: {l1, l2, l3},
	}}}, pod(nil, "reg:5000/img1:1", "reg:5000/img3:1")
}

// The burst's first replica: its image is on no node and the resolver has no answer
// yet. With a wait, PreScore waits for the registry (answering here once the test lets
// it, 50 ms after the fetch began) and the first pod scores as the next pods do (N1 90,
// N2 70: the registry's L1 L2 L3 L5), not as without an answer (N1 100, N2 77).
func TestTheFirstPodOfAnUnresolvedImageWaitsForTheRegistry(t *testing.T) {
	source, p := firstPodSource()
	pl, r := registryPlugin(t, source)
	pl.registry.wait = time.Minute // the test's hand answers long before
	waits, bounded := counterValue(t, registryWaits), counterValue(t, registryWaitsBounded)
	go func() {
		<-source.started
		time.Sleep(50 * time.Millisecond) // the registry's round trip
		close(source.gate)
	}()
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 90 || got["N2"] != 70 || got["N3"] != 0 {
		t.Fatalf("first pod after the wait %v, want the registry's layers scored (N1 90, N2 70)", got)
	}
	if counterValue(t, registryWaits) != waits+1 || counterValue(t, registryWaitsBounded) != bounded {
		t.Fatalf("waits counted %v (bounded %v), want one more, not bounded", counterValue(t, registryWaits)-waits, counterValue(t, registryWaitsBounded)-bounded)
	}
	// the next pod finds the answer: no wait
	score(t, pl, p, "N1", "N2", "N3")
	if counterValue(t, registryWaits) != waits+1 {
		t.Fatal("the next pod of an answered image waited")
	}
	r.Wait()
}

// A registry slower than the bound: PreScore returns when the bound is reached (by the
// test's hand here: no timer), the pod scores as without the answer, and the next pods
// do not wait for the same resolution (which goes on and lands for them).
func TestASlowRegistryCostsOneBoundedWait(t *testing.T) {
	source, p := firstPodSource()
	pl, r := registryPlugin(t, source)
	hand := newHandBound()
	pl.registry.wait, pl.registry.bound = time.Minute, hand.bound
	waits, bounded := counterValue(t, registryWaits), counterValue(t, registryWaitsBounded)
	go func() {
		<-source.started
		close(hand.reached)
	}()
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 100 || got["N2"] != 77 {
		t.Fatalf("first pod at the bound %v, want img1 alone (N1 100, N2 77)", got)
	}
	if counterValue(t, registryWaits) != waits+1 || counterValue(t, registryWaitsBounded) != bounded+1 {
		t.Fatal("a wait to the bound not counted as one")
	}
	// the resolution is still under way; a second pod with a bound that never comes
	// returns at once (were it to wait, the test would hang), without counting a wait
	pl.registry.bound = func(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
		return context.WithCancel(ctx)
	}
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 100 {
		t.Fatalf("second pod %v", got)
	}
	if counterValue(t, registryWaits) != waits+1 {
		t.Fatal("the second pod waited for a resolution that already kept one to its bound")
	}
	close(source.gate)
	r.Wait()
	if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 90 || got["N2"] != 70 {
		t.Fatalf("once the registry answered %v", got)
	}
}

// A failed image is remembered (failureTTLSeconds): its next pods do not wait.
func TestAFailedImageDoesNotWaitTwice(t *testing.T) {
	source := &gatedSource{gate: make(chan struct{}), started: make(chan resolver.Key, 8), tableSource: tableSource{answers: map[resolver.Key][]layers.Layer{}}} // every image 404s
	pl, r := registryPlugin(t, source)
	pl.registry.wait = time.Minute
	waits := counterValue(t, registryWaits)
	go func() {
		<-source.started // the first pod waits for the fetch, which then fails
		close(source.gate)
	}()
	p := pod(nil, "reg:5000/gone:1")
	for range 5 {
		if got := score(t, pl, p, "N1", "N2", "N3"); got["N1"] != 0 {
			t.Fatalf("an image that failed scored %v", got)
		}
	}
	// One wait at most: the first pod's, which joins the fetch under way. On a loaded
	// machine the fetch may start (from the pod's own prepare), fail and be cached
	// before the first pod's Await joins it; then that pod waits for nothing either.
	if got := counterValue(t, registryWaits) - waits; got > 1 {
		t.Fatalf("%v waits for one failing image and 5 pods, want at most 1", got)
	}
	if source.fetched() != 1 {
		t.Fatalf("%d fetches, want 1", source.fetched())
	}
	r.Wait()
}

// Profiles' cycles asking for the same unresolved image at once share one resolution.
func TestConcurrentFirstPodsShareOneResolution(t *testing.T) {
	source, p := firstPodSource()
	pl, r := registryPlugin(t, source)
	pl.registry.wait = time.Minute
	var wg sync.WaitGroup
	scores := make(chan map[string]int64, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, message := cycle(pl, p, true, "N1", "N2")
			if message != "" {
				t.Error(message)
			}
			scores <- got
		}()
	}
	<-source.started
	<-source.started // img1 and img3, each once
	close(source.gate)
	wg.Wait()
	close(scores)
	for got := range scores {
		if got["N1"] != 90 || got["N2"] != 70 {
			t.Errorf("a concurrent first pod scored %v, want the registry's layers", got)
		}
	}
	r.Wait()
	if source.fetched() != 2 {
		t.Fatalf("%d fetches for 2 images and 8 pods, want 2", source.fetched())
	}
}

// Under in-flight, the burst's first replica waits for the registry too: with the
// answer, its 60 bytes are scored on each idle node (76 s each: all alike, and not 0).
func TestInFlightsFirstReplicaWaitsForTheRegistry(t *testing.T) {
	l9 := layers.Layer{Digest: digest("L9"), SizeBytes: 60}
	source := &gatedSource{gate: make(chan struct{}), started: make(chan resolver.Key, 8), tableSource: tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img9:1"}: {l9},
	}}}
	pl, r := registryPluginWith(t, `{"strategy": "in-flight", "inFlight": {"defaultBandwidthBitsPerS": 8}}`, source)
	pl.inFlight = newInFlight(pl.args.InFlight, pl.imageLayers)
	pl.registry.wait = time.Minute
	go func() {
		<-source.started
		close(source.gate)
	}()
	got := inFlightCycle(t, pl, pod(nil, "reg:5000/img9:1"), inFlightNode("N1"), inFlightNode("N2"), inFlightNode("N3"))
	// every node idle: all cost the same 76 s now that the layers are known, each scored
	// against the pod's 60 bytes rather than 0 everywhere
	if got["N1"] == 0 || got["N1"] != got["N2"] {
		t.Fatalf("first replica after the wait %v, want the layers' scores", got)
	}
	r.Wait()
}

// snapshotSet is pl's snapshot as the spread reads it.
func snapshotSet(pl *LayerLocality) func() (nodeSet, error) {
	return func() (nodeSet, error) {
		view, err := pl.snapshot()
		return view.set, err
	}
}
