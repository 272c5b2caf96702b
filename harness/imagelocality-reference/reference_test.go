package reference

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
)

const mb = 1024 * 1024

// newCache is the constructor of the release this module pins (1.35: an assumed-pod TTL,
// 0 as the scheduler passes, and no API dispatcher); minors/ hold the others'.
func newCache(ctx context.Context) cache.Cache {
	return cache.New(ctx, 0, nil)
}

func node(name string, images ...v1.ContainerImage) v1.Node {
	return v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Images: images}}
}

func image(sizeBytes int64, names ...string) v1.ContainerImage {
	return v1.ContainerImage{Names: names, SizeBytes: sizeBytes}
}

func containers(images ...string) []v1.Container {
	listed := make([]v1.Container, len(images))
	for i, name := range images {
		listed[i] = v1.Container{Name: "c" + string(rune('0'+i)), Image: name}
	}
	return listed
}

func TestScores(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecar := v1.Container{Name: "proxy", Image: "reg.test/proxy:1", RestartPolicy: &always}
	tests := []struct {
		name  string
		nodes []v1.Node
		pod   v1.PodSpec
		want  map[string]int64
	}{
		{
			// untagged names are looked up as :latest; each image's size is halved (1 of 2
			// nodes holds it). node1: 40M / 2 = 20M, under the 23M minimum = 0;
			// node2: 100 * (125M - 23M) / (2000M - 23M) = 5
			name: "CONTEXT.md's example",
			nodes: []v1.Node{
				node("node1", image(40*mb, "gcr.io/40:latest")),
				node("node2", image(250*mb, "gcr.io/250:latest")),
			},
			pod:  v1.PodSpec{Containers: containers("gcr.io/40", "gcr.io/250")},
			want: map[string]int64{"node1": 0, "node2": 5},
		},
		{
			// an init container and a sidecar count as containers (from 1.30), in the sum
			// and in the threshold: a: (500M + 500M + 1000M) / 2 = 1000M,
			// 100 * (1000M - 23M) / (3000M - 23M) = 32; b holds nothing = 0
			name: "init containers and a sidecar",
			nodes: []v1.Node{
				node("a",
					image(1000*mb, "reg.test/app:1"),
					image(500*mb, "reg.test/init:1"),
					image(500*mb, "reg.test/proxy:1")),
				node("b"),
			},
			pod: v1.PodSpec{
				InitContainers: append(containers("reg.test/init:1"), sidecar),
				Containers:     containers("reg.test/app:1"),
			},
			want: map[string]int64{"a": 32, "b": 0},
		},
		{
			// the size is the first reporting node's (3000M; b's 10M is ignored) and both
			// hold the name: 3000M is past the 1000M threshold of one container = 100 on
			// both
			name: "over the threshold, the first node's size",
			nodes: []v1.Node{
				node("a", image(3000*mb, "reg.test/big:1")),
				node("b", image(10*mb, "reg.test/big:1")),
			},
			pod:  v1.PodSpec{Containers: containers("reg.test/big:1")},
			want: map[string]int64{"a": 100, "b": 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: tt.pod}
			got, err := Score(context.Background(), newCache, &Case{Name: tt.name, Nodes: tt.nodes, Pods: []v1.Pod{pod}})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got["p"], tt.want) {
				t.Errorf("scores %v, want %v", got["p"], tt.want)
			}
		})
	}
}

func TestRunReadsCasesAndWritesScores(t *testing.T) {
	in := `{"cases": [{"name": "c0",
		"nodes": [{"metadata": {"name": "n1"}, "status": {"images": [{"names": ["r/a:1"], "sizeBytes": 524288000}]}},
		          {"metadata": {"name": "n2"}}],
		"pods": [{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "r/a:1"}]}}]}]}`
	var out bytes.Buffer
	if err := Run(context.Background(), newCache, "v1.35.test", strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var got Output
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	// n1: 500M / 2 = 250M, 100 * (250M - 23M) / (1000M - 23M) = 23
	want := map[string]int64{"n1": 23, "n2": 0}
	if got.KubernetesVersion != "v1.35.test" || len(got.Cases) != 1 || got.Cases[0].Name != "c0" ||
		!maps.Equal(got.Cases[0].Scores["p"], want) {
		t.Errorf("output %+v, want v1.35.test and case c0 with pod p scored %v", got, want)
	}
}

func TestRunRefusesWhatItCannotScore(t *testing.T) {
	for name, in := range map[string]string{
		"an unknown field": `{"cases": [{"name": "c", "nodes": [], "pod": []}]}`,
		"a repeated node":  `{"cases": [{"name": "c", "nodes": [{"metadata": {"name": "n"}}, {"metadata": {"name": "n"}}], "pods": []}]}`,
		"a repeated pod":   `{"cases": [{"name": "c", "nodes": [], "pods": [{"metadata": {"name": "p"}}, {"metadata": {"name": "p"}}]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := Run(context.Background(), newCache, "v1.35.test", strings.NewReader(in), &bytes.Buffer{}); err == nil {
				t.Error("no error")
			}
		})
	}
}
