#!/usr/bin/env bash
# make simulate: hotedge20, edge-hetero, two slower-link sensitivity runs and scale,
# with the production strategies. Writes reports/simulation.json and
# reports/simulation-*.png, and regenerates the results block (between the
# simulation:begin/end markers) of README.md (short summary) and docs/simulator.md
# (full tables) from the report.
# Extra arguments go to the CLI (e.g. --from-report to re-render without simulating).
set -o errexit -o nounset -o pipefail
exec "${VENV:-.venv}/bin/layersched" simulate --out reports/simulation.json \
  --summary-into README.md --markdown-into docs/simulator.md "$@"
