// Command kubectl is upstream's kubectl, unchanged, from the Kubernetes release this
// module's go.mod pins (hack/pin_kubernetes.py): the testbed's control plane and nodes
// run the same release as the scheduler layersched builds, from the same module graph.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
