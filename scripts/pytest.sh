#!/usr/bin/env bash
# Run one test group. pytest's "no tests collected" (exit 5) fails the group:
# a group that exists must test something. With LAYERSCHED_STAGE_LOG set (.ci/run sets
# it), the group's duration and exit status are appended there.
set -o errexit -o nounset -o pipefail
group=$1; shift
echo "== $group tests"
started=$SECONDS
status=0
"${VENV:-.venv}/bin/python" -m pytest "$@" || status=$?
if [ -n "${LAYERSCHED_STAGE_LOG:-}" ]; then
  printf '%s %d %d\n' "$group" $((SECONDS - started)) "$status" >>"$LAYERSCHED_STAGE_LOG"
fi
exit "$status"
