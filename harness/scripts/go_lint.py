"""make go-lint (part of make lint): ``go vet`` and ``go test -race`` in every Go module.

Every ``go.mod`` git tracks is a module (:func:`modules`), none is left out:

* its packages are its own (``./...``); a module with no Go file of its own that replaces
  ``layersched.io/kube-scheduler`` (``src/kube-scheduler/minors/<minor>``) checks that
  module's packages against its release (``layersched.io/kube-scheduler/pkg/...``); a
  module with neither (``harness/crio``: it only requires the CRI-O release it builds) has
  nothing to check, and says so;
* ``go vet -trimpath`` on every package, with the Kubernetes build's toolchain and caches;
* ``go test -race -trimpath -count=1`` on every package with tests (``go list``'s
  ``TestGoFiles``/``XTestGoFiles`` holding a ``func Test``). A package whose tests are
  benchmarks only (``harness/scheduler-perf``: ``BenchmarkPerfScheduling``, run by
  make bench-perf) has no test to run under it.

The race detector needs cgo and compiles every dependency apart from a plain build (cold on
a fresh machine: minutes per Kubernetes release), and ``go vet`` type-checks every
dependency of what it vets, once per build mode, for its analyzers' facts. So each module
is vetted against a compile that exists anyway:

* at the Kubernetes build's release (``src/kube-scheduler``, ``harness/scheduler-perf``, the
  reference's minor of that release): every package plainly (cgo off), on ``make
  kubernetes``'s compile, one set of facts for all of them; the race tests then compile
  the race build, and nothing type-checks it again;
* at an older release, which nothing else compiles plainly: the race-tested packages with
  ``-race`` (cgo on), type-checked against the race build the tests reuse, one compile of
  the release instead of two; the others plainly.

``go test`` runs with ``-vet=off``: its vet is a subset of the ``go vet`` just run on the
same packages and their test files, and under ``-race`` it would type-check every
dependency a second time.

Prints a line per module and step with its duration; exits 1 naming every failure, with
go's last lines. ``--module DIR`` (repeatable) checks only those; ``--no-race`` vets only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from layersched.builds import REPO_ROOT, pinned_version
from layersched.core.errors import LayerschedError
from layersched_harness.testbed.builds import find_go, kubernetes_build

#: The module the minors' modules compile against their release.
MAIN_MODULE = "layersched.io/kube-scheduler"
MAIN_PACKAGES = f"{MAIN_MODULE}/pkg/..."
#: A cold race build of a Kubernetes release's packages takes minutes on 2 cores.
GO_TIMEOUT_S = 3600
TAIL_CHARS = 4000
#: A test function (TestMain runs the others: alone it tests nothing).
_TEST_FUNC = re.compile(r"^func Test(?!Main\()[A-Z0-9_]\w*\(", re.MULTILINE)


@dataclass(frozen=True)
class Module:
    """A Go module of the repository and the packages checked in it."""

    directory: Path
    packages: tuple[str, ...]
    #: Why nothing is checked, when ``packages`` is empty.
    why_none: str = ""
    #: The Kubernetes release its ``go.mod`` compiles (``v1.37.2``), if it requires one.
    release: str | None = None

    @property
    def name(self) -> str:
        return self.directory.relative_to(REPO_ROOT).as_posix()


def _replaces_main(go_mod: str) -> bool:
    return re.search(rf"^replace {re.escape(MAIN_MODULE)} =>", go_mod, re.MULTILINE) is not None


def modules(root: Path = REPO_ROOT) -> list[Module]:
    """Every tracked ``go.mod``'s module, with what is checked there."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "*go.mod"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = []
    for relative in sorted(listed):
        directory = (root / relative).parent
        go_mod = (directory / "go.mod").read_text("utf-8")
        release = pinned_version(go_mod)
        own = [p for p in directory.rglob("*.go") if not _in_nested_module(p, directory)]
        if own:
            found.append(Module(directory, ("./...",), release=release))
        elif _replaces_main(go_mod):
            found.append(Module(directory, (MAIN_PACKAGES,), release=release))
        else:
            found.append(Module(directory, (), "no Go package of its own (it builds a tool)"))
    return found


def _in_nested_module(path: Path, module: Path) -> bool:
    """Whether ``path`` belongs to a module nested under ``module`` (minors/)."""
    parent = path.parent
    while parent != module:
        if (parent / "go.mod").is_file():
            return True
        parent = parent.parent
    return False


def _go(
    go: str, module: Module, *args: str, race: bool = False
) -> subprocess.CompletedProcess[str]:
    env = kubernetes_build().go_env()
    if race:
        env["CGO_ENABLED"] = "1"  # the race detector needs cgo
    return subprocess.run(
        [go, *args],
        cwd=module.directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=GO_TIMEOUT_S,
        check=False,
    )


def split_packages(go: str, module: Module) -> tuple[list[str], list[str]]:
    """The module's packages that hold a ``func Test`` in their test files, and the others."""
    listed = _go(
        go, module, "list", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles", *module.packages
    )
    if listed.returncode != 0:
        raise LayerschedError(f"go list in {module.name}: {listed.stderr[-TAIL_CHARS:]}")
    decoder, text, at = json.JSONDecoder(), listed.stdout, 0
    tested: list[str] = []
    untested: list[str] = []
    while at < len(text):
        package, at = decoder.raw_decode(text, at)
        while at < len(text) and text[at].isspace():
            at += 1
        files = [*package.get("TestGoFiles", []), *package.get("XTestGoFiles", [])]
        directory = Path(package["Dir"])
        has_tests = any(_TEST_FUNC.search((directory / f).read_text("utf-8")) for f in files)
        (tested if has_tests else untested).append(package["ImportPath"])
    return tested, untested


def steps(
    module: Module, tested: list[str], untested: list[str], race: bool, built_release: str
) -> list[tuple[str, list[str], bool]]:
    """What is run in ``module``: ``(label, go's arguments, with the race detector)``, in
    order. ``built_release`` is the release ``make kubernetes`` compiles (the docstring)."""
    vet_all = ("go vet", ["vet", "-trimpath", *module.packages], False)
    if not race or not tested:
        return [vet_all]
    test = ("go test -race", ["test", "-trimpath", "-race", "-vet=off", "-count=1", *tested], True)
    if module.release == built_release:
        return [vet_all, test]
    vetted = [("go vet -race", ["vet", "-trimpath", "-race", *tested], True)]
    if untested:
        vetted.append(("go vet", ["vet", "-trimpath", *untested], False))
    return [*vetted, test]


def check(go: str, module: Module, race: bool, built_release: str) -> list[str]:
    """Vet, then race-test, one module; the failures, each with go's last output."""
    if not module.packages:
        print(f"{module.name}: nothing to check: {module.why_none}", flush=True)
        return []
    failures = []
    tested, untested = split_packages(go, module) if race else ([], [])
    if race and not tested:
        print(f"{module.name}: go test -race: no package with a Test function", flush=True)
    for label, args, with_race in steps(module, tested, untested, race, built_release):
        started = time.monotonic()
        done = _go(go, module, *args, race=with_race)
        took = time.monotonic() - started
        verdict = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"{module.name}: {label}: {verdict} in {took:.0f} s", flush=True)
        if done.returncode != 0:
            failures.append(
                f"{module.name}: go {' '.join(args)}:\n{(done.stdout + done.stderr)[-TAIL_CHARS:]}"
            )
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", default=[], help="only this module dir")
    parser.add_argument("--no-race", action="store_true", help="go vet only")
    args = parser.parse_args(argv)
    try:
        built = kubernetes_build()
        go, _ = find_go(built.go_version_needed())
    except LayerschedError as err:
        print(f"go-lint: {err}", file=sys.stderr)
        return 1
    chosen = modules()
    if args.module:
        wanted = {Path(m).resolve() for m in args.module}
        chosen = [m for m in chosen if m.directory.resolve() in wanted]
        unknown = wanted - {m.directory.resolve() for m in chosen}
        if unknown:
            print(f"go-lint: no tracked Go module at {sorted(map(str, unknown))}", file=sys.stderr)
            return 2
    failures: list[str] = []
    for module in chosen:
        try:
            failures += check(go, module, race=not args.no_race, built_release=built.version)
        except (LayerschedError, subprocess.TimeoutExpired) as err:
            failures.append(f"{module.name}: {err}")
    for failure in failures:
        print(f"\n== {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
