package resolver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"layersched.io/kube-scheduler/pkg/layers"
)

const platform = "linux/amd64"

func key(image string) Key { return Key{Platform: platform, Image: image} }

func layersOf(labels ...string) []layers.Layer {
	found := make([]layers.Layer, len(labels))
	for i, label := range labels {
		found[i] = layers.Layer{Digest: "sha256:" + strings.Repeat(label, 64)[:64], SizeBytes: int64(10 * (i + 1))}
	}
	return found
}

// fakeSource answers from a table; gate, when set, holds every Fetch until closed.
type fakeSource struct {
	mu      sync.Mutex
	answers map[string]Fetched
	errs    map[string]error
	digests map[string]string
	gate    chan struct{}
	fetches atomic.Int64
	heads   atomic.Int64
	started chan Key
}

func newFakeSource() *fakeSource {
	return &fakeSource{answers: map[string]Fetched{}, errs: map[string]error{}, digests: map[string]string{}}
}

func (f *fakeSource) set(image string, fetched Fetched, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[image], f.errs[image], f.digests[image] = fetched, err, fetched.Digest
}

func (f *fakeSource) Fetch(ctx context.Context, key Key) (Fetched, error) {
	f.fetches.Add(1)
	if f.started != nil {
		f.started <- key
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return Fetched{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs[key.Image]; err != nil {
		return Fetched{}, err
	}
	answer, ok := f.answers[key.Image]
	if !ok {
		return Fetched{}, fmt.Errorf("%s: 404 – is the image pushed?", key.Image)
	}
	return answer, nil
}

func (f *fakeSource) CurrentDigest(_ context.Context, key Key) (string, error) {
	f.heads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.digests[key.Image], f.errs[key.Image]
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// settled waits until no resolution is queued or running (the workers' own pace; the
// test's timeout bounds it).
func settled(t *testing.T, r *Resolver) {
	t.Helper()
	r.Wait()
}

func started(t *testing.T, source Source, cfg Config) *Resolver {
	t.Helper()
	r := New(source, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.Start(ctx)
	return r
}

func TestTheFirstAskQueuesTheNextIsAnswered(t *testing.T) {
	source := newFakeSource()
	source.set("reg/app:v1", Fetched{Layers: layersOf("a", "b"), Digest: "sha256:d1"}, nil)
	var outcomes []Outcome
	var mu sync.Mutex
	r := started(t, source, Config{Hooks: Hooks{Resolved: func(o Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }}})
	if found, ok := r.Layers(key("reg/app:v1")); ok || found != nil {
		t.Fatalf("answered before any resolution: %v", found)
	}
	settled(t, r)
	found, ok := r.Layers(key("reg/app:v1"))
	if !ok || len(found) != 2 {
		t.Fatalf("not answered after the resolution: %v %v", found, ok)
	}
	// another platform is another resolution
	if _, ok := r.Layers(Key{"linux/arm64", "reg/app:v1"}); ok {
		t.Fatal("answered for another platform")
	}
	settled(t, r)
	if got := source.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 2 || outcomes[0].Err != nil {
		t.Fatalf("outcomes %+v", outcomes)
	}
}

func TestASlowRegistryNeverBlocksTheCaller(t *testing.T) {
	source := newFakeSource()
	source.gate = make(chan struct{}) // every fetch hangs until the test lets it go
	var dropped atomic.Int64
	r := started(t, source, Config{Workers: 2, QueueSize: 8, Hooks: Hooks{Dropped: func(Key) { dropped.Add(1) }}})
	// 1,000 asks for 100 images while the registry answers nothing: every ask returns
	// (were one to block, the registry would never be released and the test would hang)
	for i := range 1000 {
		if _, ok := r.Layers(key(fmt.Sprintf("reg/app%d:v1", i%100))); ok {
			t.Fatal("answered while the registry hangs")
		}
	}
	// the queue held 8 (and the workers took up to 2 more): the rest were dropped,
	// and no image is queued twice
	if pending := r.Pending(); pending < 8 || pending > 10 {
		t.Fatalf("%d pending, want 8 to 10", pending)
	}
	if dropped.Load() == 0 {
		t.Fatal("nothing dropped with a full queue")
	}
	close(source.gate)
	settled(t, r)
	if got := source.fetches.Load(); got > 10 {
		t.Fatalf("%d fetches for at most 10 queued images", got)
	}
}

func TestInFlightNamesAreResolvedOnce(t *testing.T) {
	source := newFakeSource()
	source.set("reg/app:v1", Fetched{Layers: layersOf("a")}, nil)
	source.gate = make(chan struct{})
	r := started(t, source, Config{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Layers(key("reg/app:v1"))
		}()
	}
	wg.Wait()
	close(source.gate)
	settled(t, r)
	if got := source.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches for one image asked 64 times at once, want 1", got)
	}
}

func TestFailuresAreRememberedForTheirTTLAsShortText(t *testing.T) {
	source := newFakeSource()
	source.set("reg/app:v1", Fetched{}, errors.New("reg: 503 "+strings.Repeat("x", 5000)))
	now := &clock{now: time.Unix(1_000_000, 0)}
	r := started(t, source, Config{Now: now.Now, NegativeTTL: 10 * time.Second})
	r.Layers(key("reg/app:v1"))
	settled(t, r)
	for range 5 {
		if _, ok := r.Layers(key("reg/app:v1")); ok {
			t.Fatal("a failure answered with layers")
		}
	}
	settled(t, r)
	if got := source.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches within the failure's TTL, want 1", got)
	}
	_, bytes := r.Size()
	if bytes > entryOverheadBytes+MaxFailureChars+64 {
		t.Fatalf("a failure costs %d bytes: not kept short", bytes)
	}
	// past the TTL the next ask retries, and a success replaces the failure
	source.set("reg/app:v1", Fetched{Layers: layersOf("a")}, nil)
	now.advance(11 * time.Second)
	r.Layers(key("reg/app:v1"))
	settled(t, r)
	if _, ok := r.Layers(key("reg/app:v1")); !ok || source.fetches.Load() != 2 {
		t.Fatalf("not retried after the TTL (%d fetches)", source.fetches.Load())
	}
}

func TestTagsAreRevalidatedAndPinnedNamesKept(t *testing.T) {
	source := newFakeSource()
	pinnedName := "reg/app@sha256:" + strings.Repeat("e", 64)
	source.set("reg/app:v1", Fetched{Layers: layersOf("a"), Digest: "sha256:one"}, nil)
	source.set(pinnedName, Fetched{Layers: layersOf("p"), Digest: "sha256:" + strings.Repeat("e", 64)}, nil)
	now := &clock{now: time.Unix(1_000_000, 0)}
	var unchanged, kept atomic.Int64
	r := started(t, source, Config{Now: now.Now, PositiveTTL: time.Minute, NegativeTTL: 10 * time.Second,
		Hooks: Hooks{Resolved: func(o Outcome) {
			if o.Unchanged {
				unchanged.Add(1)
			}
			if o.Kept {
				kept.Add(1)
			}
		}}})
	r.Layers(key("reg/app:v1"))
	r.Layers(key(pinnedName))
	settled(t, r)
	now.advance(2 * time.Minute)
	// stale: still answered, and revalidated by a digest check alone
	if found, ok := r.Layers(key("reg/app:v1")); !ok || len(found) != 1 {
		t.Fatal("a stale tag was not served while revalidated")
	}
	settled(t, r)
	if source.fetches.Load() != 2 || source.heads.Load() != 1 || unchanged.Load() != 1 {
		t.Fatalf("%d fetches, %d HEADs, %d unchanged: want 2, 1, 1", source.fetches.Load(), source.heads.Load(), unchanged.Load())
	}
	// a pinned name never expires: no revalidation
	if _, ok := r.Layers(key(pinnedName)); !ok {
		t.Fatal("a pinned name was dropped")
	}
	settled(t, r)
	if source.fetches.Load() != 2 {
		t.Fatal("a pinned name was fetched again")
	}
	// the tag moves: fetched again, new layers
	source.set("reg/app:v1", Fetched{Layers: layersOf("b", "c"), Digest: "sha256:two"}, nil)
	now.advance(2 * time.Minute)
	r.Layers(key("reg/app:v1"))
	settled(t, r)
	if found, _ := r.Layers(key("reg/app:v1")); len(found) != 2 {
		t.Fatalf("the moved tag still answers %v", found)
	}
	// the registry goes down: the layers last known are kept
	source.set("reg/app:v1", Fetched{}, errors.New("connection refused"))
	now.advance(2 * time.Minute)
	r.Layers(key("reg/app:v1"))
	settled(t, r)
	if found, ok := r.Layers(key("reg/app:v1")); !ok || len(found) != 2 || kept.Load() != 1 {
		t.Fatalf("a failed revalidation dropped the layers: %v %v (kept %d)", found, ok, kept.Load())
	}
}

func TestTheCacheIsBoundedByConstructionAndSwept(t *testing.T) {
	now := &clock{now: time.Unix(1_000_000, 0)}
	cfg := Config{MaxEntries: 3, MaxBytes: 10_000, PositiveTTL: time.Minute, NegativeTTL: 10 * time.Second, Now: now.Now}
	cfg.defaults()
	c := newCache(cfg)
	for i := range 5 {
		c.storeLayers(key(fmt.Sprintf("app%d", i)), layersOf("a"), "", false)
	}
	// entries: the 3 most recent stay
	if entries, _ := c.size(); entries != 3 || c.get(key("app0")).found || !c.get(key("app4")).found {
		t.Fatalf("%d entries", entries)
	}
	// bytes: a 30-layer entry costs ~3 KB; 3 of them and a failure must fit 10,000 bytes
	many := layersOf(strings.Split(strings.Repeat("m", 30), "")...)
	for i := range 3 {
		c.storeLayers(key(fmt.Sprintf("big%d", i)), many, "", false)
	}
	if _, bytes := c.size(); bytes > cfg.MaxBytes {
		t.Fatalf("%d bytes held, over the %d bound", bytes, cfg.MaxBytes)
	}
	// an entry larger than the whole budget is not kept
	c.storeLayers(key("huge"), layersOf(strings.Split(strings.Repeat("h", 200), "")...), "", false)
	if c.get(key("huge")).found {
		t.Fatal("an entry over the whole budget was kept")
	}
	// the sweep: an expired failure goes; a tag expired for a whole TTL goes; a
	// pinned name stays
	fresh := newCache(cfg)
	fresh.storeFailure(key("down"), "503")
	fresh.storeLayers(key("tag"), layersOf("a"), "", false)
	fresh.storeLayers(key("pinned"), layersOf("a"), "", true)
	now.advance(30 * time.Second)
	if entries, _ := fresh.sweep(); entries != 2 {
		t.Fatalf("%d entries after the failure's TTL, want 2", entries)
	}
	now.advance(2 * time.Minute)
	if entries, bytes := fresh.sweep(); entries != 1 || !fresh.get(key("pinned")).found || bytes != entryCost(key("pinned"), layersOf("a"), "", "") {
		t.Fatalf("%d entries, %d bytes after two TTLs", entries, bytes)
	}
}

func TestLongNamesAreNeverQueued(t *testing.T) {
	source := newFakeSource()
	r := started(t, source, Config{})
	if _, ok := r.Layers(key("reg/" + strings.Repeat("a", MaxImageChars))); ok || r.Pending() != 0 {
		t.Fatal("a name past MaxImageChars was queued")
	}
}

func TestConcurrentAsksUnderTheRaceDetector(t *testing.T) {
	source := newFakeSource()
	for i := range 20 {
		source.set(fmt.Sprintf("reg/app%d:v1", i), Fetched{Layers: layersOf("a", "b"), Digest: "sha256:x"}, nil)
	}
	r := started(t, source, Config{Workers: 3, QueueSize: 4, MaxEntries: 8})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				found, ok := r.Layers(key(fmt.Sprintf("reg/app%d:v1", (g+i)%20)))
				if ok && len(found) != 2 {
					t.Errorf("answered %v", found)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			r.Sweep()
		}
	}()
	wg.Wait()
	settled(t, r)
	if entries, _ := r.Size(); entries > 8 {
		t.Fatalf("%d entries, over the bound of 8", entries)
	}
}

func TestStopAbandonsResolutionsUnderWay(t *testing.T) {
	source := newFakeSource()
	source.gate = make(chan struct{})
	source.started = make(chan Key, 1)
	var resolved atomic.Int64
	r := New(source, Config{Workers: 1, Hooks: Hooks{Resolved: func(Outcome) { resolved.Add(1) }}})
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	r.Layers(key("reg/app:v1"))
	<-source.started
	cancel()
	// the hanging fetch returns with the context; nothing is cached, nothing reported
	r.Wait()
	if entries, _ := r.Size(); entries != 0 || resolved.Load() != 0 {
		t.Fatalf("%d entries, %d outcomes after a stop", entries, resolved.Load())
	}
}

// awaited runs Await in the background; the channel gets what it did.
func awaited(r *Resolver, ctx context.Context, keys ...Key) <-chan Waited {
	done := make(chan Waited, 1)
	go func() { done <- r.Await(ctx, keys) }()
	return done
}

func TestAwaitReturnsOnceTheResolutionLands(t *testing.T) {
	source := newFakeSource()
	source.set("reg/app:v1", Fetched{Layers: layersOf("a", "b")}, nil)
	source.gate = make(chan struct{})
	source.started = make(chan Key, 1)
	r := started(t, source, Config{})
	done := awaited(r, context.Background(), key("reg/app:v1"))
	<-source.started // the fetch is under way and the caller waits for it
	select {
	case got := <-done:
		t.Fatalf("Await returned (%v) before the registry answered", got)
	default:
	}
	close(source.gate)
	if got := <-done; got != Answered {
		t.Fatalf("Await: %v, want Answered", got)
	}
	if found, ok := r.Layers(key("reg/app:v1")); !ok || len(found) != 2 {
		t.Fatalf("after the wait: %v %v", found, ok)
	}
	// answered now: no wait (Cached: the caller reads the answer), no fetch
	if got := r.Await(context.Background(), []Key{key("reg/app:v1")}); got != Cached || source.fetches.Load() != 1 {
		t.Fatalf("a cached key: %v, %d fetches", got, source.fetches.Load())
	}
}

func TestAwaitEndsAtItsBoundAndNoOneWaitsForThatResolutionAgain(t *testing.T) {
	source := newFakeSource()
	source.gate = make(chan struct{}) // the registry hangs until the test ends
	source.started = make(chan Key, 1)
	t.Cleanup(func() { close(source.gate) })
	r := started(t, source, Config{})
	bound, reached := context.WithCancel(context.Background())
	done := awaited(r, bound, key("reg/slow:v1"))
	<-source.started
	reached() // the caller's bound (a timer in the plugin; the test's hand here)
	if got := <-done; got != Bounded {
		t.Fatalf("Await: %v, want Bounded", got)
	}
	// the resolution is still under way: the next caller does not wait for it (a context
	// that never ends: were it to wait, the test would hang)
	if got := r.Await(context.Background(), []Key{key("reg/slow:v1")}); got != NotWaited {
		t.Fatalf("second Await: %v, want NotWaited", got)
	}
	if got := source.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches, want the one under way", got)
	}
}

func TestAwaitWithATimerReturnsAtTheBound(t *testing.T) {
	source := newFakeSource()
	source.gate = make(chan struct{})
	t.Cleanup(func() { close(source.gate) })
	r := started(t, source, Config{})
	const bound = 50 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if got := r.Await(ctx, []Key{key("reg/slow:v1")}); got != Bounded {
		t.Fatalf("Await: %v, want Bounded", got)
	}
	// the slack is generous (a loaded 2-core machine): what is asserted is that the
	// caller is not held for the registry's own deadline
	if elapsed := time.Since(start); elapsed > bound+2*time.Second {
		t.Fatalf("returned after %s for a %s bound", elapsed, bound)
	}
}

func TestAFailedImageIsNotWaitedForAgainWithinTheNegativeTTL(t *testing.T) {
	source := newFakeSource()
	source.set("reg/gone:v1", Fetched{}, errors.New("reg: 404"))
	now := &clock{now: time.Unix(1_700_000_000, 0)}
	r := started(t, source, Config{Now: now.Now, NegativeTTL: 10 * time.Second})
	if got := r.Await(context.Background(), []Key{key("reg/gone:v1")}); got != Answered {
		t.Fatalf("first Await: %v, want Answered (with a failure)", got)
	}
	if _, ok := r.Layers(key("reg/gone:v1")); ok {
		t.Fatal("a failure answered layers")
	}
	now.advance(9 * time.Second)
	if got := r.Await(context.Background(), []Key{key("reg/gone:v1")}); got != NotWaited {
		t.Fatalf("within the negative TTL: %v, want NotWaited", got)
	}
	if got := source.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches within the negative TTL, want 1", got)
	}
	// past it, the registry is asked again (and one caller may wait once more)
	now.advance(2 * time.Second)
	if got := r.Await(context.Background(), []Key{key("reg/gone:v1")}); got != Answered || source.fetches.Load() != 2 {
		t.Fatalf("past the negative TTL: %v, %d fetches", got, source.fetches.Load())
	}
}

func TestConcurrentAwaitsShareOneResolution(t *testing.T) {
	source := newFakeSource()
	source.set("reg/app:v1", Fetched{Layers: layersOf("a")}, nil)
	source.set("reg/lib:v1", Fetched{Layers: layersOf("b")}, nil)
	source.gate = make(chan struct{})
	r := started(t, source, Config{})
	var wg sync.WaitGroup
	results := make(chan Waited, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- r.Await(context.Background(), []Key{key("reg/app:v1"), key("reg/lib:v1")})
		}()
	}
	// let the registry answer once every caller joined or returned: the pending count
	// stays at the two keys however many callers wait for them
	if pending := r.Pending(); pending > 2 {
		t.Fatalf("%d resolutions pending for 2 images", pending)
	}
	close(source.gate)
	wg.Wait()
	close(results)
	for got := range results {
		if got == Bounded {
			t.Fatal("a wait without a bound ended Bounded")
		}
	}
	if got := source.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches for 2 images awaited by 32 callers, want 2", got)
	}
	for _, image := range []string{"reg/app:v1", "reg/lib:v1"} {
		if _, ok := r.Layers(key(image)); !ok {
			t.Fatalf("%s not answered after the waits", image)
		}
	}
}
