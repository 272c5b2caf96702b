#!/usr/bin/env bash
# make replay: replay harness/bench/replay/trace.json through every arm's kube-scheduler of the
# local testbed (the default profile the baseline), under the kubelets' serial and
# parallel pulls, with the burst case (issue 42); not part of make test:
# `harness/bench/replay.py estimate` prints how long it takes. Brings the testbed up with the
# trace's nodes, each node's link rate and every arm's scheduler if it is not (a testbed
# already up as the trace says is kept, with its registry warm), then runs the plan
# (harness/bench/replay.py run: it restarts the schedulers once, switches the kubelets' pull mode
# between blocks, shows its progress, and continues an unfinished run of the same plan):
# replay.json and replay.png under this run's directory (runs/<UTC time>/harness/results/),
# or over harness/results/ with RESULTS=commit (LAYERSCHED_RESULTS=commit); `make figures`
# then rewrites the blocks. Extra arguments go to `harness/bench/replay.py run`, e.g. --rounds 1
# (REPLAY_ARGS through make). Tear the testbed down afterwards with make testbed-down.
set -o errexit -o nounset -o pipefail
venv=${VENV:-.venv}
read -r -a up_args < <("$venv/bin/python" harness/bench/replay.py up-args)
"$venv/bin/layersched" testbed up "${up_args[@]}"
# shellcheck disable=SC2086 # REPLAY_ARGS is a list of options
exec "$venv/bin/python" harness/bench/replay.py run ${REPLAY_ARGS:-} "$@"
