#!/usr/bin/env bash
# Cloud nodes on AWS (make testbed DRIVER=cloud / make testbed-down DRIVER=cloud).
#   harness/infra/cloud/cloud.sh up     checks -> pulumi up -> Ansible over SSH -> the seed scenario
#   harness/infra/cloud/cloud.sh check  only the checks (nothing is created)
#   harness/infra/cloud/cloud.sh down   pulumi destroy (safe to run twice)
# Settings: LAYERSCHED_CLOUD_STACK (Pulumi stack, default dev), LAYERSCHED_CLOUD_SSH_KEY
# (the private key of the stack's sshPublicKey, default ~/.ssh/id_ed25519),
# PULUMI_CONFIG_PASSPHRASE (local backend; empty by default). Every check runs before
# anything is created and stops with one line naming what to set. See docs/cloud.md.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/../../.."
action=${1:?usage: harness/infra/cloud/cloud.sh up|check|down}
venv=${VENV:-.venv}
stack=${LAYERSCHED_CLOUD_STACK:-dev}
ssh_key=${LAYERSCHED_CLOUD_SSH_KEY:-$HOME/.ssh/id_ed25519}
export PULUMI_CONFIG_PASSPHRASE=${PULUMI_CONFIG_PASSPHRASE-}
program=harness/infra/cloud
state_dir=${LAYERSCHED_CLOUD_STATE_DIR:-$PWD/.testbed/cloud/$stack}
teardown="make testbed-down DRIVER=cloud LAYERSCHED_CLOUD_STACK=$stack"

stop() { echo "DRIVER=cloud: $*" >&2; exit 1; }

have_aws_credentials() {
  [ -n "${AWS_ACCESS_KEY_ID:-}" ] && [ -n "${AWS_SECRET_ACCESS_KEY:-}" ] && return 0
  [ -n "${AWS_PROFILE:-}" ] || [ -n "${AWS_WEB_IDENTITY_TOKEN_FILE:-}" ] && return 0
  [ -s "${AWS_SHARED_CREDENTIALS_FILE:-$HOME/.aws/credentials}" ] && return 0
  return 1
}

check_tools() {
  command -v pulumi >/dev/null 2>&1 ||
    stop "the pulumi CLI is not on PATH: install it (https://www.pulumi.com/docs/install/) and put it on PATH (docs/cloud.md)"
  have_aws_credentials ||
    stop "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (docs/cloud.md)"
}

check_config() {
  pulumi --cwd "$program" stack select "$stack" >/dev/null 2>&1 ||
    stop "no Pulumi stack $stack: run pulumi --cwd $program stack init $stack, then set region, operatorCidr and sshPublicKey (docs/cloud.md)"
  local key missing=()
  for key in region operatorCidr sshPublicKey; do
    [ -n "$(pulumi --cwd "$program" config get "$key" --stack "$stack" 2>/dev/null)" ] || missing+=("$key")
  done
  [ "${#missing[@]}" -eq 0 ] ||
    stop "stack $stack lacks ${missing[*]}: set each with pulumi --cwd $program config set KEY VALUE --stack $stack (docs/cloud.md)"
  [ -r "$ssh_key" ] ||
    stop "no SSH private key at $ssh_key: set LAYERSCHED_CLOUD_SSH_KEY to the key whose public half is the stack's sshPublicKey"
}

output() { pulumi --cwd "$program" stack output --stack "$stack" "$@"; }

provision() {
  # Built once on this machine (static linux/amd64 binaries), copied to the VMs by Ansible;
  # first, so that a failed build leaves nothing running in the account.
  [ "${LAYERSCHED_SKIP_KUBERNETES_BUILD:-0}" = 1 ] || VENV=$venv harness/scripts/kubernetes.sh
  # From here on, something may exist in the account: every failure names the teardown.
  trap 'status=$?; [ "$status" -eq 0 ] || echo "DRIVER=cloud: failed (exit $status); resources may exist: tear down with $teardown" >&2' EXIT
  echo "== pulumi up (stack $stack)" >&2
  pulumi --cwd "$program" up --stack "$stack" --yes
  mkdir -p "$state_dir"
  output ansible_inventory >"$state_dir/inventory.yml"
  echo "== Ansible over SSH: control plane, registry, nodes ($state_dir/inventory.yml)" >&2
  ANSIBLE_HOST_KEY_CHECKING=False "$venv/bin/ansible-playbook" -i "$state_dir/inventory.yml" \
    --private-key "$ssh_key" harness/playbooks/testbed-cloud.yml \
    -e "testbed_state_dir=$state_dir" -e "testbed_ssh_key=$ssh_key" \
    -e "testbed_registry_address=$(output control_plane_private_ip)" \
    -e "testbed_api_public_address=$(output control_plane_public_ip)"
}

case "$action" in
  check)
    check_tools
    check_config
    echo "DRIVER=cloud: ready (stack $stack)" >&2
    ;;
  up)
    check_tools
    check_config
    provision
    # a run's report goes under runs/ (git-ignored); RESULTS=commit writes harness/results/
    if [ "${LAYERSCHED_RESULTS:-}" = commit ]; then report_dir=harness/results
    else report_dir=runs/$(date -u +%Y%m%dT%H%M%SZ)/harness/results; fi
    report_dir=${LAYERSCHED_E2E_REPORT_DIR:-$report_dir}
    echo "== scenario ($report_dir/scenario.json)" >&2
    LAYERSCHED_CLOUD_STACK=$stack LAYERSCHED_CLOUD_STATE_DIR=$state_dir LAYERSCHED_KEEP_TESTBED=1 \
      LAYERSCHED_E2E_REPORT_DIR=$report_dir \
      "$venv/bin/python" -m pytest -m cloud -p no:cacheprovider tests/e2e/test_cloud_scenario.py
    echo "explore: KUBECONFIG=$state_dir/kubeconfig kubectl get nodes; tear down: $teardown" >&2
    ;;
  down)
    check_tools
    if pulumi --cwd "$program" stack select "$stack" >/dev/null 2>&1; then
      pulumi --cwd "$program" destroy --stack "$stack" --yes
    else
      echo "no Pulumi stack $stack: nothing to tear down" >&2
    fi
    ;;
  *)
    echo "usage: harness/infra/cloud/cloud.sh up|check|down" >&2
    exit 2
    ;;
esac
