// Command etcd is upstream's etcd server, unchanged, at the version the pinned Kubernetes
// release requires (go.etcd.io/etcd/server/v3 in this module's graph): the testbed's
// kube-apiserver stores into the etcd its own release is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
