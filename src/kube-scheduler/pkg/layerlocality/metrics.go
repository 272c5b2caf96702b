package layerlocality

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The plugin's metrics, on kube-scheduler's own /metrics.
const (
	metricsNamespace = "layersched"
	metricsSubsystem = "layer_locality"
	// ReasonMissing and ReasonStale label a node scored without an inventory.
	ReasonMissing = "missing"
	ReasonStale   = "stale"
	// ReasonOverBudget labels a node whose object the index refused for its size.
	ReasonOverBudget = "over_budget"
)

var (
	nodesWithoutInventory = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "nodes_without_inventory_total",
		Help:           "Nodes scored 0 because they had no NodeLayerInventory (reason missing: no agent, or a malformed object), an older one than inventoryMaxAgeSeconds (reason stale), or one the index refused for its size (reason over_budget), one count per node scored.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	podImagesUnknown = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "pod_images_unknown_total",
		Help:           "Pod images no quorum of nodes agrees on (imageQuorum; unpublished, or published without a quorum): their layers count neither present nor needed (the plugin makes no registry call).",
		StabilityLevel: metrics.ALPHA,
	})
	podImagesWithoutQuorum = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "pod_images_without_quorum_total",
		Help:           "Pod images some node published, but which fewer than imageQuorum nodes agree on, or two answers of which reach it (one of pod_images_unknown_total): a lying node shows here.",
		StabilityLevel: metrics.ALPHA,
	})
	invalidInventories = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "invalid_inventories_total",
		Help:           "NodeLayerInventory objects ignored as malformed (an index out of range, a bad digest or size); the node then has no inventory.",
		StabilityLevel: metrics.ALPHA,
	})
	refusedInventories = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "refused_inventories_total",
		Help:           "NodeLayerInventory objects the index refused or dropped for their size: reason object_too_large (over the per-object cap) or over_budget (the largest holder when the index's budget ran out).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	inventoryBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "inventory_charged_bytes",
		Help:           "Bytes the index is charged for what it holds (an upper estimate of its heap), within its budget.",
		StabilityLevel: metrics.ALPHA,
	})
	inventoryNodes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "inventory_nodes",
		Help:           "Nodes whose NodeLayerInventory the plugin holds.",
		StabilityLevel: metrics.ALPHA,
	})
	registerMetrics sync.Once
)

func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(nodesWithoutInventory, podImagesUnknown, podImagesWithoutQuorum, invalidInventories, refusedInventories, inventoryBytes, inventoryNodes)
	})
}
