#!/usr/bin/env bash
# Lint gate: ruff, mypy --strict, import-linter, every test module collects,
# ansible-lint (production profile), then go vet and go test -race in every Go module
# (harness/scripts/go-lint.sh; LAYERSCHED_LINT_GO=0 leaves it out: .ci/run runs it as a stage of
# its own, beside the e2e).
# With LAYERSCHED_STAGE_LOG set (.ci/run sets it), the duration is appended there.
set -o errexit -o nounset -o pipefail
bin=${VENV:-.venv}/bin
started=$SECONDS
lint() {
  echo "== ruff"; "$bin/ruff" check src harness tests
  echo "== ruff format"; "$bin/ruff" format --check src harness tests
  echo "== mypy --strict"; "$bin/mypy"
  echo "== import-linter"; "$bin/lint-imports"
  # every test module imports: a renamed module fails here in seconds, not after the
  # unit stage (the integration suite is only collected after the Kubernetes build)
  echo "== pytest --collect-only (every suite)"
  "$bin/python" -m pytest --collect-only -q -p no:cacheprovider tests >/dev/null || {
    "$bin/python" -m pytest --collect-only -q -p no:cacheprovider tests | tail -20
    return 1
  }
  if [ -d harness/playbooks ] && compgen -G "harness/playbooks/*.yml" >/dev/null; then
    echo "== ansible-lint (production)"
    PATH="$bin:$PATH" "$bin/ansible-lint" --profile production --offline harness/playbooks
  fi
  if [ "${LAYERSCHED_LINT_GO:-1}" != 0 ]; then
    echo "== go vet, go test -race (every Go module)"
    LAYERSCHED_STAGE_LOG='' harness/scripts/go-lint.sh
  fi
}
# errexit is off inside a function called from `||` (bash ignores it there), so each check
# would go on past a failure: run it in a subshell with errexit on, and take its status
set +o errexit
(set -o errexit; lint)
status=$?
set -o errexit
if [ -n "${LAYERSCHED_STAGE_LOG:-}" ]; then
  printf '%s %d %d\n' lint $((SECONDS - started)) "$status" >>"$LAYERSCHED_STAGE_LOG"
fi
exit "$status"
