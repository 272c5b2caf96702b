#!/usr/bin/env python3
"""Steps of the Kubernetes build that Ansible's modules do not cover. Standard library only.

``sources --codename C [--type deb|deb-src] [--suite S]``
    Print a one-line-format sources list with ``deb-src`` lines for each ``deb`` entry of this
    machine's apt configuration whose suite is C or C-*. The build fetches its source from
    the archive the machine already uses, through a private sources list, so the
    machine's own apt configuration is never changed. With ``--suite S`` only the entries
    whose suite is exactly C are taken, and S replaces it: the containerd download
    (role containerd_download) reads ``deb`` lines for ``sid`` from the same archive.

``make --tree T --log L --timeout-s N [--plugin SRC=IMPORT] -- WHAT...``
    Build ``WHAT`` in tree T as Debian's ``debian/rules`` does: GOPATH=T/.go with
    ``.go/src/k8s.io/kubernetes`` linked to T, CGO_ENABLED=0, upstream's Makefile.
    ``--plugin`` first copies the Go module in SRC (its ``.go`` files and ``go.mod``) into
    the tree's ``vendor/IMPORT``, so that WHAT can name ``vendor/IMPORT/cmd/...`` and
    build it against the tree's vendored packages. Output goes to L, one line per line,
    so a caller can follow it. On failure it prints which step failed, where the log is
    and the log's last lines, and exits 1.

``gotest --tree T --plugin SRC=IMPORT [--race] -- ARGS...``
    Copy the module as ``make --plugin`` does, then run ``go test ARGS`` in the GOPATH,
    cache and flags of the tree's own build (packages as ``./vendor/IMPORT/...``), so the
    packages ``make`` compiled are not compiled again; its output on stdout; exits with
    go test's status. ``--race`` builds with cgo for the race detector.

Both hold a lock on the tree while they copy and compile, so a build and a test never
see each other's copy of the module.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

#: Where apt keeps its configuration.
APT_SOURCES_LIST = Path("/etc/apt/sources.list")
APT_SOURCES_DIR = Path("/etc/apt/sources.list.d")
#: Log lines quoted in a failure message.
LOG_TAIL_LINES = 25
#: Held (flock) by a build or a test of a tree while the module is copied in and compiled.
LOCK_FILE = ".layersched-build.lock"
#: What of a plugin module is copied into the tree (sources, tests, the module file).
PLUGIN_FILES = ("*.go", "go.mod")
#: Debian's Go (golang-go, 1.19 on bookworm): the toolchain the 1.20 tree builds with.
#: It goes first on PATH, since the machine's own ``go`` may be a newer toolchain
#: (/usr/local/go) that rejects this GOPATH-mode tree.
DEBIAN_GO_BIN = Path("/usr/lib/go/bin")
#: The build tag that selects the plugin's adapter for the 1.20 framework (the module's
#: other files are for 1.35 and later); the tree's make appends GOFLAGS' -tags to its own.
TREE_TAG = "k8s120"
_ONE_LINE = re.compile(
    r"^deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s+(?P<comps>.+)$"
)


def _wanted(suite: str, codename: str) -> bool:
    return suite == codename or suite.startswith(codename + "-")


def _deb822_entries(text: str) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields:
            entries.append(fields)
    return entries


def _sources(codename: str) -> list[dict[str, str]]:
    """(uri, suites, components, signed-by) of the machine's deb entries for codename."""
    found: list[dict[str, str]] = []
    list_files = [APT_SOURCES_LIST, *sorted(APT_SOURCES_DIR.glob("*.list"))]
    for path in list_files:
        if not path.is_file():
            continue
        for raw in path.read_text(errors="replace").splitlines():
            match = _ONE_LINE.match(raw.strip())
            if not match or not _wanted(match["suite"], codename):
                continue
            opts = dict(o.split("=", 1) for o in (match["opts"] or "").split() if "=" in o)
            found.append(
                {
                    "uri": match["uri"],
                    "suites": match["suite"],
                    "components": match["comps"].strip(),
                    "signed-by": opts.get("signed-by", ""),
                }
            )
    for path in sorted(APT_SOURCES_DIR.glob("*.sources")):
        for fields in _deb822_entries(path.read_text(errors="replace")):
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            suites = [s for s in fields.get("suites", "").split() if _wanted(s, codename)]
            for uri in fields.get("uris", "").split():
                if suites:
                    found.append(
                        {
                            "uri": uri,
                            "suites": " ".join(suites),
                            "components": fields.get("components", "main"),
                            "signed-by": fields.get("signed-by", ""),
                        }
                    )
    return found


def cmd_sources(args: argparse.Namespace) -> int:
    entries = _sources(args.codename)
    if args.suite:
        # the archive's own line for the codename (not -updates/-security), another suite
        entries = [
            dict(entry, suites=args.suite)
            for entry in entries
            if args.codename in entry["suites"].split()
        ]
    if not entries:
        print(
            f"no 'deb' entry for {args.codename} or {args.codename}-* in {APT_SOURCES_LIST} "
            f"or {APT_SOURCES_DIR}: the Kubernetes source package comes from the Debian "
            f"archive this machine uses; add that archive to apt's sources first",
            file=sys.stderr,
        )
        return 1
    # One-line format: apt reads Dir::Etc::SourceList as a .list file.
    lines = []
    for entry in entries:
        opts = f"[signed-by={entry['signed-by']}] " if entry["signed-by"] else ""
        for suite in entry["suites"].split():
            lines.append(f"{args.type} {opts}{entry['uri']} {suite} {entry['components']}")
    print("\n".join(lines))
    return 0


def _gopath(tree: Path) -> Path:
    """The tree's GOPATH link (``.go/src/k8s.io/kubernetes`` -> tree), made or fixed."""
    gopath = tree / ".go"
    link = gopath / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() != tree:
        link.unlink()  # a tree copied or moved: point GOPATH at this one, not the old
    if not link.is_symlink():
        link.symlink_to(tree)
    return link


def _go_env(tree: Path, cache: Path) -> dict[str, str]:
    if not (DEBIAN_GO_BIN / "go").is_file():
        raise SystemExit(
            f"Debian's Go is missing ({DEBIAN_GO_BIN / 'go'}): the Kubernetes 1.20 tree builds"
            " with it, not the machine's newer go (apt-get install golang-go)"
        )
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{DEBIAN_GO_BIN}{os.pathsep}{env.get('PATH', '')}",
            "GOROOT": str(DEBIAN_GO_BIN.parent.resolve()),
            "GOTOOLCHAIN": "local",
            "GOPATH": str(tree / ".go"),
            "GOCACHE": str(cache),
            "CGO_ENABLED": "0",
            "GOPROXY": "off",
            # GOPATH mode, as the tree's own scripts build (hack/lib/init.sh)
            "GO111MODULE": "off",
            "GOFLAGS": f"-tags={TREE_TAG}",
            "HOME": str(tree.parent),
        }
    )
    return env


class _Locked:
    """An exclusive flock on the tree for the life of the ``with`` block."""

    def __init__(self, tree: Path) -> None:
        self.path = tree / LOCK_FILE

    def __enter__(self) -> None:
        self.handle = self.path.open("w")
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _place_plugin(tree: Path, plugin: str) -> None:
    """Copy module SRC into the tree's vendor/IMPORT (``SRC=IMPORT``), deleting what the
    module no longer has."""
    source, sep, import_path = plugin.partition("=")
    if not sep or not source or not import_path or ".." in Path(import_path).parts:
        raise SystemExit(f"--plugin {plugin!r}: write SOURCE_DIR=IMPORT_PATH")
    if not (Path(source) / "go.mod").is_file():
        raise SystemExit(
            f"--plugin {plugin!r}: {source} holds no go.mod: is it the module's directory?"
        )
    dest = tree / "vendor" / import_path
    dest.mkdir(parents=True, exist_ok=True)
    argv = ["rsync", "--recursive", "--checksum", "--delete", "--delete-excluded"]
    argv += ["--prune-empty-dirs", "--include=*/"]
    argv += [f"--include={pattern}" for pattern in PLUGIN_FILES] + ["--exclude=*"]
    subprocess.run([*argv, f"{source.rstrip('/')}/", f"{dest}/"], check=True)


def cmd_make(args: argparse.Namespace) -> int:
    tree = Path(args.tree).resolve()
    log = Path(args.log)
    link = _gopath(tree)
    env = _go_env(tree, tree.parent / "go-build-cache")
    argv = ["make", f"WHAT={' '.join(args.what)}"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with _Locked(tree), log.open("w") as out:
        if args.plugin:
            _place_plugin(tree, args.plugin)
        out.write(f"$ {' '.join(argv)}  (in {link})\n")
        out.flush()
        try:
            proc = subprocess.run(
                argv,
                cwd=link,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=args.timeout_s,
                check=False,
            )
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = -1
        except OSError as err:
            print(f"cannot run {argv[0]}: {err} (apt-get install make golang-go)", file=sys.stderr)
            return 1
    if rc == 0:
        return 0
    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    why = f"timed out after {args.timeout_s} s" if rc == -1 else f"exited {rc}"
    print(
        f"building {' '.join(args.what)} in {tree} {why}; full log: {log}\n" + "\n".join(tail),
        file=sys.stderr,
    )
    return 1


#: The tree's own build GOPATH (hack/lib/golang.sh: _output/local/go, its cache in it).
TREE_BUILD_GOPATH = ("_output", "local", "go")
#: What the tree's make passes every build of a static binary (kube-scheduler is one):
#: ``go test`` with the same GOPATH, cache and flags compiles the packages make built
#: already (client-go, the scheduler) from make's cache instead of again.
TREE_BUILD_FLAGS = ("-installsuffix", "static", "-tags", f"selinux,notest,{TREE_TAG}")


def cmd_gotest(args: argparse.Namespace) -> int:
    tree = Path(args.tree).resolve()
    gopath = tree.joinpath(*TREE_BUILD_GOPATH)
    link = gopath / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(tree)
    env = _go_env(tree, gopath / "cache")
    env["GOPATH"] = str(gopath)
    # the go tool takes the package's import path from $PWD when it names the working
    # directory: the GOPATH link, not the tree it resolves to
    env["PWD"] = str(link)
    if args.race:
        env["CGO_ENABLED"] = "1"
    with _Locked(tree):
        _place_plugin(tree, args.plugin)
        argv = ["go", "test", *TREE_BUILD_FLAGS, *args.go_args]
        print(f"$ {' '.join(argv)}  (in {link})", flush=True)
        try:
            done = subprocess.run(argv, cwd=link, env=env, stdin=subprocess.DEVNULL, check=False)
            return done.returncode
        except OSError as err:
            print(f"cannot run go: {err} (apt-get install golang-go)", file=sys.stderr)
            return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_src = sub.add_parser("sources")
    p_src.add_argument("--codename", required=True)
    p_src.add_argument("--type", choices=("deb-src", "deb"), default="deb-src")
    p_src.add_argument("--suite", help="the suite to write instead of the codename's own")
    p_make = sub.add_parser("make")
    p_make.add_argument("--tree", required=True)
    p_make.add_argument("--log", required=True)
    p_make.add_argument("--timeout-s", type=int, default=7200)
    p_make.add_argument("--plugin", help="SOURCE_DIR=IMPORT_PATH: a Go module to build in the tree")
    p_make.add_argument("what", nargs="+")
    p_test = sub.add_parser("gotest")
    p_test.add_argument("--tree", required=True)
    p_test.add_argument("--plugin", required=True, help="SOURCE_DIR=IMPORT_PATH")
    p_test.add_argument("--race", action="store_true", help="cgo on, for go test -race")
    p_test.add_argument("go_args", nargs="+")
    args = parser.parse_args()
    handlers = {"sources": cmd_sources, "make": cmd_make, "gotest": cmd_gotest}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
