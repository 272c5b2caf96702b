"""make kubernetes: build (or find cached) the testbed's Kubernetes from its Go modules.

First layersched's kube-scheduler (``src/layersched/kubernetes-build.yml``: ``go build``
of ``cmd/kube-scheduler`` in layersched's Go module, against the release its ``go.mod``
pins) into ``$LAYERSCHED_CACHE_DIR/kubernetes/<its build ID>/bin``; then the testbed's
control plane (``harness/layersched_harness/testbed/control-plane-build.yml``: each
``cmd/<name>`` of the harness's ``harness/control-plane`` module, pinned to the same
release) into the testbed build's ``bin``, beside a hard link to that kube-scheduler
(``layersched_harness.testbed.builds.kubernetes_build``). The Go module and build caches
live under ``$LAYERSCHED_CACHE_DIR/go``, outside the repository. With every binary there
and stamped with the build ID nothing runs; a changed plugin recompiles only what changed
(warm: well under a minute). With ``--minor 1.35`` it builds that older minor's binaries
from each module's ``minors/1.35`` (``make live-minors``), under that minor's own build
IDs. With ``--arch amd64|arm64`` it compiles ``--binary`` (default: kube-scheduler, the
images' one binary, under the kube-scheduler build's ID) for ``linux/<arch>`` into the
build's ``linux-<arch>/`` (``GOARCH``, cgo off: a static binary; without a VCS stamp, so
that it is a function of the build ID and the architecture only; the host's own
architecture is a relink from Go's build cache), for ``make images``. Prints a line per
binary with its duration; a failure names the binary and ends with the compiler's last
lines.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from layersched.builds import BUILD_STAMP, IMAGE_ARCHES, KubernetesBuild, cache_root
from layersched.core.errors import LayerschedError
from layersched_harness.testbed.builds import find_go, kubernetes_build

#: Compiler output quoted when a binary fails.
TAIL_LINES = 30
#: Held while building, so two builds never write the same bin dir.
LOCK = ".build.lock"


def ldflags(build: KubernetesBuild) -> str:
    """What ``--version`` prints: the pinned release (upstream's build stamps the same)."""
    major, minor = build.version.lstrip("v").split(".")[:2]
    stamp = {
        "gitVersion": build.version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    flags = " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in stamp.items())
    return f"-s -w {flags}"


def _take(source: Path, target: Path) -> None:
    """``target`` becomes the built ``source``: a hard link, else a copy (another file
    system), replacing whatever was there."""
    partial = target.with_name(f"{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:
        shutil.copy2(source, partial)
    partial.replace(target)


def build_all(build: KubernetesBuild) -> int:
    """Every binary of ``build`` into its bin dir (an included build's first, then
    taken as built), unless they are there and stamped."""
    if build.includes is not None:
        status = build_all(build.includes)
        if status != 0:
            return status
    module = build.directory()
    go, go_version = find_go(build.go_version_needed())
    bin_dir = build.bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    go_cache = build.go_cache_dir()
    env = build.go_env()
    with (bin_dir / LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not build.missing():
            print(f"Kubernetes {build.version} from Go modules: cached in {bin_dir}")
            return 0
        print(
            f"Kubernetes {build.version} from Go modules, build {build.build_id}, {go_version}:"
            f" {', '.join(build.binaries)} into {bin_dir} (Go caches under {go_cache})",
            flush=True,
        )
        started = time.monotonic()
        (bin_dir / BUILD_STAMP).unlink(missing_ok=True)
        for name in build.binaries:
            if name not in build.own_binaries:
                assert build.includes is not None
                _take(build.includes.binary(name), bin_dir / name)
                print(f"  {name}: from build {build.includes.build_id}", flush=True)
                continue
            began = time.monotonic()
            argv = [go, "build", "-trimpath", "-ldflags", ldflags(build)]
            argv += ["-o", str(bin_dir / name), build.main_package(name)]
            done = subprocess.run(
                argv, cwd=module, env=env, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-TAIL_LINES:])
                print(f"building {name} failed (go build in {module}):\n{tail}", file=sys.stderr)
                return 1
            print(f"  {name}: {time.monotonic() - began:.0f} s", flush=True)
        (bin_dir / BUILD_STAMP).write_text(f"{build.build_id}\n", "utf-8")
        print(f"built in {time.monotonic() - started:.0f} s")
    return 0


#: What ``--arch`` builds unless ``--binary`` says: the images' one Go binary.
IMAGE_BINARY = "kube-scheduler"


def build_platform(build: KubernetesBuild, name: str, arch: str) -> int:
    """Binary ``name`` of ``build`` for ``linux/<arch>`` into its cache path
    (:meth:`KubernetesBuild.platform_binary`), unless it is there; a binary ``build`` takes
    from another build is that build's (the images' kube-scheduler is keyed by
    layersched's module alone)."""
    if build.includes is not None and name not in build.own_binaries:
        return build_platform(build.includes, name, arch)
    target = build.platform_binary(name, arch)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{name}.partial")
    with (target.parent / LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            print(f"{name} {build.version} linux/{arch}: cached in {target.parent}")
            return 0
        began = time.monotonic()
        go, go_version = find_go(build.go_version_needed())
        print(
            f"{name} {build.version} for linux/{arch}, build {build.build_id}, {go_version}, "
            f"into {target.parent}",
            flush=True,
        )
        env = {**build.go_env(), "GOOS": "linux", "GOARCH": arch}
        # no VCS stamp: the binary is a function of the build ID (release and sources)
        # and the architecture, whichever commit builds it, as its cache path says
        argv = [go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(build)]
        argv += ["-o", str(partial), build.main_package(name)]
        done = subprocess.run(
            argv, cwd=build.directory(), env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-TAIL_LINES:])
            where = f"go build in {build.directory()}"
            print(f"building {name} for linux/{arch} failed ({where}):\n{tail}", file=sys.stderr)
            partial.unlink(missing_ok=True)
            return 1
        partial.replace(target)
        print(f"  {name} linux/{arch}: {time.monotonic() - began:.0f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minor",
        action="append",
        default=[],
        help="build this older minor (1.35) from its module under minors/ instead; repeatable",
    )
    parser.add_argument(
        "--arch",
        action="append",
        choices=IMAGE_ARCHES,
        default=[],
        help="cross-compile --binary for linux/ARCH instead (repeatable)",
    )
    parser.add_argument(
        "--binary",
        action="append",
        default=[],
        help=f"with --arch: the binary to build (repeatable; default: {IMAGE_BINARY})",
    )
    args = parser.parse_args(argv)
    if args.binary and not args.arch:
        parser.error("--binary goes with --arch (without it every binary is built)")
    try:
        builds = [kubernetes_build(m) for m in args.minor] or [kubernetes_build()]
        print(f"cache root: {cache_root()}")
        for build in builds:
            if not args.arch:
                status = build_all(build)
                if status != 0:
                    return status
            for arch in args.arch:
                for name in args.binary or [IMAGE_BINARY]:
                    status = build_platform(build, name, arch)
                    if status != 0:
                        return status
        return 0
    except LayerschedError as err:
        print(f"make kubernetes: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
