#!/usr/bin/env bash
# make replay: replay bench/replay/trace.json through every kube-scheduler of the local
# testbed (not part of make test: about 40 min). Brings the testbed up with the trace's
# nodes, each node's link rate and the fourth, pull-time scheduler if it is not (a testbed
# already up as the trace says is kept, with its registry warm), then runs the alternated
# rounds (bench/replay.py run): replay.json and replay.png under this run's directory
# (runs/<UTC time>/bench/results/), or over bench/results/ with RESULTS=commit
# (LAYERSCHED_RESULTS=commit); `make figures` then rewrites the blocks. Extra arguments go
# to `bench/replay.py run`, e.g. --rounds 1. Tear the testbed down afterwards with make
# testbed-down.
set -o errexit -o nounset -o pipefail
venv=${VENV:-.venv}
read -r -a up_args < <("$venv/bin/python" bench/replay.py up-args)
"$venv/bin/layersched" testbed up "${up_args[@]}"
exec "$venv/bin/python" bench/replay.py run "$@"
