#!/usr/bin/env bash
# make testbed / make testbed-down: bring the $DRIVER testbed up (and run the seed
# scenario on it) or tear it down.
#   harness/scripts/testbed.sh up   [layersched testbed up options, e.g. --node-rate n3=5]
#   harness/scripts/testbed.sh down
# `layersched scenario` builds and pushes the scenario images itself (once), then writes
# scenario.json and scenario.png under the run's directory (runs/<UTC time>/harness/results/), or
# over harness/results/ with RESULTS=commit (LAYERSCHED_RESULTS=commit): a user's run leaves the
# clone as it was; `make figures` alone rewrites the blocks quoting harness/results/.
# LAYERSCHED_SCENARIO_ARGS passes it options, e.g. LAYERSCHED_SCENARIO_ARGS="--trials 5
# --size L3=8Mi".
# DRIVER=local (default): real registry + containerd nodes in network namespaces on this
# host (needs root on Linux). DRIVER=kind: hands over to harness/infra/kind/kind.sh. DRIVER=cloud:
# hands over to harness/infra/cloud/cloud.sh (AWS VMs from harness/infra/cloud, Ansible over SSH).
set -o errexit -o nounset -o pipefail
action=${1:?usage: harness/scripts/testbed.sh up|down [options]}
shift
driver=${DRIVER:-local}
layersched=${VENV:-.venv}/bin/layersched

case "$driver" in
  local) ;;
  kind)
    if [ -x harness/infra/kind/kind.sh ]; then
      exec harness/infra/kind/kind.sh "$action" "$@"
    fi
    echo "DRIVER=kind: harness/infra/kind/kind.sh not found (see docs/kind.md). Use DRIVER=local." >&2
    exit 1
    ;;
  cloud)
    exec harness/infra/cloud/cloud.sh "$action" "$@"
    ;;
  *)
    echo "DRIVER=$driver: unknown driver (use local, kind or cloud)" >&2
    exit 2
    ;;
esac

case "$action" in
  up)
    # the report records the whole run, bring-up included (make help shows it)
    LAYERSCHED_TESTBED_STARTED_S=$(date +%s)
    export LAYERSCHED_TESTBED_STARTED_S
    # RUNTIMES=containerd,containerd,crio: each node's runtime (CRI-O needs make crio)
    if [ -n "${RUNTIMES:-}" ]; then set -- --runtimes "$RUNTIMES" "$@"; fi
    "$layersched" testbed up "$@"
    read -r -a scenario_args <<<"${LAYERSCHED_SCENARIO_ARGS:-}"
    "$layersched" scenario "${scenario_args[@]}"
    echo "explore: ${layersched} testbed status; tear down: make testbed-down" >&2
    ;;
  down)
    "$layersched" testbed down "$@"
    ;;
  *)
    echo "usage: harness/scripts/testbed.sh up|down [options]" >&2
    exit 2
    ;;
esac
