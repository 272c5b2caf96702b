"""Sidecar or Service? The extender's /prioritize latency over loopback vs across nodes.

In full-``Nodes`` mode kube-scheduler sends the extender the pod and every candidate Node
in full; in ``NodeNames`` mode (``nodeCacheCapable: true``, what install/kustomize/ uses, with the
extender's ``--watch`` inventory) only their names. This measures one call of each (500
nodes × 50 images, the bench corpus; the NodeNames extender holds the same nodes from a
``--nodes`` file, which answers like a ``--watch`` inventory) where kube-scheduler would
make it:

* **sidecar**: from the extender's own network namespace to ``127.0.0.1``;
* **Service**: from another node's namespace to the extender's node address, i.e.
  across the testbed's network (the hop a Deployment + Service adds; the testbed has no
  kube-proxy, so the node address stands in for the ClusterIP, which adds no bytes).

Needs root and a local testbed (its node network namespaces):
``sudo .venv/bin/python harness/bench/bench_extender_hop.py --state-dir /tmp/lsdp-state``.
Results go to ``extender_hop.json`` under this run's directory
(``runs/<UTC time>/harness/results/``), or to ``harness/results/extender_hop.json`` with
``LAYERSCHED_RESULTS=commit``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import tenacity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import workload

from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.local import load_state

#: The committed results file (a run writes it under its run directory unless committing).
RESULTS = "harness/results/extender_hop.json"
NODES = 500
IMAGES_PER_NODE = 50
PORT = 18888
READY_TIMEOUT_S = 60.0
CLIENT = """
import json, sys, time, httpx
url, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = open(path, "rb").read()
out = []
with httpx.Client(timeout=120) as c:
    c.post(url, content=body).raise_for_status()  # warm: resolve, connect
    for _ in range(n):
        t = time.perf_counter(); c.post(url, content=body).raise_for_status()
        out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


#: ``--max-request-bytes`` of the full-``Nodes`` case, as a full-``Nodes`` deployment sets
#: it (docs/extender.md, Limits): bench_extender.py's, repeated (the benchmarks are scripts
#: side by side, and import only their shared helpers, ``corpus`` and ``fake_api``).
FULL_NODES_MAX_REQUEST_BYTES = 64 * 1024 * 1024


def _client(netns: str, url: str, body: Path, requests: int) -> list[float]:
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", CLIENT, url, str(body)]
    done = subprocess.run([*argv, str(requests)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"bench_extender_hop: POST {url} from {netns} failed: {last}")
    return [float(x) for x in json.loads(done.stdout)]


def _stats(latencies_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies_s)
    return {
        "requests": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "max_ms": round(ms[-1], 1),
        "mean_ms": round(statistics.fmean(ms), 1),
    }


def _measure(
    server_netns: str, client_netns: str, address: str, extender_args: list[str], body: Path,
    requests: int,
) -> dict[str, Any]:  # fmt: skip
    """Start an extender in ``server_netns``; time ``body`` from itself and from another node."""
    cmd = ["ip", "netns", "exec", server_netns, sys.executable, "-m", "layersched.cli.main"]
    cmd += ["extender", "--host", "0.0.0.0", "--port", str(PORT), *extender_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        @tenacity.retry(
            stop=tenacity.stop_after_delay(READY_TIMEOUT_S),
            wait=tenacity.wait_fixed(0.5),
            reraise=True,
        )
        def ready() -> None:
            probe = ["ip", "netns", "exec", server_netns, "curl", "-sf"]
            url = f"http://127.0.0.1:{PORT}/readyz"
            subprocess.run([*probe, "-o", "/dev/null", url], check=True)

        ready()
        local = _client(server_netns, f"http://127.0.0.1:{PORT}/prioritize", body, requests)
        remote = _client(client_netns, f"http://{address}:{PORT}/prioritize", body, requests)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "request_bytes": body.stat().st_size,
        "sidecar_loopback": _stats(local),
        "across_nodes": _stats(remote),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument(
        "--output",
        type=Path,
        help=f"results file (default: {RESULTS} under this run's directory, runs/<UTC "
        f"time>/, or {RESULTS} itself with LAYERSCHED_RESULTS=commit)",
    )
    args = parser.parse_args(argv)
    inventory = load_state(args.state_dir)
    server, client = inventory.nodes[1], inventory.nodes[0]
    load = workload()
    pod = load.pods(1)[0]
    nodes = load.node_list(NODES, IMAGES_PER_NODE, seed=3)
    names = [n["metadata"]["name"] for n in nodes["items"]]
    # the testbed's daemons name its state directory: the benchmark's own, not others'
    record = provenance.start(None, own_commands=[str(args.state_dir.resolve())])
    results: dict[str, Any] = {
        "nodes": NODES,
        "images_per_node": IMAGES_PER_NODE,
        "link_rate_bits_per_s": server.link_rate_bits_per_s,
    }
    with tempfile.TemporaryDirectory(prefix="layersched-hop-") as tmp:
        layers, node_file = Path(tmp) / "layers.json", Path(tmp) / "nodes.json"
        full, by_name = Path(tmp) / "full.json", Path(tmp) / "names.json"
        layers.write_bytes(msgspec.json.encode(load.layers_document()))
        node_file.write_bytes(msgspec.json.encode(nodes))
        full.write_bytes(msgspec.json.encode({"Pod": pod, "Nodes": nodes}))
        by_name.write_bytes(msgspec.json.encode({"Pod": pod, "NodeNames": names}))
        for mode, extra, body in (
            # a full-Nodes deployment raises the request bound (docs/extender.md, Limits)
            ("full_nodes", ["--max-request-bytes", str(FULL_NODES_MAX_REQUEST_BYTES)], full),
            ("node_names", ["--nodes", str(node_file)], by_name),
        ):
            results[mode] = _measure(
                server.netns, client.netns, server.address,
                ["--layers", str(layers), *extra], body, args.requests,
            )  # fmt: skip
    results["provenance"] = provenance.finish(record)
    written = write_json(RESULTS, results, output=args.output)
    print(json.dumps(results, indent=2))
    print(f"results: {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
