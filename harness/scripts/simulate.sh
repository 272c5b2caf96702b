#!/usr/bin/env bash
# make simulate: hotedge20, edge-hetero, two slower-link sensitivity runs and scale,
# with the production strategies. Writes simulation.json and simulation-*.png under this
# run's directory (runs/<UTC time>/harness/results/), or over harness/results/ with RESULTS=commit
# (LAYERSCHED_RESULTS=commit); the blocks of README.md and docs/simulator.md change only
# through `make figures`. Extra arguments go to the CLI (e.g. --from-report to re-plot the
# committed report without simulating).
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/layersched" simulate "$@"
