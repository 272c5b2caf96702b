package main

import (
	"context"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	reference "layersched.io/imagelocality-reference"
)

const mb = 1024 * 1024

// An image volume (KEP-4639) is where the supported minors differ. Node a holds the
// container's image and the volume's, 500M each, and is one of 2 nodes (each size halved).
// 1.35 counts none: 250M, 100 * (250M - 23M) / (1000M - 23M) = 23.
func TestImageVolumes(t *testing.T) {
	nodes := []v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: v1.NodeStatus{Images: []v1.ContainerImage{
			{Names: []string{"reg.test/app:1"}, SizeBytes: 500 * mb},
			{Names: []string{"reg.test/data:1"}, SizeBytes: 500 * mb},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	}
	pod := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "app", Image: "reg.test/app:1"}},
		Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: "reg.test/data:1"},
		}}},
	}}
	got, err := reference.Score(context.Background(), newCache, &reference.Case{Name: "volumes", Nodes: nodes, Pods: []v1.Pod{pod}})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 23, "b": 0}; !maps.Equal(got["p"], want) {
		t.Errorf("scores %v, want %v", got["p"], want)
	}
}
