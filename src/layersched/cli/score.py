"""``layersched score``: offline what-if and explanation of a scheduling decision."""

from __future__ import annotations

import argparse
import logging

import numpy as np

from layersched.cli._io import read_bytes, read_document
from layersched.cli._output import add_output_option, is_document, print_document
from layersched.cli._sources import (
    add_layer_source_options,
    add_strategy_options,
    open_layer_source,
    strategy_from_args,
)
from layersched.cli._tables import console, duration, size, table, table_width
from layersched.core.errors import LayerResolutionError
from layersched.core.indexbuilder import LayerIndexBuilder
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer, LayerSource
from layersched.core.nodeindexing import add_node_object
from layersched.core.objects import decode_node_list, decode_pod, pod_images
from layersched.core.strategies import NodeScores, Strategy, resolve_pod_layers
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.core.strategies.pull_time import NAME as PULL_TIME
from layersched.core.strategies.pull_time import PullTime, node_bandwidth_bits_per_s
from layersched.registry import DEFAULT_DEADLINE_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``score`` subcommand."""
    p = sub.add_parser(
        "score",
        help="score every node for a pod, and show why",
        description="Score NODES for POD with a strategy; explain present vs total bytes.",
    )
    p.add_argument("--nodes", required=True, metavar="NODES.json", help="v1 NodeList")
    p.add_argument("--pod", required=True, metavar="POD.json|yaml", help="v1 Pod")
    add_strategy_options(p)
    add_output_option(p, old="--format")
    # offline use: a slow registry may be waited for (the extender's defaults are small)
    add_layer_source_options(
        p,
        registry_timeout_s=DEFAULT_TIMEOUT_S,
        registry_retries=DEFAULT_RETRIES,
        registry_deadline_s=DEFAULT_DEADLINE_S,
    )
    p.set_defaults(handler=run)


log = logging.getLogger(__name__)
#: The pull-time table prints bandwidths in Mbit/s (decimal, as links are sold).
BITS_PER_MEGABIT = 1e6


def run(args: argparse.Namespace) -> int:
    """Score and print."""
    strategy = strategy_from_args(args)
    pod = pod_images(decode_pod(read_document(args.pod, "Pod"), args.pod), args.pod)
    source: LayerSource | None = open_layer_source(args) if strategy.needs_layers else None
    # the one NodeList decoder, as `layersched extender --nodes` reads the same file
    builder = LayerIndexBuilder(source)
    for i, node in enumerate(decode_node_list(read_bytes(args.nodes), args.nodes)):
        add_node_object(builder, node, f"{args.nodes}: items[{i}]")
    inventory = builder.build()
    for warning in inventory.warnings:
        log.warning("%s: %s", args.nodes, warning)
    candidates = np.arange(inventory.node_count, dtype=np.int64)
    layers: tuple[Layer, ...] = ()
    if strategy.needs_layers:
        try:
            layers = resolve_pod_layers(pod, source)
        except LayerResolutionError as err:
            raise LayerResolutionError(f"{args.pod}: pod {pod.name!r}: {err}") from None
    result = strategy.score(pod, layers, inventory, candidates)
    if is_document(args.output):
        print_document(result.as_dict(inventory), args.output)
    else:
        _print_table(result, inventory, strategy, pod.name, args.output)
    return 0


def _print_table(
    result: NodeScores,
    index: LayerIndex,
    strategy: Strategy,
    pod: str,
    output: str | None = None,
) -> None:
    by_layer = strategy.name in (LAYER_LOCALITY, PULL_TIME)
    present_label = "held" if by_layer else "matched (scaled)"
    total_label = "needed" if by_layer else "upper threshold"
    rows = [
        [index.nodes[int(idx)].name, size(int(present)), size(result.total_bytes)]
        for idx, present in zip(result.nodes, result.present_bytes, strict=True)
    ]
    headers = ["node", present_label, total_label]
    if isinstance(strategy, PullTime) and result.total_bytes > 0:
        # what the score is made of: each node's bandwidth and the pull it predicts there
        estimates_s = strategy.estimates_s(
            index, result.nodes, result.present_bytes, result.total_bytes
        )
        default = strategy.default_bandwidth_bits_per_s
        for row, idx, estimate_s in zip(rows, result.nodes, estimates_s, strict=True):
            node = index.nodes[int(idx)]
            bandwidth = node_bandwidth_bits_per_s(node, default)
            row += [f"{bandwidth / BITS_PER_MEGABIT:.4g}", duration(float(estimate_s))]
        headers += ["Mbit/s", "est. pull"]
    for row, score in zip(rows, result.scores, strict=True):
        row.append(str(int(score)))
    headers.append("score 0-100")
    out = console(wide=output == "wide")
    # narrow terminals lose the total (the same on every row) first, then the bandwidth,
    # then the bytes held: never a digit of a score
    drop = (2, 3, 1) if len(headers) > 4 else (2, 1)
    title = f"{strategy.name} scores for pod {pod}"
    out.print(table(title, headers, rows, table_width(out, output), drop=drop))
    if index.unresolved_images:
        out.print(
            f"[yellow]{index.unresolved_images} node image(s) ignored: their layers are "
            "unknown (each is named in a warning above)[/yellow]"
        )
