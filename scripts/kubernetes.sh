#!/usr/bin/env bash
# make kubernetes: build (or find cached) the Kubernetes binaries the testbed runs, from
# Debian's source package; the version is pinned in playbooks/vars/kubernetes.yml and the
# cache is outside the repository (LAYERSCHED_CACHE_DIR, default /var/cache/layersched).
# A cold build takes about 13-15 minutes on 2 cores; Ansible prints a line every 15 s.
set -o errexit -o nounset -o pipefail
bin=${VENV:-.venv}/bin
exec "$bin/ansible-playbook" -i playbooks/inventory/local.yml playbooks/kubernetes-build.yml "$@"
