package resolver

import (
	"container/list"
	"sync"
	"time"

	"layersched.io/kube-scheduler/pkg/layers"
)

// The cache's defaults: the Python LayerCache's (registry/_cache.py).
const (
	// DefaultPositiveTTL: a tag's layers are revalidated after this long (served
	// meanwhile, and kept when the registry cannot be reached). Tags moving faster than 5
	// minutes are rare. A digest-pinned name never expires (it names its content).
	DefaultPositiveTTL = 5 * time.Minute
	// DefaultNegativeTTL: a failure is remembered this long, so a down registry is asked
	// once per period per image, not once per pod.
	DefaultNegativeTTL = 10 * time.Second
	// DefaultMaxEntries: a cluster runs far fewer distinct images.
	DefaultMaxEntries = 65_536
	// DefaultMaxBytes bounds what the entries cost (estimated, entryCost): 64 MiB holds
	// 65,536 images of ~10 layers each, and bounds what hostile registries can make the
	// scheduler hold.
	DefaultMaxBytes = 64 * 1024 * 1024
	// MaxFailureChars: a failure is kept as text this long at most, the Python cache's
	// MAX_ERROR_CHARS (its message says where and why first; the rest is detail).
	MaxFailureChars = 300
	// entryOverheadBytes and layerOverheadBytes estimate an entry's heap beyond its
	// strings: the entry, its list element and map slot; a Layer's string header and size.
	entryOverheadBytes = 256
	layerOverheadBytes = 24
)

// entry is one cached answer: layers (nil: the last resolution failed, failure says
// why), the digest the name pointed to, when it expires.
type entry struct {
	key       Key
	layers    []layers.Layer
	failure   string
	digest    string
	pinned    bool
	expiresAt time.Time
	cost      int64
	element   *list.Element
}

func entryCost(key Key, found []layers.Layer, failure, digest string) int64 {
	cost := int64(entryOverheadBytes + len(key.Platform) + len(key.Image) + len(failure) + len(digest))
	for _, layer := range found {
		cost += int64(layerOverheadBytes + len(layer.Digest))
	}
	return cost
}

// cache maps (platform, image) to layers with TTLs, bounded in entries and in estimated
// bytes by construction: past either bound the least recently used entries go, and an
// entry larger than the whole budget is not kept. Safe for concurrent use.
type cache struct {
	mu          sync.Mutex
	entries     map[Key]*entry
	order       *list.List // least recently used at the back
	bytes       int64
	maxEntries  int
	maxBytes    int64
	positiveTTL time.Duration
	negativeTTL time.Duration
	now         func() time.Time
}

func newCache(cfg Config) *cache {
	return &cache{
		entries: map[Key]*entry{}, order: list.New(),
		maxEntries: cfg.MaxEntries, maxBytes: cfg.MaxBytes,
		positiveTTL: cfg.PositiveTTL, negativeTTL: cfg.NegativeTTL, now: cfg.Now,
	}
}

// lookup is what the cache says of key: its layers (stale when past its TTL: to be
// revalidated), or a recent failure, or nothing (an expired failure is forgotten, to be
// retried).
type lookup struct {
	layers []layers.Layer
	found  bool
	stale  bool
	failed bool
}

func (c *cache) get(key Key) lookup {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return lookup{}
	}
	c.order.MoveToFront(e.element)
	expired := !e.pinned && !c.now().Before(e.expiresAt)
	if e.layers == nil {
		if expired {
			c.drop(e)
			return lookup{}
		}
		return lookup{failed: true}
	}
	return lookup{layers: e.layers, found: true, stale: expired}
}

// peek is key's entry's layers and digest, without touching its recency.
func (c *cache) peek(key Key) ([]layers.Layer, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		return e.layers, e.digest
	}
	return nil, ""
}

// storeLayers remembers a successful resolution.
func (c *cache) storeLayers(key Key, found []layers.Layer, digest string, pinned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(&entry{key: key, layers: found, digest: digest, pinned: pinned, expiresAt: c.now().Add(c.positiveTTL)})
}

// renew extends key's layers by a TTL (unchanged: a digest check found the tag where it
// was; else a failed revalidation keeps them for the negative TTL); false when the entry
// holds no layers any more.
func (c *cache) renew(key Key, unchanged bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.layers == nil {
		return false
	}
	ttl := c.negativeTTL
	if unchanged {
		ttl = c.positiveTTL
	}
	e.expiresAt = c.now().Add(ttl)
	c.order.MoveToFront(e.element)
	return true
}

// storeFailure remembers a failed resolution as short text, unless layers are known (a
// failed revalidation keeps them, retried after the negative TTL); the layers kept, if
// any, are returned.
func (c *cache) storeFailure(key Key, failure string) []layers.Layer {
	if len(failure) > MaxFailureChars {
		failure = failure[:MaxFailureChars] + "…"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && e.layers != nil {
		e.expiresAt = c.now().Add(c.negativeTTL)
		c.order.MoveToFront(e.element)
		return e.layers
	}
	c.put(&entry{key: key, failure: failure, expiresAt: c.now().Add(c.negativeTTL)})
	return nil
}

func (c *cache) put(e *entry) {
	if old, ok := c.entries[e.key]; ok {
		c.drop(old)
	}
	e.cost = entryCost(e.key, e.layers, e.failure, e.digest)
	if e.cost > c.maxBytes {
		return // larger than the whole budget: not kept
	}
	e.element = c.order.PushFront(e)
	c.entries[e.key] = e
	c.bytes += e.cost
	for len(c.entries) > c.maxEntries || c.bytes > c.maxBytes {
		c.drop(c.order.Back().Value.(*entry))
	}
}

func (c *cache) drop(e *entry) {
	c.order.Remove(e.element)
	delete(c.entries, e.key)
	c.bytes -= e.cost
}

// sweep drops the failures past their TTL, and the tags' layers no pod asked for within
// a whole TTL after they expired (a pod would have revalidated them): what is left is
// what pods still use. It returns the entries and bytes held after.
func (c *cache) sweep() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for element := c.order.Back(); element != nil; {
		e := element.Value.(*entry)
		element = element.Prev()
		switch {
		case e.pinned:
		case e.layers == nil && !now.Before(e.expiresAt):
			c.drop(e)
		case e.layers != nil && !now.Before(e.expiresAt.Add(c.positiveTTL)):
			c.drop(e)
		}
	}
	return len(c.entries), c.bytes
}

func (c *cache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.bytes
}
