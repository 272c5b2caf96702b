#!/usr/bin/env python3
"""make help: every target with its ``## `` comment, aligned, and how long it last took.

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
    rows = []
    for line in (REPO / "Makefile").read_text(encoding="utf-8").splitlines():
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
        name = f"\033[36m{target:<{width}}\033[0m" if color else f"{target:<{width}}"
        print(f"  {name}{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
