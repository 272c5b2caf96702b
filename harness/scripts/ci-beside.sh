#!/usr/bin/env bash
# .ci/run's work beside its other stages: what only compiles Go or installs with pip, and
# so leaves a core idle for the integration tests and the e2e, which wait on links,
# kubelets and registries. Run at nice 19; each group records its own stage
# (LAYERSCHED_STAGE_LOG). Exit 1 when any group failed.
#   harness/scripts/ci-beside.sh          run them
#   harness/scripts/ci-beside.sh --tests  the test modules it runs (the integration stage skips them)
set -o nounset -o pipefail
minors=(tests/integration/test_image_locality_minors.py tests/integration/test_kube_scheduler_minors.py)
pip=(tests/integration/test_pip_install.py)
if [ "${1:-}" = --tests ]; then
  printf '%s\n' "${minors[@]}" "${pip[@]}"
  exit 0
fi
status=0
# go vet and go test -race of every Go module (make lint's Go part)
harness/scripts/go-lint.sh || status=1
# the per-minor compiles: the image-locality reference's programs, the plugin per minor
harness/scripts/pytest.sh go-minors "${minors[@]}" || status=1
# the wheel and the sdist installed by pip into a new venv (reads the package index)
harness/scripts/pytest.sh pip-install "${pip[@]}" || status=1
exit "$status"
