#!/usr/bin/env python3
"""Pin a Go module to one Kubernetes release, as out-of-tree schedulers do.

``k8s.io/kubernetes`` requires its staging modules (``k8s.io/api``, ``k8s.io/client-go``,
...) at ``v0.0.0`` and replaces them with ``./staging/...`` directories, which a consumer
of the module does not have (golang/go#44840). A consumer therefore requires
``k8s.io/kubernetes vX.Y.Z`` and replaces every staging module with its published
``v0.Y.Z``. The list of staging modules changes between releases, so it is read from the
release's own ``go.mod`` here, never kept by hand:

    python3 hack/pin_kubernetes.py v1.37.2            # the module this file lives in
    python3 hack/pin_kubernetes.py v1.37.2 --module-dir ../../harness/control-plane

The testbed's control plane (the harness's module ``harness/control-plane``) is pinned to
the same release as this module; its builder refuses two.

A module that requires another module pinned to a *newer* release (``minors/1.35``
requires this module, pinned to 1.37) would have Go's minimal version selection lift the
older release, and every dependency the two share, to the newer one's versions. With
``--as-released`` the release itself and every module its ``go.mod`` requires are replaced
with the version that ``go.mod`` requires, so the code compiled is the release's own:

    python3 hack/pin_kubernetes.py v1.35.4 --as-released --module-dir minors/1.35

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


def released_requirements(upstream_go_mod: str) -> dict[str, str]:
    """The modules a release's ``go.mod`` requires, with their versions (the staging
    modules' ``v0.0.0`` left out: they are replaced by :func:`staging_modules`)."""
    required: dict[str, str] = {}
    block = False
    for line in upstream_go_mod.splitlines():
        words = line.split("//", 1)[0].split()
        if words[:2] == ["require", "("]:
            block = True
            continue
        if block and words[:1] == [")"]:
            block = False
            continue
        if words[:1] == ["require"]:
            words = words[1:]
        elif not block:
            continue
        if len(words) == 2 and words[1].startswith("v") and words[1] != "v0.0.0":
            required[words[0]] = words[1]
    return required


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
    parser.add_argument(
        "--as-released",
        action="store_true",
        help="also replace the release and every module its go.mod requires with the version"
        " it requires (for a module that requires one pinned to a newer release)",
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

    released = released_requirements(upstream) if args.as_released else {}
    if args.as_released:
        released[KUBERNETES] = args.version

    ours = json.loads(_go("mod", "edit", "-json", cwd=module_dir))
    stale = sorted(
        old
        for replace in ours.get("Replace") or []
        if (old := replace["Old"]["Path"]) not in staging
        and old not in released
        # a module version (not a directory) this script wrote: k8s.io/*, or any with
        # --as-released
        and replace["New"].get("Version")
        and (args.as_released or old.startswith("k8s.io/"))
    )
    edits = [f"-require={KUBERNETES}@{args.version}"]
    edits += [f"-dropreplace={module}" for module in stale]
    edits += [f"-replace={module}={module}@{staging_version}" for module in staging]
    edits += [f"-replace={module}={module}@{version}" for module, version in released.items()]
    # our module must declare at least the Go version the release declares
    upstream_go = _GO_DIRECTIVE.search(upstream)
    if upstream_go and _version_key(upstream_go["version"]) > _version_key(ours["Go"]):
        edits.append(f"-go={upstream_go['version']}")
    _go("mod", "edit", *edits, cwd=module_dir)
    _go("mod", "tidy", cwd=module_dir)
    print(
        f"{go_mod}: {KUBERNETES} {args.version}, {len(staging)} staging modules at"
        f" {staging_version}"
        + (f", {len(released)} modules as released" if released else "")
        + (f"; dropped {', '.join(stale)}" if stale else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
