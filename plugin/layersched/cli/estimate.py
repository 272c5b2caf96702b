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
import dataclasses
import importlib.util
import logging
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from layersched.cli._kube import add_cluster_options, open_client
from layersched.cli._output import add_output_option, is_document, print_document
from layersched.cli._pull_secrets import UserPullSecrets
from layersched.cli._sources import (
    add_layer_source_options,
    credential_source_factory,
    open_layer_source,
)
from layersched.cli._tables import console, duration, size, table, table_width
from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.estimate import SKIP_UNRESOLVED, Estimate, estimate, in_window
from layersched.core.events import PULLED_REASON
from layersched.core.inflight import PULL_MODES, SERIAL
from layersched.core.layers import Layer, LayerSource
from layersched.core.manifest import Platform
from layersched.core.nodeimages import NodeImage, NodeInfo, names_resolver
from layersched.core.nodeindexing import node_info
from layersched.core.placedobjects import (
    SchedulableNode,
    decode_placed_pod,
    decode_schedulable_node,
)
from layersched.core.placementfacts import (
    NodeFacts,
    PodFacts,
    PullFacts,
    node_facts,
    pod_facts,
    pull_facts,
    ran_images,
)
from layersched.core.reference import ImageName
from layersched.core.strategies.args import DEFAULT_BANDWIDTH_BITS_PER_S, InFlightArgs
from layersched.extender import pull_secret_names
from layersched.kube import (
    ALL_EVENTS_PATH,
    ALL_PODS_PATH,
    NODES_PATH,
    KubeClient,
    selector,
)
from layersched.registry import DEFAULT_DEADLINE_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

log = logging.getLogger(__name__)

#: The API server keeps events an hour by default (--event-ttl): a longer window still
#: weighs its pods, with their pull times estimated (the output says so).
DEFAULT_WINDOW = "1h"
#: Rows of the table (the pods that would have saved most); -o json has them all.
DEFAULT_TOP = 20
#: Pods the plot shows at most (one bar pair each).
PLOT_PODS = 30
_WINDOW = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>s|m|h|d)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: Only bound pods take part (a pending pod pulled nothing yet).
BOUND_PODS = "spec.nodeName!="
#: The exit status when fewer than half of the pods could be weighed (without --partial).
EXIT_PARTIAL = 3
#: Below this share of the pods weighed, the estimate says so first and exits EXIT_PARTIAL.
MIN_COVERAGE = 0.5


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
            nodes = _read_nodes(kube, progress)
            pods, ran, pulling = _read_pods(kube, progress, since_s, until_s, namespaces)
            pulls = _read_pulls(kube, progress, since_s, {p.uid: p.node for p in pods})
            notes: list[str] = []
            facts = _resolve_nodes(nodes, source, progress, notes)
            secrets = _user_pull_secrets(args, kube)
            pods = _resolve_pods(
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


def coverage(result: Estimate) -> tuple[int, int, list[str]]:
    """(pods weighed, pods that should have been: weighed or with unknown layers, the
    reasons their layers are unknown). Pinned pods and pods of vanished nodes are neither."""
    unknown = [reason for _, reason in result.skipped if reason.startswith(SKIP_UNRESOLVED)]
    return result.totals.pods, result.totals.pods + len(unknown), unknown


def coverage_warning(result: Estimate) -> str:
    """What to say first when fewer than half of the pods could be weighed ("": enough)."""
    weighed, weighable, unknown = coverage(result)
    if weighable == 0 or weighed >= MIN_COVERAGE * weighable:
        return ""
    example = unknown[0].partition(": ")[2] if unknown else ""
    return (
        f"only {weighed} of {weighable} pods could be weighed: the layers of the other "
        f"{weighable - weighed} pods' images are unknown"
        + (f" (first: {example})" if example else "")
        + ". Private or unreachable registries: pass --registry-config FILE (a docker "
        "config.json with their credentials) or --layers FILE (written by `layersched "
        "layers IMAGE... --out FILE` where the registries are reachable); --partial prints "
        "the partial result and exits 0"
    )


# ------------------------------------------------------------------ reading the cluster


def _pages(
    kube: KubeClient, progress: Progress, path: str, what: str, field_selector: str | None = None
) -> Iterator[dict[str, Any]]:
    """The items of a collection, page by page, counted on a progress line."""
    task = progress.add_task(f"reading {what}", total=None)
    seen = 0
    for page, _ in kube.list_pages(path, field_selector=field_selector):
        seen += len(page)
        progress.update(task, description=f"reading {what}: {seen}")
        yield from page
    progress.remove_task(task)


def _read_nodes(kube: KubeClient, progress: Progress) -> list[tuple[SchedulableNode, NodeInfo]]:
    """(decoded node, its inventory entry without layers) of every Node."""
    found = []
    for i, item in enumerate(_pages(kube, progress, NODES_PATH, "nodes")):
        where = f"{NODES_PATH}: items[{i}]"
        problems: list[str] = []
        try:
            node = decode_schedulable_node(item, where)
            info = node_info(node, where, problems)
        except InputError as err:
            log.warning("ignoring a node: %s", err)
            continue
        for problem in problems:
            log.warning("%s", problem)
        found.append((node, info))
    return found


#: A weighed pod's pull secrets: (its namespace, the secrets it names), by uid.
PullSecretNames = dict[str, tuple[str, tuple[str, ...]]]


def _read_pods(
    kube: KubeClient,
    progress: Progress,
    since_s: float,
    until_s: float,
    namespaces: frozenset[str] | None,
) -> tuple[list[PodFacts], dict[str, dict[ImageName, ImageName]], PullSecretNames]:
    """Every bound pod's facts, and for those weighed, what their runtimes ran and the pull
    secrets they name (by uid)."""
    pods: list[PodFacts] = []
    ran: dict[str, dict[ImageName, ImageName]] = {}
    pulling: PullSecretNames = {}
    problems: list[str] = []
    items = _pages(kube, progress, ALL_PODS_PATH, "pods", field_selector=BOUND_PODS)
    for i, item in enumerate(items):
        try:
            pod = decode_placed_pod(item, f"{ALL_PODS_PATH}: items[{i}]")
        except InputError as err:
            log.warning("ignoring a pod: %s", err)
            continue
        facts = pod_facts(pod, problems)
        if facts is None:
            continue
        pods.append(facts)
        if in_window(facts, since_s, until_s, namespaces):
            ran[facts.uid] = ran_images(pod)
            names = pull_secret_names(pod)
            if names and pod.metadata.namespace:
                pulling[facts.uid] = (pod.metadata.namespace, names)
    for problem in problems:
        log.warning("%s", problem)
    return pods, ran, pulling


def _read_pulls(
    kube: KubeClient, progress: Progress, since_s: float, node_of: dict[str, str]
) -> list[PullFacts]:
    """The kubelets' pull reports of the window."""
    found = []
    pulled = selector({"reason": PULLED_REASON})
    for event in _pages(kube, progress, ALL_EVENTS_PATH, "Pulled events", field_selector=pulled):
        facts = pull_facts(event, node_of)
        if facts is not None and facts.at_s >= since_s:
            found.append(facts)
    return found


# ---------------------------------------------------------------------- layers


def _resolving(progress: Progress, what: str, total: int) -> Callable[[], None]:
    task = progress.add_task(f"resolving {what}", total=total)
    return lambda: progress.advance(task)


def _resolve_nodes(
    nodes: Sequence[tuple[SchedulableNode, NodeInfo]],
    source: LayerSource,
    progress: Progress,
    notes: list[str],
) -> list[NodeFacts]:
    """Every node with the layers of its images (each distinct image resolved once)."""
    resolve = names_resolver(source)
    distinct = {image.names for _, info in nodes for image in info.images if image.names}
    step = _resolving(progress, "the nodes' images", len(distinct))
    layers: dict[tuple[str, ...], tuple[Layer, ...] | None] = {}
    unknown = 0
    for names in distinct:
        try:
            layers[names] = resolve(names)
        except LayerResolutionError as err:
            layers[names] = None
            unknown += 1
            log.warning("node image %r: its layers are unknown (%s)", names[0], err)
        step()
    if unknown:
        notes.append(
            f"{unknown} of {len(distinct)} node image(s) have unknown layers (named in the "
            "warnings): the nodes holding them count as not holding their layers"
        )
    facts = []
    for node, info in nodes:
        images = tuple(
            NodeImage(image.names, image.size_bytes, layers.get(image.names))
            for image in info.images
        )
        facts.append(node_facts(node, dataclasses.replace(info, images=images)))
    return facts


def _user_pull_secrets(args: argparse.Namespace, kube: KubeClient) -> UserPullSecrets | None:
    """Pods' pull secrets read with the user's credentials (None with ``--layers``, an
    offline source: no registry to ask with them)."""
    if args.layers:
        return None
    make = credential_source_factory(args)
    platform = Platform.parse(args.platform)
    return UserPullSecrets(kube, lambda credential: make(platform, credential))


def _resolve_pods(
    pods: list[PodFacts],
    ran: dict[str, dict[ImageName, ImageName]],
    source: LayerSource,
    progress: Progress,
    since_s: float,
    until_s: float,
    namespaces: frozenset[str] | None,
    pulling: PullSecretNames | None = None,
    secrets: UserPullSecrets | None = None,
) -> list[PodFacts]:
    """The pods, those weighed with the layers of their images (by the digest their runtime
    ran, else by their reference); a private image with the pod's pull secret for its
    registry (``secrets``: read with the user's credentials), the others with ``source``."""
    weighed = [
        i
        for i, pod in enumerate(pods)
        if not pod.pinned and in_window(pod, since_s, until_s, namespaces)
    ]
    # the source of each weighed pod's image: its pull secret's credential's, else None
    source_of: dict[tuple[str, ImageName], LayerSource | None] = {}
    for i in weighed:
        pod = pods[i]
        named = (pulling or {}).get(pod.uid)
        credentials = secrets.credentials(*named) if secrets is not None and named else {}
        for image in pod.images:
            own = secrets.source(image, credentials) if secrets is not None else None
            source_of[(pod.uid, image)] = own
    Key = tuple[ImageName, ImageName | None, int]
    references: dict[Key, LayerSource] = {}
    for i in weighed:
        for image in pods[i].images:
            own = source_of[(pods[i].uid, image)]
            chosen = own if own is not None else source
            references[(image, ran[pods[i].uid].get(image), id(chosen))] = chosen
    step = _resolving(progress, "the pods' images", len(references))
    resolved: dict[Key, tuple[Layer, ...] | str] = {}
    for (image, by_digest, which), chosen in references.items():
        resolved[(image, by_digest, which)] = _resolve_image(chosen, image, by_digest)
        step()
    out = list(pods)
    for i in weighed:
        pod = pods[i]
        found: dict[ImageName, tuple[Layer, ...]] = {}
        why = ""
        for image in pod.images:
            own = source_of[(pod.uid, image)]
            which = id(own if own is not None else source)
            layers = resolved[(image, ran[pod.uid].get(image), which)]
            if isinstance(layers, str):
                why = why or f"{image}: {layers}"
            else:
                found[image] = layers
        out[i] = dataclasses.replace(pod, image_layers=None if why else found, unresolved=why)
    return out


def _resolve_image(
    source: LayerSource, image: ImageName, by_digest: ImageName | None
) -> tuple[Layer, ...] | str:
    """The layers of ``image`` (the digest it ran from first), or why they are unknown."""
    reason = ""
    for reference in (by_digest, image):
        if reference is None:
            continue
        try:
            return source.resolve(reference)
        except LayerResolutionError as err:
            reason = str(err)
    return reason


# ---------------------------------------------------------------------- output


def as_document(result: Estimate, server: str, since: str) -> dict[str, Any]:
    """The estimate as JSON: exact bytes and seconds, every pod."""
    totals = result.totals
    weighed, weighable, _ = coverage(result)
    return {
        "cluster": server,
        "coverage": {
            "weighed": weighed,
            "weighable": weighable,
            "complete": not coverage_warning(result),
        },
        "window": {"since": since, "since_s": result.since_s, "until_s": result.until_s},
        "nodes": result.nodes,
        "totals": {
            **dataclasses.asdict(totals),
            "affected_share": totals.affected_share,
            "avoidable_share": totals.avoidable_share,
        },
        "pods": [dataclasses.asdict(pod) for pod in result.pods],
        "skipped": [{"pod": pod, "reason": reason} for pod, reason in result.skipped],
        "rates": {
            node: {"bytes_per_s": rate.bytes_per_s, "source": rate.source}
            for node, rate in result.rates.items()
        },
        "approximations": result.approximations,
    }


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def print_estimate(
    result: Estimate, server: str, since: str, top: int, out: Console, output: str | None = None
) -> None:
    """The table of the pods that would have saved most, the totals, the approximations."""
    totals = result.totals
    shown = result.pods[:top]
    rows = [
        (
            pod.pod,
            pod.node,
            size(pod.pulled_bytes),
            pod.best_node if pod.avoidable_bytes else "(same)",
            size(pod.avoidable_bytes),
            duration(pod.avoidable_s),
        )
        for pod in shown
    ]
    headers = ("pod", "ran on", "pulled", "best node", "avoidable", "time")
    title = f"layer-aware placement, pods started in the last {since} on {server}"
    if rows:
        width = table_width(out, output)
        out.print(
            table(title, headers, rows, width, shrink=(0, 1, 3), left=(0, 1, 3), drop=(5, 2, 3))
        )
    else:
        out.print(title, markup=False)
    if len(result.pods) > len(shown):
        out.print(f"… and {len(result.pods) - len(shown)} more pods (--top, or -o json)")
    skipped: dict[str, int] = {}
    for _, reason in result.skipped:
        kind = reason.split(":", 1)[0]
        skipped[kind] = skipped.get(kind, 0) + 1
    weighed = f"{totals.pods} pods weighed on {result.nodes} nodes"
    if skipped:
        weighed += " (not weighed: " + ", ".join(f"{n} {k}" for k, n in skipped.items()) + ")"
    out.print(weighed, markup=False)
    out.print(
        f"pulled {size(totals.pulled_bytes)} in {duration(totals.pull_s)}; on the best "
        f"feasible nodes {size(totals.best_pulled_bytes)}"
    )
    out.print(
        f"[bold]avoidable: {size(totals.avoidable_bytes)} "
        f"({_percent(totals.avoidable_share)} of the bytes) and "
        f"{duration(totals.avoidable_s)} of pull time; {totals.pods_affected} of "
        f"{totals.pods} pods ({_percent(totals.affected_share)}) would have pulled less[/bold]"
    )
    out.print(in_flight_line(result, out.width), markup=False)
    out.print("approximated:")
    for note in result.approximations:
        text = textwrap.fill(note, out.width - 1, initial_indent=" - ", subsequent_indent="   ")
        out.print(text, markup=False)  # a note may quote the cluster's own strings


def in_flight_line(result: Estimate, width: int) -> str:
    """The waits behind pulls in flight, where the pods ran and on each scoring's picks."""
    totals = result.totals
    text = (
        f"waiting (estimated, pulls in flight counted): {duration(totals.wait_s)} where the "
        f"pods ran; on layer-locality's picks {duration(totals.layer_locality_wait_s)} "
        f"({_saved(totals.wait_s - totals.layer_locality_wait_s)}); on in-flight's picks "
        f"{duration(totals.in_flight_wait_s)} "
        f"({_saved(totals.wait_s - totals.in_flight_wait_s)}, {totals.pods_in_flight_moved} "
        f"of {totals.pods} pods elsewhere)"
    )
    return textwrap.fill(text, width - 1)


def _saved(seconds: float) -> str:
    return f"{duration(seconds)} less" if seconds >= 0 else f"{duration(-seconds)} more"


def plot(result: Estimate, path: Path) -> None:
    """Each pod's bytes pulled where it ran against on its best feasible node (the pods
    that would have saved most), the totals in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pods = result.pods[:PLOT_PODS]
    mib = 1024 * 1024
    figure, axes = plt.subplots(figsize=(9, 1.5 + 0.35 * max(len(pods), 1)))
    positions = list(range(len(pods)))
    axes.barh(
        [p + 0.2 for p in positions],
        [pod.pulled_bytes / mib for pod in pods],
        height=0.4,
        label="pulled where it ran",
        color="tab:gray",
    )
    axes.barh(
        [p - 0.2 for p in positions],
        [pod.best_pulled_bytes / mib for pod in pods],
        height=0.4,
        label="on the best feasible node",
        color="tab:blue",
    )
    axes.set_yticks(positions, [pod.pod for pod in pods])
    axes.invert_yaxis()
    axes.set_xlabel("MiB pulled")
    totals = result.totals
    axes.set_title(
        f"avoidable: {size(totals.avoidable_bytes)} ({_percent(totals.avoidable_share)}), "
        f"{duration(totals.avoidable_s)}; {totals.pods_affected} of {totals.pods} pods"
    )
    axes.legend(loc="lower right")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as err:
        raise InputError(f"--plot {path}: cannot write it ({err.strerror})") from None
    finally:
        plt.close(figure)
