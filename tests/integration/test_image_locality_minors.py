"""The image-locality port against upstream's compiled ImageLocality, per supported minor.

``harness/imagelocality-reference`` is a small Go harness around upstream kube-scheduler's
own ``imagelocality`` plugin and scheduler cache, one program per minor
(``minors/<minor>``, each pinned to the newest patch the Go module proxy serves). Per
minor the test builds the program (``go build -race``, as go-lint compiles the same
modules; cached outside the repository under ``<cache root>/imagelocality-reference``, keyed
by the minor, the build's flags and the hash of both modules' go.mod, go.sum and sources),
feeds it random cases from a fixed seed as v1 Nodes and Pods,
and compares every score with ``ImageLocality(kubernetes_minor=minor)`` on the same objects,
decoded as the extender decodes them (``nodes_from_document``/``node_info`` into a
``LayerIndex``, ``decode_pod``/``pod_images``). No API server runs.

The cases cover what the minors disagree on and what the arithmetic turns on: init
containers and sidecars (restartPolicy Always), image volumes (KEP-4639) beside other
volumes, repeated images, untagged names (``:latest``), digest names, registries with a
port, other spellings of a name a node reports (``docker.io/library/`` added or dropped,
capitals, tag and digest: upstream matches none), names a node reports twice or at another
size than the first node (the cache keeps the first), nodes with no images, clusters of 1
to 200 nodes (the spread factor), sums under the 23 MiB minimum and over the 1000 MiB
threshold per image. Every score must be
equal; the port's other modes must disagree with each minor somewhere (so the cases do
tell the minors apart, and each program is the release it says).

Also here: that each program selects every dependency at the version its release's go.mod
requires. The Go tests of the harness and of each minor's program are ``make go-lint``'s
(``go vet`` and ``go test -race`` in every module: ``harness/scripts/go_lint.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from layersched.builds import (
    KUBERNETES_MODULE,
    PLUGIN_HASH_CHARS,
    REPO_ROOT,
    cache_root,
    module_sha256,
    required_version,
)
from layersched.core.errors import InputError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.nodeindexing import node_info
from layersched.core.objects import decode_pod, nodes_from_document, pod_images
from layersched.core.pod import PodImages
from layersched.core.strategies.args import ImageLocalityArgs, KubernetesMinor
from layersched.core.strategies.image_locality import (
    MIN_THRESHOLD_BYTES,
    ImageLocality,
    format_kubernetes_minor,
)
from layersched_harness.testbed.builds import find_go, kubernetes_build
from tests.fixtures import prereq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The harness module, and one program (module) per minor under it.
REFERENCE = REPO_ROOT / "harness" / "imagelocality-reference"
MINORS: tuple[KubernetesMinor, ...] = ((1, 35), (1, 36), (1, 37))
#: The port's modes each minor is also compared with: they must disagree somewhere.
OTHER_MODES: tuple[KubernetesMinor, ...] = ((1, 20), *MINORS)
PROGRAM = "imagelocality-reference"
#: A cold build compiles part of Kubernetes: about 2-2.5 min per minor on 2 busy cores.
BUILD_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 600
SEED = 20_261_127
CLUSTERS = 260
MIN_CASES = 1_000
MB = 1024 * 1024
#: The rounding case: 3 of 11 nodes hold an image of this size.
BOUNDARY_CASE = "boundary"
BOUNDARY_IMAGE = "reg.test/boundary:v1"
BOUNDARY_SIZE_BYTES = 238_683_863
BOUNDARY_NODES = 11
BOUNDARY_HOLDERS = 3
#: Messages list at most this many mismatches.
SHOWN = 20


# --------------------------------------------------------------------------------- go
def _find_go() -> str:
    """The Kubernetes build's go command (Go 1.26+: PATH's, else /usr/local/go's)."""
    build = kubernetes_build()
    try:
        go, _ = find_go(build.go_version_needed())
    except InputError as err:
        prereq.missing(f"building upstream's ImageLocality: {err}")
    return go


def _go_env() -> dict[str, str]:
    # the module and build caches the Kubernetes build uses (`make kubernetes`)
    return kubernetes_build().go_env()


def _run_go(go: str, module: Path, *args: str, race: bool = False) -> str:
    env = _go_env()
    if race:
        env["CGO_ENABLED"] = "1"  # the race detector needs cgo
    done = subprocess.run(
        [go, *args],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"go {' '.join(args)} in {module}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _module(minor: KubernetesMinor) -> Path:
    return REFERENCE / "minors" / format_kubernetes_minor(minor)


#: How the programs are built: with the race detector, as make go-lint race-tests the
#: same modules (``go test -race``: harness/scripts/go_lint.py), so that a release's packages
#: compile once for both (a plain build compiled them a second time); part of the cache
#: key.
PROGRAM_BUILD_FLAGS = "-trimpath -race"


def _binary(minor: KubernetesMinor) -> Path:
    """Where the program of ``minor`` is cached: keyed by the minor and the hash of the
    harness's and the program's go.mod, go.sum and sources."""
    sources = module_sha256(REFERENCE) + module_sha256(_module(minor)) + PROGRAM_BUILD_FLAGS
    key = hashlib.sha256(sources.encode()).hexdigest()[:PLUGIN_HASH_CHARS]
    build = f"{format_kubernetes_minor(minor)}+src.{key}"
    return cache_root() / PROGRAM / build / PROGRAM


def _build(go: str, minor: KubernetesMinor) -> Path:
    """The program of ``minor``, built unless cached."""
    binary = _binary(minor)
    if binary.is_file():
        print(f"{PROGRAM} {format_kubernetes_minor(minor)}: cached {binary}")
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".{PROGRAM}.{os.getpid()}")
    started = time.monotonic()
    _run_go(go, _module(minor), "build", "-trimpath", "-race", "-o", str(partial), ".", race=True)
    partial.replace(binary)  # whole or absent, for a concurrent run too
    took = time.monotonic() - started
    print(f"{PROGRAM} {format_kubernetes_minor(minor)}: built in {took:.0f} s into {binary}")
    return binary


@pytest.fixture(scope="module")
def go() -> str:
    return _find_go()


@pytest.mark.parametrize("minor", MINORS, ids=format_kubernetes_minor)
def test_each_program_builds_its_release_as_released(go: str, minor: KubernetesMinor) -> None:
    # the harness module pins the oldest minor, so a newer program selects its own release
    # (MVS): and every other module at the version the release's go.mod requires, so that
    # the code compiled is the release's own
    module = _module(minor)
    pinned = required_version((module / "go.mod").read_text("utf-8"))
    assert pinned is not None and pinned.startswith(f"v{format_kubernetes_minor(minor)}.")
    info = json.loads(
        _run_go(go, module, "mod", "download", "-json", f"{KUBERNETES_MODULE}@{pinned}")
    )
    upstream = {}
    for line in Path(info["GoMod"]).read_text("utf-8").splitlines():
        words = line.split("//", 1)[0].split()
        words = words[1:] if words[:1] == ["require"] else words
        if len(words) == 2 and words[1].startswith("v") and words[1] != "v0.0.0":
            upstream[words[0]] = words[1]
    listed = _run_go(go, module, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
    selected = dict(line.split() for line in listed.splitlines() if len(line.split()) == 2)
    assert selected[KUBERNETES_MODULE] == pinned
    differing = {
        path: (version, upstream[path])
        for path, version in selected.items()
        if path in upstream and upstream[path] != version
    }
    assert differing == {}, f"selected != {pinned}'s go.mod: {differing}"
    assert len(set(selected) & set(upstream)) > 50  # the comparison compared something


# ------------------------------------------------------------------------ generating
@dataclass(frozen=True, slots=True)
class PoolImage:
    """An image a cluster's nodes may hold: its reference parts, size and popularity."""

    repo: str
    tag: str
    digest_name: str | None
    size_bytes: int
    #: The chance a node holds it (1.0: every node, a spread factor of 1).
    popularity: float

    @property
    def tagged(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def names(self) -> list[str]:
        """As a kubelet reports them: repo digests first, then tags."""
        return [n for n in (self.digest_name, self.tagged) if n]


@dataclass(slots=True)
class Case:
    """One cluster (v1 Nodes) and the pods (v1 Pods) scored on it."""

    name: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": self.nodes, "pods": self.pods}


DOCKER_LIBRARY = "docker.io/library/"
_REGISTRIES = ("reg.test", "localhost:5000", DOCKER_LIBRARY.rstrip("/"), "ghcr.io/team", "")


def _size(rng: random.Random) -> int:
    band = rng.random()
    if band < 0.25:
        return rng.randint(0, 30 * MB)  # around the 23 MiB minimum
    if band < 0.75:
        return rng.randint(30 * MB, 900 * MB)
    return rng.randint(900 * MB, 4000 * MB)  # past one image's 1000 MiB alone


def _pool(rng: random.Random) -> list[PoolImage]:
    pool = []
    for j in range(rng.randint(3, 18)):
        registry = rng.choice(_REGISTRIES)
        repo = f"{registry}/app{j}" if registry else f"app{j}"
        tag = "latest" if rng.random() < 0.35 else f"v{rng.randint(1, 3)}"
        digest = f"{repo}@sha256:{rng.getrandbits(256):064x}" if rng.random() < 0.4 else None
        popularity = rng.choice((0.05, 0.2, 0.5, 0.8, 1.0))
        pool.append(PoolImage(repo, tag, digest, _size(rng), popularity))
    return pool


def _node(rng: random.Random, name: str, pool: list[PoolImage]) -> dict[str, Any]:
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    if rng.random() < 0.08:
        return node  # no status.images at all
    images = []
    for image in pool:
        if rng.random() >= image.popularity:
            continue
        # another runtime reports another size (compressed or not): the first node's counts
        size = image.size_bytes if rng.random() < 0.9 else _size(rng)
        images.append({"names": image.names, "sizeBytes": size})
        if rng.random() < 0.03:
            # the same name on a second entry of the node (a re-pulled tag): counted once
            images.append({"names": [image.tagged], "sizeBytes": _size(rng)})
    if rng.random() < 0.05:
        images.append({"names": [], "sizeBytes": _size(rng)})  # a dangling image
    rng.shuffle(images)
    node["status"] = {"images": images}
    return node


def _respelled(rng: random.Random, image: PoolImage) -> str:
    """The same image under another spelling, which upstream does not match: it compares
    names as strings after the :latest rule, nothing more."""
    name = image.tagged
    if name.startswith(DOCKER_LIBRARY):
        return name.removeprefix(DOCKER_LIBRARY)
    if "/" not in name:
        return DOCKER_LIBRARY + name
    if image.digest_name and rng.random() < 0.5:
        return f"{name}@{image.digest_name.partition('@')[2]}"  # tag and digest
    return name.upper()


def _reference(rng: random.Random, pool: list[PoolImage]) -> str:
    """A pod's reference to a pool image (tagged, untagged for :latest, by digest), to
    another tag or spelling of one, or to an image no node holds."""
    roll = rng.random()
    if roll < 0.08:
        return f"reg.test/absent{rng.randint(0, 5)}" + rng.choice(("", ":v1"))
    image = rng.choice(pool)
    if roll < 0.15 and image.digest_name:
        return image.digest_name
    if roll < 0.2:
        return f"{image.repo}:other"
    if roll < 0.24:
        return _respelled(rng, image)
    if image.tag == "latest" and rng.random() < 0.6:
        return image.repo  # normalised back to :latest
    return image.tagged


def _containers(rng: random.Random, prefix: str, images: list[str]) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = []
    for i, image in enumerate(images):
        container: dict[str, Any] = {"name": f"{prefix}{i}", "image": image}
        if prefix == "i" and rng.random() < 0.4:
            container["restartPolicy"] = "Always"  # a sidecar
        listed.append(container)
    return listed


def _pod(rng: random.Random, name: str, pool: list[PoolImage]) -> dict[str, Any]:
    containers = [_reference(rng, pool) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.15:
        containers.append(rng.choice(containers))  # repeated: counted twice upstream
    spec: dict[str, Any] = {"containers": _containers(rng, "c", containers)}
    if rng.random() < 0.45:
        init = [_reference(rng, pool) for _ in range(rng.randint(1, 3))]
        spec["initContainers"] = _containers(rng, "i", init)
    volumes: list[dict[str, Any]] = []
    if rng.random() < 0.45:
        for v in range(rng.randint(1, 3)):
            source: dict[str, Any] = {"reference": _reference(rng, pool)}
            if rng.random() < 0.3:
                source["pullPolicy"] = "IfNotPresent"
            volumes.append({"name": f"img{v}", "image": source})
    if rng.random() < 0.3:
        volumes.insert(rng.randint(0, len(volumes)), {"name": "scratch", "emptyDir": {}})
    if volumes:
        spec["volumes"] = volumes
    metadata = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _node_count(rng: random.Random) -> int:
    band = rng.random()
    if band < 0.05:
        return 1
    if band < 0.5:
        return rng.randint(2, 10)
    if band < 0.85:
        return rng.randint(11, 40)
    return rng.randint(41, 200)


def boundary_case() -> Case:
    """An image whose spread-scaled size sits on a score boundary: 3 of 11 nodes hold it.
    Go's ``int64(float64(size) * (3.0 / 11.0))`` is 65095598 and scores 3; ``size * 3 / 11``
    would be 65095599 and score 4 (CONTEXT.md §2, measured on v1.20.2 too)."""
    image = {"names": [BOUNDARY_IMAGE], "sizeBytes": BOUNDARY_SIZE_BYTES}
    case = Case(BOUNDARY_CASE)
    for k in range(BOUNDARY_NODES):
        node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{k}"}}
        node["status"] = {"images": [image] if k < BOUNDARY_HOLDERS else []}
        case.nodes.append(node)
    spec = {"containers": [{"name": "c0", "image": BOUNDARY_IMAGE}]}
    case.pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0"}, "spec": spec})
    return case


def generate_cases(seed: int = SEED, clusters: int = CLUSTERS) -> list[Case]:
    """``clusters`` random cases, then :func:`boundary_case`."""
    rng = random.Random(seed)
    cases = []
    for c in range(clusters):
        case = Case(f"c{c:03d}")
        pool = _pool(rng)
        case.nodes = [_node(rng, f"n{k:03d}", pool) for k in range(_node_count(rng))]
        case.pods = [_pod(rng, f"p{p}", pool) for p in range(rng.randint(4, 6))]
        cases.append(case)
    return [*cases, boundary_case()]


# --------------------------------------------------------------------------- the port
@dataclass(frozen=True, slots=True)
class PortScores:
    """The port's scores of every pod of every case, in each mode, and what they covered."""

    #: mode -> case -> pod -> node -> score
    scores: dict[KubernetesMinor, dict[str, dict[str, dict[str, int]]]]
    #: mode -> how many node scores had a sum under the minimum (> 0) / at the threshold
    under_minimum: Counter[KubernetesMinor]
    at_threshold: Counter[KubernetesMinor]


def port_scores(cases: list[Case], modes: tuple[KubernetesMinor, ...]) -> PortScores:
    scores: dict[KubernetesMinor, dict[str, dict[str, dict[str, int]]]] = {m: {} for m in modes}
    under: Counter[KubernetesMinor] = Counter()
    at: Counter[KubernetesMinor] = Counter()
    strategies = {m: ImageLocality(ImageLocalityArgs(kubernetes_minor=m)) for m in modes}
    for case in cases:
        origin = f"case {case.name}"
        document = {"apiVersion": "v1", "kind": "NodeList", "items": case.nodes}
        inventory = build_layer_index(
            node_info(node, origin) for node in nodes_from_document(document, origin)
        )
        candidates, missing = inventory.indices_of([n["metadata"]["name"] for n in case.nodes])
        assert not missing
        pods: list[tuple[str, PodImages]] = [
            (p["metadata"]["name"], pod_images(decode_pod(p, origin), origin)) for p in case.pods
        ]
        for mode, strategy in strategies.items():
            by_pod = scores[mode].setdefault(case.name, {})
            for name, pod in pods:
                result = strategy.score(pod, (), inventory, candidates)
                by_pod[name] = result.as_dict(inventory)
                present = result.present_bytes
                under[mode] += int(((present > 0) & (present < MIN_THRESHOLD_BYTES)).sum())
                at[mode] += int((present == result.total_bytes).sum())
    return PortScores(scores, under, at)


# ----------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return generate_cases()


@pytest.fixture(scope="module")
def port(cases: list[Case]) -> PortScores:
    return port_scores(cases, OTHER_MODES)


def test_the_cases_cover_what_the_scores_turn_on(cases: list[Case]) -> None:
    pods = [p["spec"] for c in cases for p in c.pods]
    init = [c for s in pods for c in s.get("initContainers", [])]
    volumes = [v for s in pods for v in s.get("volumes", []) if "image" in v]
    images = [c["image"] for s in pods for c in s["containers"]] + [c["image"] for c in init]
    coverage = {
        "pods": len(pods),
        "pods with init containers": sum(1 for s in pods if s.get("initContainers")),
        "sidecars": sum(1 for c in init if c.get("restartPolicy") == "Always"),
        "pods with image volumes": sum(
            1 for s in pods if any("image" in v for v in s.get("volumes", []))
        ),
        "image volumes": len(volumes),
        "pods repeating an image": sum(
            1 for s in pods if len({c["image"] for c in s["containers"]}) < len(s["containers"])
        ),
        "untagged references": sum(1 for i in images if i.rfind(":") <= i.rfind("/")),
        "references by digest": sum(1 for i in images if "@" in i),
        "references by tag and digest": sum(1 for i in images if re.search(r":[^/@]+@", i)),
        "references in capitals": sum(1 for i in images if i != i.lower()),
        "clusters over 100 nodes": sum(1 for c in cases if len(c.nodes) > 100),
        "single-node clusters": sum(1 for c in cases if len(c.nodes) == 1),
    }
    print(f"generated (seed {SEED}): {coverage}")
    assert coverage["pods"] >= MIN_CASES
    assert all(count > 0 for count in coverage.values()), coverage


@pytest.mark.parametrize("minor", MINORS, ids=format_kubernetes_minor)
def test_the_port_scores_as_upstream_compiled(
    go: str,
    cases: list[Case],
    port: PortScores,
    minor: KubernetesMinor,
    tmp_path: Path,
) -> None:
    shown = format_kubernetes_minor(minor)
    program = _build(go, minor)
    given = tmp_path / "cases.json"
    given.write_text(json.dumps({"cases": [c.as_json() for c in cases]}), "utf-8")
    started = time.monotonic()
    with given.open("rb") as stdin:
        done = subprocess.run(
            [str(program)],
            stdin=stdin,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    answer = json.loads(done.stdout)
    version = answer["kubernetesVersion"]
    assert version.startswith(f"v{shown}."), f"{program} scores with {version}"
    upstream = {c["name"]: c["scores"] for c in answer["cases"]}
    assert sorted(upstream) == sorted(c.name for c in cases)

    pods = node_scores = 0
    mismatches: list[str] = []
    disagreements: Counter[KubernetesMinor] = Counter()
    for case in cases:
        for pod in case.pods:
            name = pod["metadata"]["name"]
            expected = upstream[case.name][name]
            actual = port.scores[minor][case.name][name]
            pods += 1
            node_scores += len(expected)
            assert sorted(expected) == sorted(n["metadata"]["name"] for n in case.nodes)
            if actual != expected:
                differ = {
                    n: (expected[n], actual.get(n))
                    for n in expected
                    if expected[n] != actual.get(n)
                }
                mismatches.append(f"{case.name}/{name} (upstream, port): {differ}")
            for mode in OTHER_MODES:
                if mode != minor and port.scores[mode][case.name][name] != expected:
                    disagreements[mode] += 1
    others = ", ".join(
        f"{format_kubernetes_minor(m)} on {disagreements[m]}" for m in OTHER_MODES if m != minor
    )
    print(
        f"ImageLocality {shown} ({version}, {took:.1f} s): {len(cases)} clusters, {pods} pods, "
        f"{node_scores} node scores, {pods - len(mismatches)} pods all equal, "
        f"{len(mismatches)} not; {port.under_minimum[minor]} node sums under the minimum, "
        f"{port.at_threshold[minor]} at the threshold; the port's other modes disagree: "
        f"{others}"
    )
    assert pods >= MIN_CASES
    assert mismatches == [], f"{len(mismatches)} pods differ:\n" + "\n".join(mismatches[:SHOWN])
    # the quotient first: the boundary case's holders score 3 (4 the other way round)
    boundary = upstream[BOUNDARY_CASE]["p0"]
    assert [boundary[f"n{k}"] for k in range(BOUNDARY_HOLDERS)] == [3] * BOUNDARY_HOLDERS
    # the cases reach both ends of the clamp
    assert port.under_minimum[minor] > 0 and port.at_threshold[minor] > 0
    # and they tell the minors apart: each other mode of the port is wrong somewhere
    assert all(disagreements[m] > 0 for m in OTHER_MODES if m != minor), disagreements
