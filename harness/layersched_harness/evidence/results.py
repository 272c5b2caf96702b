"""Where a run's results go: a run directory, or the committed results files when asked.

Every results file has a committed home under ``harness/results/`` (the
figures in README.md and docs/ are generated from those by ``make figures``). A user's
run (``make testbed``, ``make replay``, ``make simulate``, the benchmarks) must leave a
clone as it found it, so by default it writes the same relative path under a run
directory instead, ``runs/<UTC time>/`` in the checkout (git-ignored): e.g.
``runs/20261128T200102Z/harness/results/scenario.json``. ``LAYERSCHED_RESULTS=commit``
(``make testbed RESULTS=commit``) writes the committed file itself, to be committed
with the commit it names (:func:`layersched_harness.evidence.provenance.start` refuses a dirty
tree then, before measuring). ``LAYERSCHED_RUN_DIR`` names the run directory, so that
the steps of one ``make`` target (the testbed's bring-up, then the scenario) share one.

A writer passes the committed path to :func:`destination` or :func:`write_json`; a
plot passes :func:`plot_metadata` to ``savefig`` so that the PNG names the commit of
the JSON beside it (:func:`png_provenance` reads it back).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layersched.core.errors import InputError
from layersched_harness.evidence import provenance

ROOT = provenance.ROOT
RUN_DIR_ENV = "LAYERSCHED_RUN_DIR"
#: The run directories' parent in the checkout (``.gitignore`` names it).
RUNS = "runs"
#: The PNG text key a plot's provenance is written under (:func:`plot_metadata`).
PNG_KEY = "layersched-provenance"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_run_dir: Path | None = None


def run_dir(root: Path = ROOT) -> Path:
    """This run's directory: ``$LAYERSCHED_RUN_DIR``, or ``runs/<UTC time>`` in the
    checkout, made on first use and kept for the rest of the process."""
    global _run_dir
    named = os.environ.get(RUN_DIR_ENV)
    if named:
        return Path(named)
    if _run_dir is None:
        _run_dir = root / RUNS / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return _run_dir


def destination(committed: str | Path, root: Path = ROOT) -> Path:
    """Where this run writes the results file whose committed home is ``committed``
    (relative to the checkout): that file when committing, else the same relative path
    under :func:`run_dir`. Its directory exists afterwards."""
    relative = Path(committed)
    if relative.is_absolute():
        raise InputError(f"{committed}: a committed results path is relative to the checkout")
    path = root / relative if provenance.committing() else run_dir(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(
    committed: str | Path,
    document: Mapping[str, Any],
    *,
    output: Path | None = None,
    root: Path = ROOT,
    compact: bool = False,
) -> Path:
    """Write ``document`` (which must hold its ``provenance`` record, from
    :func:`~layersched_harness.evidence.provenance.start`/``finish``) to ``output`` or to
    :func:`destination` of ``committed``; return the path, and say on stderr what the
    record lacks to pass the committed files' test, if anything. ``compact`` writes it
    without indentation or spaces (a file of per-pod records, a third of the size)."""
    record = document.get("provenance")
    if not isinstance(record, Mapping):
        raise InputError(
            f"{committed}: the results document has no provenance record: call "
            "layersched_harness.evidence.provenance.start() before measuring and finish() after"
        )
    path = output if output is not None else destination(committed, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        json.dumps(document, separators=(",", ":")) if compact else json.dumps(document, indent=2)
    )
    path.write_text(text + "\n", encoding="utf-8")
    lacking = provenance.problems(record)
    if lacking:
        print(
            f"note: {path}: not committable as results ({'; '.join(lacking)})",
            file=sys.stderr,
        )
    return path


def plot_metadata(record: Mapping[str, Any] | None) -> dict[str, str]:
    """PNG text for matplotlib's ``savefig(metadata=...)``: the commit and date of the
    results the plot draws (empty when they record none)."""
    if not record:
        return {}
    return {
        PNG_KEY: json.dumps(
            {"commit": record.get("commit"), "date": record.get("date")}, sort_keys=True
        )
    }


def png_provenance(path: Path) -> dict[str, Any] | None:
    """The record :func:`plot_metadata` wrote into the PNG at ``path`` (None without one):
    its ``tEXt`` chunks, read without an imaging library."""
    data = path.read_bytes()
    if not data.startswith(_PNG_SIGNATURE):
        raise InputError(f"{path}: not a PNG")
    at = len(_PNG_SIGNATURE)
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        at += 12 + length  # length, type, body, CRC
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            text = zlib.decompress(rest[1:])
        else:
            continue
        if key.decode("latin-1") == PNG_KEY:
            found: dict[str, Any] = json.loads(text.decode("latin-1"))
            return found
    return None
