#!/usr/bin/env bash
# Scheduler throughput (queue drain) and latency with the real kube-scheduler (issues 12, 24):
# results in harness/results/, the README and docs/bench-scheduler.md.
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/python" harness/bench/bench_scheduler.py "$@"
