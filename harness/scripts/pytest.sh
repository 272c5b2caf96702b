#!/usr/bin/env bash
# Run one test group. pytest's "no tests collected" (exit 5) fails the group:
# a group that exists must test something. With LAYERSCHED_STAGE_LOG set (.ci/run sets
# it), the group's duration and exit status are appended there. The slowest tests (over
# 5 s) are listed at the end: where a fresh CI's minutes go.
set -o errexit -o nounset -o pipefail
group=$1; shift
echo "== $group tests"
started=$SECONDS
status=0
"${VENV:-.venv}/bin/python" -m pytest --durations=15 --durations-min=5 "$@" || status=$?
if [ -n "${LAYERSCHED_STAGE_LOG:-}" ]; then
  printf '%s %d %d\n' "$group" $((SECONDS - started)) "$status" >>"$LAYERSCHED_STAGE_LOG"
fi
exit "$status"
