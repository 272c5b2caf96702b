package layerlocality

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The test side of framework.go: how the shared tests drive the plugin through the
// framework of 1.35 and later.

const frameworkRelease = "kube-scheduler 1.35+"

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
		info := framework.NewNodeInfo()
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		value, status := pl.Score(context.Background(), state, pod, info)
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
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, errorf("invalid: %v", err)
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

func enabled(set config.PluginSet, name string) bool {
	for _, plugin := range set.Enabled {
		if plugin.Name == name {
			return true
		}
	}
	return false
}

// signPod is the plugin's signature fragments.
func signPod(pl *LayerLocality, pod *v1.Pod) ([]fwk.SignFragment, string) {
	fragments, status := pl.SignPod(context.Background(), pod)
	if !status.IsSuccess() {
		return nil, status.Message()
	}
	return fragments, ""
}

func TestSignPodSignsTheImagesTheScoreReads(t *testing.T) {
	pl := plugin(t, `{}`)
	cases := []struct {
		name string
		pod  *v1.Pod
		want []string
	}{
		// the score counts distinct layers: neither order, repetition nor the init/regular
		// split changes it, so neither changes the signature
		{name: "sorted, without repeats", pod: pod([]string{"b:1"}, "c:1", "a:1", "c:1"), want: []string{"a:1", "b:1", "c:1"}},
		{name: "same images, other places", pod: pod(nil, "a:1", "b:1", "c:1"), want: []string{"a:1", "b:1", "c:1"}},
		// a tag is part of the name a node published: no normalisation
		{name: "untagged stays untagged", pod: pod(nil, "a"), want: []string{"a"}},
		{name: "no containers", pod: pod(nil), want: []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fragments, message := signPod(pl, c.pod)
			if message != "" {
				t.Fatal(message)
			}
			if len(fragments) != 1 || fragments[0].Key != SignerName {
				t.Fatalf("fragments %+v, want one under %q", fragments, SignerName)
			}
			if got := fmt.Sprint(fragments[0].Value); got != fmt.Sprint(c.want) {
				t.Errorf("signed %s, want %v", got, c.want)
			}
		})
	}
}
