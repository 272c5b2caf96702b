"""An extender process that recycles itself once, for test_extender_recycle.py.

It is the real server (``layersched.extender.serve``) with a real
:class:`~layersched.extender.Recycler` measuring this process's real resident memory.
Only the memory residue is staged: once the recycler has taken its reference, this
process allocates and touches 24 MiB that it never frees, so the next checks find that
much more resident than a fresh process needs. The re-executed process (same PID, same
argv, the sockets handed over) finds the recycle in its environment and stages nothing,
and its bound is out of reach: it serves on.

Run: ``python tests/integration/_recycling_extender.py PORT LAYERS NODES``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path

import tenacity

from layersched.core.layers import StaticLayerSource
from layersched.core.strategies import LayerLocalityArgs, get_strategy
from layersched.extender import (
    Recycler,
    StaticLayerIndexProvider,
    make_extender,
    recycled_before,
    serve,
)

#: What the first process allocates and keeps once the reference is taken.
RESIDUE_BYTES = 24 * 1024 * 1024
#: ... the bound it has to pass (the re-executed process's is out of reach).
FIRST_BOUND_BYTES = 8 * 1024 * 1024
NEVER_BYTES = 1 << 50
#: The first check (the reference) comes one check period after the load.
REFERENCE_TIMEOUT_S = 30.0

_kept: list[bytearray] = []


@tenacity.retry(
    stop=tenacity.stop_after_delay(REFERENCE_TIMEOUT_S),
    wait=tenacity.wait_fixed(0.05),
    reraise=True,
)
def _await_reference(recycler: Recycler) -> None:
    assert recycler.reference is not None, "the recycler has not measured its reference"


def _stage_residue(recycler: Recycler) -> None:
    _await_reference(recycler)
    _kept.append(bytearray(b"\x01") * RESIDUE_BYTES)  # written: resident


def main(port: int, layers: str, nodes: str) -> int:
    count, last_at_s = recycled_before()
    recycler = Recycler(
        min_excess_bytes=FIRST_BOUND_BYTES if count == 0 else NEVER_BYTES,
        ratio=0.0,
        confirmations=2,
        min_interval_s=0.0,
        count=count,
        last_at_s=last_at_s,
    )
    if count == 0:
        threading.Thread(target=_stage_residue, args=(recycler,), daemon=True).start()
    source = StaticLayerSource.from_json(json.loads(Path(layers).read_text()), layers)
    provider = StaticLayerIndexProvider(nodes, source)
    extender = make_extender(
        # unscaled scores, as the test expects: spread off, said here (issue 45)
        get_strategy("layer-locality", LayerLocalityArgs(spread=False)),
        source,
        provider,
    )
    print(f"recycling extender: count {count}", file=sys.stderr, flush=True)
    asyncio.run(serve(extender, "127.0.0.1", port, recycler=recycler))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
