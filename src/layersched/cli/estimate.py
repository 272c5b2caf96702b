"""``layersched estimate``: what layer-aware placement would have saved on a live cluster.

Read-only, against any cluster of any version, with nothing installed: it lists the
Nodes (``status.images``), the pods bound to them and the kubelets' ``Pulled`` events
through the API (page by page: it never holds a whole list), resolves the layers of the
images involved through their registries (or ``--layers``, the same options as ``layersched
score``), and weighs every pod that started in the window (:mod:`layersched.core.estimate`
says how, and what it approximates). Out: a table that fits the terminal, ``-o
json|yaml`` (exact bytes), ``-o wide``, and ``--plot FILE.png`` (matplotlib, only imported
when asked).

It says first when it could weigh fewer than half of the pods it should have (their
images' layers unknown: a private or unreachable registry, an air-gapped cluster), with
the cause and the fix, and exits :data:`EXIT_PARTIAL` unless ``--partial`` asks for the
partial result: an "avoidable: 0 B" from nothing weighed would read as a verdict.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from layersched.cli._estimate_cluster import read_nodes, read_pods, read_pulls
from layersched.cli._estimate_layers import resolve_nodes, resolve_pods, user_pull_secrets
from layersched.cli._estimate_report import (
    MIN_COVERAGE,
    as_document,
    coverage_warning,
    plot,
    print_estimate,
)
from layersched.cli._kube import add_cluster_options, open_client
from layersched.cli._output import add_output_option, is_document, print_document
from layersched.cli._sources import add_layer_source_options, open_layer_source
from layersched.cli._tables import console
from layersched.core.errors import InputError
from layersched.core.estimate import estimate
from layersched.core.inflight import PULL_MODES, SERIAL
from layersched.core.strategies.args import DEFAULT_BANDWIDTH_BITS_PER_S, InFlightArgs
from layersched.registry import DEFAULT_DEADLINE_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

#: The API server keeps events an hour by default (--event-ttl): a longer window still
#: weighs its pods, with their pull times estimated (the output says so).
DEFAULT_WINDOW = "1h"
#: Rows of the table (the pods that would have saved most); -o json has them all.
DEFAULT_TOP = 20
_WINDOW = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>s|m|h|d)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The exit status when fewer than half of the pods could be weighed (without --partial).
EXIT_PARTIAL = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``estimate`` subcommand."""
    p = sub.add_parser(
        "estimate",
        help="what layer-aware placement would have saved on a live cluster (read-only)",
        description="For every pod that started in the window: the bytes it pulled where it "
        "ran against the best node it fitted on then, and the totals. Needs only read "
        "access to nodes, pods and events (and the images' registries, or --layers).",
    )
    add_cluster_options(p, namespace_help=None)
    p.add_argument(
        "--since",
        default=DEFAULT_WINDOW,
        metavar="DURATION",
        help="weigh the pods started this long ago or later: 90s, 30m, 6h, 2d "
        "(default: %(default)s; the API keeps events about an hour by default)",
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        metavar="NS",
        help="weigh only pods of this namespace (repeatable; default: all namespaces, not the "
        "context's: an estimate is cluster-wide). Every pod still takes its node's resources",
    )
    add_output_option(p, old="--format")
    p.add_argument(
        "--partial",
        action="store_true",
        help=f"print the result and exit 0 even when fewer than {100 * MIN_COVERAGE:.0f}%% of the "
        f"pods could be weighed (default: say so first and exit {EXIT_PARTIAL})",
    )
    p.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help="table rows: the N pods that would have saved most (default: %(default)s)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw the pods' bytes (pulled vs best node) into FILE (needs matplotlib: "
        "pip install 'layersched[sim]')",
    )
    p.add_argument(
        "--default-bandwidth-bits-per-s",
        type=float,
        default=DEFAULT_BANDWIDTH_BITS_PER_S,
        metavar="BITS_PER_S",
        help="pull rate of a node when no pull was observed anywhere and it has no "
        "bandwidth label (default: %(default)s)",
    )
    p.add_argument(
        "--pull-mode",
        choices=PULL_MODES,
        default=SERIAL,
        help="how the cluster's kubelets pull, for the waits in flight: serial "
        "(serializeImagePulls: true, the kubelet's default) or parallel (default: %(default)s)",
    )
    add_layer_source_options(
        p,
        registry_timeout_s=DEFAULT_TIMEOUT_S,
        registry_retries=DEFAULT_RETRIES,
        registry_deadline_s=DEFAULT_DEADLINE_S,
    )
    p.set_defaults(handler=run)


def window_seconds(text: str) -> float:
    """``90s``, ``30m``, ``6h``, ``2d`` in seconds; InputError otherwise."""
    match = _WINDOW.match(text.strip())
    if match is None or float(match["value"]) <= 0:
        raise InputError(
            f"--since {text!r}: expected a positive duration with a unit, e.g. 90s, 30m, 6h, 2d"
        )
    return float(match["value"]) * _UNIT_S[match["unit"]]


def _check(args: argparse.Namespace) -> float:
    """The window in seconds, once every option is valid (before any API call)."""
    window_s = window_seconds(args.since)
    if args.top < 0:
        raise InputError(f"--top {args.top}: must be 0 or more")
    if not args.default_bandwidth_bits_per_s > 0:
        raise InputError(
            f"--default-bandwidth-bits-per-s {args.default_bandwidth_bits_per_s}: must be > 0"
        )
    if args.plot is not None:
        if importlib.util.find_spec("matplotlib") is None:
            raise InputError(
                "--plot needs matplotlib, which is not installed: pip install "
                "'layersched[sim]' (or matplotlib), or drop --plot"
            )
        if not args.plot.parent.is_dir():
            raise InputError(f"--plot {args.plot}: no directory {args.plot.parent}")
    return window_s


def run(args: argparse.Namespace) -> int:
    """Read the cluster, weigh its recent pods, print (and plot)."""
    window_s = _check(args)
    source = open_layer_source(args, cached=True)
    until_s = time.time()
    since_s = until_s - window_s
    namespaces = frozenset(args.namespace) if args.namespace else None
    progress_console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(
        *columns,
        console=progress_console,
        transient=True,
        disable=not progress_console.is_terminal,
    ) as progress:
        with open_client(args) as kube:
            server = kube.config.server
            nodes = read_nodes(kube, progress)
            pods, ran, pulling = read_pods(kube, progress, since_s, until_s, namespaces)
            pulls = read_pulls(kube, progress, since_s, {p.uid: p.node for p in pods})
            notes: list[str] = []
            facts = resolve_nodes(nodes, source, progress, notes)
            secrets = user_pull_secrets(args, kube)
            pods = resolve_pods(
                pods, ran, source, progress, since_s, until_s, namespaces, pulling, secrets
            )
            if secrets is not None:
                notes += secrets.notes()
        task = progress.add_task("weighing the pods", total=None)
        result = estimate(
            facts,
            pods,
            pulls,
            since_s=since_s,
            until_s=until_s,
            default_bits_per_s=args.default_bandwidth_bits_per_s,
            namespaces=namespaces,
            notes=notes,
            in_flight=InFlightArgs(pull_mode=args.pull_mode),
        )
        progress.remove_task(task)
    short = coverage_warning(result)
    if short:
        print(f"warning: {short}", file=sys.stderr)
    if is_document(args.output):
        print_document(as_document(result, server, args.since), args.output)
    else:
        out = console(wide=args.output == "wide")
        if short:
            out.print(f"[bold red]incomplete:[/bold red] {short}", highlight=False)
        print_estimate(result, server, args.since, args.top, out, args.output)
    if args.plot is not None:
        plot(result, args.plot)
        progress_console.print(f"plot: {args.plot}")
    return EXIT_PARTIAL if short and not args.partial else 0
