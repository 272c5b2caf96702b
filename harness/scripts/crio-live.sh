#!/usr/bin/env bash
# make crio-live: the live CRI-O tests (tests/crio): a private CRI-O built by `make crio`
# on each storage driver that works here, pulling from a real registry; the agent on its
# real storage, its verbose ImageStatus, the relay in front of it. Not part of `make test`
# (CI does not build CRI-O). Installs what CRI-O runs from Debian when it is missing
# (conmon; runc and util-linux's nsenter the testbed has already), as root.
set -o errexit -o nounset -o pipefail
need=(conmon runc util-linux)
missing=()
for pkg in "${need[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]} (what CRI-O runs) ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
exec harness/scripts/pytest.sh crio tests/crio "$@"
