"""The LayerLocality kube-scheduler plugin (``src/kube-scheduler``) against layersched's
Python core: the configurations the generator writes, decoded in Go, and differential tests.

The module's own Go tests run in ``make lint`` (``make go-lint``: ``go vet`` and ``go test
-race`` of every package with tests, ``TestScoresAreReadWhileEventsArrive``'s 16 Score
readers and the watch's writer among them), not here as well: a second, non-race compile
and link of the same test binaries cost a fresh CI about three minutes of both cores.
``tests/unit/test_go_lint.py`` holds that the plugin's packages keep their tests.

The tests run ``go test`` in the Go module with the build's toolchain and caches
(``layersched.builds``: the module cache ``make kubernetes`` filled, so nothing is
downloaded again and the scheduler's packages are compiled once).

The differential test generates pods and NodeLayerInventory objects (1,200 random cases
and the hidden-parity shapes: shared layers, repeated images, init containers, spread,
digest and untagged references, a moved tag, a repeated or resized layer, a malformed
object, a size over the 1 TiB cap, holders x size past 2^53 under spread, and the trust
shapes: a lying node, colluders, quorums 1 to 3, a pinned image with a dissenting
publisher), scores them with layersched's Python core, writes both to JSON, and runs the
Go side's ``TestParityWithThePythonCore`` on it: every node score of every case must be
equal.

The Python side is the core's ``LayerLocality`` over a ``LayerIndex`` of the parsed
objects (``parse_document``). A pod image's layers are the extender's own rule
(``core/votes.py``, used as is: each node's ``ballots`` into an ``ImageVotes`` of the
case's quorum): nodes agreeing on one (digest, layers) under the image's lookup key (as
kubelet normalises names) must be a quorum and a majority of those publishing under it
(issue 30), and no other answer may pass too; for a digest-pinned image every publisher
(issue 44). An image without such agreement is left out of the pod on both sides (the
plugin makes no registry call; the extender would ask a registry).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from layersched.builds import scheduler_build
from layersched.core.boundpod import bound_at_s, decode_bound_pod, pending_images
from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.indexbuilder import build_layer_index
from layersched.core.inflight import PendingPull
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeInfo
from layersched.core.nodelayers import API_VERSION, KIND, parse_document
from layersched.core.pod import PodImages
from layersched.core.strategies.args import InFlightArgs, LayerLocalityArgs
from layersched.core.strategies.base import resolve_pod_layers
from layersched.core.strategies.in_flight import InFlight
from layersched.core.strategies.layer_locality import LayerLocality
from layersched.core.votes import DEFAULT_IMAGE_QUORUM, Ballot, ImageVotes, ballots
from layersched.deploy import (
    IN_FLIGHT_WEIGHT,
    KUBE_SCHEDULER_CONFIG_V1,
    PluginArgs,
    plugin_readme_block,
    plugin_scheduler_config,
)
from layersched_harness.testbed.builds import find_go, kubernetes_build
from layersched_harness.testbed.scheduler_configs import (
    TestbedSchedulers,
)
from layersched_harness.testbed.scheduler_configs import (
    testbed_scheduler_configs as generate_testbed_configs,
)
from tests.fixtures import prereq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The Go test reading the cases, and the environment variables naming its inputs.
PARITY_TEST = "TestParityWithThePythonCore"
PARITY_ENV = "LAYERSCHED_PARITY_CASES"
ARGS_TEST = "TestArgsFromTheGenerator"
ARGS_ENV = "LAYERSCHED_GENERATED_CONFIGS"
#: Random cases, on top of the shapes; the issue asks for at least 1,000.
RANDOM_CASES = 1_200
MIN_CASES = 1_000
SEED = 20261124
#: A cold compile of the module's dependencies (client-go, the scheduler framework) takes
#: minutes on 2 cores; later runs reuse the build's cache.
GO_TEST_TIMEOUT_S = 1800
_PARITY_LINE = re.compile(r"parity: (?P<cases>\d+) cases, (?P<scores>\d+) node scores, all equal")


# --------------------------------------------------------------------- running go test
def _package(relative: str) -> str:
    return f"./{relative}"


@pytest.fixture(scope="module")
def tree() -> Path:
    """layersched's Go module, once a go command new enough for it is found."""
    build = scheduler_build()
    try:
        find_go(build.go_version_needed())
    except InputError as err:
        prereq.missing(str(err))
    return build.directory()


def _go_test(
    module: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    build = scheduler_build()
    go, _ = find_go(build.go_version_needed())
    go_env = {**build.go_env(), **(env or {})}
    # -trimpath, as make kubernetes compiles: the packages it compiled come from the cache
    argv = [go, "test", "-trimpath", *args]
    print(f"$ {' '.join(argv)}  (in {module})")
    done = subprocess.run(
        argv,
        cwd=module,
        capture_output=True,
        text=True,
        timeout=GO_TEST_TIMEOUT_S,
        env=go_env,
        check=False,
    )
    print(done.stdout[-20_000:], done.stderr[-5_000:])
    return done


def _go_test_on(
    tree: Path, test: str, package: str, env_name: str, path: Path
) -> subprocess.CompletedProcess[str]:
    """Go test ``test`` of ``package``, given the file ``path`` through ``env_name``; it
    must pass."""
    done = _go_test(
        tree, "-count=1", "-v", "-run", test, _package(package), env={env_name: str(path)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_generators_plugin_args_decode_in_go(tree: Path, tmp_path: Path) -> None:
    # every configuration layersched writes for the plugin is one its Go side accepts
    testbed = generate_testbed_configs(
        TestbedSchedulers(
            kubeconfig="/state/control-plane/kube-scheduler.kubeconfig",
            extender_url="http://10.250.71.1:8888",
            extender_timeout_s=5.0,
            kubernetes_version=kubernetes_build().version,
        )
    )
    readme = yaml.safe_load(plugin_readme_block().removeprefix("```yaml\n").removesuffix("```"))
    # the in-flight strategy's args, as the replay's plugin arm would render them
    in_flight = plugin_scheduler_config(
        PluginArgs(in_flight=InFlightArgs(pull_mode="parallel")),
        weight=IN_FLIGHT_WEIGHT,
        api_version=KUBE_SCHEDULER_CONFIG_V1,
        kubernetes_version=kubernetes_build().version,
    )
    configs = {
        "testbed": testbed["layer-locality-plugin"],
        "readme": readme,
        "in-flight": in_flight,
    }
    path = tmp_path / "configs.json"
    path.write_text(json.dumps(configs))
    done = _go_test_on(tree, ARGS_TEST, "pkg/layerlocality", ARGS_ENV, path)
    assert "decoded 3 generated configurations" in done.stdout


def test_go_and_the_python_core_agree_on_every_score(tree: Path, tmp_path: Path) -> None:
    cases = [*_shapes(), *(_random_case(random.Random(SEED + i), i) for i in range(RANDOM_CASES))]
    for case in cases:
        case["scores"] = _python_scores(case)
    path = tmp_path / "parity.json"
    path.write_text(json.dumps({"cases": cases}))
    done = _go_test_on(tree, PARITY_TEST, "pkg/layers", PARITY_ENV, path)
    match = _PARITY_LINE.search(done.stdout)
    assert match, done.stdout
    assert int(match["cases"]) == len(cases) >= MIN_CASES
    assert int(match["scores"]) == sum(len(c["nodes"]) for c in cases)
    # the cases are not all zeros: most pods score above 0 somewhere, some hit 100
    scored = [max(c["scores"].values(), default=0) for c in cases]
    assert sum(s > 0 for s in scored) > len(cases) // 2
    assert sum(s == 100 for s in scored) > 10
    print(f"parity: {match['cases']} cases, {match['scores']} node scores, all equal")


# ---------------------------------------------------------------- the Python reference
#: The platform key every node votes under (the plugin has no platforms: one key).
_PLATFORM = ""


class _Agreed:
    """A pod image's layers by the extender's rule: what a quorum of nodes agree on."""

    def __init__(self, votes: ImageVotes) -> None:
        self.votes = votes

    def find(self, image: str) -> tuple[Layer, ...] | None:
        return self.votes.layers(image, _PLATFORM)

    def resolve(self, image: str) -> tuple[Layer, ...]:
        layers = self.find(image)
        if layers is None:
            raise LayerResolutionError(f"{image!r}: no quorum of nodes agrees on its layers")
        return layers


def _python_scores(case: dict[str, Any]) -> dict[str, int]:
    parsed = []
    case["valid"] = []
    for document in case["inventories"]:
        try:
            parsed.append(parse_document(document, f"case {case['id']}"))
            case["valid"].append(True)
        except InputError:
            case["valid"].append(False)
    # each object replaces its node's votes, as an update does in the extender and in Go
    votes = ImageVotes(case["quorum"])
    cast: dict[str, set[Ballot]] = {}
    for layers in parsed:
        new = ballots(_PLATFORM, layers.images)
        votes.change(cast.get(layers.node, set()), new)
        cast[layers.node] = new
    published = _Agreed(votes)
    by_node = {layers.node: layers for layers in parsed}
    inventory = build_layer_index(
        NodeInfo(name=node, images=by_node[node].node_images() if node in by_node else ())
        for node in case["nodes"]
    )
    init = tuple(i for i in case["init"] if published.find(i) is not None)
    main = tuple(i for i in case["containers"] if published.find(i) is not None)
    pod = PodImages(name=case["id"], init_containers=init, containers=main)
    candidates = np.arange(len(case["nodes"]), dtype=np.int64)
    strategy = LayerLocality(LayerLocalityArgs(spread=case["spread"]))
    result = strategy.score(pod, resolve_pod_layers(pod, published), inventory, candidates)
    return result.as_dict(inventory)


# ------------------------------------------------------------------------ the cases
def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _document(node: str, images: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A NodeLayerInventory as the agent builds it: a table of distinct layers, images
    naming theirs by index."""
    table: dict[str, int] = {}
    layers: list[dict[str, Any]] = []
    entries = []
    for image in images:
        indexes: dict[int, None] = {}  # a layer twice in a manifest is listed once
        for digest, size in image["layers"]:
            if digest not in table:
                table[digest] = len(layers)
                layers.append({"digest": digest, "sizeBytes": size})
            indexes[table[digest]] = None
        entries.append(
            {"names": image["names"], "digest": image["digest"], "layers": list(indexes)}
        )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node},
        "runtime": "containerd://1.6.20",
        "source": "content-store",
        "observedAt": "2026-11-24T10:00:00Z",
        "truncated": False,
        "layers": layers,
        "images": entries,
    }


def _case(
    case_id: str,
    nodes: Sequence[str],
    holdings: Mapping[str, Sequence[dict[str, Any]]],
    init: Sequence[str],
    containers: Sequence[str],
    spread: bool,
    quorum: int = 1,
) -> dict[str, Any]:
    """A case; ``quorum`` is the image quorum both sides resolve with (1 for the
    arithmetic shapes, whose images each one node publishes)."""
    return {
        "id": case_id,
        "spread": spread,
        "quorum": quorum,
        "nodes": list(nodes),
        "inventories": [_document(node, images) for node, images in holdings.items()],
        "init": list(init),
        "containers": list(containers),
        "images": [*init, *containers],
    }


def _image(name: str, layers: Sequence[tuple[str, int]], *names: str) -> dict[str, Any]:
    return {"names": [name, *names], "digest": _digest("manifest " + name), "layers": list(layers)}


def _shapes() -> Iterator[dict[str, Any]]:
    mib = 1024 * 1024
    l1, l2, l3, l4 = ((_digest(f"L{i}"), size * mib) for i, size in enumerate((40, 30, 20, 10), 1))
    img1 = _image("reg:5000/img1:1", [l1, l2, l3])
    img2 = _image("reg:5000/img2:1", [l1, l2, l4])
    seed = {"n1": [img1], "n2": [img2], "n3": []}
    nodes = ["n1", "n2", "n3"]
    for spread in (False, True):
        tag = "spread" if spread else "plain"
        # the seed scenario's t3: N2 shares L1+L2 with Img1
        yield _case(f"seed-{tag}", nodes, seed, [], ["reg:5000/img1:1"], spread)
        # repeated images: counted once
        yield _case(f"repeated-{tag}", nodes, seed, [], ["reg:5000/img1:1"] * 3, spread)
        # init containers: their layers and the containers', each distinct layer once
        yield _case(f"init-{tag}", nodes, seed, ["reg:5000/img2:1"], ["reg:5000/img1:1"], spread)
        # a node without any object counts in the spread's node count, holding nothing
        yield _case(f"no-object-{tag}", [*nodes, "n4"], seed, [], ["reg:5000/img1:1"], spread)
    # by digest, and untagged (":latest")
    latest = _image("reg:5000/app:latest", [l1, l3])
    yield _case(
        "digest-and-latest",
        nodes,
        {"n1": [latest], "n2": [img2]},
        [],
        [f"elsewhere/img2@{img2['digest']}", "reg:5000/app"],
        False,
    )
    # a moved tag: n2's image took img1:1's name, then n3 republishes n1's image
    moved = dict(_image("reg:5000/img1:1", [l4]), digest=_digest("moved"))
    yield _case(
        "moved-tag",
        ["n1", "n2", "n3"],
        {"n1": [img1], "n2": [moved], "n3": [img1]},
        [],
        ["reg:5000/img1:1"],
        False,
    )
    # one layer twice in an image, and one digest with two sizes: the first seen counts
    twice = _image("reg:5000/twice:1", [l1, l1, l2])
    resized = _image("reg:5000/resized:1", [(l1[0], 7), l3])
    yield _case(
        "repeated-and-resized-layer",
        nodes,
        {"n1": [twice], "n2": [resized]},
        [],
        ["reg:5000/twice:1", "reg:5000/resized:1"],
        False,
    )
    # layers that weigh nothing: 0 everywhere
    empty = _image("reg:5000/empty:1", [(_digest("empty"), 0)])
    yield _case("zero-bytes", nodes, {"n1": [empty]}, [], ["reg:5000/empty:1"], True)
    # a malformed object (an index past the table): the node has no inventory on both sides
    broken = _case("malformed", nodes, seed, [], ["reg:5000/img1:1"], False)
    broken["inventories"][0]["images"][0]["layers"] = [99]
    yield broken
    # issue 30: an index repeated in an image (the hostile object listed 0 a thousand
    # times) is refused on both sides
    repeated = _case("repeated-index", nodes, seed, [], ["reg:5000/img1:1"], False)
    repeated["inventories"][0]["images"][0]["layers"] = [0, 1, 0]
    yield repeated
    # short names as kubelet normalises them: the runtime lists docker.io/library/...,
    # the pod says app:1 (and the other way round)
    hub = _image("docker.io/library/app:1", [l1, l2])
    short = _image("app:1", [l1, l2])
    short["digest"] = hub["digest"]
    yield _case(
        "short-names",
        nodes,
        {"n1": [hub], "n2": [short], "n3": [hub]},
        [],
        ["app:1", "docker.io/library/app:1", "index.docker.io/library/app:1"],
        False,
        quorum=DEFAULT_IMAGE_QUORUM,
    )
    # an image nobody published: left out; the rest scores
    yield _case("unknown-image", nodes, seed, [], ["reg:5000/img1:1", "nowhere:1"], False)
    # a size over the 1 TiB cap: the object is refused on both sides (the node then has
    # none), and the image it alone published is unknown
    over = _image("reg:5000/over:1", [(_digest("over"), (1 << 40) + 1), l2])
    yield _case(
        "size-over-1-TiB",
        nodes,
        {"n1": [over], "n2": [img2]},
        [],
        ["reg:5000/over:1", "reg:5000/img2:1"],
        False,
    )
    # 9,000 nodes, sizes at the 1 TiB cap past 2^53 once multiplied by 8,200 holders:
    # Python's int / int is the float nearest the exact quotient, not a float product
    # divided; the default quorum is reached by thousands
    huge = _image("reg:5000/huge:1", [(_digest("huge"), (1 << 40) - 12_345), l2])
    many = [f"m{i:04d}" for i in range(9000)]
    holdings = {node: [huge] for node in many[:8200]}
    holdings[many[8200]] = [img2]
    yield _case(
        "spread-9000-nodes",
        many,
        holdings,
        [],
        ["reg:5000/huge:1"],
        True,
        quorum=DEFAULT_IMAGE_QUORUM,
    )
    yield from _trust_shapes(img1, img2)


def _trust_shapes(img1: dict[str, Any], img2: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Issue 23's attack on the plugin: a node publishes a pod image's name and digest as
    one huge layer only it holds (last writer, so "last writer wins" would score it 100)."""
    lie = dict(img1, layers=[(_digest("lie"), 1 << 40)])
    nodes = ["h1", "h2", "liar", "liar2"]
    pod = ["reg:5000/img1:1"]
    for quorum, holdings, case_id in (
        # K=2, one honest holder: neither answer has 2 nodes -> unknown, all 0
        (2, {"h1": [img1], "liar": [lie]}, "liar-one-holder-k2"),
        # K=2, two honest holders agree: they score 100, the liar 0
        (2, {"h1": [img1], "h2": [img1, img2], "liar": [lie]}, "liar-two-holders-k2"),
        # colluders: two answers at the quorum -> unknown, all 0
        (2, {"h1": [img1], "h2": [img1], "liar": [lie], "liar2": [lie]}, "colluders-k2"),
        # K=1 alone: one node's word (the old behaviour); with a liar: two answers -> 0
        (1, {"h1": [img1], "h2": [img2]}, "single-publisher-k1"),
        (1, {"h1": [img1], "liar": [lie]}, "liar-k1"),
        # K=3: two honest holders are not enough
        (3, {"h1": [img1], "h2": [img1], "liar": [lie]}, "two-holders-k3"),
        # issue 30, agreement: five holders outvote two liars (a majority and a quorum)
        (
            2,
            {**{f"h{i}": [img1] for i in range(1, 6)}, "liar": [lie], "liar2": [lie]},
            "five-vs-two-k2",
        ),
        # ... and two liars are a majority of three publishers: the bound the docs state
        (2, {"h1": [img1], "liar": [lie], "liar2": [lie]}, "two-liars-of-three-k2"),
    ):
        listed = [*nodes, *(n for n in holdings if n not in nodes)]
        yield _case(case_id, listed, holdings, [], pod, False, quorum=quorum)
    # issue 44: a digest-pinned pod image (the liars claim its digest) resolves from the
    # nodes only with no dissenting publisher; otherwise it is unknown on both sides
    pinned = [f"reg:5000/img1@{img1['digest']}"]
    for quorum, holdings, case_id in (
        (2, {"h1": [img1], "liar": [lie], "liar2": [lie]}, "pinned-two-liars-of-three-k2"),
        (
            2,
            {**{f"h{i}": [img1] for i in range(1, 6)}, "liar": [lie], "liar2": [lie]},
            "pinned-five-vs-two-k2",
        ),
        (2, {"h1": [img1], "h2": [img1]}, "pinned-unanimous-k2"),
        (2, {"liar": [lie], "liar2": [lie]}, "pinned-unanimous-liars-k2"),
        (1, {"h1": [img1], "liar": [lie]}, "pinned-liar-k1"),
    ):
        listed = [*nodes, *(n for n in holdings if n not in nodes)]
        yield _case(case_id, listed, holdings, [], pinned, False, quorum=quorum)


_SIZES = (
    (0.05, 0, 0),
    (0.45, 1, 4096),
    (0.35, 1 << 20, 500 << 20),
    (0.13, 500 << 20, 1 << 38),
    (0.02, 1 << 38, 1 << 40),  # up to the 1 TiB cap, inclusive
)


def _size(rng: random.Random) -> int:
    pick = rng.random()
    for weight, low, high in _SIZES:
        if pick < weight:
            return rng.randint(low, high)
        pick -= weight
    return rng.randint(1, 4096)


def _random_case(rng: random.Random, number: int) -> dict[str, Any]:
    layers = [(_digest(f"c{number} l{i}"), _size(rng)) for i in range(rng.randint(3, 40))]
    images = []
    for i in range(rng.randint(1, 12)):
        own = rng.sample(layers, rng.randint(1, min(8, len(layers))))
        if rng.random() < 0.05:  # a layer twice in one image
            own.append(own[0])
        form = rng.random()
        if form < 0.1:
            names = [f"app{i}"]  # what kubelet would list as app{i}:latest... or not
        elif form < 0.15:  # as the runtime lists a Docker Hub image the pod names short
            names = [f"docker.io/library/app{i}:{rng.randint(1, 3)}"]
        elif form < 0.3:
            names = [
                f"reg.local:5000/app{i}:latest",
                f"reg.local:5000/app{i}@{_digest(f'{number}/{i}')}",
            ]
        else:
            names = [f"reg.local:5000/app{i}:{rng.randint(1, 3)}"]
        images.append({"names": names, "digest": _digest(f"{number}/{i}"), "layers": own})
    if rng.random() < 0.05 and len(images) > 1:  # a tag moved to another image
        images[1]["names"] = list(images[0]["names"])
    nodes = [f"n{i}" for i in range(rng.randint(1, 12))]
    holdings = {
        node: rng.sample(images, rng.randint(0, len(images)))
        for node in nodes
        if rng.random() < 0.85
    }
    if rng.random() < 0.3:  # liars: one, or colluders, claim an image is one huge layer
        victim = rng.choice(images)
        digest = victim["digest"] if rng.random() < 0.5 else _digest(f"lie {number}")
        lie = dict(victim, digest=digest, layers=[(_digest(f"lie {number}"), _size(rng))])
        for liar in range(rng.choice((1, 1, 2))):
            nodes.append(f"liar{liar}")
            holdings[f"liar{liar}"] = [
                lie,
                *rng.sample(images, rng.randint(0, min(2, len(images)))),
            ]

    def reference(image: dict[str, Any]) -> str:
        pick = rng.random()
        name = str(image["names"][0])
        if pick < 0.1:
            return f"{name}@{image['digest']}"
        if pick < 0.2:
            return f"elsewhere.example/any@{image['digest']}"
        if pick < 0.3 and name.endswith(":latest"):
            return name.removesuffix(":latest")
        if pick < 0.4 and name.startswith("docker.io/library/"):
            return name.removeprefix("docker.io/library/")
        return name

    init = [reference(rng.choice(images)) for _ in range(rng.choice((0, 0, 1, 2)))]
    containers = [reference(rng.choice(images)) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.1:
        containers.append("nowhere.example/unknown:1")
    quorum = rng.choice((1, 2, 2, 3))
    case = _case(f"random-{number}", nodes, holdings, init, containers, rng.random() < 0.5, quorum)
    if rng.random() < 0.02 and case["inventories"]:
        case["inventories"][0]["layers"].append({"digest": "sha256:short", "sizeBytes": 1})
    return case


# ------------------------------------------------------------------ in-flight parity
#: The Go test reading the in-flight cases, and the variable naming its input.
IN_FLIGHT_PARITY_TEST = "TestInFlightParityWithThePythonCore"
IN_FLIGHT_PARITY_ENV = "LAYERSCHED_IN_FLIGHT_PARITY_CASES"
#: Random in-flight cases, on top of the shapes.
IN_FLIGHT_RANDOM_CASES = 1_500
_IN_FLIGHT_LINE = re.compile(
    r"in-flight parity: (?P<cases>\d+) cases, (?P<nodes>\d+) nodes, costs bit for bit"
)
_NOW_S = 1_800_000_000.25
_MB = 1_000_000


def test_go_and_the_python_core_agree_on_every_in_flight_cost(tree: Path, tmp_path: Path) -> None:
    # the in-flight rule (docs/in-flight.md): costs compared bit for bit, scores equal
    cases = [
        *_in_flight_shapes(),
        *(_in_flight_random(random.Random(SEED * 7 + i), i) for i in range(IN_FLIGHT_RANDOM_CASES)),
    ]
    for case in cases:
        case["costs"], case["scores"] = _in_flight_python(case)
    path = tmp_path / "in-flight-parity.json"
    path.write_text(json.dumps({"cases": cases}))
    done = _go_test_on(tree, IN_FLIGHT_PARITY_TEST, "pkg/layers", IN_FLIGHT_PARITY_ENV, path)
    match = _IN_FLIGHT_LINE.search(done.stdout)
    assert match, done.stdout
    assert int(match["cases"]) == len(cases) >= MIN_CASES
    assert int(match["nodes"]) == sum(len(c["nodes"]) for c in cases)
    # not degenerate: pending pulls change the ranking in many cases, both modes ran
    moved = sum(c["scores"] != c["idle_scores"] for c in cases)
    assert moved > len(cases) // 4, moved
    assert {c["mode"] for c in cases} == {"serial", "parallel"}
    print(
        f"in-flight parity: {match['cases']} cases, {match['nodes']} nodes compared, "
        f"differing 0 (costs bit for bit); {moved} cases ranked otherwise than without "
        "their pending pulls"
    )


def _in_flight_python(case: dict[str, Any]) -> tuple[dict[str, float], dict[str, int]]:
    """The core's costs and scores of ``case`` (and, in ``idle_scores``, its scores with
    no pending pull, to show the pulls mattered)."""

    def layers(entries: Sequence[dict[str, Any]]) -> tuple[Layer, ...]:
        return tuple(Layer(e["digest"], e["size"]) for e in entries)

    nodes = [
        NodeInfo(
            node["name"],
            annotation_layers=layers(node["held"]),
            labels=node["labels"],
            annotations=node["annotations"],
        )
        for node in case["nodes"]
    ]
    inventory = build_layer_index(nodes)
    candidates = np.arange(len(nodes), dtype=np.int64)
    args = InFlightArgs(
        pull_mode=case["mode"],
        default_bandwidth_bits_per_s=case["default_bandwidth_bits_per_s"],
        overhead_s=case["overhead_s"],
        new_bytes_weight=case["new_bytes_weight"],
        max_pending_age_s=case["max_pending_age_s"],
    )
    pod = layers(case["pod"])
    idle = InFlight(args, clock=lambda: case["now"])
    case["idle_scores"] = idle.score(PodImages.of(), pod, inventory, candidates).as_dict(inventory)
    strategy = InFlight(args, clock=lambda: case["now"])
    for node in case["nodes"]:
        for pending in node["pending"]:
            pull = PendingPull(pending["key"], pending["bound_at"], layers(pending["layers"]))
            assert strategy.pending.put(node["name"], pull)
    costs = strategy.costs_s(pod, inventory, candidates)[0]
    scores = strategy.score(PodImages.of(), pod, inventory, candidates).as_dict(inventory)
    return {n.name: float(c) for n, c in zip(nodes, costs, strict=True)}, scores


def _layer_entry(label: str, size: int) -> dict[str, Any]:
    return {"digest": _digest(label), "size": size}


def _in_flight_case(
    case_id: str,
    nodes: Sequence[dict[str, Any]],
    pod: Sequence[dict[str, Any]],
    mode: str = "serial",
    **options: float,
) -> dict[str, Any]:
    return {
        "id": case_id,
        "mode": mode,
        "overhead_s": options.get("overhead_s", 1.0),
        "new_bytes_weight": options.get("new_bytes_weight", 0.25),
        "default_bandwidth_bits_per_s": options.get("default_bandwidth_bits_per_s", 1e8),
        "max_pending_age_s": options.get("max_pending_age_s", 600.0),
        "now": options.get("now", _NOW_S),
        "nodes": list(nodes),
        "pod": list(pod),
    }


def _in_flight_node(
    name: str,
    held: Sequence[dict[str, Any]] = (),
    pending: Sequence[dict[str, Any]] = (),
    label: str | None = "80000000",
    annotation: str | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "held": list(held),
        "labels": {} if label is None else {"layersched.io/bandwidth-bits-per-s": label},
        "annotations": {}
        if annotation is None
        else {"layersched.io/bandwidth-bits-per-s": annotation},
        "pending": list(pending),
    }


def _pending(
    key: str, ago_s: float, layers: Sequence[dict[str, Any]], now_s: float = _NOW_S
) -> dict[str, Any]:
    return {"key": key, "bound_at": now_s - ago_s, "layers": list(layers)}


def _in_flight_shapes() -> Iterator[dict[str, Any]]:
    """The worked table's cases and the edges: ties by key, a bind after now, the age
    bound exactly, the caps, a held pod at zero overhead, an empty pod, odd labels."""
    l1, l2 = _layer_entry("F1", 40 * _MB), _layer_entry("F2", 40 * _MB)
    other, small = _layer_entry("FY", 80 * _MB), _layer_entry("SMALL", 8 * _MB)
    image = [l1, l2]
    for mode in ("serial", "parallel"):
        yield _in_flight_case(
            f"worked-{mode}",
            [
                _in_flight_node("idle"),
                _in_flight_node("half", pending=[_pending("u1", 4.0, image)]),
                _in_flight_node("fresh", pending=[_pending("u2", 0.0, image)]),
                _in_flight_node("other", pending=[_pending("u3", 0.0, [other])]),
                _in_flight_node("holds", held=[l1]),
                _in_flight_node("slow", label="20000000", pending=[_pending("u4", 0.0, image)]),
            ],
            image,
            mode,
        )
        yield _in_flight_case(
            f"small-pod-{mode}",
            [
                _in_flight_node("busy", pending=[_pending("u1", 0.0, [other])]),
                _in_flight_node("idle"),
            ],
            [small],
            mode,
        )
    yield _in_flight_case(
        "ties-by-key-and-future-bind",
        [
            _in_flight_node("n1", pending=[_pending("b", 1.0, [l1]), _pending("a", 1.0, image)]),
            _in_flight_node("n2", pending=[_pending("c", -30.0, image)]),
            _in_flight_node("n3"),
        ],
        image,
    )
    yield _in_flight_case(
        "age-bound-exactly",
        [
            _in_flight_node("at", pending=[_pending("a", 600.0, image)]),
            _in_flight_node("past", pending=[_pending("b", 600.5, image)]),
        ],
        image,
    )
    many = [_pending(f"p{i:03}", i * 0.1, [_layer_entry(f"M{i}", _MB)]) for i in range(90)]
    wide = [_layer_entry(f"W{i}", _MB) for i in range(170)]
    yield _in_flight_case(
        "caps",
        [
            _in_flight_node("many", pending=many),
            _in_flight_node("wide", pending=[_pending("w", 3.0, wide)]),
        ],
        image,
        "parallel",
    )
    yield _in_flight_case(
        "zero-overhead-held",
        [_in_flight_node("has", held=image), _in_flight_node("not")],
        image,
        overhead_s=0.0,
    )
    yield _in_flight_case("empty-pod", [_in_flight_node("a"), _in_flight_node("b")], [])
    yield _in_flight_case(
        "odd-labels",
        [
            _in_flight_node("underscores", label="40_000_000"),
            _in_flight_node("spaces", label=None, annotation=" 2e7 "),
            _in_flight_node("bad-label", label="fast", annotation="5e7"),
            _in_flight_node("negative", label="-1"),
            _in_flight_node("hex", label="0x10"),
            _in_flight_node("inf", label="inf", pending=[_pending("x", 1.0, image)]),
        ],
        image,
        default_bandwidth_bits_per_s=3.3e7,
    )


def _in_flight_random(rng: random.Random, number: int) -> dict[str, Any]:
    pool = [
        _layer_entry(f"r{number} l{i}", rng.choice((rng.randint(1, 60 * _MB), rng.randint(0, 3))))
        for i in range(rng.randint(2, 14))
    ]
    if rng.random() < 0.05:  # one huge layer (the readers' cap is 1 TiB)
        pool.append(_layer_entry(f"r{number} huge", rng.randint(2**38, 2**40)))

    def some(most: int) -> list[dict[str, Any]]:
        return rng.sample(pool, rng.randint(0, min(most, len(pool))))

    labels = ("80000000", "20000000", "40000000", "1e8", "3.3e7", "1_000_000", "bad", None)
    keys = iter(range(10**6))
    now_s = rng.choice((_NOW_S, rng.uniform(0, 2e9)))
    nodes = []
    for i in range(rng.randint(1, 8)):
        pending = [
            _pending(
                f"k{next(keys):04}",
                rng.choice(
                    (0.0, rng.uniform(0, 40), rng.uniform(-5, 700), float(rng.randint(0, 30)))
                ),
                some(5),
                now_s,
            )
            for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5)))
        ]
        nodes.append(
            _in_flight_node(
                f"n{i}",
                held=some(4),
                pending=pending,
                label=rng.choice(labels),
                annotation=rng.choice((None, None, "2.5e7", "-3")),
            )
        )
    return _in_flight_case(
        f"random-{number}",
        nodes,
        some(5),
        rng.choice(("serial", "parallel")),
        overhead_s=rng.choice((1.0, 0.0, rng.uniform(0, 3))),
        new_bytes_weight=rng.choice((0.25, 0.0, 1.0, rng.uniform(0, 2))),
        default_bandwidth_bits_per_s=rng.choice((1e8, rng.uniform(1e6, 1e9))),
        max_pending_age_s=rng.choice((600.0, rng.uniform(1, 60))),
        now=now_s,
    )


# -------------------------------------------------------------- pending pods parity
PENDING_PODS_TEST = "TestPendingPodsParityWithThePythonCore"
PENDING_PODS_ENV = "LAYERSCHED_PENDING_PODS_CASES"
PENDING_PODS_CASES = 2_000
_PENDING_LINE = re.compile(r"pending pods parity: (?P<pods>\d+) pods, all equal")


def test_go_and_the_python_core_agree_on_which_pods_are_pulling(tree: Path, tmp_path: Path) -> None:
    # which of a node's pods are pulls in flight, and since when: the extender reads
    # watched pods (core.boundpod.pending_images), the plugin its NodeInfos' v1.Pods
    rng = random.Random(SEED * 11)
    cases = []
    for number in range(PENDING_PODS_CASES):
        document = _random_pod(rng, number)
        pod = decode_bound_pod(document, f"pod {number}")
        cases.append(
            {"pod": document, "images": list(pending_images(pod)), "bound_at": bound_at_s(pod)}
        )
    pulling = sum(bool(c["images"]) for c in cases)
    assert PENDING_PODS_CASES // 5 < pulling < PENDING_PODS_CASES  # both kinds, often
    path = tmp_path / "pending-pods.json"
    path.write_text(json.dumps({"cases": cases}))
    done = _go_test_on(tree, PENDING_PODS_TEST, "pkg/layerlocality", PENDING_PODS_ENV, path)
    match = _PENDING_LINE.search(done.stdout)
    assert match and int(match["pods"]) == len(cases), done.stdout
    print(f"pending pods parity: {len(cases)} pods ({pulling} pulling), all equal")


def _random_pod(rng: random.Random, number: int) -> dict[str, Any]:
    images = [f"reg/i{i}:1" for i in range(5)]
    reasons = ("ContainerCreating", "PodInitializing", "ErrImagePull", "ImagePullBackOff", "")
    containers = [{"name": f"c{i}", "image": rng.choice(images)} for i in range(rng.randint(1, 3))]
    init = [{"name": f"i{i}", "image": rng.choice(images)} for i in range(rng.choice((0, 0, 1)))]
    statuses: list[dict[str, Any]] = []
    init_statuses: list[dict[str, Any]] = []
    for container, into in [(c, statuses) for c in containers] + [(c, init_statuses) for c in init]:
        pick = rng.random()
        if pick < 0.3:
            continue  # not reported yet
        state: dict[str, Any]
        if pick < 0.55:
            state = {"waiting": {"reason": rng.choice(reasons)}}
        elif pick < 0.75:
            state = {"running": {"startedAt": "2027-01-15T08:00:05Z"}}
        else:
            state = {"terminated": {"exitCode": 0, "finishedAt": "2027-01-15T08:00:06Z"}}
        image_id = f"reg/i@sha256:{number:064x}" if rng.random() < 0.4 else ""
        into.append({"name": container["name"], "imageID": image_id, "state": state})
    status: dict[str, Any] = {
        "phase": rng.choice(("Pending", "Pending", "Pending", "Running", "Succeeded", "")),
        "containerStatuses": statuses,
        "initContainerStatuses": init_statuses,
    }
    if rng.random() < 0.7:
        status["conditions"] = [
            {
                "type": rng.choice(("PodScheduled", "PodScheduled", "Ready")),
                "status": rng.choice(("True", "True", "False")),
                "lastTransitionTime": f"2027-01-15T08:00:{rng.randint(0, 59):02d}Z",
            }
        ]
    volumes = [{"name": "v", "image": {"reference": "reg/vol:1"}}] if rng.random() < 0.3 else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{number}", "namespace": "ns", "uid": f"uid-{number}"},
        "spec": {
            "nodeName": rng.choice(("n1", "n1", "n1", "")),
            "initContainers": init,
            "containers": containers,
            "volumes": volumes,
        },
        "status": status,
    }
