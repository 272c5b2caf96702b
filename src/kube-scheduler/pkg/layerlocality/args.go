package layerlocality

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"layersched.io/kube-scheduler/pkg/layers"
)

// StrategyLayerLocality is the plugin's default strategy: the Python core's
// layer-locality; StrategyInFlight (inflight.go) the other one it runs. Pull-time stays
// the extender's; image-locality is upstream's ImageLocality plugin.
const StrategyLayerLocality = "layer-locality"

// Bounds and defaults of the args.
const (
	// DefaultInventoryMaxAgeSeconds is three of the agent's heartbeats (it re-applies an
	// unchanged object every 600 s, refreshing observedAt): an agent that missed three
	// has stopped, and its node's layers are no longer known.
	DefaultInventoryMaxAgeSeconds int64 = 1800
	// MaxInventoryMaxAgeSeconds is a week: past that, turn the bound off with 0.
	MaxInventoryMaxAgeSeconds int64 = 7 * 24 * 3600
	// DefaultInventorySyncTimeoutSeconds bounds how long start-up waits for the first
	// list of NodeLayerInventory objects before scheduling starts without them.
	DefaultInventorySyncTimeoutSeconds int64 = 30
	MaxInventorySyncTimeoutSeconds     int64 = 600
	// DefaultSpread: the spread factor is on unless the args turn it off (issue 30).
	DefaultSpread = true
	// DefaultImageQuorum is how many distinct nodes must publish the same layers for a
	// pod image (the extender's --image-quorum default).
	DefaultImageQuorum int64 = layers.DefaultImageQuorum
	// MaxImageQuorum bounds the arg (an int32 node count would do; a quorum past a
	// cluster's size only turns resolution off).
	MaxImageQuorum int64 = 100_000
)

// Args are LayerLocality's args in a KubeSchedulerConfiguration profile's pluginConfig.
type Args struct {
	// Strategy is the scoring rule: "layer-locality" (the default) or "in-flight" (the
	// pod's estimated start, the pulls in flight counted: InFlight; spread does not apply).
	Strategy string `json:"strategy,omitempty"`
	// Spread scales each present layer by (nodes holding it / all nodes), as upstream
	// ImageLocality scales images, so that a layer found on one node in a thousand does
	// not drag every pod to that node ("node heating"), and so that an agent claiming
	// layers it copied from other nodes' objects gains at most what those layers' real
	// holders share (docs/inventory.md, "Trust model"). Default true (issue 30; false
	// before): set false on a small cluster whose agents are all trusted, where it blurs
	// the signal.
	Spread *bool `json:"spread,omitempty"`
	// InventoryMaxAgeSeconds is how old a node's NodeLayerInventory (its observedAt) may
	// be and still count; an older one scores the node 0, as if it had none. 0 turns the
	// bound off. Default 1800.
	InventoryMaxAgeSeconds *int64 `json:"inventoryMaxAgeSeconds,omitempty"`
	// InventorySyncTimeoutSeconds is how long the plugin waits at start-up for the first
	// list of NodeLayerInventory objects. Default 30.
	InventorySyncTimeoutSeconds *int64 `json:"inventorySyncTimeoutSeconds,omitempty"`
	// ImageQuorum is how many distinct nodes (with a fresh inventory) must publish the
	// same manifest digest and layers under a pod image's name for the plugin to use
	// them; with fewer, or with two answers that many nodes give, the image counts as
	// unknown. The extender's --image-quorum (docs/inventory.md, "Trust model"); 1
	// trusts any single node. Default 2.
	ImageQuorum *int64 `json:"imageQuorum,omitempty"`
	// KubeConfigPath holds the credentials to list and watch NodeLayerInventory objects
	// with; empty: kube-scheduler's own client configuration (framework.Handle's
	// KubeConfig(): its --kubeconfig, or its pod's service account).
	KubeConfigPath string `json:"kubeConfigPath,omitempty"`
	// InFlight are the in-flight strategy's args (inflight.go); only with strategy
	// in-flight, whose defaults fill what they leave out.
	InFlight *InFlightArgs `json:"inFlight,omitempty"`
	// Registry resolves, in the background, the layers of pod images no quorum of nodes
	// publishes, from their registry, as the extender does (registry_args.go). Off when
	// omitted: the plugin then makes no registry call.
	Registry *RegistryArgs `json:"registry,omitempty"`
}

// DecodeArgs reads the plugin's args (nil: every default), strictly: an unknown field is
// an error naming it, then defaults and validates them.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch typed := obj.(type) {
	case nil:
	case *runtime.Unknown:
		if typed == nil {
			break
		}
		raw := typed.Raw
		if typed.ContentType == runtime.ContentTypeYAML {
			converted, err := yaml.YAMLToJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("%s args: %v", Name, err)
			}
			raw = converted
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			decoder := json.NewDecoder(bytes.NewReader(raw))
			decoder.DisallowUnknownFields()
			if err := decoder.Decode(args); err != nil {
				return nil, fmt.Errorf("%s args: %v (fields: strategy, spread, inventoryMaxAgeSeconds, inventorySyncTimeoutSeconds, imageQuorum, kubeConfigPath, inFlight: %s, registry: %s)", Name, err, inFlightFields, registryFields)
			}
		}
	default:
		return nil, fmt.Errorf("%s args: got %T, expected the plugin's args", Name, obj)
	}
	SetDefaults(args)
	if errs := Validate(args); len(errs) > 0 {
		return nil, fmt.Errorf("%s args: %v", Name, errs.ToAggregate())
	}
	return args, nil
}

// SetDefaults fills what the args leave out.
func SetDefaults(args *Args) {
	if args.Strategy == "" {
		args.Strategy = StrategyLayerLocality
	}
	if args.Spread == nil {
		spread := DefaultSpread
		args.Spread = &spread
	}
	if args.InventoryMaxAgeSeconds == nil {
		value := DefaultInventoryMaxAgeSeconds
		args.InventoryMaxAgeSeconds = &value
	}
	if args.InventorySyncTimeoutSeconds == nil {
		value := DefaultInventorySyncTimeoutSeconds
		args.InventorySyncTimeoutSeconds = &value
	}
	if args.ImageQuorum == nil {
		value := DefaultImageQuorum
		args.ImageQuorum = &value
	}
	if args.Strategy == StrategyInFlight {
		if args.InFlight == nil {
			args.InFlight = &InFlightArgs{}
		}
		args.InFlight.setDefaults()
	}
	if args.Registry == nil {
		args.Registry = &RegistryArgs{}
	}
	args.Registry.setDefaults()
}

// Validate checks defaulted args, each error naming its field and the allowed values.
func Validate(args *Args) field.ErrorList {
	var errs field.ErrorList
	switch args.Strategy {
	case StrategyLayerLocality:
		if args.InFlight != nil {
			errs = append(errs, inFlightArgsError(args.Strategy))
		}
	case StrategyInFlight:
		if args.InFlight != nil {
			errs = append(errs, args.InFlight.validate(field.NewPath("inFlight"))...)
		}
	default:
		errs = append(errs, field.NotSupported(field.NewPath("strategy"), args.Strategy,
			[]string{StrategyLayerLocality, StrategyInFlight}))
	}
	within := func(path string, value *int64, max int64) {
		if value != nil && (*value < 0 || *value > max) {
			errs = append(errs, field.Invalid(field.NewPath(path), *value,
				fmt.Sprintf("must be between 0 and %d seconds", max)))
		}
	}
	within("inventoryMaxAgeSeconds", args.InventoryMaxAgeSeconds, MaxInventoryMaxAgeSeconds)
	within("inventorySyncTimeoutSeconds", args.InventorySyncTimeoutSeconds, MaxInventorySyncTimeoutSeconds)
	if args.ImageQuorum != nil && (*args.ImageQuorum < 1 || *args.ImageQuorum > MaxImageQuorum) {
		errs = append(errs, field.Invalid(field.NewPath("imageQuorum"), *args.ImageQuorum,
			fmt.Sprintf("must be between 1 and %d nodes (1 trusts any single node's word for an image)", MaxImageQuorum)))
	}
	if args.Registry != nil {
		errs = append(errs, args.Registry.validate(field.NewPath("registry"))...)
	}
	return errs
}
