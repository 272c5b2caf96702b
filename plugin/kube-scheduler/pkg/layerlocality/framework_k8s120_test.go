//go:build k8s120

package layerlocality

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The test side of framework_k8s120.go: how the shared tests drive the plugin through
// the framework of 1.20.

const frameworkRelease = "kube-scheduler 1.20"

// cycle runs PreScore then Score for each node through one CycleState, as the framework
// does; it returns the first failing status's message.
func cycle(pl *LayerLocality, pod *v1.Pod, preScore bool, nodes ...string) (map[string]int64, string) {
	state := framework.NewCycleState()
	if preScore {
		if status := pl.PreScore(context.Background(), state, pod, nil); !status.IsSuccess() {
			return nil, status.Message()
		}
	}
	got := map[string]int64{}
	for _, node := range nodes {
		value, status := pl.Score(context.Background(), state, pod, node)
		if !status.IsSuccess() {
			return nil, status.Message()
		}
		got[node] = value
	}
	return got, ""
}

// decodeConfig decodes and validates a KubeSchedulerConfiguration as kube-scheduler
// loads its --config file, and returns each profile's LayerLocality args and whether the
// plugin is enabled at preScore and score.
func decodeConfig(document []byte) ([]profileUse, error) {
	object, _, err := scheme.Codecs.UniversalDecoder().Decode(document, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := object.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, errorf("decoded a %T", object)
	}
	if errs := validation.ValidateKubeSchedulerConfiguration(cfg); len(errs) > 0 {
		return nil, errorf("invalid: %v", errs.ToAggregate())
	}
	var uses []profileUse
	for _, profile := range cfg.Profiles {
		for _, pluginConfig := range profile.PluginConfig {
			if pluginConfig.Name == Name {
				uses = append(uses, profileUse{
					args:    pluginConfig.Args,
					enabled: enabled(profile.Plugins.PreScore, Name) && enabled(profile.Plugins.Score, Name),
				})
			}
		}
	}
	return uses, nil
}

func enabled(set *config.PluginSet, name string) bool {
	if set == nil {
		return false
	}
	for _, plugin := range set.Enabled {
		if plugin.Name == name {
			return true
		}
	}
	return false
}
