#!/usr/bin/env bash
# make simulate: hotedge20, edge-hetero and scale with the production strategies.
# Writes reports/simulation.json, reports/simulation-*.png and prints the Markdown
# results snippet (docs/simulator.md carries a copy). Extra arguments go to the CLI.
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/layersched" simulate --out reports/simulation.json --markdown "$@"
