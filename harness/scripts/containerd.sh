#!/usr/bin/env bash
# make containerd: download (or find cached) containerd 2.x for the integration tests,
# Debian's binary package unpacked under the cache, never installed. The version is pinned
# in harness/layersched_harness/testbed/containerd-download.yml; the cache is outside the repository
# (LAYERSCHED_CACHE_DIR, default /var/cache/layersched). Under a minute cold, seconds cached.
set -o errexit -o nounset -o pipefail
bin=${VENV:-.venv}/bin
exec "$bin/ansible-playbook" -i harness/playbooks/inventory/local.yml harness/playbooks/containerd-download.yml "$@"
