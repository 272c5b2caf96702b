// layersched's kube-scheduler: upstream kube-scheduler v1.20.2 with the LayerLocality
// score plugin registered out of tree. There is no Go module proxy where this is built:
// the module is compiled inside the Kubernetes v1.20.2 source tree's GOPATH, against
// that tree's vendor/ (playbooks/tools/kubernetes_build.py places it at
// vendor/layersched.io/kube-scheduler), so it lists no requirements of its own. See
// README.md.
module layersched.io/kube-scheduler

go 1.19
