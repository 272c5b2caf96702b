"""``layersched simulate``: the scale simulator, its report, plots and Markdown snippet."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from layersched_harness.evidence import provenance, results
from layersched_harness.sim.report import (
    BEGIN_MARKER,
    DEFAULT_REPORT,
    END_MARKER,
    markdown,
    read_block,
    read_report,
    summary_markdown,
    write_block,
    write_report,
)
from layersched_harness.sim.runner import run_scale, run_setting
from layersched_harness.sim.settings import DEFAULT_SETTINGS, SCALE, SETTINGS

DEFAULT_SEED = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand."""
    p = sub.add_parser(
        "simulate",
        help="trace-driven scale simulation of the scoring strategies",
        description=(
            "Simulate settings with the production strategies; write a JSON report and plots."
        ),
    )
    p.add_argument(
        "--setting",
        action="append",
        choices=(*SETTINGS, SCALE.name),
        help=f"setting to run (repeatable; default: {', '.join((*DEFAULT_SETTINGS, SCALE.name))})",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed (default: %(default)s)")
    p.add_argument(
        "--window-s",
        type=float,
        metavar="S",
        help="override every setting's arrival window (seconds), e.g. for a quick look",
    )
    p.add_argument(
        "--out",
        metavar="JSON",
        help=f"report path (default: {DEFAULT_REPORT} under this run's directory, runs/<UTC "
        f"time>/, or {DEFAULT_REPORT} itself with LAYERSCHED_RESULTS=commit; with "
        f"--from-report: {DEFAULT_REPORT})",
    )
    p.add_argument(
        "--plots-dir", metavar="DIR", help="where PNG plots go (default: the report's directory)"
    )
    p.add_argument("--no-plots", action="store_true", help="do not write plots")
    p.add_argument(
        "--markdown", action="store_true", help="print the results snippet as Markdown at the end"
    )
    p.add_argument(
        "--markdown-into",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            f"replace the text between '{BEGIN_MARKER}' and '{END_MARKER}' in FILE with the "
            "results snippet (repeatable; checked before simulating)"
        ),
    )
    p.add_argument(
        "--summary-into",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "like --markdown-into, with the short summary (one table and the headlines) "
            "instead of the full tables (repeatable)"
        ),
    )
    p.add_argument(
        "--from-report",
        action="store_true",
        help="do not simulate: render plots/Markdown from the existing report at --out "
        f"(default {DEFAULT_REPORT})",
    )
    p.set_defaults(handler=run)


def _simulate(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    names = args.setting or [*DEFAULT_SETTINGS, SCALE.name]
    report: dict[str, Any] = {"seed": args.seed, "settings": {}}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        tasks: dict[tuple[str, str], TaskID] = {}
        for name in dict.fromkeys(names):
            if name == SCALE.name:
                task = progress.add_task(f"{name}: scoring cost", total=None, detail="")
                report["scale"] = run_scale(SCALE, args.seed)
                progress.update(task, total=1, completed=1, detail="done")
                continue
            setting = SETTINGS[name]
            if args.window_s is not None:
                setting = replace(
                    setting, workload=replace(setting.workload, window_s=args.window_s)
                )
            window_s = setting.workload.window_s
            for label in setting.strategies:
                tasks[(name, label)] = progress.add_task(
                    f"{name}: {label}", total=window_s, detail=""
                )

            def tick(
                setting_name: str, label: str, simulated_s: float, window_s: float = window_s
            ) -> None:
                progress.update(
                    tasks[(setting_name, label)],
                    completed=min(simulated_s, window_s),
                    detail=f"{simulated_s:,.0f} s simulated",
                )

            report["settings"][name] = run_setting(setting, args.seed, tick)
    return report


def run(args: argparse.Namespace) -> int:
    """Simulate (or reload), then write the report, plots and Markdown."""
    console = Console(stderr=True)
    if args.out:
        out = Path(args.out)
    elif args.from_report:
        out = Path(DEFAULT_REPORT)
    else:
        out = results.destination(DEFAULT_REPORT)
    targets = [Path(f) for f in args.markdown_into]
    summaries = [Path(f) for f in args.summary_into]
    # Fail on a missing marker now, not after minutes of simulation.
    for target in (*targets, *summaries):
        read_block(target)
    if args.from_report:
        report = read_report(out)
    else:
        started = time.monotonic()
        record = provenance.start(None)
        report = _simulate(args, console)
        report["run_time_s"] = round(time.monotonic() - started, 1)  # for `make help`
        report["provenance"] = provenance.finish(record)
        write_report(report, out)
        console.print(f"report: {out}")
    if not args.no_plots and (report["settings"] or report.get("scale")):
        from layersched_harness.sim.plots import write_plots  # matplotlib is slow to import

        for path in write_plots(report, Path(args.plots_dir) if args.plots_dir else out.parent):
            console.print(f"plot: {path}")
    source = args.out or DEFAULT_REPORT
    snippet = markdown(report, source=source)
    for target in targets:
        write_block(target, snippet)
        console.print(f"results: {target}")
    if summaries:
        summary = summary_markdown(report, source=source)
        for target in summaries:
            write_block(target, summary)
            console.print(f"results summary: {target}")
    if args.markdown:
        print(snippet)
    return 0
