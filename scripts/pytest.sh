#!/usr/bin/env bash
# Run one test group. pytest's "no tests collected" (exit 5) fails the group:
# a group that exists must test something.
set -o errexit -o nounset -o pipefail
group=$1; shift
echo "== $group tests"
exec "${VENV:-.venv}/bin/python" -m pytest "$@"
