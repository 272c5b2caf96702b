"""The extender against an earlier version of itself, alternating in one run.

Machines are noisy, so a regression check compares two versions within one run, not
two runs: rounds alternate new and old (``new, old, old, new, new, old, …``, so neither
side always goes first), each round a fresh extender process of that version serving
the benchmark's NodeNames case (5,000 nodes held, 200 pods cycled: ``bench_extender``'s
workload and client), and the latencies of each side are pooled. ``--against DIR`` is a
checkout of the earlier version (``git worktree add DIR REV``); its extender runs from
that tree's ``plugin/`` on this venv. Results: ``harness/results/extender_against.json``.

With ``--watch`` the inventory comes from the live watch instead of a ``--nodes`` file:
each round's extender runs ``--watch`` against a fresh stand-in API server
(``fake_api.py``) serving the same nodes and their agents' NodeLayerInventory objects,
which streams updates while the requests are measured (``bench_extender``'s
``node_names_watch`` case), so the watch's code is on the measured path.

    .venv/bin/python harness/bench/bench_against.py --against /tmp/old --label-old d05a4a3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from bench_extender import (
    HELD_NODES,
    IMAGES,
    IMAGES_PER_NODE,
    PODS,
    WATCH_UPDATES_PER_S,
    _extender,
    _run_requests,
    _stats,
    watch_documents,
)
from corpus import workload
from fake_api import FakeApi
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from layersched.builds import REPO_ROOT
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json

#: Where a comparison goes when committed (LAYERSCHED_RESULTS=commit; name it with
#: --output, e.g. harness/results/extender_against_issue31.json).
AGAINST_RESULTS = "harness/results/extender_against.json"
#: Rounds per side, and measured requests per round (after as many warm-up ones).
DEFAULT_ROUNDS = 6
DEFAULT_REQUESTS = 1000
NEW, OLD = "new", "old"


def product_root(tree: Path) -> Path:
    """Where a checkout keeps the layersched package: ``src/`` (``plugin/`` before the
    product got a root of its own)."""
    return tree / "src" if (tree / "src" / "layersched").is_dir() else tree / "plugin"


@contextlib.contextmanager
def _python_path(tree: Path | None) -> Iterator[None]:
    """Children started in the block import layersched from ``tree``'s product root (None:
    the venv's own, this checkout's)."""
    before = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(product_root(tree))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


#: What the stand-in API server serves (the nodes' objects) and streams (``update``).
Watched = tuple[list[dict[str, Any]], Callable[[int], dict[str, Any]]]


@contextlib.contextmanager
def _inventory(
    directory: Path,
    held_doc: dict[str, Any],
    watched: Watched | None,
    updates_per_s: float,
) -> Iterator[tuple[list[str], FakeApi | None]]:
    """The extender's inventory arguments for one round: the ``--nodes`` file, or (with
    ``watched``) ``--watch`` on a fresh stand-in API server in ``directory``, and that
    server."""
    if watched is None:
        yield ["--nodes", str(directory / "nodes.json")], None
        return
    round_dir = Path(tempfile.mkdtemp(dir=directory))
    documents, update = watched
    api = FakeApi(round_dir, held_doc["items"], documents, update, updates_per_s)
    api.start()
    try:
        yield ["--watch", "--kubeconfig", str(api.kubeconfig())], api
    finally:
        api.stop()


def _order(rounds: int) -> list[str]:
    """ABBA order: each side goes first as often as the other."""
    order: list[str] = []
    for i in range(rounds):
        order += [NEW, OLD] if i % 2 == 0 else [OLD, NEW]
    return order


def commit(tree: Path) -> str:
    """The short commit id of the checkout at ``tree`` ("?" when git cannot say)."""
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="checkout of the old version")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds per side")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="per round")
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {AGAINST_RESULTS} under this run's directory, "
        f"runs/<UTC time>/, or {AGAINST_RESULTS} itself with LAYERSCHED_RESULTS=commit)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="the inventory from the live watch of a stand-in API server, not a --nodes file",
    )
    parser.add_argument(
        "--watch-updates-per-s",
        type=float,
        default=WATCH_UPDATES_PER_S,
        help="with --watch: NodeLayerInventory updates streamed while measuring",
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="both sides score with --spread (the default from issue 45 on, off before: "
        "without it, a side older than that and a newer one answer differently)",
    )
    args = parser.parse_args()
    old_tree = args.against.resolve()
    if not (product_root(old_tree) / "layersched" / "__init__.py").is_file():
        parser.error(f"--against {old_tree}: no layersched package there: give a checkout")
    console = Console(stderr=True)
    load = workload(IMAGES)
    pod_json = [msgspec.json.encode(p) for p in load.pods(PODS)]
    held_doc = load.node_list(HELD_NODES, IMAGES_PER_NODE, seed=1)
    watched = watch_documents(load, held_doc["items"]) if args.watch else None
    names = msgspec.json.encode([item["metadata"]["name"] for item in held_doc["items"]])
    bodies = [b'{"Pod":' + p + b',"NodeNames":' + names + b"}" for p in pod_json]
    latencies: dict[str, list[float]] = {NEW: [], OLD: []}
    answers: dict[str, list[bytes]] = {NEW: [], OLD: []}
    rounds: list[dict[str, Any]] = []
    started = time.monotonic()
    record = provenance.start(None)
    with (
        tempfile.TemporaryDirectory(prefix="layersched-against-") as tmp,
        Progress(console=console) as progress,
    ):
        layers_path = Path(tmp) / "layers.json"
        layers_path.write_bytes(msgspec.json.encode(load.layers_document()))
        layers_argv = ["--layers", str(layers_path), *(["--spread"] if args.spread else [])]
        (Path(tmp) / "nodes.json").write_bytes(msgspec.json.encode(held_doc))
        for n, side in enumerate(_order(args.rounds)):
            with (
                _python_path(old_tree if side == OLD else None),
                _inventory(Path(tmp), held_doc, watched, args.watch_updates_per_s) as (argv, api),
                _extender([*layers_argv, *argv], Path(tmp) / f"{n}-{side}.log") as (port, _),
            ):
                label, sent_before = f"round {n + 1} {side}", 0
                said: list[bytes] = []
                if api is not None:  # the answers before any update streams (they change them)
                    _, said = _run_requests(port, bodies, 0, len(bodies), progress, label)
                    api.streaming.set()
                    sent_before = api.sent
                got, measured = _run_requests(
                    port, bodies, len(bodies), args.requests, progress, label
                )
                streamed = {} if api is None else {"updates_streamed": api.sent - sent_before}
            latencies[side] += got
            answers[side] = answers[side] or (measured if api is None else said)
            rounds.append({"side": side} | _stats(got) | streamed)
    same = answers[NEW] == answers[OLD]
    result: dict[str, Any] = {
        "provenance": provenance.finish(record),
        "case": f"NodeNames × {HELD_NODES:,} nodes, {PODS} pods cycled (bench_extender)"
        + (", --spread on both sides" if args.spread else ""),
        "inventory": (
            "--nodes file"
            if watched is None
            else f"--watch of a stand-in API server, {args.watch_updates_per_s:g} updates/s "
            "streamed while measured"
        ),
        # what was compared: kept apart from the two sides' statistics ("new", "old"),
        # which would otherwise overwrite it
        "compared": {
            NEW: {"commit": commit(REPO_ROOT)},
            OLD: {"tree": str(old_tree), "commit": commit(old_tree)},
        },
        "order": "ABBA by round (new first in even rounds)",
        "rounds_per_side": args.rounds,
        "requests_per_round": args.requests,
        "same_answers": same,
        NEW: _stats(latencies[NEW]),
        OLD: _stats(latencies[OLD]),
        "rounds": rounds,
        "run_time_s": round(time.monotonic() - started, 1),
    }
    for stat in ("p50_ms", "p99_ms"):
        result[f"{stat}_new_over_old"] = round(result[NEW][stat] / result[OLD][stat], 3)
    written = write_json(AGAINST_RESULTS, result, output=args.output)
    table = Table("side", "requests", "p50 ms", "p99 ms", "mean ms")
    for side in (NEW, OLD):
        s = result[side]
        table.add_row(
            side, str(s["requests"]), str(s["p50_ms"]), str(s["p99_ms"]), str(s["mean_ms"])
        )
    console.print(table)
    console.print(
        f"new/old: p50 {result['p50_ms_new_over_old']}, p99 {result['p99_ms_new_over_old']}; "
        f"same answers: {same}; {written}"
    )
    per_round = np.array([r["p50_ms"] for r in rounds])
    console.print(f"round p50s: {per_round.round(3).tolist()}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
