"""A replay trace: one seeded workload, kept as a file, that the testbed replays and the
simulator reads (``make replay``, ``harness/bench/replay/trace.json``).

The trace is drawn by the simulator's own generators, scaled to what one 2-core machine
holds: :func:`~layersched_harness.sim.corpus.generate_corpus` (a few OS bases, runtimes on them,
private application layers on top, Zipf popularity) and
:func:`~layersched_harness.sim.workload.generate_workload` (Poisson arrivals, Zipf-drawn images,
uniform lifetimes). Only the images the pods use are kept. Each layer gets a content seed,
so the testbed builds the same bytes every time (:mod:`layersched.images.oci`); its
``size_bytes`` is the content size (the blob is a tar header and gzip framing larger).

The document::

    {"format": "layersched-replay-trace/1", "seed": 36, "params": {...},
     "cluster": {"nodes": 6, "containers_per_node": 4,
                 "link_rates_bits_per_s": [40000000, 40000000, 20000000, ...],
                 "start_overhead_s": 1.0, "serial_pulls": true},
     "layers": {"L001": {"seed": 3600001, "size_bytes": 1071459}, ...},
     "images": [{"name": "app-01", "layers": ["L001", "L004", "L009"]}, ...],
     "pods": [{"name": "pod-001", "image": "app-01", "arrival_s": 0.84,
               "lifetime_s": 17.2}, ...]}

:func:`read_trace` checks it and names the field and the fix on bad input;
:func:`simulate_trace` runs the simulator on it, pod by pod, as a strategy alone or as a
kube-scheduler profile places it (:mod:`layersched_harness.sim.kube`), under the kubelets' serial
or parallel pulls; :func:`simulate_burst` runs the burst case (:class:`BurstParams`: a
Deployment's replicas of the trace's largest image, created at once) on its nodes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from layersched.core.errors import InputError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName
from layersched_harness.sim.corpus import MIB, Corpus, CorpusImage, CorpusParams, generate_corpus
from layersched_harness.sim.engine import ClusterParams, RunResult, simulate
from layersched_harness.sim.kube import Profile
from layersched_harness.sim.settings import build_strategy
from layersched_harness.sim.workload import Workload, WorkloadParams, generate_workload

FORMAT = "layersched-replay-trace/1"
#: The committed trace ``make replay`` replays.
DEFAULT_TRACE = "harness/bench/replay/trace.json"
#: The testbed never evicts (its kubelets' image GC is off): the simulated store is
#: unbounded too.
UNBOUNDED_STORE_BYTES = 1 << 50
#: Layer content seeds: ``seed * SEED_STRIDE + index``, unique per trace seed.
SEED_STRIDE = 100_000
#: A trace small enough to read whole; the testbed could not replay more anyway.
MAX_PODS = 10_000
MAX_LAYERS = 10_000
MAX_LAYER_BYTES = 1 << 31
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True, slots=True)
class TraceParams:
    """What :func:`generate_trace` draws; defaults: ``make replay``'s trace.

    Sized for one 2-core machine shared with other work (docs/replay.md): 6 nodes of 4
    slots, 50 pods arriving at 0.5/s (about 100 s), living 10..30 s once started; images
    of 3..7 layers drawn from 24 over 3 OS bases and 8 runtimes, most of a few to tens of
    MiB, with the corpus's heavy tail capped at 96 MiB a layer. The links differ (issue 37,
    fixed before any result): two fast nodes at 40 Mbit/s, two at 20 (the single rate of
    the trace before) and two slow ones at 10, a 4x spread, so that where a pod pulls
    matters as well as what it pulls, and pull-time has something to weigh. Unscaled
    (``byte_scale`` 1): the images as run are the sizes drawn. ``byte_scale`` below 1
    divides both the bytes and every link rate, which leaves every pull's duration, and so
    the placement's effect on start-up, as the unscaled trace would have them.
    """

    pods: int = 50
    images: int = 24
    rate_per_s: float = 0.5
    min_lifetime_s: float = 10.0
    max_lifetime_s: float = 30.0
    nodes: int = 6
    containers_per_node: int = 4
    #: Each node's link rate before ``byte_scale``, the first node's first (``n1`` on the
    #: testbed): as many as ``nodes``.
    link_rates_bits_per_s: tuple[int, ...] = (
        40_000_000,
        40_000_000,
        20_000_000,
        20_000_000,
        10_000_000,
        10_000_000,
    )
    #: Every layer's size and every link rate are multiplied by this.
    byte_scale: float = 1.0
    start_overhead_s: float = 1.0
    #: The testbed's kubelets pull one image at a time (``serializeImagePulls: true``).
    serial_pulls: bool = True
    corpus: CorpusParams = field(
        default_factory=lambda: CorpusParams(
            os_bases=3,
            os_layer_median_bytes=10 * MIB,
            os_layer_sigma=0.7,
            runtimes=8,
            runtime_layers=(1, 3),
            runtime_layer_median_bytes=6 * MIB,
            runtime_layer_sigma=0.8,
            private_layer_median_bytes=2 * MIB,
            private_layer_sigma=1.2,
            min_layers=3,
            max_layers=7,
            min_layer_bytes=64 * 1024,
            max_layer_bytes=96 * MIB,
        )
    )


@dataclass(frozen=True, slots=True)
class TraceLayer:
    """One layer: the seed of its content and the content's size."""

    seed: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class TraceImage:
    """One image: its short name (the repository's last part) and its layer labels, base
    first."""

    name: str
    layers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod: its name, image, arrival (seconds from the start) and how long it runs once
    started."""

    name: str
    image: str
    arrival_s: float
    lifetime_s: float


@dataclass(frozen=True, slots=True)
class TraceCluster:
    """The cluster the trace is replayed on."""

    nodes: int
    containers_per_node: int
    #: Each node's link rate, the first node's first (the testbed's ``n1``).
    link_rates_bits_per_s: tuple[int, ...]
    start_overhead_s: float
    #: Whether a node pulls one image at a time (the simulator then does too).
    serial_pulls: bool = False

    def node_rates_bits_per_s(self) -> dict[str, int]:
        """Each testbed node's link rate by name (``n1``, ``n2``, ...)."""
        return {f"n{i}": rate for i, rate in enumerate(self.link_rates_bits_per_s, start=1)}


@dataclass(frozen=True, slots=True)
class Trace:
    """A replay trace (see the module docstring)."""

    seed: int
    cluster: TraceCluster
    layers: Mapping[str, TraceLayer]
    images: tuple[TraceImage, ...]
    pods: tuple[TracePod, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    def image(self, name: str) -> TraceImage:
        """The image called ``name``."""
        for image in self.images:
            if image.name == name:
                return image
        raise InputError(f"the trace has no image {name!r}")

    def image_size_bytes(self, name: str) -> int:
        """Content bytes of ``name``'s layers."""
        return sum(self.layers[label].size_bytes for label in self.image(name).layers)

    def smallest_layer_bytes(self) -> int:
        """The smallest layer's content size."""
        return min(layer.size_bytes for layer in self.layers.values())

    def distinct_bytes(self) -> int:
        """Content bytes of every distinct layer (what the registry stores)."""
        return sum(layer.size_bytes for layer in self.layers.values())


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def generate_trace(seed: int, params: TraceParams | None = None) -> Trace:
    """The trace drawn from ``seed`` (the same seed and params give the same trace)."""
    params = params or TraceParams()
    if params.pods < 1 or params.pods > MAX_PODS:
        raise InputError(f"trace pods: expected 1..{MAX_PODS}, got {params.pods}")
    if not 0 < params.byte_scale <= 1:
        raise InputError(f"trace byte_scale {params.byte_scale}: expected within (0, 1]")
    if (
        len(params.link_rates_bits_per_s) != params.nodes
        or min(params.link_rates_bits_per_s, default=0) < 1
    ):
        raise InputError(
            f"trace link_rates_bits_per_s {list(params.link_rates_bits_per_s)}: give one "
            f"positive rate per node ({params.nodes})"
        )
    if not 0 < params.min_lifetime_s <= params.max_lifetime_s:
        raise InputError(
            f"trace lifetimes {params.min_lifetime_s}..{params.max_lifetime_s} s: "
            "need 0 < min <= max"
        )
    corpus = generate_corpus(params.images, seed=seed, params=params.corpus)
    # A window long enough for ``pods`` arrivals nearly always; the first ``pods`` are kept.
    expected_s = params.pods / params.rate_per_s
    window_s = 2 * expected_s + 10 * math.sqrt(params.pods) / params.rate_per_s
    workload = generate_workload(
        corpus,
        WorkloadParams(
            rate_per_s=params.rate_per_s,
            window_s=window_s,
            min_pod_duration_s=params.min_lifetime_s,
            max_pod_duration_s=params.max_lifetime_s,
        ),
        seed=seed + 1,
    )
    if len(workload) < params.pods:
        raise InputError(
            f"trace seed {seed}: only {len(workload)} arrivals in {window_s:.0f} s; "
            "choose another seed"
        )
    used = sorted(set(int(i) for i in workload.image[: params.pods]))
    labels: dict[str, str] = {}
    layers: dict[str, TraceLayer] = {}
    images: list[TraceImage] = []
    names: dict[int, str] = {}
    for rank in used:
        source = corpus.images[rank]
        own = []
        for layer in source.layers:
            label = labels.get(layer.digest)
            if label is None:
                label = labels[layer.digest] = f"L{len(labels) + 1:03d}"
                scaled = max(1, round(layer.size_bytes * params.byte_scale))
                layers[label] = TraceLayer(seed * SEED_STRIDE + len(labels), scaled)
            own.append(label)
        names[rank] = f"app-{rank + 1:02d}"
        images.append(TraceImage(names[rank], tuple(own)))
    width = len(str(params.pods))
    pods = tuple(
        TracePod(
            name=f"pod-{i + 1:0{width}d}",
            image=names[int(workload.image[i])],
            arrival_s=_round(workload.arrival_s[i]),
            lifetime_s=_round(workload.pod_duration_s[i]),
        )
        for i in range(params.pods)
    )
    cluster = TraceCluster(
        params.nodes,
        params.containers_per_node,
        tuple(max(1, round(r * params.byte_scale)) for r in params.link_rates_bits_per_s),
        params.start_overhead_s,
        params.serial_pulls,
    )
    return Trace(seed, cluster, layers, tuple(images), pods, asdict(params))


# ------------------------------------------------------------------ the file


def trace_document(trace: Trace) -> dict[str, Any]:
    """The trace as the JSON document :func:`read_trace` reads."""
    return {
        "format": FORMAT,
        "seed": trace.seed,
        "params": dict(trace.params),
        "cluster": asdict(trace.cluster)
        | {"link_rates_bits_per_s": list(trace.cluster.link_rates_bits_per_s)},
        "layers": {label: asdict(layer) for label, layer in trace.layers.items()},
        "images": [{"name": i.name, "layers": list(i.layers)} for i in trace.images],
        "pods": [asdict(pod) for pod in trace.pods],
    }


def write_trace(trace: Trace, path: Path) -> None:
    """Write the trace as indented JSON (creating the directory)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trace_document(trace), indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        raise InputError(f"writing the replay trace to {path}: {err.strerror}") from err


def _field(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = doc.get(key)
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise InputError(
            f"{where}.{key}: expected {getattr(kind, '__name__', 'a number')}, got "
            f"{type(value).__name__}; regenerate the trace (python3 harness/bench/replay.py trace)"
        )
    return value


def _positive(value: float, where: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: expected a positive number, got {value}")
    return value


def _link_rates(cluster_doc: Mapping[str, Any], nodes: int, where: str) -> tuple[int, ...]:
    """Each node's rate: ``link_rates_bits_per_s``, one per node; a trace written before
    the links differed (issue 36) has one ``link_rate_bits_per_s`` for every node."""
    if "link_rates_bits_per_s" not in cluster_doc and "link_rate_bits_per_s" in cluster_doc:
        rates = [_field(cluster_doc, "link_rate_bits_per_s", int, where)] * max(nodes, 0)
    else:
        rates = _field(cluster_doc, "link_rates_bits_per_s", list, where)
    if (
        len(rates) != nodes
        or not all(isinstance(r, int) and not isinstance(r, bool) for r in rates)
        or min(rates, default=0) < 1
    ):
        raise InputError(
            f"{where}.link_rates_bits_per_s: expected {nodes} positive whole bit rates, one "
            f"per node, got {rates!r:.200}; regenerate the trace (python3 harness/bench/replay.py "
            "trace)"
        )
    return tuple(rates)


def parse_trace(doc: Any, where: str) -> Trace:
    """A :class:`Trace` from the document read at ``where`` (named in every error)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(
            f"{where}: not a replay trace (expected format {FORMAT!r}); "
            "regenerate it with python3 harness/bench/replay.py trace"
        )
    number = (int, float)
    cluster_doc = _field(doc, "cluster", dict, where)
    nodes = _field(cluster_doc, "nodes", int, f"{where}: cluster")
    cluster = TraceCluster(
        nodes=nodes,
        containers_per_node=_field(cluster_doc, "containers_per_node", int, f"{where}: cluster"),
        link_rates_bits_per_s=_link_rates(cluster_doc, nodes, f"{where}: cluster"),
        start_overhead_s=float(
            _field(cluster_doc, "start_overhead_s", number, f"{where}: cluster")
        ),
        serial_pulls=_field(cluster_doc, "serial_pulls", bool, f"{where}: cluster")
        if "serial_pulls" in cluster_doc
        else False,
    )
    if cluster.nodes < 1 or cluster.containers_per_node < 1:
        raise InputError(f"{where}: cluster: nodes and slots must be at least 1")
    if cluster.start_overhead_s < 0:
        raise InputError(f"{where}: cluster.start_overhead_s must not be negative")
    layer_docs = _field(doc, "layers", dict, where)
    if not 0 < len(layer_docs) <= MAX_LAYERS:
        raise InputError(f"{where}: layers: expected 1..{MAX_LAYERS} layers")
    layers: dict[str, TraceLayer] = {}
    for label, entry in layer_docs.items():
        at = f"{where}: layers.{label}"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: expected an object with seed and size_bytes")
        size = _field(entry, "size_bytes", int, at)
        if not 0 < size <= MAX_LAYER_BYTES:
            raise InputError(f"{at}.size_bytes: expected 1..{MAX_LAYER_BYTES}, got {size}")
        layers[str(label)] = TraceLayer(_field(entry, "seed", int, at), size)
    images: list[TraceImage] = []
    for i, entry in enumerate(_field(doc, "images", list, where)):
        at = f"{where}: images[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: expected an object with name and layers")
        name = _field(entry, "name", str, at)
        if not _NAME.match(name):
            raise InputError(f"{at}.name {name!r}: use lowercase letters, digits and '-'")
        own = tuple(str(label) for label in _field(entry, "layers", list, at))
        unknown = [label for label in own if label not in layers]
        if not own or unknown:
            raise InputError(f"{at}.layers: empty or naming undefined layers {unknown}")
        images.append(TraceImage(name, own))
    image_names = {image.name for image in images}
    if len(image_names) != len(images):
        raise InputError(f"{where}: images: two images share a name")
    pods: list[TracePod] = []
    pod_docs = _field(doc, "pods", list, where)
    if not 0 < len(pod_docs) <= MAX_PODS:
        raise InputError(f"{where}: pods: expected 1..{MAX_PODS} pods")
    last_s = 0.0
    for i, entry in enumerate(pod_docs):
        at = f"{where}: pods[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: expected an object with name, image, arrival_s, lifetime_s")
        image = _field(entry, "image", str, at)
        if image not in image_names:
            raise InputError(f"{at}.image {image!r} is not among the trace's images")
        arrival_s = float(_field(entry, "arrival_s", number, at))
        if not math.isfinite(arrival_s) or arrival_s < last_s:
            raise InputError(f"{at}.arrival_s {arrival_s}: pods must be in arrival order")
        last_s = arrival_s
        name = _field(entry, "name", str, at)
        if not _NAME.match(name):
            raise InputError(f"{at}.name {name!r}: use lowercase letters, digits and '-'")
        lifetime = _positive(float(_field(entry, "lifetime_s", number, at)), f"{at}.lifetime_s")
        pods.append(TracePod(name, image, arrival_s, lifetime))
    if len({pod.name for pod in pods}) != len(pods):
        raise InputError(f"{where}: pods: two pods share a name")
    params = doc.get("params")
    return Trace(
        seed=_field(doc, "seed", int, where),
        cluster=cluster,
        layers=layers,
        images=tuple(images),
        pods=tuple(pods),
        params=params if isinstance(params, dict) else {},
    )


def read_trace(path: Path) -> Trace:
    """Read and check the trace at ``path``."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(
            f"reading the replay trace {path}: {err.strerror}: generate it with "
            "python3 harness/bench/replay.py trace"
        ) from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a replay trace (not JSON: {err})") from err
    return parse_trace(doc, str(path))


# ------------------------------------------------------------------ the simulator


def layer_digest(trace_seed: int, label: str) -> str:
    """The digest the simulator gives a trace layer (the testbed's are the built blobs')."""
    text = f"layersched-replay/{trace_seed}/{label}".encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def simulator_inputs(
    trace: Trace,
    max_parallel_pulls: int | None = None,
    overheads: Overheads | None = None,
    resources: Resources | None = None,
) -> tuple[Corpus, Workload, ClusterParams]:
    """The trace as the simulator's corpus, workload and cluster. ``max_parallel_pulls``:
    the nodes' pull queue (default: the trace's, 1 with ``serial_pulls``, else no bound);
    ``overheads``: the fixed costs and the links' efficiency (default: the trace's start
    overhead, nothing else); ``resources``: the nodes' allocatable cpu and memory and a
    pod's requests (default: the slots)."""
    corpus = _corpus(trace, [image.name for image in trace.images])
    index = {image.name: i for i, image in enumerate(trace.images)}
    counts = np.bincount([index[pod.image] for pod in trace.pods], minlength=len(trace.images))
    corpus = replace(corpus, popularity=np.asarray(counts / counts.sum(), dtype=np.float64))
    lifetimes = [pod.lifetime_s for pod in trace.pods]
    workload = Workload(
        arrival_s=np.asarray([pod.arrival_s for pod in trace.pods], dtype=np.float64),
        image=np.asarray([index[pod.image] for pod in trace.pods], dtype=np.int64),
        pod_duration_s=np.asarray(lifetimes, dtype=np.float64),
        params=WorkloadParams(
            rate_per_s=len(trace.pods) / max(trace.pods[-1].arrival_s, 1.0),
            window_s=trace.pods[-1].arrival_s + 1.0,
            min_pod_duration_s=min(lifetimes),
            max_pod_duration_s=max(lifetimes),
        ),
    )
    cluster = _cluster(
        trace, trace.cluster.containers_per_node, max_parallel_pulls, overheads, resources
    )
    return corpus, workload, cluster


@dataclass(frozen=True, slots=True)
class Overheads:
    """What the simulator takes as given rather than models: the time from a pod's
    creation to its pull request (scheduling and the sandbox), from its layers' arrival
    to its container's start, the share of a link's rate a pull achieves (transfer,
    unpacking and the kubelet's bookkeeping), and from a pod's end (its lifetime after its
    start) to its slot taken again (the kubelet ending it, kube-scheduler retrying the pods
    that waited): ``make replay`` measures each on the testbed (the same for every arm of
    a pull mode)."""

    pull_request_delay_s: float = 0.0
    #: None: the trace's ``start_overhead_s``.
    start_overhead_s: float | None = None
    link_efficiency: float = 1.0
    slot_release_s: float = 0.0
    #: The measured releases, each pod's drawn from them (empty: ``slot_release_s``).
    slot_release_samples_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if (
            self.pull_request_delay_s < 0
            or self.slot_release_s < 0
            or any(not 0 <= d < math.inf for d in self.slot_release_samples_s)
            or (self.start_overhead_s is not None and self.start_overhead_s < 0)
            or not 0 < self.link_efficiency <= 1
        ):
            raise InputError(
                f"overheads {self}: delays must not be negative and the link efficiency "
                "must be within (0, 1]"
            )


@dataclass(frozen=True, slots=True)
class Resources:
    """A node's allocatable cpu and memory and what one pod requests (kube-scheduler's
    resource scores read them), as the testbed had them (millicores, bytes)."""

    allocatable: tuple[int, int]
    requests: tuple[int, int]


def _corpus(trace: Trace, names: Sequence[str]) -> Corpus:
    images = tuple(
        CorpusImage(
            ImageName(f"replay/{name}:v1"),
            tuple(
                Layer(layer_digest(trace.seed, label), trace.layers[label].size_bytes)
                for label in trace.image(name).layers
            ),
        )
        for name in names
    )
    uniform = np.full(len(images), 1.0 / len(images), dtype=np.float64)
    return Corpus(images=images, popularity=uniform, params=CorpusParams(), seed=trace.seed)


def _cluster(
    trace: Trace,
    slots: int,
    max_parallel_pulls: int | None,
    overheads: Overheads | None,
    resources: Resources | None,
) -> ClusterParams:
    costs = overheads or Overheads()
    rates = tuple(float(r) * costs.link_efficiency for r in trace.cluster.link_rates_bits_per_s)
    if max_parallel_pulls is None:
        max_parallel_pulls = 1 if trace.cluster.serial_pulls else 0
    return ClusterParams(
        nodes=trace.cluster.nodes,
        containers_per_node=slots,
        store_capacity_bytes=UNBOUNDED_STORE_BYTES,
        eviction="lru",
        bandwidth_bits_per_s=(min(rates), max(rates)),
        node_bandwidth_bits_per_s=rates,
        start_overhead_s=(
            trace.cluster.start_overhead_s
            if costs.start_overhead_s is None
            else costs.start_overhead_s
        ),
        pull_request_delay_s=costs.pull_request_delay_s,
        slot_release_delay_s=costs.slot_release_s,
        slot_release_delays_s=tuple(costs.slot_release_samples_s),
        max_parallel_pulls=max_parallel_pulls,
        lone_pull_efficiency=costs.link_efficiency,
        node_allocatable=resources.allocatable if resources else None,
        pod_requests=resources.requests if resources else None,
    )


@dataclass(frozen=True, slots=True)
class SimulatedPods:
    """One simulated run of a trace (or a burst), pod by pod (trace order): the profile
    (or strategy) it ran, the tie-break seed, and per pod its node, start-up, bytes its
    own pull fetched, its pull's wait behind other pulls and the pull itself (NaN: it
    pulled nothing)."""

    strategy: str
    seed: int
    node: tuple[int, ...]
    startup_s: tuple[float, ...]
    bytes_pulled: tuple[int, ...]
    queue_s: tuple[float, ...] = ()
    pull_s: tuple[float, ...] = ()
    #: Given placements to follow (:func:`simulate_placed`): the pods that could not be.
    unfollowed: int = 0


def _per_pod(result: RunResult, label: str, seed: int) -> SimulatedPods:
    return SimulatedPods(
        strategy=label,
        seed=seed,
        node=tuple(int(n) for n in result.pod_node),
        startup_s=tuple(_round(s, 4) for s in result.pod_startup_s),
        bytes_pulled=tuple(int(b) for b in result.pod_bytes),
        queue_s=tuple(_round(s, 4) for s in result.pod_queue_s),
        pull_s=tuple(_round(s, 4) for s in result.pod_pull_s),
        unfollowed=result.unfollowed,
    )


def _run(
    corpus: Corpus,
    workload: Workload,
    cluster: ClusterParams,
    model: str | Profile,
    seed: int,
    follow: Sequence[int] | None = None,
) -> SimulatedPods:
    """One simulated run: a strategy alone (ties at random) or a kube-scheduler profile,
    following given placements where it can (``follow``)."""
    if isinstance(model, Profile):
        strategy = build_strategy(model.strategy) if model.strategy else None
        result = simulate(
            corpus, workload, cluster, strategy, seed=seed, profile=model, follow=follow
        )
        return _per_pod(result, model.name, seed)
    result = simulate(corpus, workload, cluster, build_strategy(model), seed=seed)
    return _per_pod(result, model, seed)


def simulate_trace(
    trace: Trace,
    models: Sequence[str | Profile],
    seeds: Sequence[int],
    *,
    max_parallel_pulls: int | None = None,
    overheads: Overheads | None = None,
    resources: Resources | None = None,
) -> list[SimulatedPods]:
    """Simulate ``trace`` once per model and tie-break seed: a strategy name (the strategy
    alone, ties at random) or a kube-scheduler :class:`~layersched_harness.sim.kube.Profile`
    (what a testbed scheduler does). Several seeds give the prediction's spread, for
    random ties; a profile without an extender ties in node order and gives one answer."""
    corpus, workload, cluster = simulator_inputs(trace, max_parallel_pulls, overheads, resources)
    return [_run(corpus, workload, cluster, model, seed) for model in models for seed in seeds]


def simulate_placed(
    trace: Trace,
    model: Profile,
    placements: Sequence[Sequence[int]],
    *,
    max_parallel_pulls: int | None = None,
    overheads: Overheads | None = None,
    resources: Resources | None = None,
) -> list[SimulatedPods]:
    """Simulate ``trace`` once per given placement (a node index per pod, in trace
    order: where a real run put each pod), each pod on its node when that node has a free
    slot, else where ``model`` sends it: the time model given reality's placement (the
    run's seed is its position in ``placements``)."""
    corpus, workload, cluster = simulator_inputs(trace, max_parallel_pulls, overheads, resources)
    return [
        _run(corpus, workload, cluster, model, seed, follow)
        for seed, follow in enumerate(placements)
    ]


# ------------------------------------------------------------------ the burst


@dataclass(frozen=True, slots=True)
class BurstParams:
    """The burst case (issue 42), fixed before any result: a Deployment of ``replicas``
    pods of one image no node holds, all created at once, on the trace's nodes and links.
    Each replica requests ``1 / slots_per_node`` of a worker: all of them fit on one node,
    so that only the schedulers' scores spread them, not the resource filter. The image
    is the trace's largest (:func:`burst_image`): its pull over the slowest link is the
    longest any trace pod waits for, so the spread between a fast and a slow placement
    is widest."""

    replicas: int = 20
    slots_per_node: int = 20


def burst_image(trace: Trace) -> str:
    """The trace's image of the most bytes (the first such in trace order)."""
    return max(trace.images, key=lambda image: trace.image_size_bytes(image.name)).name


#: The replicas run until the Deployment is deleted: longer than any simulated burst.
_BURST_LIFETIME_S = 1e9


def burst_inputs(
    trace: Trace,
    params: BurstParams,
    max_parallel_pulls: int | None = None,
    overheads: Overheads | None = None,
    resources: Resources | None = None,
) -> tuple[Corpus, Workload, ClusterParams]:
    """The burst as the simulator's corpus (its one image), workload (every replica at
    time 0, one owner) and cluster (the trace's nodes and links, ``slots_per_node``)."""
    if params.replicas < 1 or params.slots_per_node < 1:
        raise InputError(
            f"burst: replicas {params.replicas} and slots {params.slots_per_node} must be "
            "at least 1"
        )
    corpus = _corpus(trace, [burst_image(trace)])
    workload = Workload(
        arrival_s=np.zeros(params.replicas, dtype=np.float64),
        image=np.zeros(params.replicas, dtype=np.int64),
        pod_duration_s=np.full(params.replicas, _BURST_LIFETIME_S, dtype=np.float64),
        params=WorkloadParams(rate_per_s=1.0, window_s=1.0),
        owner=np.zeros(params.replicas, dtype=np.int64),
    )
    cluster = _cluster(trace, params.slots_per_node, max_parallel_pulls, overheads, resources)
    return corpus, workload, cluster


def simulate_burst(
    trace: Trace,
    params: BurstParams,
    models: Sequence[str | Profile],
    seeds: Sequence[int],
    *,
    max_parallel_pulls: int | None = None,
    overheads: Overheads | None = None,
    resources: Resources | None = None,
) -> list[SimulatedPods]:
    """Simulate the burst once per model and seed (see :func:`simulate_trace`); a run's
    time until all are Ready is its largest start-up."""
    corpus, workload, cluster = burst_inputs(
        trace, params, max_parallel_pulls, overheads, resources
    )
    return [_run(corpus, workload, cluster, model, seed) for model in models for seed in seeds]
