// Command kube-scheduler is upstream's kube-scheduler, unchanged (every in-tree plugin,
// every flag), with layersched's LayerLocality score plugin registered out of tree, as
// kubernetes-sigs/scheduler-plugins registers its own. A profile that does not enable
// LayerLocality runs upstream's code only. The release is the one go.mod pins
// (hack/pin_kubernetes.py).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as upstream's command
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"layersched.io/kube-scheduler/pkg/layerlocality"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(layerlocality.Name, layerlocality.New))
	os.Exit(cli.Run(command))
}
