#!/usr/bin/env python3
"""Steps of the Kubernetes build that Ansible's modules do not cover. Standard library only.

``sources --codename C [--type deb|deb-src] [--suite S]``
    Print a one-line-format sources list with ``deb-src`` lines for each ``deb`` entry of this
    machine's apt configuration whose suite is C or C-*. The build fetches its source from
    the archive the machine already uses, through a private sources list, so the
    machine's own apt configuration is never changed. With ``--suite S`` only the entries
    whose suite is exactly C are taken, and S replaces it: the containerd download
    (role containerd_download) reads ``deb`` lines for ``sid`` from the same archive.

``make --tree T --log L --timeout-s N -- WHAT...``
    Build ``WHAT`` in tree T as Debian's ``debian/rules`` does: GOPATH=T/.go with
    ``.go/src/k8s.io/kubernetes`` linked to T, CGO_ENABLED=0, upstream's Makefile.
    Output goes to L, one line per line, so a caller can follow it. On failure it prints
    which step failed, where the log is and the log's last lines, and exits 1.
"""

from __future__ import annotations

import argparse
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


def cmd_make(args: argparse.Namespace) -> int:
    tree = Path(args.tree).resolve()
    log = Path(args.log)
    gopath = tree / ".go"
    link = gopath / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() != tree:
        link.unlink()  # a tree copied or moved: point GOPATH at this one, not the old
    if not link.is_symlink():
        link.symlink_to(tree)
    env = dict(os.environ)
    env.update(
        {
            "GOPATH": str(gopath),
            "GOCACHE": str(tree.parent / "go-build-cache"),
            "CGO_ENABLED": "0",
            "GOPROXY": "off",
            "HOME": str(tree.parent),
        }
    )
    argv = ["make", f"WHAT={' '.join(args.what)}"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
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
    p_make.add_argument("what", nargs="+")
    args = parser.parse_args()
    return cmd_sources(args) if args.command == "sources" else cmd_make(args)


if __name__ == "__main__":
    sys.exit(main())
