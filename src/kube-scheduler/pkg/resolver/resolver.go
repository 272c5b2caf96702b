// Package resolver resolves pod images' layers in the background, for the LayerLocality
// plugin: a scheduling cycle asks (Layers) and never waits, except through Await, a wait
// bounded by its caller's context for resolutions under way. What is cached is answered
// at once; what is not is queued (a bounded queue: full, the request is dropped and asked
// again by the next pod), each image once however many pods ask (in-flight names are
// deduplicated), and a few workers resolve the queue through a Source (the registry).
// The answer is there for the next pod of that image.
//
// Answers are kept in a cache bounded by construction (entries and estimated bytes), as
// the Python extender's LayerCache (registry/_cache.py) keeps them: a tag's layers for a
// positive TTL, then served stale while a worker revalidates them (a digest check first:
// an unchanged tag costs one HEAD); a digest-pinned name's for good; a failure, as short
// text, for a negative TTL. A sweep drops expired failures and tags no pod asked for
// since.
package resolver

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"layersched.io/kube-scheduler/pkg/layers"
)

// The queue's defaults: the Python DeadlineResolver's (extender/_resolver.py).
const (
	// DefaultWorkers: parallel registry conversations.
	DefaultWorkers = 4
	// DefaultQueueSize: resolutions queued or in flight at most; past it a request is
	// dropped (the next pod of the image asks again).
	DefaultQueueSize = 256
	// MaxImageChars: a longer image name is no reference a registry serves
	// (distribution's names stop at 255 characters, tags at 128, digests near 135); it
	// is answered as unknown and never queued, so names do not cost the queue or the
	// cache more than this each.
	MaxImageChars = 1024
	// sweepPeriod: how often expired entries are swept.
	sweepPeriod = 10 * time.Second
	// warningPeriod: one image's failures are logged at warning level once per period
	// (at V(2) otherwise); a registry's refusals by the allow-list once per period, for
	// all its images.
	warningPeriod = 5 * time.Minute
	// maxWarned bounds the names whose last warning is remembered.
	maxWarned = 10_000
)

// Key is one resolution: an image as a pod names it, on a platform ("linux/amd64").
type Key struct {
	Platform string
	Image    string
}

// Fetched is what a source found: the image's layers on the key's platform, and the
// digest its name points to (an index's, for a multi-platform image; "" if unknown).
type Fetched struct {
	Layers []layers.Layer
	Digest string
}

// Source resolves keys (the registry: RegistrySource).
type Source interface {
	// Fetch resolves the key's image's layers.
	Fetch(ctx context.Context, key Key) (Fetched, error)
	// CurrentDigest is the digest the key's image points to now (cheap: one HEAD), ""
	// if the source cannot say.
	CurrentDigest(ctx context.Context, key Key) (string, error)
}

// Outcome is how one resolution ended.
type Outcome struct {
	Key Key
	// Err is the failure (nil: resolved).
	Err error
	// Unchanged: a revalidation found the tag where it was (no manifest fetched).
	Unchanged bool
	// Kept: a failed revalidation kept the layers last known.
	Kept bool
}

// Hooks tell the plugin's metrics what happened; each may be nil.
type Hooks struct {
	// Resolved is called after each resolution.
	Resolved func(Outcome)
	// Dropped is called when a request finds the queue full.
	Dropped func(Key)
	// Size is called with the cache's entries and estimated bytes after each change.
	Size func(entries int, bytes int64)
}

// Config bounds a resolver; a zero field takes its default.
type Config struct {
	Workers     int
	QueueSize   int
	MaxEntries  int
	MaxBytes    int64
	PositiveTTL time.Duration
	NegativeTTL time.Duration
	// Now is the clock (tests cross TTLs without waiting).
	Now   func() time.Time
	Hooks Hooks
}

func (cfg *Config) defaults() {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.PositiveTTL <= 0 {
		cfg.PositiveTTL = DefaultPositiveTTL
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = DefaultNegativeTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
}

// Resolver answers from its cache and resolves the rest in the background.
type Resolver struct {
	source Source
	cfg    Config
	cache  *cache
	queue  chan Key
	// mu guards inFlight: the keys queued or being resolved (each once), and their
	// flights' abandoned marks; idle is broadcast whenever one is done.
	mu       sync.Mutex
	idle     *sync.Cond
	inFlight map[Key]*flight
	warnings *warnings
}

// New makes a resolver over source; Start runs its workers.
func New(source Source, cfg Config) *Resolver {
	cfg.defaults()
	r := &Resolver{
		source:   source,
		cfg:      cfg,
		cache:    newCache(cfg),
		queue:    make(chan Key, cfg.QueueSize),
		inFlight: map[Key]*flight{},
		warnings: &warnings{last: map[string]time.Time{}, now: cfg.Now},
	}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// Start runs the workers and the sweep until ctx ends (resolutions under way are
// abandoned then).
func (r *Resolver) Start(ctx context.Context) {
	for range r.cfg.Workers {
		go r.work(ctx)
	}
	go func() {
		ticker := time.NewTicker(sweepPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				r.Sweep()
			}
		}
	}()
}

// Layers is key's layers when a resolution is cached (ok), never waiting: a stale
// answer is returned and revalidated in the background; without an answer the key is
// queued (unless it failed within the negative TTL) and ok is false. Safe to call from
// every scheduling cycle at once.
func (r *Resolver) Layers(key Key) ([]layers.Layer, bool) {
	if len(key.Image) > MaxImageChars {
		return nil, false
	}
	found := r.cache.get(key)
	if found.failed {
		return nil, false
	}
	if !found.found || found.stale {
		r.enqueue(key, found.stale) // Layers never waits: its flight is not needed
	}
	return found.layers, found.found
}

// Known is key's cached layers without queueing anything (ok false: none).
func (r *Resolver) Known(key Key) ([]layers.Layer, bool) {
	found, _ := r.cache.peek(key)
	return found, found != nil
}

// flight is one key's resolution, queued or under way: done is closed when it ends;
// abandoned (under Resolver.mu) says a caller's wait for it ended at its bound, so no
// later caller waits for it again.
type flight struct {
	done      chan struct{}
	abandoned bool
}

// enqueue queues key unless it is queued or in flight already, and returns its flight
// and whether a caller may wait for it (not abandoned). Nothing is queued (nil) when a
// full queue drops it, or when the caller found no answer (not revalidate) and one
// landed since: a worker stores its answer before its flight ends, so each answer is
// fetched once however the callers interleave.
func (r *Resolver) enqueue(key Key, revalidate bool) (*flight, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.inFlight[key]; ok {
		return f, !f.abandoned
	}
	if !revalidate {
		if found := r.cache.get(key); found.found || found.failed {
			return nil, false
		}
	}
	select {
	case r.queue <- key:
		f := &flight{done: make(chan struct{})}
		r.inFlight[key] = f
		return f, true
	default:
		if r.cfg.Hooks.Dropped != nil {
			r.cfg.Hooks.Dropped(key)
		}
		return nil, false
	}
}

// Waited is what Await did: nothing to wait for and no answer (NotWaited: each key
// failed within the negative TTL, found the queue full, or its resolution had already
// kept a caller waiting to its bound), nothing to wait for but some key answered
// (Cached: an answer may have landed since the caller last asked), waited until the
// resolutions ended (Answered), or until ctx ended first (Bounded).
type Waited int

const (
	NotWaited Waited = iota
	Cached
	Answered
	Bounded
)

// Await is Layers for keys, waiting until the resolutions of those not cached end or
// ctx does (the caller's bound), whichever comes first; the answers are then read with
// Layers. It queues each missing key (or joins its resolution under way: one
// resolution a key, however many callers wait), and never waits for a key that is
// cached (a stale one is revalidated in the background), failed within the negative
// TTL, dropped by a full queue, or whose resolution already kept a caller waiting to
// its bound: a slow or failing registry costs one bounded wait per resolution, not one
// per pod.
func (r *Resolver) Await(ctx context.Context, keys []Key) Waited {
	var flights []*flight
	answered := false
	for _, key := range keys {
		if len(key.Image) > MaxImageChars {
			continue
		}
		found := r.cache.get(key)
		answered = answered || found.found
		if found.failed || (found.found && !found.stale) {
			continue
		}
		f, wait := r.enqueue(key, found.stale) // a stale answer is revalidated without a wait
		switch {
		case wait && !found.found:
			flights = append(flights, f)
		case f == nil && !found.found:
			answered = answered || r.cache.get(key).found // landed since the look above
		}
	}
	if len(flights) == 0 {
		if answered {
			return Cached
		}
		return NotWaited
	}
	for i, f := range flights {
		select {
		case <-f.done:
		case <-ctx.Done():
			r.mu.Lock()
			for _, left := range flights[i:] {
				left.abandoned = true
			}
			r.mu.Unlock()
			return Bounded
		}
	}
	return Answered
}

// Size is the cache's entries and estimated bytes.
func (r *Resolver) Size() (int, int64) {
	return r.cache.size()
}

// Pending is how many keys are queued or being resolved.
func (r *Resolver) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inFlight)
}

// Wait returns once nothing is queued or being resolved (tests, and a caller that must
// know resolution finished; never a scheduling cycle).
func (r *Resolver) Wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.inFlight) > 0 {
		r.idle.Wait()
	}
}

// Sweep drops expired failures and tags no pod asked for since they expired (the
// workers' ticker runs it every 10 s).
func (r *Resolver) Sweep() {
	entries, bytes := r.cache.sweep()
	if r.cfg.Hooks.Size != nil {
		r.cfg.Hooks.Size(entries, bytes)
	}
}

func (r *Resolver) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-r.queue:
			r.resolve(ctx, key)
			r.mu.Lock()
			close(r.inFlight[key].done)
			delete(r.inFlight, key)
			r.idle.Broadcast()
			r.mu.Unlock()
		}
	}
}

// resolve answers key through the source and caches the answer: a known tag is first
// checked by digest, and only a moved one is fetched again.
func (r *Resolver) resolve(ctx context.Context, key Key) {
	outcome := Outcome{Key: key}
	pinned := layers.Pinned(key.Image)
	known, digest := r.cache.peek(key)
	if known != nil && digest != "" && !pinned {
		current, err := r.source.CurrentDigest(ctx, key)
		if err == nil && current == digest && r.cache.renew(key, true) {
			outcome.Unchanged = true
			r.done(outcome)
			return
		}
	}
	fetched, err := r.source.Fetch(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return // the scheduler is stopping: nothing learnt
	case err != nil:
		outcome.Err = err
		outcome.Kept = r.cache.storeFailure(key, err.Error()) != nil
		r.warnings.failed(key, err, outcome.Kept)
	default:
		r.cache.storeLayers(key, fetched.Layers, fetched.Digest, pinned)
		klog.V(4).Infof("LayerLocality: image %q (%s): %d layers resolved from its registry", key.Image, key.Platform, len(fetched.Layers))
	}
	r.done(outcome)
}

func (r *Resolver) done(outcome Outcome) {
	if r.cfg.Hooks.Resolved != nil {
		r.cfg.Hooks.Resolved(outcome)
	}
	if r.cfg.Hooks.Size != nil {
		entries, bytes := r.cache.size()
		r.cfg.Hooks.Size(entries, bytes)
	}
}

// warnings logs a failing image at warning level once per warningPeriod, at V(2)
// otherwise (a down registry fails every image of it together).
type warnings struct {
	mu   sync.Mutex
	last map[string]time.Time
	now  func() time.Time
}

func (w *warnings) due(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if last, ok := w.last[name]; ok && now.Sub(last) < warningPeriod {
		return false
	}
	if len(w.last) >= maxWarned {
		clear(w.last)
	}
	w.last[name] = now
	return true
}

func (w *warnings) failed(key Key, err error, kept bool) {
	consequence := "pods using it score as if it were unknown until it resolves (retried when a pod asks after the failure's TTL)"
	if kept {
		consequence = "keeping the layers last known"
	}
	name := key.Image
	var grouped interface{ WarningKey() string }
	if errors.As(err, &grouped) {
		name = grouped.WarningKey()
	}
	if w.due(name) {
		klog.Warningf("LayerLocality: image %q (%s): layers cannot be resolved from its registry, %s: %v", key.Image, key.Platform, consequence, err)
		return
	}
	klog.V(2).Infof("LayerLocality: image %q (%s): layers cannot be resolved again: %v", key.Image, key.Platform, err)
}
