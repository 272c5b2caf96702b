package layerlocality

// The in-flight strategy (strategy: in-flight): the pod's estimated start on each node,
// the pulls in flight there counted (docs/in-flight.md). The rule is package layers'
// (inflight.go, held to the Python core by a parity test); this file reads its inputs
// from what kube-scheduler already holds: each node's pods, assumed and bound, from its
// NodeInfo (no API call), their images' layers from the index's agreement, the node's
// link from its label.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"layersched.io/kube-scheduler/pkg/layers"
)

// StrategyInFlight is the in-flight strategy's name in the args.
const StrategyInFlight = "in-flight"

// Bounds of the in-flight state, against hostile pods (the Python core's by the same
// meaning: layers.MaxPendingPullsPerNode and MaxLayersPerPendingPod bound what counts).
const (
	// maxInFlightNodes bounds the per-node entries kept between cycles; past it they are
	// dropped at once and rebuilt from the NodeInfos as cycles need them.
	maxInFlightNodes = 20_000
	// maxFirstSeen bounds the pods remembered without a PodScheduled time (assumed pods).
	maxFirstSeen = 65_536
	// maxResolvedImages bounds the pending images whose layers are remembered;
	// imageTTL is how long (an image's agreement may change).
	maxResolvedImages = 8_192
	imageTTL          = 30 * time.Second
	// missTTL is how long an image no agreement answers is not asked again (a node that
	// keeps one such pod pending is made again each cycle meanwhile, from this cache).
	missTTL = 5 * time.Second
)

// pullFailures are the kubelet's waiting reasons for a failed pull: such a pod pulls
// nothing meanwhile (the Python core's PULL_FAILURES, core/boundpod.py).
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// InFlightArgs are the in-flight strategy's args (the Python core's InFlightArgs).
type InFlightArgs struct {
	// PullMode is how the nodes' kubelets pull: "serial" (serializeImagePulls: true, the
	// default) or "parallel".
	PullMode string `json:"pullMode,omitempty"`
	// NewBytesWeight is how much the link time of the pod's own new bytes counts again,
	// for the later pods on the node (>= 0; default 0.25).
	NewBytesWeight *float64 `json:"newBytesWeight,omitempty"`
	// OverheadSeconds is the start cost added to every estimate (>= 0; default 1).
	OverheadSeconds *float64 `json:"overheadSeconds,omitempty"`
	// DefaultBandwidthBitsPerS is a node's link without a layersched.io/bandwidth-bits-per-s
	// label or annotation (> 0; default 100 Mbit/s).
	DefaultBandwidthBitsPerS *float64 `json:"defaultBandwidthBitsPerS,omitempty"`
	// MaxPendingAgeSeconds: a pod bound longer ago no longer counts as pulling (> 0;
	// default 600).
	MaxPendingAgeSeconds *float64 `json:"maxPendingAgeSeconds,omitempty"`
}

// inFlightFields names the fields for the decoder's error.
const inFlightFields = "pullMode, newBytesWeight, overheadSeconds, defaultBandwidthBitsPerS, maxPendingAgeSeconds"

func (a *InFlightArgs) setDefaults() {
	if a.PullMode == "" {
		a.PullMode = string(layers.Serial)
	}
	defaulted := func(value **float64, def float64) {
		if *value == nil {
			*value = &def
		}
	}
	defaulted(&a.NewBytesWeight, layers.DefaultNewBytesWeight)
	defaulted(&a.OverheadSeconds, layers.DefaultOverheadSeconds)
	defaulted(&a.DefaultBandwidthBitsPerS, layers.DefaultBandwidthBitsPerS)
	defaulted(&a.MaxPendingAgeSeconds, layers.DefaultMaxPendingAgeSeconds)
}

func (a *InFlightArgs) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.PullMode != string(layers.Serial) && a.PullMode != string(layers.Parallel) {
		errs = append(errs, field.NotSupported(path.Child("pullMode"), a.PullMode,
			[]string{string(layers.Serial), string(layers.Parallel)}))
	}
	check := func(name string, value *float64, positive bool) {
		if value == nil {
			return
		}
		if math.IsNaN(*value) || math.IsInf(*value, 0) || *value < 0 || (positive && *value == 0) {
			bound := ">= 0"
			if positive {
				bound = "> 0"
			}
			errs = append(errs, field.Invalid(path.Child(name), *value, "must be a finite number "+bound))
		}
	}
	check("newBytesWeight", a.NewBytesWeight, false)
	check("overheadSeconds", a.OverheadSeconds, false)
	check("defaultBandwidthBitsPerS", a.DefaultBandwidthBitsPerS, true)
	check("maxPendingAgeSeconds", a.MaxPendingAgeSeconds, true)
	return errs
}

// pendingImages are the images a pod bound to a node still waits for: those of its
// containers not created yet (no image ID, not running, not terminated; init containers
// first) that no created container runs, and its image volumes while none is created;
// none for a pod not bound, not Pending, or whose pull failed. The Python core's
// pending_images (core/boundpod.py; the same table in both languages' tests).
func pendingImages(pod *v1.Pod) []string {
	if pod.Spec.NodeName == "" || (pod.Status.Phase != "" && pod.Status.Phase != v1.PodPending) {
		return nil
	}
	statuses := make(map[string]*v1.ContainerStatus,
		len(pod.Status.InitContainerStatuses)+len(pod.Status.ContainerStatuses))
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			statuses[list[i].Name] = &list[i]
		}
	}
	var waiting []string
	present := map[string]bool{}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, container := range list {
			status, ok := statuses[container.Name]
			if ok && status.State.Waiting != nil && pullFailures[status.State.Waiting.Reason] {
				return nil
			}
			if ok && (status.ImageID != "" || status.State.Running != nil || status.State.Terminated != nil) {
				present[container.Image] = true
				continue
			}
			waiting = append(waiting, container.Image)
		}
	}
	if len(present) == 0 {
		for _, volume := range pod.Spec.Volumes {
			if volume.Image != nil {
				waiting = append(waiting, volume.Image.Reference)
			}
		}
	}
	images := waiting[:0]
	seen := map[string]bool{}
	for _, image := range waiting {
		if image != "" && !present[image] && !seen[image] {
			seen[image] = true
			images = append(images, image)
		}
	}
	return images
}

// boundAt is when the pod was bound (its PodScheduled condition turned true), in Unix
// seconds; false when it does not say (an assumed pod).
func boundAt(pod *v1.Pod) (float64, bool) {
	for _, condition := range pod.Status.Conditions {
		if condition.Type == v1.PodScheduled && condition.Status == v1.ConditionTrue {
			if condition.LastTransitionTime.IsZero() {
				return 0, false
			}
			return float64(condition.LastTransitionTime.Unix()), true
		}
	}
	return 0, false
}

// pendingNode is what the in-flight strategy reads of a candidate node: kube-scheduler's
// NodeInfo, through the framework's adapter. The Node's metadata (name, link labels) is
// read only when needed: an idle node the caller places is scored without it (its
// object is one more cache line a candidate, on every cycle).
type pendingNode struct {
	meta *metav1.ObjectMeta
	// placed: the caller places the node (slot, id), for the placement it gives scores;
	// not placed: the node is looked up by name.
	placed bool
	// slot is the node's place in the caller's node list (its facts are kept by it), id
	// its id in the placement's name table.
	slot       int32
	id         layers.NodeID
	generation int64
	// pods lists the node's pods (assumed and bound), read only when its facts are made
	// again (a pointer in an interface: no allocation per node and cycle).
	pods podLister
}

// name is the node's name.
func (n *pendingNode) name() string {
	return n.meta.Name
}

// placement is where the caller's placed nodes are: their ids' name table, the identity
// of their slots (equal, with ==, while the slots are the same) and how many there are.
// The zero placement places none.
type placement struct {
	names   *layers.NameTable
	version any
	slots   int
}

// podLister lists a node's pods.
type podLister interface {
	list() []*v1.Pod
}

// nodeFacts are a node's link and pending pulls, as of one NodeInfo generation.
type nodeFacts struct {
	generation int64
	bitsPerS   float64
	// pulls are its pending pods (their layers resolved when the entry was made); a
	// pull whose images were not all known makes the entry be made again next cycle.
	pulls    []layers.PendingPull
	complete bool
	// kept is the node's backlog as last computed (nil: none), with what it rests on
	// (under inFlight.mu): see keptBacklog.
	kept *keptBacklog
}

// keptBacklog is a node's backlog (layers.NodeBacklog) kept between cycles. It holds
// while the node's facts are the same (its NodeInfo generation), the index's epoch is
// the same (the layers the node holds), the earliest pull it counted still counts
// (later ones count as long, and an expired one never again), and the node's inventory,
// when fresh, still is (a stale one stays so within the epoch). The rule's result is
// then what NodeBacklog would give again: only the time it is read at moves, and that
// only through Backlog.Remaining, computed each cycle.
type keptBacklog struct {
	backlog layers.Backlog
	epoch   uint64
	// earliest is the earliest counted pull's bind time; counted is false when none
	// counted (nothing pending counts again within the facts).
	earliest float64
	counted  bool
	// observed is the node's inventory's observed time, when fresh was true.
	observed int64
	fresh    bool
}

type resolvedImage struct {
	layers []layers.Layer
	known  bool
	at     time.Time
}

// inFlight is the strategy's state between cycles: each node's facts by generation,
// pods' first-seen times, pending images' layers; bounded (the constants above).
type inFlight struct {
	args        layers.CostArgs
	defaultBits float64
	maxAge      float64
	// resolve gives an image's layers (the index's agreement), or false.
	resolve func(image string, now time.Time) ([]layers.Layer, bool)

	mu        sync.Mutex
	nodes     map[string]*nodeFacts
	firstSeen map[string]float64
	images    map[string]resolvedImage
	// bySlot are the facts of the placed nodes, by slot, for one placement's slots
	// (slotsVersion): dropped when they change (at most maxInFlightNodes of them; past it,
	// the nodes are kept by name).
	bySlot       []*nodeFacts
	slotsVersion any
}

func newInFlight(args *InFlightArgs, resolve func(string, time.Time) ([]layers.Layer, bool)) *inFlight {
	return &inFlight{
		args: layers.CostArgs{
			Mode:            layers.PullMode(args.PullMode),
			OverheadSeconds: *args.OverheadSeconds,
			NewBytesWeight:  *args.NewBytesWeight,
		},
		defaultBits: *args.DefaultBandwidthBitsPerS,
		maxAge:      *args.MaxPendingAgeSeconds,
		resolve:     resolve,
		nodes:       map[string]*nodeFacts{},
		firstSeen:   map[string]float64{},
		images:      map[string]resolvedImage{},
	}
}

// factsAndBacklogLocked are node's facts (facts) and its kept backlog when it still
// holds at now for the index's epoch (nil otherwise); called with f.mu held.
func (f *inFlight) factsAndBacklogLocked(node *pendingNode, now time.Time, epoch uint64, indexMaxAge time.Duration) (*nodeFacts, *layers.Backlog) {
	facts := f.factsLocked(node, now)
	kept := facts.kept
	if kept == nil || kept.epoch != epoch {
		return facts, nil
	}
	if kept.counted && !(unixSeconds(now)-kept.earliest <= f.maxAge) {
		return facts, nil
	}
	if kept.fresh && !layers.StillFresh(kept.observed, now, indexMaxAge) {
		return facts, nil
	}
	return facts, &kept.backlog
}

// keep keeps backlog, computed at nowS from held, as node facts' (unless a pull was bound
// after nowS: its bind time then moves with the clock, so the backlog is not kept).
func (f *inFlight) keep(facts *nodeFacts, node string, backlog layers.Backlog, held holdings, nowS float64) {
	kept := &keptBacklog{backlog: backlog, epoch: held.Epoch()}
	for _, pull := range facts.pulls {
		if pull.BoundAt > nowS {
			return
		}
		if nowS-pull.BoundAt <= f.maxAge && (!kept.counted || pull.BoundAt < kept.earliest) {
			kept.earliest, kept.counted = pull.BoundAt, true
		}
	}
	kept.observed, kept.fresh = held.Observed(node)
	f.mu.Lock()
	defer f.mu.Unlock()
	facts.kept = kept
}

// factsLocked are node's link and pending pulls: kept while its NodeInfo's generation
// is the same (a pod added, changed or removed, or the Node changed, moves it); called
// with f.mu held.
func (f *inFlight) factsLocked(node *pendingNode, now time.Time) *nodeFacts {
	bySlot := node.placed && f.bySlot != nil
	var kept *nodeFacts
	if bySlot {
		kept = f.bySlot[node.slot]
	} else {
		kept = f.nodes[node.name()]
	}
	if kept != nil && kept.generation == node.generation && kept.complete {
		return kept
	}
	facts := &nodeFacts{
		generation: node.generation,
		bitsPerS:   layers.Bandwidth(node.meta.Labels, node.meta.Annotations, f.defaultBits),
		complete:   true,
	}
	nowS := unixSeconds(now)
	for _, pod := range node.pods.list() {
		images := pendingImages(pod)
		if len(images) == 0 {
			continue
		}
		key := string(pod.UID)
		if key == "" {
			key = pod.Namespace + "/" + pod.Name
		}
		bound, ok := boundAt(pod)
		if !ok {
			bound = f.seen(key, nowS)
		}
		var podLayers []layers.Layer
		seen := map[string]bool{}
		for _, image := range images {
			imageLayers, known := f.layersOf(image, now)
			facts.complete = facts.complete && known
			for _, layer := range imageLayers {
				if !seen[layer.Digest] {
					seen[layer.Digest] = true
					podLayers = append(podLayers, layer)
				}
			}
		}
		facts.pulls = append(facts.pulls, layers.PendingPull{Key: key, BoundAt: bound, Layers: podLayers})
	}
	if bySlot {
		f.bySlot[node.slot] = facts
		return facts
	}
	if _, kept := f.nodes[node.name()]; !kept && len(f.nodes) >= maxInFlightNodes {
		clear(f.nodes)
	}
	f.nodes[node.name()] = facts
	return facts
}

// place readies the facts by slot for at's slots (called with f.mu held).
func (f *inFlight) place(at placement) {
	switch {
	case at.version == nil || at.slots > maxInFlightNodes:
		f.bySlot, f.slotsVersion = nil, nil
	case at.version != f.slotsVersion || len(f.bySlot) != at.slots:
		f.bySlot, f.slotsVersion = make([]*nodeFacts, at.slots), at.version
	}
}

// seen is when pod key was first seen without a bind time (called with f.mu held).
func (f *inFlight) seen(key string, nowS float64) float64 {
	if at, ok := f.firstSeen[key]; ok {
		return at
	}
	if len(f.firstSeen) >= maxFirstSeen {
		clear(f.firstSeen)
	}
	f.firstSeen[key] = nowS
	return nowS
}

// layersOf are image's layers (and whether known), remembered for imageTTL, a miss for
// missTTL (called with f.mu held).
func (f *inFlight) layersOf(image string, now time.Time) ([]layers.Layer, bool) {
	if kept, ok := f.images[image]; ok {
		ttl := imageTTL
		if !kept.known {
			ttl = missTTL
		}
		if now.Sub(kept.at) < ttl {
			return kept.layers, kept.known
		}
	}
	found, known := f.resolve(image, now)
	if _, kept := f.images[image]; !kept && len(f.images) >= maxResolvedImages {
		clear(f.images)
	}
	f.images[image] = resolvedImage{layers: found, known: known, at: now}
	return found, known
}

// podTerms is what the in-flight costs need of the pod: its distinct layers (with their
// total), and heldOf, which answers which nodes hold which of digests, and whether each
// node of byNode holds its own digests (one look at the index for the pod's layers on
// every candidate and the candidates' pending pods' layers on their nodes).
type podTerms struct {
	layers []layers.Layer
	total  int64
	heldOf func(digests []string, byNode map[string][]string) holdings
	// epoch is the index's change count now (nil: no backlog is kept between cycles);
	// maxAge its inventories' age bound.
	epoch  func() uint64
	maxAge time.Duration
}

// holdings say which nodes hold which layers (layers.Held).
type holdings interface {
	Holds(node, digest string) bool
	// Mask: bit i for the i-th distinct digest asked of every node (the first 64).
	Mask(node string) uint64
	// MaskByID is Mask for a node's id in Names (==) only.
	MaskByID(id layers.NodeID) uint64
	Names() *layers.NameTable
	// Epoch is the index's change count they were read at.
	Epoch() uint64
	// Observed: a node asked its own digests, its inventory's observed time when fresh.
	Observed(node string) (int64, bool)
}

// scores are the candidates' in-flight scores, as nodes lists them (the rule:
// layers.NodeBacklog, SplitBytes, StartCost, ScoreCosts; the Python core's
// InFlight.score). at is where the placed nodes are (their facts kept by slot, their
// held layers read by id); the others are looked up by name.
func (f *inFlight) scores(now time.Time, nodes []pendingNode, at placement, pod podTerms) []int64 {
	nowS := unixSeconds(now)
	facts := make([]*nodeFacts, len(nodes))
	digests := make([]string, 0, len(pod.layers))
	for _, layer := range pod.layers {
		digests = append(digests, layer.Digest)
	}
	// a node's pending layers are asked of the index only when its backlog is not kept
	caching := pod.epoch != nil
	var epoch uint64
	if caching {
		epoch = pod.epoch()
	}
	kept := make([]*layers.Backlog, len(nodes))
	pending := map[string][]string{}
	ask := func(i int) {
		for _, pull := range facts[i].pulls {
			name := nodes[i].name()
			for _, layer := range pull.Layers {
				pending[name] = append(pending[name], layer.Digest)
			}
		}
	}
	f.mu.Lock()
	f.place(at)
	for i := range nodes {
		if caching {
			facts[i], kept[i] = f.factsAndBacklogLocked(&nodes[i], now, epoch, pod.maxAge)
		} else {
			facts[i] = f.factsLocked(&nodes[i], now)
		}
	}
	f.mu.Unlock()
	for i := range nodes {
		if kept[i] == nil {
			ask(i)
		}
	}
	holds := pod.heldOf(digests, pending)
	if caching && holds.Epoch() != epoch {
		// the index changed meanwhile: nothing kept holds; every node's from this Held
		clear(pending)
		for i := range nodes {
			kept[i] = nil
			ask(i)
		}
		holds = pod.heldOf(digests, pending)
	}
	costs := make([]float64, len(nodes))
	var name string
	nodeHolds := func(digest string) bool { return holds.Holds(name, digest) }
	masked := len(pod.layers) <= layers.MaskedLayers
	byID := at.names != nil && holds.Names() == at.names
	for i := range nodes {
		node := &nodes[i]
		// the pod's own layers the node holds: one mask, read by id (else looked up by
		// name), when the pod has at most MaskedLayers of them (Held.Holds answers them
		// from the same mask)
		var mask uint64
		if masked {
			if byID && node.placed {
				mask = holds.MaskByID(node.id)
			} else {
				mask = holds.Mask(node.name())
			}
		}
		if masked && len(facts[i].pulls) == 0 {
			// an idle node (most of them): nothing arriving nor queued (SplitBytes and
			// StartCost with layers.Idle)
			held, _, total := layers.SplitMasked(pod.layers, mask, &layers.Idle)
			costs[i] = layers.StartCost(held, 0, total, 0, 0, 0, facts[i].bitsPerS, f.args)
			continue
		}
		name = node.name()
		rate := facts[i].bitsPerS / layers.BitsPerByte
		backlog := layers.Idle
		switch {
		case kept[i] != nil:
			backlog = *kept[i]
		case len(facts[i].pulls) > 0:
			backlog = layers.NodeBacklog(facts[i].pulls, nodeHolds, rate, nowS, f.maxAge)
			if caching {
				f.keep(facts[i], name, backlog, holds, nowS)
			}
		}
		var held, arriving, total int64
		if masked {
			held, arriving, total = layers.SplitMasked(pod.layers, mask, &backlog)
		} else {
			held, arriving, total = layers.SplitBytes(pod.layers, nodeHolds, &backlog)
		}
		remaining := backlog.Remaining(rate, nowS)
		costs[i] = layers.StartCost(held, arriving, total, remaining, backlog.EnqueuedBytes, backlog.Pulls, facts[i].bitsPerS, f.args)
	}
	return layers.ScoreCosts(costs, pod.total)
}

// prepare scores the pod on every candidate once (PreScore), as nodes lists them (the
// placed ones where at says): its images' layers as f.resolve answers them (an image it
// does not know counts neither as held nor as needed; await, when not nil, may wait for
// the registry's answers for those first and says whether it did), held and arriving
// as the index and the candidates' pods say at now.
func (f *inFlight) prepare(index *layers.Index, pod *v1.Pod, nodes []pendingNode, at placement, now time.Time, maxAge time.Duration,
	await func(images []string) bool) []int64 {
	images := appendPodImages(nil, pod)
	terms, unknown := f.podLayers(images, now)
	if len(unknown) > 0 && await != nil && await(unknown) {
		terms, _ = f.podLayers(images, now)
	}
	terms.heldOf = func(digests []string, byNode map[string][]string) holdings {
		return index.Held(digests, byNode, now, maxAge)
	}
	terms.epoch, terms.maxAge = index.Epoch, maxAge
	return f.scores(now, nodes, at, terms)
}

// podLayers are images' distinct layers as f.resolve answers them, and the images it
// does not know.
func (f *inFlight) podLayers(images []string, now time.Time) (podTerms, []string) {
	var terms podTerms
	var unknown []string
	seen := map[string]bool{}
	for _, image := range images {
		found, known := f.resolve(image, now)
		if !known {
			unknown = append(unknown, image)
			continue
		}
		for _, layer := range found {
			if !seen[layer.Digest] {
				seen[layer.Digest] = true
				terms.layers = append(terms.layers, layer)
				terms.total += layer.SizeBytes // sizes are capped at 1 TiB: no pod wraps
			}
		}
	}
	return terms, unknown
}

// awaitRegistry is prepare's wait for the registry's answers for the pod's unknown
// images, on the default platform the strategy resolves in (nil: no registry).
func (pl *LayerLocality) awaitRegistry(ctx context.Context) func(images []string) bool {
	if pl.registry == nil || pl.registry.wait <= 0 {
		return nil
	}
	return func(images []string) bool {
		return pl.registry.await(ctx, images, []string{pl.registry.platforms.fallback})
	}
}

// imageLayers is how the in-flight strategy resolves an image (the pod's and its
// candidates' pending pods'): the layers a quorum of nodes agrees on; else, with
// registry resolution, the registry's answer for the default platform when the
// background resolver has one (asking queues it for a later cycle); else unknown.
func (pl *LayerLocality) imageLayers(image string, now time.Time) ([]layers.Layer, bool) {
	found, resolution := pl.index.ImageLayers(image, now, pl.maxAge)
	if resolution == layers.Agreed {
		return found, true
	}
	if pl.registry == nil {
		return nil, false
	}
	return platformSource{pl.registry.resolver, pl.registry.platforms.fallback}.Layers(image)
}

// unixSeconds is t in Unix seconds with its fraction (as Python's time.time()).
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// inFlightArgsError names an in-flight field set for another strategy.
func inFlightArgsError(strategy string) *field.Error {
	return field.Invalid(field.NewPath("inFlight"), "(set)",
		fmt.Sprintf("applies to strategy %q only, not %q", StrategyInFlight, strategy))
}
