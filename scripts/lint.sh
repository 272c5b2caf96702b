#!/usr/bin/env bash
# Lint gate: ruff, mypy --strict, import-linter, ansible-lint (production profile).
set -o errexit -o nounset -o pipefail
bin=${VENV:-.venv}/bin
echo "== ruff"; "$bin/ruff" check plugin tests bench infra playbooks/tools
echo "== ruff format"; "$bin/ruff" format --check plugin tests bench infra playbooks/tools
echo "== mypy --strict"; "$bin/mypy"
echo "== import-linter"; "$bin/lint-imports"
if [ -d playbooks ] && compgen -G "playbooks/*.yml" >/dev/null; then
  echo "== ansible-lint (production)"
  PATH="$bin:$PATH" "$bin/ansible-lint" --profile production --offline playbooks
fi
