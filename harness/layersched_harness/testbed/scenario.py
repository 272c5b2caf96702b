"""The seed's two-image, three-node scenario, independent of the testbed driver.

Each trial starts from empty caches and runs, for one strategy:

1. submit ``P1`` (Img1)          -> some node N1
2. submit ``P2`` (Img2)          -> N1 is full, so another node N2
3. delete ``P2``                 -> N2 keeps L1, L2, L4 cached
4. submit ``P1-again`` (Img1)    -> layer-aware: N2; image-locality: N2/N3 tie

P2 is submitted once P1 is *bound* (N1 is then full, which is all P2's scoring sees of
P1), so the two pulls run at once, on two nodes with links of their own: each pull is
measured as if alone (``P1+P2`` is one timed step). A trial may use its own tag of the
images (:func:`trial_tag`, :func:`trial_images`): the same layers, but a name no node's
``status.images`` lists from an earlier trial, so a reset does not wait for the kubelet
to notice what was removed.

A :class:`Driver` plays kube-scheduler and kubelet for its testbed; this
module only sequences the steps and shapes the report
(``harness/results/scenario.json``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from layersched.core.errors import InputError
from layersched.core.reference import ImageReference
from layersched_harness.testbed.errors import TestbedError

#: Pod names, in the order the scenario submits them.
P1 = "P1"
P2 = "P2"
P1_AGAIN = "P1-again"
#: The steps of a trial, timed in :attr:`Trial.phase_s`. P1 and P2 pull at once, on two
#: nodes: one step.
RESET, PULLS, DELETE_P2, SETTLE = "reset", "P1+P2", "delete P2", "settle"
PHASES = (RESET, PULLS, DELETE_P2, SETTLE, P1_AGAIN)
#: An OCI tag: ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`` (distribution-spec).
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class Pull:
    """One image pull as measured on the node: bytes really transferred, wall time."""

    pod: str
    node: str
    bytes: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod landed, the extender scores behind the decision, and its pull."""

    node: str
    scores: Mapping[str, int]
    pull: Pull
    #: The scheduler that bound the pod (its Scheduled event), when a real one did.
    scheduler: str | None = None


@dataclass(slots=True)
class Trial:
    """One run of the four steps from empty caches."""

    placements: dict[str, str] = field(default_factory=dict)
    scores_t3: dict[str, int] = field(default_factory=dict)
    pulls: list[Pull] = field(default_factory=list)
    #: pod -> the scheduler that bound it (real clusters only).
    scheduler: dict[str, str] = field(default_factory=dict)
    #: pod -> seconds from its pull's end until its node listed the image in
    #: ``status.images`` (real clusters; measured for P2, whose node P1-again is scored on).
    status_lag_s: dict[str, float] = field(default_factory=dict)
    #: Seconds from a pull to the extender's live inventory listing the image, per pod.
    inventory_lag_s: dict[str, float] = field(default_factory=dict)
    #: Wall-clock seconds of each step of the trial (:data:`PHASES`): where time goes.
    phase_s: dict[str, float] = field(default_factory=dict)
    #: Img1 and Img2 as this trial referenced them (its own tag, when it had one).
    images: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScenarioImages:
    """The two scenario images and their layers' digests/sizes by label (L1..L4)."""

    img1: str
    img2: str
    layers: Mapping[str, tuple[str, int]]


class Driver(Protocol):
    """What a testbed driver does for the scenario."""

    name: str

    def reset(self, images: Sequence[str] | None = None) -> None:
        """Delete all pods, empty every node's cache of the scenario's images, and wait
        until no scheduler sees ``images`` (the next trial's) on any node."""
        ...

    def submit(self, pod: str, image: str, strategy: str) -> Any:
        """Submit ``pod`` (requests a whole node) for ``strategy``; return once it is bound
        (a handle for :meth:`complete`)."""
        ...

    def complete(self, submitted: Any) -> Placement:
        """Wait for the pull of a pod :meth:`submit` bound, and measure it."""
        ...

    def delete(self, pod: str) -> None:
        """Delete ``pod``; its image stays in the node's cache."""
        ...

    def settle(self, pod: str, strategy: str) -> float | None:
        """Wait until the node that ran ``pod`` lists its image where ``strategy`` looks
        (``status.images`` for image-locality, the layer inventory for the layer-aware
        strategies); the seconds ``status.images`` took after the pull, if measured by now."""
        ...


def _record(trial: Trial, pod: str, placed: Placement) -> None:
    trial.placements[pod] = placed.node
    trial.pulls.append(placed.pull)
    if placed.scheduler is not None:
        trial.scheduler[pod] = placed.scheduler


def run_trial(driver: Driver, images: ScenarioImages, strategy: str) -> Trial:
    """The four steps, once, from empty caches (each step timed)."""
    trial = Trial(images={"Img1": images.img1, "Img2": images.img2})
    clock = _PhaseClock(trial)
    with clock.phase(RESET):
        driver.reset((images.img1, images.img2))
    with clock.phase(PULLS):
        # P2 is scored once P1 is bound (its node is full then): the pulls overlap.
        first = driver.submit(P1, images.img1, strategy)
        second = driver.submit(P2, images.img2, strategy)
        placed = {P1: driver.complete(first), P2: driver.complete(second)}
    if placed[P1].node == placed[P2].node:
        raise TestbedError(
            f"P1 and P2 both landed on node {placed[P1].node}: each requests a whole node, so "
            "their pulls would share one link; check the nodes' allocatable and other pods"
        )
    for pod in (P1, P2):
        _record(trial, pod, placed[pod])
    with clock.phase(DELETE_P2):
        driver.delete(P2)
    with clock.phase(SETTLE):
        # P1-again must be scored against a node that shows what P2 left behind.
        lag_s = driver.settle(P2, strategy)
        if lag_s is not None:
            trial.status_lag_s[P2] = lag_s
        inventory_lag = getattr(driver, "inventory_lag", None)
        inventory_lag_s = inventory_lag(P2) if inventory_lag is not None else None
        if inventory_lag_s is not None:
            trial.inventory_lag_s[P2] = inventory_lag_s
    with clock.phase(P1_AGAIN):
        again = driver.complete(driver.submit(P1_AGAIN, images.img1, strategy))
    _record(trial, P1_AGAIN, again)
    trial.scores_t3 = dict(again.scores)
    return trial


def trial_tag(run_id: str, number: int) -> str:
    """The tag of trial ``number`` (from 1, over the whole run) of run ``run_id``:
    ``("20261124031500", 7)`` -> ``trial-20261124031500-07``. InputError when that is no
    valid OCI tag."""
    if number < 1:
        raise InputError(f"trial number: expected at least 1, got {number}")
    tag = f"trial-{run_id}-{number:02d}"
    if not _TAG.match(tag):
        raise InputError(
            f"scenario image tag {tag!r} (run id {run_id!r}) is not a valid OCI tag: "
            "letters, digits, '_', '.', '-', at most 128 characters"
        )
    return tag


def trial_images(images: ScenarioImages, tag: str) -> ScenarioImages:
    """``images`` with both references retagged ``tag`` (same repositories and layers)."""

    return replace(images, img1=retag(images.img1, tag), img2=retag(images.img2, tag))


def repository_of(ref: str) -> str:
    """``ref`` without its tag, as written (``reg:5000/scenario/img1:v1`` ->
    ``reg:5000/scenario/img1``). InputError for a reference pinned by digest."""
    parsed = ImageReference.parse(ref)  # a malformed reference is an InputError naming it
    if parsed.digest is not None:
        raise InputError(f"scenario image {ref}: pinned by digest, it cannot be given a tag")
    return ref.removesuffix(parsed.suffix())


def retag(ref: str, tag: str) -> str:
    """``ref`` with tag ``tag`` instead of its own."""
    if not _TAG.match(tag):
        raise InputError(f"scenario image tag {tag!r} is not a valid OCI tag")
    return f"{repository_of(ref)}:{tag}"


class _PhaseClock:
    """Times the steps of one trial into its ``phase_s``."""

    def __init__(self, trial: Trial, clock: Callable[[], float] = time.monotonic) -> None:
        self._trial = trial
        self._clock = clock

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        finally:
            self._trial.phase_s[name] = round(self._clock() - started, 2)


def report(
    driver: str,
    link_rate_bits_per_s: int,
    images: ScenarioImages,
    trials: Mapping[str, Sequence[Trial]],
    node_rates_bits_per_s: Mapping[str, int] | None = None,
    *,
    components: Mapping[str, str] | None = None,
    score_sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``harness/results/scenario.json`` document.

    ``link_rate_bits_per_s`` is the slowest node link (the scenario's nodes are meant
    to be identical); ``node_rates_bits_per_s``, when the driver knows them, records
    every node's own link rate (``"node_rates_bits_per_s"``, by node name).
    ``components`` are the versions of what ran the scenario (``"components"``);
    ``score_sources`` says per strategy where ``scores_t3`` came from and on what scale
    (``"scores_t3_source"``). When the trials measured it, the ``status.images`` lag is
    summarised as ``"status_images_lag_s"`` (count, mean, max over every pull).
    """
    doc: dict[str, Any] = {
        "driver": driver,
        "link_rate_bits_per_s": link_rate_bits_per_s,
        "images": {"Img1": images.img1, "Img2": images.img2},
        "layers": {
            label: {"digest": digest, "size": size}
            for label, (digest, size) in sorted(images.layers.items())
        },
        "strategies": {
            strategy: {"trials": [asdict(t) for t in runs]} for strategy, runs in trials.items()
        },
    }
    if node_rates_bits_per_s is not None:
        doc["node_rates_bits_per_s"] = dict(sorted(node_rates_bits_per_s.items()))
    if components is not None:
        doc["components"] = dict(components)
    for strategy, source in (score_sources or {}).items():
        if strategy in doc["strategies"]:
            doc["strategies"][strategy]["scores_t3_source"] = source
    for key, attribute in (
        ("status_images_lag_s", "status_lag_s"),
        ("inventory_lag_s", "inventory_lag_s"),
    ):
        lags = [
            lag for runs in trials.values() for t in runs for lag in getattr(t, attribute).values()
        ]
        if lags:
            doc[key] = {
                "count": len(lags),
                "mean": round(sum(lags) / len(lags), 2),
                "max": max(lags),
            }
    every = [t for runs in trials.values() for t in runs]
    if any(t.phase_s for t in every):
        # where the trials' time went: per step, summed over every trial, and the mean
        doc["phases_s"] = {
            phase: {
                "total": round(sum(t.phase_s.get(phase, 0.0) for t in every), 1),
                "mean": round(sum(t.phase_s.get(phase, 0.0) for t in every) / len(every), 2),
            }
            for phase in PHASES
        }
    return doc


def plan_trials(strategies: Sequence[str], trials: int) -> list[tuple[str, int, int]]:
    """(strategy, trial index within it, trial number over the run from 1), in run order:
    every trial of the first strategy, then the next's."""
    if trials < 1:
        raise InputError(f"trials: expected at least 1 trial per strategy, got {trials}")
    order = [(strategy, i) for strategy in strategies for i in range(trials)]
    return [(strategy, i, number) for number, (strategy, i) in enumerate(order, start=1)]


def run_scenario(
    driver: Driver,
    images: ScenarioImages,
    strategies: Sequence[str],
    trials: int,
    on_trial: Callable[[str, int, Trial], None] | None = None,
    *,
    images_of: Callable[[int], ScenarioImages] | None = None,
) -> dict[str, list[Trial]]:
    """``trials`` runs per strategy; ``on_trial(strategy, i, trial)`` reports progress.

    ``images_of(number)`` gives trial ``number``'s images (see :func:`plan_trials`), when
    each trial has its own tag; else every trial uses ``images``.
    """
    results: dict[str, list[Trial]] = {strategy: [] for strategy in strategies}
    for strategy, i, number in plan_trials(strategies, trials):
        trial = run_trial(driver, images if images_of is None else images_of(number), strategy)
        results[strategy].append(trial)
        if on_trial is not None:
            on_trial(strategy, i, trial)
    return results
