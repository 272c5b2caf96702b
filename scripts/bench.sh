#!/usr/bin/env bash
# Benchmarks of the extender against its real process; results in bench/results/.
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/python" bench/bench_extender.py "$@"
