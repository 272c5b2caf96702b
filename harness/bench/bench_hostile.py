"""The ``--watch`` extender under issue 30's hostile objects, new against an earlier version.

Two scenarios, each a fresh extender process on the benchmark's 5,000 nodes
(``bench_extender``'s corpus, served by the stand-in API :mod:`bench.fake_api`):

* ``hostile_node``: one more Node whose ``status.images`` holds 650,000 empty entries:
  1.24 MiB of the protobuf a kubelet writes, 9.75 MB of JSON. Before issue 30 every list
  of Nodes failed on it for good (the extender never got ready);
* ``hostile_inventories``: six nodes publish NodeLayerInventory objects of ~1 MiB, each
  5,000 images of 8 names of their own (the costliest thing per byte to hold), listed
  before the 4,994 honest nodes' own. Before, they took the budget first come, first
  served, and honest objects were refused.

For each: seconds until ``/readyz`` answers 200 (or "never" within ``--ready-timeout-s``),
peak memory (VmHWM, the whole run), settled RSS (after 200 NodeNames requests, once the
inventory is listed), the watch's ignored-object counters, and how many nodes hold their
published layers. The budget stated in docs/inventory.md: peak and settled RSS under the
extender's 512 MiB container limit, the honest nodes' objects all held.

    .venv/bin/python harness/bench/bench_hostile.py --against /tmp/old --label-old 1e8b238
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from bench_against import _python_path, commit
from bench_extender import (
    CONTAINER_LIMIT_MIB,
    HELD_NODES,
    IMAGES,
    IMAGES_PER_NODE,
    PODS,
    _extender,
    _held_images,
    _memory_mb,
    _metrics,
    _ready,
    _run_requests,
    machine,
)
from corpus import workload
from fake_api import FakeApi
from rich.console import Console
from rich.progress import Progress

from layersched.builds import REPO_ROOT
from layersched.core.nodelayersbuilder import build_document
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json

#: The committed results file (a run writes it under its run directory unless committing).
HOSTILE_RESULTS = "harness/results/extender_hostile.json"
#: The issue's Node: empty status images, as the API server writes them in JSON.
HOSTILE_NODE_IMAGES = 650_000
HOSTILE_INVENTORIES = 6
HOSTILE_IMAGES = 5_000
HOSTILE_NAMES = 8
DEFAULT_READY_TIMEOUT_S = 90.0
SETTLED_REQUESTS = 200


def hostile_node(name: str) -> dict[str, Any]:
    """A Node small in etcd and huge in JSON (one entry object, repeated: cheap here)."""
    empty = {"names": None}
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "status": {"images": [empty] * HOSTILE_NODE_IMAGES},
    }


def hostile_inventory(name: str, n: int) -> dict[str, Any]:
    """``name``'s ~1 MiB object: 5,000 images of 8 names nobody else has, on one layer."""
    document = build_document(name, [], runtime="hostile", source="content-store")
    document["layers"] = [{"digest": "sha256:" + "e" * 64, "sizeBytes": 1}]
    document["images"] = [
        {
            "names": [f"h{n}/{i:x}/{j}" for j in range(HOSTILE_NAMES)],
            "digest": f"sha256:{n:032x}{i:032x}",
            "layers": [0],
        }
        for i in range(HOSTILE_IMAGES)
    ]
    return document


def _scenario(
    label: str,
    nodes: list[dict[str, Any]],
    documents: list[dict[str, Any]],
    bodies: list[bytes],
    tmp: Path,
    ready_timeout_s: float,
    progress: Progress,
) -> dict[str, Any]:
    api = FakeApi(tmp, nodes, documents, None, 1.0)
    api.start()
    try:
        argv = ["--watch", "--kubeconfig", str(api.kubeconfig())]
        started = time.monotonic()
        with _extender(argv, tmp / f"{label}.log", wait=False) as (port, proc):
            ready_s: float | None = None
            while time.monotonic() - started < ready_timeout_s:
                if _ready(port):
                    ready_s = round(time.monotonic() - started, 2)
                    break
                time.sleep(0.5)
            if proc.poll() is not None:
                raise SystemExit(f"{label}: the extender exited: see {tmp / (label + '.log')}")
            if ready_s is not None:
                _run_requests(port, bodies, 0, SETTLED_REQUESTS, progress, f"requests: {label}")
            memory = _memory_mb(proc.pid)
            try:
                metrics = _metrics(port)
            except (OSError, http.client.HTTPException):  # not serving at all
                metrics = {}
    finally:
        api.stop()
    ignored = {
        f"{labels['resource']}/{labels['reason']}": value
        for key, value in metrics.items()
        if value and key.startswith("layersched_extender_watch_ignored_objects_total{")
        for labels in [dict(re.findall(r'(\w+)="([^"]*)"', key))]
    }
    return {
        "ready_after_s": ready_s if ready_s is not None else f"never (>{ready_timeout_s:g} s)",
        "peak_vm_hwm_mib": memory.get("VmHWM"),
        "settled_vm_rss_mib": memory.get("VmRSS"),
        "nodes_with_layers": metrics.get("layersched_extender_watch_nodes_with_layers"),
        "held_mib": round(metrics.get("layersched_extender_watch_held_bytes", 0) / 2**20, 1),
        "ignored": ignored,
        "list_failures": {
            kind: metrics.get(f'layersched_extender_watch_failures_total{{resource="{kind}"}}')
            for kind in ("nodes", "nodelayerinventories")
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="a checkout of the earlier version")
    parser.add_argument("--label-old", default="", help="its name in the results")
    parser.add_argument(
        "--new", type=Path, help="a checkout of the version measured (default: this one's)"
    )
    parser.add_argument("--label-new", default="", help="its name in the results")
    parser.add_argument("--ready-timeout-s", type=float, default=DEFAULT_READY_TIMEOUT_S)
    parser.add_argument(
        "--nodes", type=int, default=HELD_NODES, help="honest nodes (default: %(default)s)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {HOSTILE_RESULTS} under this run's directory, "
        f"runs/<UTC time>/, or {HOSTILE_RESULTS} itself with LAYERSCHED_RESULTS=commit)",
    )
    args = parser.parse_args()
    console = Console(stderr=True)
    load = workload(IMAGES)
    held_doc = load.node_list(args.nodes, IMAGES_PER_NODE, seed=1)
    nodes = held_doc["items"]
    names = [node["metadata"]["name"] for node in nodes]
    names_json = msgspec.json.encode(names)
    bodies = [
        b'{"Pod":' + msgspec.json.encode(p) + b',"NodeNames":' + names_json + b"}"
        for p in load.pods(PODS)
    ]
    honest = [
        build_document(name, _held_images(load, node), runtime="bench", source="content-store")
        for name, node in zip(names, nodes, strict=True)
    ]
    floods = [hostile_inventory(names[n], n) for n in range(HOSTILE_INVENTORIES)]
    flood_bytes = len(json.dumps(floods[0], separators=(",", ":")))
    half = len(nodes) // 2
    scenarios = {
        "hostile_node": ([*nodes[:half], hostile_node("hostile"), *nodes[half:]], honest),
        "hostile_inventories": (nodes, [*floods, *honest[HOSTILE_INVENTORIES:]]),
    }
    sides = {"new": args.new} | ({"old": args.against} if args.against else {})
    record = provenance.start(None)
    results: dict[str, Any] = {
        "provenance": record,
        "commit_new": args.label_new or commit(args.new or REPO_ROOT),
        "commit_old": args.label_old or (commit(args.against) if args.against else None),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "workload": {
            "nodes": args.nodes,
            "hostile_node_json_bytes": len(
                json.dumps(hostile_node("hostile"), separators=(",", ":"))
            ),
            "hostile_inventories": HOSTILE_INVENTORIES,
            "hostile_inventory_json_bytes": flood_bytes,
        },
        "budget": {"container_limit_mib": CONTAINER_LIMIT_MIB},
    }
    logs = Path(tempfile.mkdtemp(prefix="layersched-hostile-"))  # kept: the extenders' logs
    console.print(f"logs: {logs}")
    with Progress(console=console) as progress:
        for scenario, (scenario_nodes, documents) in scenarios.items():
            for side, tree in sides.items():
                with _python_path(tree):
                    results.setdefault(scenario, {})[side] = _scenario(
                        f"{scenario}-{side}",
                        scenario_nodes,
                        documents,
                        bodies,
                        logs,
                        args.ready_timeout_s,
                        progress,
                    )
                console.print(scenario, side, results[scenario][side])
    results["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    results["provenance"] = provenance.finish(record)
    new = [results[s]["new"] for s in scenarios]
    results["pass"] = (
        all(
            isinstance(r["ready_after_s"], float)
            and max(r["peak_vm_hwm_mib"], r["settled_vm_rss_mib"]) < CONTAINER_LIMIT_MIB
            for r in new
        )
        and results["hostile_inventories"]["new"]["nodes_with_layers"]
        == args.nodes - HOSTILE_INVENTORIES
    )
    written = write_json(HOSTILE_RESULTS, results, output=args.output)
    console.print(f"results: {written}: pass={results['pass']}")
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
