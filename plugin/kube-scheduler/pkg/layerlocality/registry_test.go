package layerlocality

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

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
		args.Registry.Platform != "linux/amd64" {
		t.Fatalf("defaults: %+v %v", args.Registry, err)
	}
	args, err = decode(`{"registry": {"enabled": true, "allowRegistries": ["10.250.61.1:5000"], "insecureRegistries": ["10.250.61.1:5000"],
		"tokenHosts": ["reg.example.com=auth.example.com"], "authFiles": ["/etc/layersched/registry/config.json"], "platform": "linux/arm64",
		"timeoutSeconds": 2, "deadlineSeconds": 5, "retries": 0, "workers": 1, "queueSize": 16, "maxCachedImages": 100,
		"maxCachedBytes": 1048576, "cacheTTLSeconds": 60, "failureTTLSeconds": 5}}`)
	if err != nil || !args.Registry.on() || args.Registry.AllowRegistries[0] != "10.250.61.1:5000" || *args.Registry.Retries != 0 {
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
		state, err := pl.prepare(p, pl.nodes, nodes)
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
