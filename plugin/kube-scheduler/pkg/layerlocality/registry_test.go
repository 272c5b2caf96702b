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

func TestPodLayersMergeTheRegistryAsTheExtenderDoes(t *testing.T) {
	// the seed's index at quorum 1: Img1 on N1, Img2 on N2; img3 (L1+L5) on no node
	index := layers.NewIndex(1)
	index.Upsert(&layers.NodeLayerInventory{Node: "N1", Images: []layers.NodeImage{img1}, ObservedAt: now})
	index.Upsert(&layers.NodeLayerInventory{Node: "N2", Images: []layers.NodeImage{img2}, ObservedAt: now})
	l5 := layers.Layer{Digest: digest("L5"), SizeBytes: 5}
	pinned := "reg:5000/img1@" + digest("img1-manifest")
	pinnedImage := layers.NodeImage{Names: []string{pinned}, Digest: digest("img1-manifest"), Layers: []layers.Layer{l1, l2, l3}}
	index.Upsert(&layers.NodeLayerInventory{Node: "N3", Images: []layers.NodeImage{pinnedImage}, ObservedAt: now})
	source := &tableSource{answers: map[resolver.Key][]layers.Layer{
		{Platform: "linux/amd64", Image: "reg:5000/img3:1"}: {l1, l5},
		{Platform: "linux/amd64", Image: "reg:5000/img1:1"}: {l1, l2, l3},
		// the registry serves the pinned digest as other layers than N3 claims
		{Platform: "linux/amd64", Image: pinned}: {l1, l4},
	}}
	r := resolver.New(source, resolver.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	reg := &registryLayers{resolver: r, platform: "linux/amd64"}
	resolve := func(images ...string) layers.PodLayers {
		return podLayers(index, reg, images, now, 0)
	}

	// every image agreed on: the nodes' layers, no registry call
	if got := resolve("reg:5000/img1:1"); !reflect.DeepEqual(got.Layers, []layers.Layer{l1, l2, l3}) || len(got.Unknown) != 0 {
		t.Fatalf("agreed: %+v", got)
	}
	r.Wait()
	if source.fetches != 0 {
		t.Fatalf("%d fetches for agreed images", source.fetches)
	}
	// img3 unknown: the first pod scores the agreed image's layers only (as today) and
	// queues both images; the next gets the registry's answer for the whole pod
	first := resolve("reg:5000/img1:1", "reg:5000/img3:1")
	if !reflect.DeepEqual(first.Layers, []layers.Layer{l1, l2, l3}) || !reflect.DeepEqual(first.Unknown, []string{"reg:5000/img3:1"}) {
		t.Fatalf("first pod: %+v", first)
	}
	r.Wait()
	next := resolve("reg:5000/img1:1", "reg:5000/img3:1")
	// distinct layers in image order: L1 L2 L3 (img1), then L5 (img3's L1 counted once)
	if !reflect.DeepEqual(next.Layers, []layers.Layer{l1, l2, l3, l5}) || len(next.Unknown) != 0 || next.TotalBytes != 95 {
		t.Fatalf("next pod: %+v", next)
	}
	// an image the registry cannot resolve: the pod stays scored as without a registry
	failing := resolve("reg:5000/img2:1", "reg:5000/gone:1")
	r.Wait()
	again := resolve("reg:5000/img2:1", "reg:5000/gone:1")
	if !reflect.DeepEqual(failing, again) || !reflect.DeepEqual(again.Layers, []layers.Layer{l1, l2, l4}) {
		t.Fatalf("with a failing image: %+v then %+v", failing, again)
	}
	// a pinned image the nodes agree on: their layers until the registry answered for
	// the digest, then the registry's (it outvotes agreeing liars)
	if got := resolve(pinned); !reflect.DeepEqual(got.Layers, []layers.Layer{l1, l2, l3}) {
		t.Fatalf("pinned, before the registry: %+v", got)
	}
	r.Wait()
	if got := resolve(pinned); !reflect.DeepEqual(got.Layers, []layers.Layer{l1, l4}) {
		t.Fatalf("pinned, after the registry: %+v", got)
	}
	// without a registry: the index's own resolution, unchanged
	if got, want := podLayers(index, nil, []string{"reg:5000/img1:1", "reg:5000/img3:1"}, now, 0), index.ResolvePod([]string{"reg:5000/img1:1", "reg:5000/img3:1"}, now, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("without a registry: %+v, want %+v", got, want)
	}
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
