#!/usr/bin/env bash
# Benchmarks of the extender against its real process: extender.json and
# extender_memory.json under this run's directory (runs/<UTC time>/harness/results/), or over
# harness/results/ with RESULTS=commit (LAYERSCHED_RESULTS=commit); `make figures` then
# rewrites the blocks quoting them.
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/python" harness/bench/bench_extender.py "$@"
