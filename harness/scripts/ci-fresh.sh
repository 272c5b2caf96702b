#!/usr/bin/env bash
# make ci-fresh: rehearse CI on a fresh machine without a new machine. Clones the
# committed HEAD into a new directory (no venv, no .testbed, no untracked files) and runs
# `.ci/run` there with every cache empty: LAYERSCHED_CACHE_DIR (the Kubernetes build, the
# image layers), pip's download cache and Go's build cache (GOCACHE) point into that
# directory. What it cannot undo is the apt packages already installed on this machine. The directory is kept (with
# ci.log) when the run fails, and removed when it passes unless KEEP=1.
set -o errexit -o nounset -o pipefail
repo=$(git rev-parse --show-toplevel)
cd "$repo"
# The rehearsal's testbed uses the default prefix and addresses: another must not be up.
if ip netns list 2>/dev/null | grep -q '^lstb-'; then
  echo "ci-fresh: a testbed is up here (network namespaces lstb-*), and the rehearsal" \
       "brings up its own on the same addresses: run 'make testbed-down' first" >&2
  exit 2
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "ci-fresh: note: uncommitted changes are not part of the rehearsal (it clones HEAD)" >&2
fi
head=$(git rev-parse HEAD)
work=$(mktemp -d "${CI_FRESH_DIR:-/var/tmp}/layersched-ci-fresh.XXXXXX")
echo "ci-fresh: HEAD $head in $work (caches: $work/cache, pip: $work/pip-cache)"
git clone --quiet --no-local "$repo" "$work/src"
git -C "$work/src" checkout --quiet --detach "$head"
started=$SECONDS
status=0
(
  cd "$work/src"
  unset VIRTUAL_ENV LAYERSCHED_TESTBED_DIR
  # Go's build cache too: a fresh machine compiles Kubernetes from nothing
  export LAYERSCHED_CACHE_DIR="$work/cache" PIP_CACHE_DIR="$work/pip-cache"
  export GOCACHE="$work/go-cache"
  bash .ci/run
) 2>&1 | tee "$work/ci.log" || status=$?
elapsed=$((SECONDS - started))
printf 'ci-fresh: exit %d after %dm%02ds (log: %s)\n' "$status" $((elapsed / 60)) \
  $((elapsed % 60)) "$work/ci.log"
if [ "$status" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then
  cp "$work/ci.log" "${TMPDIR:-/tmp}/layersched-ci-fresh-last.log"
  rm -rf "$work"
  echo "ci-fresh: passed; removed $work (log kept as ${TMPDIR:-/tmp}/layersched-ci-fresh-last.log)"
fi
exit "$status"
