#!/usr/bin/env bash
# Scheduler throughput with the real kube-scheduler (issue 12): results in bench/results/.
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/python" bench/bench_scheduler.py "$@"
