//go:build k8s120

// Command kube-scheduler is upstream's kube-scheduler v1.20.2, unchanged (every in-tree
// plugin, every flag), with layersched's LayerLocality score plugin registered out of
// tree, as kubernetes-sigs/scheduler-plugins registers its own. A profile that does not
// enable LayerLocality runs upstream's code only. This file mirrors the tree's
// cmd/kube-scheduler/scheduler.go, with the one added option.
package main

import (
	"math/rand"
	"os"
	"time"

	"github.com/spf13/pflag"

	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version" // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"layersched.io/kube-scheduler/pkg/layerlocality"
)

func main() {
	rand.Seed(time.Now().UnixNano())

	command := app.NewSchedulerCommand(app.WithPlugin(layerlocality.Name, layerlocality.New))

	pflag.CommandLine.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	logs.InitLogs()
	defer logs.FlushLogs()

	if err := command.Execute(); err != nil {
		os.Exit(1)
	}
}
