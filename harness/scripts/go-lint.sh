#!/usr/bin/env bash
# make go-lint: go vet and go test -race in every Go module of the repository
# (harness/scripts/go_lint.py says which packages, and why a module has none). With
# LAYERSCHED_STAGE_LOG set (.ci/run sets it), the duration is appended there.
set -o errexit -o nounset -o pipefail
started=$SECONDS
status=0
"${VENV:-.venv}/bin/python" harness/scripts/go_lint.py "$@" || status=$?
if [ -n "${LAYERSCHED_STAGE_LOG:-}" ]; then
  printf '%s %d %d\n' go-lint $((SECONDS - started)) "$status" >>"$LAYERSCHED_STAGE_LOG"
fi
exit "$status"
