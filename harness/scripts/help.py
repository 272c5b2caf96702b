#!/usr/bin/env python3
"""make help: every target with its ``## `` comment, aligned, and how long it last took,
under the heading of its group (a ``##@ `` line of the Makefile: the product, CI, the
harness).

A comment may end with ``{last: FILE#KEY}``: the results file that target writes and the
key recording how long its last run took (seconds); the line then says so ("last run 18
min"), or that no run is recorded there. Standard library only: it runs
before the venv exists.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = re.compile(r"^([a-zA-Z0-9_-]+):[^#]*## (.*)$")
GROUP = re.compile(r"^##@ (.*)$")
LAST = re.compile(r"\s*\{last: ([^#}]+)#([^}]+)\}\s*$")
SECONDS_PER_MINUTE = 60


def last_run(path: str, key: str) -> str:
    results = REPO / path
    try:
        value = json.loads(results.read_text(encoding="utf-8"))
        for part in key.split("."):
            value = value[part]
        seconds = float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path}, no run recorded yet"
    took = (
        f"{seconds / SECONDS_PER_MINUTE:.0f} min"
        if seconds >= SECONDS_PER_MINUTE
        else f"{seconds:.0f} s"
    )
    return f"{path}, last run {took}"


def main() -> int:
    rows: list[tuple[str, str]] = []  # (target, text), or ("", heading) for a group
    for line in (REPO / "Makefile").read_text(encoding="utf-8").splitlines():
        group = GROUP.match(line)
        if group is not None:
            rows.append(("", group.group(1)))
            continue
        match = TARGET.match(line)
        if match is None:
            continue
        target, text = match.groups()
        last = LAST.search(text)
        if last is not None:
            text = f"{text[: last.start()]} ({last_run(*last.groups())})"
        rows.append((target, text))
    width = max(len(target) for target, _ in rows) + 2
    color = sys.stdout.isatty()
    for target, text in rows:
        if not target:
            print(f"\n\033[1m{text}\033[0m" if color else f"\n{text}")
            continue
        name = f"\033[36m{target:<{width}}\033[0m" if color else f"{target:<{width}}"
        print(f"  {name}{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
