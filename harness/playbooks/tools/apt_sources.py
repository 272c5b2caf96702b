#!/usr/bin/env python3
"""A private apt sources list derived from this machine's own. Standard library only.

``sources --codename C [--type deb|deb-src] [--suite S]``
    Print a one-line-format sources list with ``deb-src`` lines for each ``deb`` entry of this
    machine's apt configuration whose suite is C or C-*. A download reads the archive the
    machine already uses, through a private sources list, so the machine's own apt
    configuration is never changed. With ``--suite S`` only the entries
    whose suite is exactly C are taken, and S replaces it: the containerd download
    (role containerd_download) reads ``deb`` lines for ``sid`` from the same archive.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

#: Where apt keeps its configuration.
APT_SOURCES_LIST = Path("/etc/apt/sources.list")
APT_SOURCES_DIR = Path("/etc/apt/sources.list.d")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_src = sub.add_parser("sources")
    p_src.add_argument("--codename", required=True)
    p_src.add_argument("--type", choices=("deb-src", "deb"), default="deb-src")
    p_src.add_argument("--suite", help="the suite to write instead of the codename's own")
    args = parser.parse_args()
    handlers = {"sources": cmd_sources}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
