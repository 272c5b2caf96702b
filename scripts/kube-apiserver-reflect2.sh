#!/usr/bin/env bash
# Build a kube-apiserver that survives custom resources (docs/bench-scheduler.md): the
# cached v1.20.2 tree with its vendored reflect2 v1.0.1 swapped, through a Go -overlay,
# for Debian's reflect2 v1.0.2 (golang-github-modern-go-reflect2-dev; Go 1.18+ support).
# The tree is not modified. OUT/bin gets that kube-apiserver plus links to the cache's
# other binaries and its .stamp, a drop-in --kubernetes-bin-dir for bench_scheduler.py.
#   scripts/kube-apiserver-reflect2.sh OUT
set -o errexit -o nounset -o pipefail
out=${1:?usage: $0 OUT_DIR}
cache=${LAYERSCHED_CACHE_DIR:-/var/cache/layersched}/kubernetes/1.20.5+really1.20.2-1.1+deb12u1
tree=$cache/src/kubernetes-1.20.5+really1.20.2
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -d "$tree/.go/src/k8s.io/kubernetes" ] || { echo "no built tree at $tree: run make kubernetes" >&2; exit 1; }
[ -f "$reflect2/go_above_118.go" ] || { echo "no reflect2 1.0.2 at $reflect2: apt-get install golang-github-modern-go-reflect2-dev" >&2; exit 1; }
mkdir -p "$out/bin"
python3 - "$tree" "$reflect2" "$out/overlay.json" <<'PY'
import json, os, sys
tree, new, path = sys.argv[1:]
old = f"{tree}/.go/src/k8s.io/kubernetes/vendor/github.com/modern-go/reflect2"
names = {f for d in (old, new) for f in os.listdir(d) if f.endswith((".go", ".s"))}
replace = {f"{old}/{f}": (f"{new}/{f}" if os.path.exists(f"{new}/{f}") else "") for f in names}
json.dump({"Replace": replace}, open(path, "w"), indent=1)
PY
version=k8s.io/kubernetes/vendor/k8s.io/component-base/version
cd "$tree/.go/src/k8s.io/kubernetes"
echo "building kube-apiserver with reflect2 1.0.2 (cold: ~10 min on 2 cores; log $out/build.log)"
GOPATH=$tree/.go GO111MODULE=off CGO_ENABLED=0 GOCACHE=$out/go-build-cache \
  go build -overlay "$out/overlay.json" -o "$out/bin/kube-apiserver" \
  -ldflags "-s -w -X $version.gitVersion=v1.20.2 -X $version.gitMajor=1 -X $version.gitMinor=20 -X $version.gitTreeState=clean" \
  ./cmd/kube-apiserver >"$out/build.log" 2>&1
for file in "$cache"/bin/* "$cache"/bin/.stamp; do
  [ "$(basename "$file")" = kube-apiserver ] || ln -sfn "$file" "$out/bin/$(basename "$file")"
done
echo "$out/bin"
