#!/usr/bin/env bash
# The kind + CRI-O testbed (make testbed DRIVER=kind / make testbed-down DRIVER=kind).
#   scripts/kind.sh up         pulumi up -> sideload (if LAYERSCHED_KIND_SIDELOAD=1) -> deploy -> scenario
#   scripts/kind.sh provision  the same without the scenario
#   scripts/kind.sh down       kind export logs, then pulumi destroy (safe to run twice)
# Settings: LAYERSCHED_KIND_STACK (Pulumi stack, default dev), PULUMI_CONFIG_PASSPHRASE
# (local backend; empty by default), LAYERSCHED_TRIALS (scenario trials per strategy).
# Needs Docker, kind, kubectl and the pulumi CLI; see docs/kind.md.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: scripts/kind.sh up|provision|down}
venv=${VENV:-.venv}
stack=${LAYERSCHED_KIND_STACK:-dev}
export PULUMI_CONFIG_PASSPHRASE=${PULUMI_CONFIG_PASSPHRASE-}
program=infra/kind

missing=()
for tool in docker kind kubectl pulumi; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "DRIVER=kind needs ${missing[*]} on PATH (Docker, kind, kubectl, pulumi CLI): see docs/kind.md" >&2
  exit 1
fi

output() { pulumi --cwd "$program" stack output --stack "$stack" "$1"; }

ensure_stack() {
  if ! pulumi --cwd "$program" stack select "$stack" >/dev/null 2>&1; then
    pulumi --cwd "$program" stack init "$stack"
  fi
}

provision() {
  ensure_stack
  echo "== pulumi up (stack $stack)" >&2
  pulumi --cwd "$program" up --stack "$stack" --yes
  kubeconfig=$(output kubeconfig_path)
  playbook=("$venv/bin/ansible-playbook")
  if [ "${LAYERSCHED_KIND_SIDELOAD:-0}" = "1" ]; then
    echo "== sideload the patched CRI-O, kubelet and control plane" >&2
    "${playbook[@]}" playbooks/sideload.yml \
      -e "sideload_cluster_name=$(output cluster_name)" \
      -e "sideload_kubeconfig=$kubeconfig" \
      -e "sideload_registry_host=$(output registry_host_address)" \
      -e "sideload_registry_cluster=$(output registry_address)"
  fi
  echo "== deploy layersched" >&2
  "${playbook[@]}" playbooks/deploy.yml \
    -e "deploy_kubeconfig=$kubeconfig" \
    -e "deploy_registry_host=$(output registry_host_address)"
}

case "$action" in
  provision)
    provision
    ;;
  up)
    provision
    echo "== scenario (reports/scenario.json)" >&2
    LAYERSCHED_KIND_STACK=$stack LAYERSCHED_KEEP_TESTBED=1 \
      "$venv/bin/python" -m pytest -m kind -p no:cacheprovider tests/e2e/test_kind_scenario.py
    echo "explore: KUBECONFIG=$(output kubeconfig_path) kubectl get pods -A;" \
      "tear down: make testbed-down DRIVER=kind" >&2
    ;;
  down)
    if pulumi --cwd "$program" stack select "$stack" >/dev/null 2>&1; then
      name=$(output cluster_name 2>/dev/null || true)
      if [ -n "$name" ] && kind get clusters 2>/dev/null | grep -qx "$name"; then
        kind export logs "reports/kind-logs" --name "$name" || true
      fi
      pulumi --cwd "$program" destroy --stack "$stack" --yes
    else
      echo "no Pulumi stack $stack: nothing to tear down" >&2
    fi
    ;;
  *)
    echo "usage: scripts/kind.sh up|provision|down" >&2
    exit 2
    ;;
esac
