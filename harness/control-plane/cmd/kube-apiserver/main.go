// Command kube-apiserver is upstream's kube-apiserver, unchanged, from the Kubernetes release this
// module's go.mod pins (hack/pin_kubernetes.py): the testbed's control plane and nodes
// run the same release as the scheduler layersched builds, from the same module graph.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
