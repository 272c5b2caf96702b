#!/usr/bin/env bash
# The kind + CRI-O testbed (make testbed DRIVER=kind / make testbed-down DRIVER=kind).
#   harness/infra/kind/kind.sh up         pulumi up -> sideload (if LAYERSCHED_KIND_SIDELOAD=1) -> deploy -> scenario
#   harness/infra/kind/kind.sh provision  the same without the scenario
#   harness/infra/kind/kind.sh down       kind export logs, then pulumi destroy (safe to run twice)
# Settings: LAYERSCHED_KIND_STACK (Pulumi stack, default dev), PULUMI_CONFIG_PASSPHRASE
# (local backend; empty by default), LAYERSCHED_E2E_TRIALS (scenario trials per strategy,
# default 5). The report goes to runs/<UTC time>/harness/results/scenario.json, harness/results/ with
# RESULTS=commit (LAYERSCHED_E2E_REPORT_DIR overrides both).
# Side-loading (LAYERSCHED_KIND_SIDELOAD=1) needs the stack's kubernetesVersion to have the
# patched tree's minor, LAYERSCHED_PATCHED_KUBERNETES_MINOR (default 1.22, the Ryax fork's);
# LAYERSCHED_KIND_SIDELOAD_ANY_VERSION=1 skips that check.
# Needs Docker, kind, kubectl and the pulumi CLI; see docs/kind.md.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/../../.."
action=${1:?usage: harness/infra/kind/kind.sh up|provision|down}
venv=${VENV:-.venv}
stack=${LAYERSCHED_KIND_STACK:-dev}
export PULUMI_CONFIG_PASSPHRASE=${PULUMI_CONFIG_PASSPHRASE-}
program=harness/infra/kind
sideload=${LAYERSCHED_KIND_SIDELOAD:-0}
patched_minor=${LAYERSCHED_PATCHED_KUBERNETES_MINOR:-1.22}

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

# A patched kubelet of one minor in a node image of another does not come up (and the
# patched API server's types must match the kubelet's): refuse before creating anything.
check_sideload_version() {
  local version minor
  version=$(pulumi --cwd "$program" config get kubernetesVersion --stack "$stack" 2>/dev/null || true)
  minor=$(printf '%s\n' "$version" | sed -n 's/^v\{0,1\}\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
  if [ "$minor" = "$patched_minor" ] || [ "${LAYERSCHED_KIND_SIDELOAD_ANY_VERSION:-0}" = "1" ]; then
    return 0
  fi
  echo "LAYERSCHED_KIND_SIDELOAD=1: stack $stack is set for Kubernetes" \
    "${version:-1.30 (kubernetesVersion not set)} but the patched components are $patched_minor." \
    "Use a $patched_minor node image and say so, e.g. for seed 001's:" \
    "pulumi --cwd $program config set usePrebuiltNodeImage true &&" \
    "pulumi --cwd $program config set kubernetesVersion v1.22.6 (docs/kind.md, Patched components);" \
    "or set LAYERSCHED_KIND_SIDELOAD_ANY_VERSION=1 to side-load anyway" >&2
  exit 1
}

provision() {
  ensure_stack
  if [ "$sideload" = "1" ]; then
    check_sideload_version
  fi
  echo "== pulumi up (stack $stack)" >&2
  pulumi --cwd "$program" up --stack "$stack" --yes
  kubeconfig=$(output kubeconfig_path)
  playbook=("$venv/bin/ansible-playbook")
  if [ "$sideload" = "1" ]; then
    echo "== sideload the patched CRI-O, kubelet and control plane" >&2
    "${playbook[@]}" harness/playbooks/sideload.yml \
      -e "sideload_cluster_name=$(output cluster_name)" \
      -e "sideload_kubeconfig=$kubeconfig" \
      -e "sideload_registry_host=$(output registry_host_address)" \
      -e "sideload_registry_cluster=$(output registry_address)"
  fi
  echo "== deploy layersched" >&2
  "${playbook[@]}" harness/playbooks/deploy.yml \
    -e "deploy_kubeconfig=$kubeconfig" \
    -e "deploy_registry_host=$(output registry_host_address)"
}

case "$action" in
  provision)
    provision
    ;;
  up)
    provision
    # a run's report goes under runs/ (git-ignored); RESULTS=commit writes harness/results/
    if [ "${LAYERSCHED_RESULTS:-}" = commit ]; then report_dir=harness/results
    else report_dir=runs/$(date -u +%Y%m%dT%H%M%SZ)/harness/results; fi
    report_dir=${LAYERSCHED_E2E_REPORT_DIR:-$report_dir}
    echo "== scenario ($report_dir/scenario.json)" >&2
    LAYERSCHED_KIND_STACK=$stack LAYERSCHED_KEEP_TESTBED=1 \
      LAYERSCHED_E2E_REPORT_DIR=$report_dir \
      "$venv/bin/python" -m pytest -m kind -p no:cacheprovider tests/e2e/test_kind_scenario.py
    echo "explore: KUBECONFIG=$(output kubeconfig_path) kubectl get pods -A;" \
      "tear down: make testbed-down DRIVER=kind" >&2
    ;;
  down)
    if pulumi --cwd "$program" stack select "$stack" >/dev/null 2>&1; then
      name=$(output cluster_name 2>/dev/null || true)
      if [ -n "$name" ] && kind get clusters 2>/dev/null | grep -qx "$name"; then
        kind export logs "harness/results/kind-logs" --name "$name" || true
      fi
      pulumi --cwd "$program" destroy --stack "$stack" --yes
    else
      echo "no Pulumi stack $stack: nothing to tear down" >&2
    fi
    ;;
  *)
    echo "usage: harness/infra/kind/kind.sh up|provision|down" >&2
    exit 2
    ;;
esac
