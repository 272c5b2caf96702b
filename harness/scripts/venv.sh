#!/usr/bin/env bash
# Create the project venv and install layersched editable with every extra, and the
# harness's commands.
set -o errexit -o nounset -o pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "layersched needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
echo "installing layersched (editable) and its dev/infra/sim/deploy extras into $venv ..."
"$venv/bin/python" -m pip install --quiet --editable '.[dev,infra,sim,deploy]'
# the harness (its packages, and its commands testbed, scenario, simulate, which join the
# CLI through its entry points): a distribution of its own (harness/pyproject.toml)
echo "installing the harness (layersched-harness, editable) ..."
"$venv/bin/python" -m pip install --quiet --editable ./harness
touch "$venv/.installed"
echo "ready: $venv/bin/layersched"
