#!/usr/bin/env bash
# make replay: replay bench/replay/trace.json through every kube-scheduler of the local
# testbed (not part of make test: about 30 min). Brings the testbed up with the trace's
# nodes and link rate if it is not (a testbed already up as the trace says is kept, with
# its registry warm), runs the alternated rounds (bench/replay.py run), then regenerates
# every measured block (make figures). Extra arguments go to `bench/replay.py run`, e.g.
# --rounds 1. Tear the testbed down afterwards with make testbed-down.
set -o errexit -o nounset -o pipefail
venv=${VENV:-.venv}
read -r nodes rate_mbit < <("$venv/bin/python" - <<'PY'
import json
doc = json.load(open("bench/replay/trace.json", encoding="utf-8"))
print(doc["cluster"]["nodes"], doc["cluster"]["link_rate_bits_per_s"] / 1e6)
PY
)
"$venv/bin/layersched" testbed up --nodes "$nodes" --rate-mbit "$rate_mbit"
"$venv/bin/python" bench/replay.py run "$@"
"$venv/bin/python" bench/figures.py
