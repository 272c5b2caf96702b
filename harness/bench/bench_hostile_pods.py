"""A stream of hostile pods through ``/prioritize``, new against an earlier version (issue 44).

Issue 44's black-box case: a registry-backed extender allowed one registry
(``--allow-registry``), answering full-``Nodes`` requests (no ``--nodes`` file, no
watch), is sent pods of 300 containers each naming a distinct image of a registry
outside the allowlist. Nothing reaches a network: a refused registry is never
contacted, so every image fails at once and is remembered as a failure. Before issue 44
each failure kept its exception (with the chained cause, its traceback and frame
locals): 4,000 such pods grew the extender's RSS from 79 to 287 MiB, and still growing.

For each version, a fresh extender process: its RSS (VmRSS) before the first pod and
after every ``--sample-every`` pods, its peak (VmHWM), the layer cache's entries and
charged bytes from ``/metrics`` (``layersched_layer_cache_bytes``; the entries where the
version exports them), and how each pod was answered. The budget stated in
docs/security.md: RSS stays under the extender's 512 MiB container limit, and settles
rather than growing with the stream.

    .venv/bin/python harness/bench/bench_hostile_pods.py --against /tmp/old --label-old 40ab284
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_against import _python_path, commit
from bench_extender import (
    CONTAINER_LIMIT_MIB,
    HTTP_TIMEOUT_S,
    LOOPBACK,
    _extender,
    _memory_mb,
    _metrics,
)
from rich.console import Console
from rich.progress import Progress

from layersched.builds import REPO_ROOT
from layersched_harness.evidence import provenance, results

#: The committed home of the results (a run writes under runs/ unless
#: LAYERSCHED_RESULTS=commit: layersched_harness.evidence.results).
HOSTILE_PODS_RESULTS = "harness/results/extender_hostile_pods.json"
#: The issue's stream: pods, and distinct refused images per pod.
PODS = 4_000
IMAGES_PER_POD = 300
#: The one registry the extender may contact, and the one every pod names instead.
ALLOWED_REGISTRY = "registry.example.com"
REFUSED_REGISTRY = "refused.example.net"
#: The request's nodes (full Nodes), each with status images of the refused registry too.
NODES = 20
NODE_IMAGES = 10
SAMPLE_EVERY = 250
#: A pod whose resolution is under way is answered neutrally within the extender's
#: deadline; past these, the RSS is read once more when the stream ends.
SETTLE_S = 5.0


def node(i: int) -> dict[str, Any]:
    """A Ready linux/amd64 Node whose status images name the refused registry."""
    return {
        "metadata": {
            "name": f"n{i}",
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        },
        "status": {
            "images": [
                {"names": [f"{REFUSED_REGISTRY}/base/{k}:1"], "sizeBytes": 50_000_000}
                for k in range(NODE_IMAGES)
            ],
            "nodeInfo": {"operatingSystem": "linux", "architecture": "amd64"},
        },
    }


def pod(i: int, images: int) -> dict[str, Any]:
    """Pod ``i``: ``images`` containers, each a distinct image of the refused registry."""
    return {
        "metadata": {"name": f"flood-{i}", "namespace": "default", "uid": f"uid-{i}"},
        "spec": {
            "containers": [
                {"name": f"c{k}", "image": f"{REFUSED_REGISTRY}/p{i}/c{k}:1"} for k in range(images)
            ]
        },
    }


def _cache(port: int) -> dict[str, float | None]:
    samples = _metrics(port)
    return {
        "cache_entries": samples.get("layersched_layer_cache_entries"),
        "cache_bytes_charged": samples.get("layersched_layer_cache_bytes"),
        "budget_bytes_charged": samples.get("layersched_extender_cache_budget_held_bytes"),
    }


def _stream(label: str, pods: int, images: int, sample_every: int, logs: Path,
            progress: Progress, record: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    nodes = json.dumps({"items": [node(i) for i in range(NODES)]}).encode()
    argv = ["--allow-registry", ALLOWED_REGISTRY]
    samples: list[dict[str, Any]] = []
    answers = {"neutral": 0, "scored": 0}
    with _extender(argv, logs / f"{label}.log") as (port, proc):
        samples.append({"pods": 0, **_memory_mb(proc.pid), **_cache(port)})
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=HTTP_TIMEOUT_S)
        task = progress.add_task(label, total=pods)
        started = time.monotonic()
        try:
            for i in range(pods):
                pod_json = json.dumps(pod(i, images)).encode()
                body = b'{"Pod":' + pod_json + b',"Nodes":' + nodes + b"}"
                conn.request("POST", "/prioritize", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                payload = response.read()
                if response.status != 200:
                    raise SystemExit(f"{label}: HTTP {response.status}: {payload[:300]!r}")
                scores = [entry["Score"] for entry in json.loads(payload)]
                answers["scored" if any(scores) else "neutral"] += 1
                if (i + 1) % sample_every == 0:
                    provenance.sample_load(record)
                    samples.append({"pods": i + 1, **_memory_mb(proc.pid), **_cache(port)})
                progress.advance(task)
        finally:
            conn.close()
        elapsed_s = round(time.monotonic() - started, 1)
        time.sleep(SETTLE_S)
        settled = {**_memory_mb(proc.pid), **_cache(port)}
    return {
        "stream_s": elapsed_s,
        "answers": answers,
        "rss_mib_before": samples[0]["VmRSS"],
        "rss_mib_after": settled["VmRSS"],
        "peak_vm_hwm_mib": settled["VmHWM"],
        "settled": settled,
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="a checkout of the earlier version")
    parser.add_argument("--label-old", default="", help="its name in the results")
    parser.add_argument("--new", type=Path, help="a checkout measured (default: this one)")
    parser.add_argument("--label-new", default="", help="its name in the results")
    parser.add_argument("--pods", type=int, default=PODS, help="default: %(default)s")
    parser.add_argument("--images", type=int, default=IMAGES_PER_POD, help="per pod")
    parser.add_argument("--sample-every", type=int, default=SAMPLE_EVERY)
    parser.add_argument("--output", type=Path, help="default: the run's " + HOSTILE_PODS_RESULTS)
    args = parser.parse_args()
    console = Console(stderr=True)
    sides = {"new": args.new} | ({"old": args.against} if args.against else {})
    record = provenance.start(None)
    found: dict[str, Any] = {
        "compared": {
            "new": args.label_new or commit(args.new or REPO_ROOT),
            "old": args.label_old or (commit(args.against) if args.against else None),
        },
        "workload": {
            "pods": args.pods,
            "images_per_pod": args.images,
            "allowed_registry": ALLOWED_REGISTRY,
            "refused_registry": REFUSED_REGISTRY,
            "nodes": NODES,
            "node_images": NODE_IMAGES,
            "mode": "full Nodes, no --nodes file, no watch",
        },
        "budget": {"container_limit_mib": CONTAINER_LIMIT_MIB},
    }
    logs = Path(tempfile.mkdtemp(prefix="layersched-hostile-pods-"))  # kept: the logs
    console.print(f"logs: {logs}")
    with Progress(console=console) as progress:
        for side, tree in sides.items():
            with _python_path(tree):
                found[side] = _stream(
                    side, args.pods, args.images, args.sample_every, logs, progress, record
                )
            console.print(side, {k: v for k, v in found[side].items() if k != "samples"})
    new = found["new"]
    found["pass"] = max(new["peak_vm_hwm_mib"], new["rss_mib_after"]) < CONTAINER_LIMIT_MIB
    document = {"provenance": provenance.finish(record), **found}
    path = results.write_json(HOSTILE_PODS_RESULTS, document, output=args.output)
    console.print(f"results: {path}: pass={found['pass']}")
    return 0 if found["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
