#!/usr/bin/env bash
# Benchmarks of the extender against its real process; results in bench/results/.
set -o errexit -o nounset -o pipefail
"${VENV:-.venv}/bin/python" bench/bench_extender.py "$@"
# the README and docs blocks quoting extender.json and extender_hop.json
exec "${VENV:-.venv}/bin/python" bench/figures.py
