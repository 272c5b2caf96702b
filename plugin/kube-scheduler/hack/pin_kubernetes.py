#!/usr/bin/env python3
"""Pin a Go module to one Kubernetes release, as out-of-tree schedulers do.

``k8s.io/kubernetes`` requires its staging modules (``k8s.io/api``, ``k8s.io/client-go``,
...) at ``v0.0.0`` and replaces them with ``./staging/...`` directories, which a consumer
of the module does not have (golang/go#44840). A consumer therefore requires
``k8s.io/kubernetes vX.Y.Z`` and replaces every staging module with its published
``v0.Y.Z``. The list of staging modules changes between releases, so it is read from the
release's own ``go.mod`` here, never kept by hand:

    python3 hack/pin_kubernetes.py v1.37.2            # the module this file lives in
    python3 hack/pin_kubernetes.py v1.35.6 --module-dir compat/k8s-1.35

It runs ``go mod download`` (the Go module proxy), ``go mod edit`` and ``go mod tidy``
with the ``go`` on PATH, and prints what it changed. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

#: The module whose release is pinned.
KUBERNETES = "k8s.io/kubernetes"
#: A staging module's line in the release's replace block.
_STAGING = re.compile(r"^\s*(?P<module>k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/(?P=module)\s*$")
_RELEASE = re.compile(r"^v1\.(?P<minor>\d+)\.(?P<patch>\d+)$")
_GO_DIRECTIVE = re.compile(r"^go\s+(?P<version>\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)


def _go(*args: str, cwd: Path) -> str:
    try:
        done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as err:
        raise SystemExit(f"cannot run go: {err} (Go 1.26 or later on PATH)") from err
    if done.returncode != 0:
        raise SystemExit(f"go {' '.join(args)} failed in {cwd}:\n{done.stderr.strip()}")
    return done.stdout


def staging_modules(upstream_go_mod: str) -> list[str]:
    """The staging modules a release's ``go.mod`` replaces with local directories."""
    modules = []
    for line in upstream_go_mod.splitlines():
        match = _STAGING.match(line)
        if match:
            modules.append(match["module"])
    if not modules:
        raise SystemExit("the release's go.mod replaces no k8s.io/* module with ./staging/...")
    return sorted(modules)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the Kubernetes release, e.g. v1.37.2")
    parser.add_argument(
        "--module-dir",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the Go module to pin (default: the one this script lives in)",
    )
    args = parser.parse_args()
    release = _RELEASE.match(args.version)
    if release is None:
        raise SystemExit(
            f"version {args.version!r}: write a release as v1.MINOR.PATCH, e.g. v1.37.2"
        )
    module_dir: Path = args.module_dir.resolve()
    go_mod = module_dir / "go.mod"
    if not go_mod.is_file():
        raise SystemExit(f"{go_mod} does not exist: --module-dir names the module's directory")

    info = json.loads(
        _go("mod", "download", "-json", f"{KUBERNETES}@{args.version}", cwd=module_dir)
    )
    upstream = Path(info["GoMod"]).read_text()
    staging = staging_modules(upstream)
    staging_version = f"v0.{release['minor']}.{release['patch']}"

    ours = json.loads(_go("mod", "edit", "-json", cwd=module_dir))
    stale = sorted(
        replace["Old"]["Path"]
        for replace in ours.get("Replace") or []
        if replace["Old"]["Path"].startswith("k8s.io/") and replace["Old"]["Path"] not in staging
    )
    edits = [f"-require={KUBERNETES}@{args.version}"]
    edits += [f"-dropreplace={module}" for module in stale]
    edits += [f"-replace={module}={module}@{staging_version}" for module in staging]
    # our module must declare at least the Go version the release declares
    upstream_go = _GO_DIRECTIVE.search(upstream)
    if upstream_go and _version_key(upstream_go["version"]) > _version_key(ours["Go"]):
        edits.append(f"-go={upstream_go['version']}")
    _go("mod", "edit", *edits, cwd=module_dir)
    _go("mod", "tidy", cwd=module_dir)
    print(
        f"{go_mod}: {KUBERNETES} {args.version}, {len(staging)} staging modules at"
        f" {staging_version}" + (f"; dropped {', '.join(stale)}" if stale else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
