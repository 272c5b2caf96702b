"""``layersched scenario``: run the seed's two-image, three-node scenario on the local
testbed's real cluster for each strategy, write ``scenario.json`` and ``scenario.png``
under the run's directory (``runs/<UTC time>/harness/results/``; ``harness/results/`` itself with
``LAYERSCHED_RESULTS=commit``, or ``--report``), and print the comparison table. The
README's block changes only through ``make figures``, from the committed report.

It builds and pushes the scenario images itself, with the same ``--spec``/``--size``
options as ``layersched testbed images`` (blobs the registry holds are not pushed again),
then submits the pods through the Kubernetes API: the real kube-schedulers place them
and the real kubelets pull and run them.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from layersched import generated
from layersched.core.errors import InputError
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched_harness.evidence import provenance
from layersched_harness.evidence.results import write_json
from layersched_harness.testbed.cli.testbed import add_image_options, layer_sizes
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.local import default_state_dir, load_state, require_root
from layersched_harness.testbed.local._cluster import (
    SCORE_SOURCES,
    FileBackend,
    LocalBackend,
    extender_requests,
)
from layersched_harness.testbed.remote import (
    REMOTE_TESTBED_FILE,
    load_remote_testbed,
    node_rates,
    push_scenario_images,
    remote_backend,
    remote_testbed_path,
)
from layersched_harness.testbed.report import BLOCK, markdown, plot, print_nodes, print_table
from layersched_harness.testbed.scenario import (
    P1,
    P1_AGAIN,
    P2,
    ScenarioImages,
    Trial,
    report,
    run_scenario,
    trial_images,
    trial_tag,
)
from layersched_harness.testbed.scenario_images import build_and_push_scenario, load_spec
from layersched_harness.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as LAYER_LOCALITY_PLUGIN,
)

LOCAL, CLOUD = "local", "cloud"
#: Three per strategy keep ``make testbed`` within 10 minutes (reset, P1+P2 at once,
#: P1-again: about 30 s a trial for the layer-aware strategies, 50 s for image-locality,
#: which waits for status.images and pulls all of Img1 half the time).
DEFAULT_TRIALS = 3
#: Those of these the testbed runs (a testbed brought up before the plugin has two).
DEFAULT_STRATEGIES = (LAYER_LOCALITY, LAYER_LOCALITY_PLUGIN, IMAGE_LOCALITY)
DEFAULT_REPORT = Path("harness/results/scenario.json")
#: Set by ``harness/scripts/testbed.sh up`` (Unix seconds) before the testbed comes up: the report
#: then records the whole ``make testbed`` (``make_testbed_s``), bring-up included.
STARTED_ENV = "LAYERSCHED_TESTBED_STARTED_S"
#: A make testbed lasting longer than this is a stale or mistyped start time.
MAX_MAKE_TESTBED_S = 24 * 3600.0
BEGIN, END = generated.markers(BLOCK)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``scenario`` subcommand."""
    p = sub.add_parser(
        "scenario",
        help="run the seed scenario on the local testbed and report placements and pulls",
        description="P1, P2, delete P2, P1-again; K trials per strategy from empty caches.",
    )
    p.add_argument(
        "--trials", type=_positive_int, default=DEFAULT_TRIALS, help="trials per strategy (>= 1)"
    )
    p.add_argument(
        "--strategy",
        action="append",
        dest="strategies",
        metavar="NAME",
        help=f"strategy to run (repeatable; default: those of {', '.join(DEFAULT_STRATEGIES)} "
        "the testbed runs)",
    )
    p.add_argument(
        "--driver",
        choices=(LOCAL, CLOUD),
        default=LOCAL,
        help="local: the local testbed (root); cloud: the remote testbed STATE_DIR's "
        f"{REMOTE_TESTBED_FILE} describes, over SSH (default {LOCAL})",
    )
    p.add_argument("--state-dir", type=Path, default=None, help="testbed state dir")
    p.add_argument(
        "--pin",
        action="append",
        default=[],
        type=_pin,
        metavar="POD=NODE",
        help=f"pin {P1} or {P2} to a worker (repeatable; e.g. --pin {P1}=n1 --pin {P2}=n3 puts "
        f"what {P1_AGAIN} is scored on in n3's runtime); {P1_AGAIN} is never pinned",
    )
    p.add_argument(
        "--report",
        type=Path,
        help=f"JSON report path (default: {DEFAULT_REPORT} under this run's directory, "
        f"runs/<UTC time>/, or {DEFAULT_REPORT} itself with LAYERSCHED_RESULTS=commit); the "
        "plot is written beside it as .png",
    )
    p.add_argument(
        "--markdown-into",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help=f"replace the text between '{BEGIN}' and '{END}' in FILE with the results "
        "block (repeatable; checked before the scenario runs)",
    )
    p.add_argument(
        "--from-report",
        type=Path,
        metavar="REPORT.json",
        help="print the table of a saved report (e.g. harness/results/scenario.json) and stop: "
        "no root, no testbed",
    )
    add_image_options(p)
    p.set_defaults(handler=run_or_print)


#: The pods ``--pin`` may place: P1-again's placement is what the scenario measures.
PINNABLE = (P1, P2)


def _pin(text: str) -> tuple[str, str]:
    pod, sep, node = text.partition("=")
    if not sep or not node or pod not in PINNABLE:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected POD=NODE with POD one of {', '.join(PINNABLE)} "
            f"(e.g. {P2}=n3; {P1_AGAIN} is what the scenario measures, never pinned)"
        )
    return pod, node


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1 trial per strategy")
    return value


@dataclass
class _Testbed:
    """What the scenario needs of a testbed, whichever driver reaches it."""

    kubeconfig: str
    backend: FileBackend
    images: ScenarioImages
    extender_url: str
    node_rates: dict[str, int]


def _local(
    args: argparse.Namespace,
    sizes: dict[str, int],
    console: Console,
    tags: Sequence[str] = (),
) -> _Testbed:
    require_root()
    state_dir: Path = args.state_dir or default_state_dir()
    inventory = load_state(state_dir)
    if not inventory.nodes:
        raise InputError(f"{state_dir}: the testbed inventory lists no nodes")
    images = build_and_push_scenario(
        inventory.registry.host, sizes, spec=load_spec(args.spec), console=console, tags=tags
    )
    return _Testbed(
        kubeconfig=inventory.cluster.kubeconfig,
        backend=LocalBackend(inventory),
        images=images,
        extender_url=inventory.cluster.extender.url,
        node_rates={n.name: n.link_rate_bits_per_s for n in inventory.nodes},
    )


def _cloud(
    args: argparse.Namespace,
    sizes: dict[str, int],
    console: Console,
    tags: Sequence[str] = (),
) -> _Testbed:
    if args.state_dir is None:
        raise InputError(
            "--driver cloud needs --state-dir (the directory remote-testbed.json is in, "
            "e.g. .testbed/cloud/dev)"
        )
    testbed = load_remote_testbed(args.state_dir)
    rates = node_rates(testbed)
    if len(rates) != len(testbed.nodes):
        raise InputError(
            f"{remote_testbed_path(args.state_dir)}: nodes "
            f"{', '.join(n.name for n in testbed.nodes if n.name not in rates)} have no "
            "link_rate_bits_per_s: the report and its checks need every node's link rate"
        )
    backend = remote_backend(testbed)
    try:
        images = push_scenario_images(
            testbed, backend, sizes, spec=load_spec(args.spec), console=console, tags=tags
        )
        extender_url = backend.extender_url
    except BaseException:
        backend.close()
        raise
    return _Testbed(testbed.kubeconfig, backend, images, extender_url, rates)


def make_testbed_s(started: str | None, now_s: float) -> float | None:
    """Seconds since ``started`` (``$LAYERSCHED_TESTBED_STARTED_S``, Unix seconds), or None
    when it is unset; InputError naming the variable when it is no plausible start."""
    if started is None:
        return None
    try:
        value = float(started)
    except ValueError:
        value = math.nan
    took_s = now_s - value
    if not math.isfinite(took_s) or not 0 <= took_s <= MAX_MAKE_TESTBED_S:
        raise InputError(
            f"{STARTED_ENV}={started!r}: expected the Unix time (seconds) make testbed "
            "started at, within the last day; unset it to run the scenario alone"
        )
    return round(took_s, 1)


def run(args: argparse.Namespace) -> int:
    """Run the scenario and write the report."""
    make_testbed_s(os.environ.get(STARTED_ENV), time.time())  # a bad value fails now
    for target in args.markdown_into:
        generated.read_block(target, BLOCK)  # a missing marker fails now, not after the run
    sizes = layer_sizes(args.size)
    console = Console(stderr=True)
    started = time.monotonic()
    # the testbed's daemons (kubelets, runtimes, schedulers) name its state directory: the
    # scenario's own, not other processes (a dirty tree is refused now when committing)
    state_dir = args.state_dir or (default_state_dir() if args.driver == LOCAL else None)
    record = provenance.start(None, own_commands=[str(state_dir.resolve())] if state_dir else [])
    # Each trial pulls a tag of its own (the same layers): no node ever listed that name,
    # so a reset never waits for the kubelets to notice the last trial's removal.
    run_id = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    most = args.trials * len(args.strategies or DEFAULT_STRATEGIES)
    tags = [trial_tag(run_id, number) for number in range(1, most + 1)]
    testbed = (_cloud if args.driver == CLOUD else _local)(args, sizes, console, tags)
    strategies: list[str] = args.strategies or [
        s for s in DEFAULT_STRATEGIES if s in testbed.backend.schedulers
    ]
    try:
        return _run(args, testbed, strategies, console, started, tags, record)
    finally:
        testbed.backend.close()


def _run(
    args: argparse.Namespace,
    testbed: _Testbed,
    strategies: list[str],
    console: Console,
    started: float,
    tags: list[str],
    record: dict[str, Any],
) -> int:
    backend, images = testbed.backend, testbed.images
    pins = dict(args.pin)
    driver = ClusterDriver(
        testbed.kubeconfig,
        backend,
        (images.img1, images.img2),
        layer_digests=[digest for digest, _size in images.layers.values()],
        pins=pins,
    )
    extender_before = extender_requests(testbed.extender_url)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("scenario trials", total=args.trials * len(strategies))

        def on_trial(strategy: str, i: int, trial: Trial) -> None:
            progress.update(
                task,
                advance=1,
                description=f"{strategy} trial {i + 1}: P1-again on {trial.placements['P1-again']}",
            )

        trials = run_scenario(
            driver,
            images,
            strategies,
            args.trials,
            on_trial,
            images_of=lambda number: trial_images(images, tags[number - 1]),
        )
    extender_after = extender_requests(testbed.extender_url)
    # The headline rate is the slowest link (identical nodes: the one rate); every
    # node's own rate is recorded too, for heterogeneous testbeds (--node-rate).
    rates = testbed.node_rates
    doc = report(
        backend.name,
        min(rates.values()),
        images,
        trials,
        rates,
        components=driver.components(),
        score_sources={s: SCORE_SOURCES[s] for s in strategies},
    )
    # A mixed cluster (containerd and CRI-O nodes) is reported per node and runtime.
    doc["node_runtimes"] = driver.node_runtimes()
    if pins:
        doc["pins"] = dict(sorted(pins.items()))
    # Proof that the real kube-scheduler called the extender: its own request counter.
    doc["extender_prioritize_requests"] = extender_after - extender_before
    doc["run_time_s"] = round(time.monotonic() - started, 1)  # images and trials
    whole_s = make_testbed_s(os.environ.get(STARTED_ENV), time.time())
    if whole_s is not None:
        doc["make_testbed_s"] = whole_s  # bring-up, images and trials: `make help`
    record["kubernetes_version"] = doc["components"].get("kubernetes")
    doc["provenance"] = provenance.finish(record)
    report_path, png = write_report(doc, args.report, args.markdown_into)
    print_table(doc, Console())
    print_nodes(doc, Console())
    for target in args.markdown_into:
        console.print(f"results block written into {target}")
    console.print(f"report: {report_path}  plot: {png}")
    if not provenance.committing() and args.report is None:
        console.print(
            "a run's report: LAYERSCHED_RESULTS=commit (make testbed RESULTS=commit) writes "
            f"{DEFAULT_REPORT}, and make figures the README's block"
        )
    return 0


def write_report(
    doc: dict[str, Any], report: Path | None = None, markdown_into: Sequence[Path] = ()
) -> tuple[Path, Path]:
    """The scenario's report step: the JSON (``report``, else :data:`DEFAULT_REPORT` under
    the run's directory, or itself when committing), the plot beside it, and the block in
    each of ``markdown_into`` (only those the user named: ``make testbed`` names none).
    Returns the JSON's and the plot's paths."""
    path = write_json(DEFAULT_REPORT, doc, output=report)
    png = path.with_suffix(".png")
    plot(doc, png)
    for target in markdown_into:
        generated.write_block(target, BLOCK, markdown(doc, str(report or DEFAULT_REPORT)))
    return path, png


def run_or_print(args: argparse.Namespace) -> int:
    """Print the saved report ``--from-report`` names, or run the scenario."""
    if args.from_report is None:
        return run(args)
    print_saved(args.from_report, Console())
    return 0


def print_saved(path: Path, console: Console) -> None:
    """The table of the report saved at ``path``; InputError naming it when it is none."""
    from layersched.cli._io import read_document

    document = read_document(str(path), "scenario report")
    try:
        print_table(document, console)
        if "node_runtimes" in document:
            print_nodes(document, console)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise InputError(
            f"{path}: not a scenario report ({type(err).__name__}: {err}): give the JSON "
            "`layersched scenario --report` wrote, e.g. harness/results/scenario.json"
        ) from None
