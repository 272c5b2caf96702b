package layerlocality

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"layersched.io/kube-scheduler/pkg/layers"
	"layersched.io/kube-scheduler/pkg/registry"
	"layersched.io/kube-scheduler/pkg/resolver"
)

// Resolving pod images from their registry (RegistryArgs): one resolver per scheduler
// and registry settings, shared by its profiles as the index is; PreScore asks it, waits
// at most resolveWaitMilliseconds for the answers of an image nothing knows yet (the
// first pod of an image: await), and layers.PrepareFrom merges its answers with the
// nodes' agreed ones as the extender does (extender/_pod_layers.py).

// Outcome labels of layersched_layer_locality_registry_resolutions_total.
const (
	OutcomeResolved  = "resolved"
	OutcomeUnchanged = "unchanged"
	OutcomeKept      = "kept"
	OutcomeCancelled = "error"
)

var (
	registryResolutions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_resolutions_total",
		Help:           "Pod images resolved from their registry in the background, by outcome: resolved, unchanged (a tag revalidated by its digest), kept (a failed revalidation kept the layers last known), not_allowed (the registry is not in allowRegistries: no request sent), registry_error, manifest_error (not a manifest read, or content other than the digest pinned), invalid_reference, error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
	registryQueueDrops = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_queue_dropped_total",
		Help:           "Pod images not queued for resolution because queueSize resolutions were queued or under way (the next pod of the image asks again).",
		StabilityLevel: metrics.ALPHA,
	})
	registryCacheEntries = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_cache_entries",
		Help:           "Answers (layers or failures, per image and platform) the registry resolver holds, at most maxCachedImages.",
		StabilityLevel: metrics.ALPHA,
	})
	registryCacheBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_cache_bytes",
		Help:           "Estimated bytes the registry resolver's answers cost, at most maxCachedBytes.",
		StabilityLevel: metrics.ALPHA,
	})
	podImagesFromRegistry = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "pod_images_from_registry_total",
		Help:           "Pod images scored with the layers their registry gave, because no quorum of nodes agreed on some image of the pod.",
		StabilityLevel: metrics.ALPHA,
	})
	registryWaits = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_waits_total",
		Help:           "Scheduling cycles that waited, at most registry.resolveWaitMilliseconds, for the registry's answers for pod images neither a quorum of nodes nor an earlier answer knew (the first pod of an image); one wait per resolution under way, however many pods ask.",
		StabilityLevel: metrics.ALPHA,
	})
	registryWaitsBounded = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "registry_waits_bounded_total",
		Help:           "Of registry_waits_total, the waits that reached their bound (or the cycle's end) before every answer came: the pod was scored without them, and no later pod waits for the same resolution.",
		StabilityLevel: metrics.ALPHA,
	})
	podImagesDisputed = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "pod_images_disputed_total",
		Help:           "Digest-pinned pod images whose layers the nodes agree on differently from what the registry serves for the digest: the registry's are used (agreeing liars are outvoted).",
		StabilityLevel: metrics.ALPHA,
	})
	registerRegistryMetrics sync.Once
)

func registerRegistry() {
	registerRegistryMetrics.Do(func() {
		legacyregistry.MustRegister(registryResolutions, registryQueueDrops, registryCacheEntries, registryCacheBytes, podImagesFromRegistry, podImagesDisputed,
			registryWaits, registryWaitsBounded)
	})
}

// outcomeLabel is how a resolution is counted.
func outcomeLabel(outcome resolver.Outcome) string {
	switch {
	case outcome.Err == nil && outcome.Unchanged:
		return OutcomeUnchanged
	case outcome.Err == nil:
		return OutcomeResolved
	case outcome.Kept:
		return OutcomeKept
	}
	var typed *registry.Error
	if errors.As(outcome.Err, &typed) {
		return string(typed.Kind)
	}
	return OutcomeCancelled
}

// newResolver is a started resolver for the args, stopped with ctx; the auth files are
// read here, so a wrong one stops kube-scheduler at start-up with its name.
func newResolver(ctx context.Context, args *RegistryArgs) (*resolver.Resolver, error) {
	registerRegistry()
	credentials, err := registry.LoadAuthFiles(args.AuthFiles)
	if err != nil {
		return nil, fmt.Errorf("%s args: registry.authFiles: %w", Name, err)
	}
	hosts, err := tokenHosts(args.TokenHosts)
	if err != nil {
		return nil, fmt.Errorf("%s args: registry.tokenHosts: %w", Name, err)
	}
	client := registry.New(registry.Options{
		AllowRegistries:    args.AllowRegistries,
		InsecureRegistries: args.InsecureRegistries,
		TokenHosts:         hosts,
		Credentials:        credentials,
		Timeout:            time.Duration(*args.TimeoutSeconds) * time.Second,
		Deadline:           time.Duration(*args.DeadlineSeconds) * time.Second,
		Retries:            int(*args.Retries),
	})
	r := resolver.New(resolver.RegistrySource{Client: client}, resolver.Config{
		Workers:     int(*args.Workers),
		QueueSize:   int(*args.QueueSize),
		MaxEntries:  int(*args.MaxCachedImages),
		MaxBytes:    *args.MaxCachedBytes,
		PositiveTTL: time.Duration(*args.CacheTTLSeconds) * time.Second,
		NegativeTTL: time.Duration(*args.FailureTTLSeconds) * time.Second,
		Hooks: resolver.Hooks{
			Resolved: func(outcome resolver.Outcome) { registryResolutions.WithLabelValues(outcomeLabel(outcome)).Inc() },
			Dropped:  func(resolver.Key) { registryQueueDrops.Inc() },
			Size: func(entries int, bytes int64) {
				registryCacheEntries.Set(float64(entries))
				registryCacheBytes.Set(float64(bytes))
			},
		},
	})
	r.Start(ctx)
	go func() {
		<-ctx.Done()
		client.Close()
	}()
	klog.Infof("%s: resolving pod images no quorum of nodes publishes from their registry (allowed: %v; plain HTTP: %v; %d auth files; %d workers; the first pod of an image waits at most %d ms)",
		Name, args.AllowRegistries, args.InsecureRegistries, len(args.AuthFiles), *args.Workers, *args.ResolveWaitMilliseconds)
	return r, nil
}

// Node platforms: a node's images, and a pod on it, are resolved for the node's
// platform (kubernetes.io/os and kubernetes.io/arch labels, else status.nodeInfo), as
// the extender does (extender/_platforms.py); nodes of a platform past the first
// maxPlatforms are resolved in the default one (nodes name platforms: they must not
// make resolutions without bound).
const (
	osLabel      = "kubernetes.io/os"
	archLabel    = "kubernetes.io/arch"
	maxPlatforms = 8
	// maxPlatformMemo bounds the (os, arch) spellings remembered.
	maxPlatformMemo = 1024
)

// platforms keys nodes by platform, bounded.
type platforms struct {
	fallback string
	mu       sync.Mutex
	known    map[string]bool
	memo     map[[2]string]string
}

func newPlatforms(fallback string) *platforms {
	platform, err := registry.ParsePlatform(fallback)
	if err == nil {
		fallback = platform.String()
	}
	return &platforms{fallback: fallback, known: map[string]bool{fallback: true}, memo: map[[2]string]string{}}
}

// key is the platform node is resolved in.
func (p *platforms) key(node *v1.Node) string {
	if node == nil {
		return p.fallback
	}
	osName, arch := node.Labels[osLabel], node.Labels[archLabel]
	if osName == "" {
		osName = node.Status.NodeInfo.OperatingSystem
	}
	if arch == "" {
		arch = node.Status.NodeInfo.Architecture
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if key, ok := p.memo[[2]string{osName, arch}]; ok {
		return key
	}
	key := p.fallback
	if platform, err := registry.ParsePlatform(osName + "/" + arch); osName != "" && arch != "" && err == nil {
		switch text := platform.String(); {
		case p.known[text]:
			key = text
		case len(p.known) < maxPlatforms:
			p.known[text] = true
			key = text
		default:
			klog.Warningf("%s: node %s: platform %s is one more than the %d handled: resolving its pods' images for %s", Name, node.Name, text, maxPlatforms, p.fallback)
		}
	}
	if len(p.memo) >= maxPlatformMemo {
		clear(p.memo)
	}
	p.memo[[2]string{osName, arch}] = key
	return key
}

// registrySet is the plugin's registry resolution: the resolver (one per scheduler and
// registry settings, shared by its profiles), the node platforms it resolves for, and
// how long a cycle waits for an answer nothing has yet.
type registrySet struct {
	resolver  *resolver.Resolver
	platforms *platforms
	// wait bounds await (resolveWaitMilliseconds; 0: never wait, every pod scores at
	// once with what is known).
	wait time.Duration
	// bound is the wait's context (nil: context.WithTimeout; tests end it themselves).
	bound func(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc)
}

// await waits, at most r.wait and never past ctx, for the registry's answers for images
// on platforms, and says whether some answer may have landed since the caller asked (it
// waited, or found one: the caller then prepares again). Only what no answer, recent failure
// or earlier bounded wait covers is waited for (resolver.Await): in practice the first
// pod of an image no node publishes, whose answer decides where its pulls go, as the
// extender's deadline lets it wait for the same answer. The resolution goes on after
// the bound, for the next pod.
func (r *registrySet) await(ctx context.Context, images, platforms []string) bool {
	if r.wait <= 0 || len(images) == 0 {
		return false
	}
	keys := make([]resolver.Key, 0, len(images)*len(platforms))
	for _, platform := range platforms {
		for _, image := range images {
			keys = append(keys, resolver.Key{Platform: platform, Image: image})
		}
	}
	bound := r.bound
	if bound == nil {
		bound = context.WithTimeout
	}
	bounded, cancel := bound(ctx, r.wait)
	defer cancel()
	switch r.resolver.Await(bounded, keys) {
	case resolver.NotWaited:
		return false
	case resolver.Cached:
		return true
	case resolver.Bounded:
		registryWaits.Inc()
		registryWaitsBounded.Inc()
		klog.V(2).Infof("%s: the registry did not answer for %v within %s: scoring without it (resolution goes on for the next pod)", Name, images, r.wait)
	default:
		registryWaits.Inc()
	}
	return true
}

// platformSource is the resolver as one platform's layers.ImageSource.
type platformSource struct {
	resolver *resolver.Resolver
	platform string
}

func (s platformSource) Layers(image string) ([]layers.Layer, bool) {
	return s.resolver.Layers(resolver.Key{Platform: s.platform, Image: image})
}

// prepare is the pod's terms with the registry's answers merged (layers.PrepareFrom):
// for the default platform's nodes, and byNode for the nodes of another platform when
// the pod needed the registry at all and candidates has some (nil otherwise). The
// resolver answers from its cache and queues the rest; when that leaves some image
// unknown, the cycle waits for the answers (await, bounded) and prepares again.
func (r *registrySet) prepare(ctx context.Context, index *layers.Index, images []string, spread *layers.Spread, now time.Time, maxAge time.Duration,
	candidates func() []*v1.Node) (*layers.Prepared, map[string]*layers.Prepared) {
	fallback := r.platforms.fallback
	source := platformSource{r.resolver, fallback}
	prepared := index.PrepareFrom(images, source, spread, now, maxAge)
	var groups map[string][]string
	if prepared.Consulted && candidates != nil {
		groups = map[string][]string{}
		for _, node := range candidates() {
			if key := r.platforms.key(node); key != fallback {
				groups[key] = append(groups[key], node.Name)
			}
		}
	}
	if len(prepared.Unknown) > 0 && r.wait > 0 {
		platforms := []string{fallback}
		for key := range groups {
			platforms = append(platforms, key)
		}
		if r.await(ctx, images, platforms) {
			prepared = index.PrepareFrom(images, source, spread, now, maxAge)
		}
	}
	countRegistry(prepared)
	if len(groups) == 0 {
		return prepared, nil
	}
	byNode := map[string]*layers.Prepared{}
	for key, names := range groups {
		other := index.PrepareFrom(images, platformSource{r.resolver, key}, spread, now, maxAge)
		countRegistry(other)
		for _, name := range names {
			byNode[name] = other
		}
	}
	return prepared, byNode
}

func countRegistry(prepared *layers.Prepared) {
	if prepared.FromSource > 0 {
		podImagesFromRegistry.Add(float64(prepared.FromSource))
	}
	if prepared.Disputed > 0 {
		podImagesDisputed.Add(float64(prepared.Disputed))
	}
}

// Shared resolvers: one per scheduler and registry settings, whichever profiles enable
// the plugin with them (as the index is shared), stopped with the scheduler.
type resolverKey struct {
	scheduler <-chan struct{}
	settings  string
}

var (
	resolversMu sync.Mutex
	resolvers   = map[resolverKey]*registrySet{}
)

// sharedRegistry is the scheduler's registry resolution for these args (nil when they
// turn it off), started on first use.
func sharedRegistry(ctx context.Context, args *RegistryArgs) (*registrySet, error) {
	if !args.on() {
		return nil, nil
	}
	settings, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%s args: registry: %w", Name, err)
	}
	key := resolverKey{ctx.Done(), string(settings)}
	resolversMu.Lock()
	defer resolversMu.Unlock()
	if found, ok := resolvers[key]; ok {
		return found, nil
	}
	r, err := newResolver(ctx, args)
	if err != nil {
		return nil, err
	}
	set := &registrySet{resolver: r, platforms: newPlatforms(args.Platform), wait: time.Duration(*args.ResolveWaitMilliseconds) * time.Millisecond}
	resolvers[key] = set
	go func() {
		<-ctx.Done()
		resolversMu.Lock()
		defer resolversMu.Unlock()
		delete(resolvers, key)
	}()
	return set, nil
}
