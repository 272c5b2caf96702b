"""What ``layersched estimate`` prints: how many pods it could weigh (and what to say
first when too few), the table that fits the terminal, the totals and the waits in
flight, ``-o json|yaml`` with exact bytes, and ``--plot`` (matplotlib, imported only
then)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console

from layersched.cli._tables import duration, size, table, table_width
from layersched.core.errors import InputError
from layersched.core.estimate import SKIP_UNRESOLVED, Estimate

#: Pods the plot shows at most (one bar pair each).
PLOT_PODS = 30


#: Below this share of the pods weighed, the estimate says so first and exits EXIT_PARTIAL.
MIN_COVERAGE = 0.5


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
