"""Upstream's own ImageLocality unit-test tables, run through our port.

The tables are data in ``tests/unit/upstream/image_locality_v*.yaml``: upstream's
``TestImageLocalityPriority`` inputs (node statuses, pod specs) and expected scores,
written out in our own format with the source path and version they come from. Every
case runs for the table's own minor and every later minor the port knows: nothing in
these pods changed meaning later (no image volumes), so a later minor scoring one
differently would be a regression. Each failure message works the arithmetic out.

``tests/integration/test_image_locality_upstream_source.py`` holds the 1.20 table equal
to the Go file in the Kubernetes build's source tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.core.indexbuilder import build_layer_index
from layersched.core.layerindex import LayerIndex
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.pod import PodImages
from layersched.core.reference import normalized_image_name
from layersched.core.strategies.args import ImageLocalityArgs
from layersched.core.strategies.image_locality import (
    MAX_CONTAINER_THRESHOLD_BYTES,
    MIN_THRESHOLD_BYTES,
    NEWEST_KUBERNETES_MINOR,
    ImageLocality,
    KubernetesMinor,
    format_kubernetes_minor,
    parse_kubernetes_minor,
)

MIB = 1024 * 1024
TABLE_DIR = Path(__file__).parent / "upstream"
TABLE_GLOB = "image_locality_v*.yaml"
#: What every table must say about where its facts come from.
SOURCE_FIELDS = ("repository", "path", "test", "version", "read_from")


@dataclass(frozen=True)
class Case:
    """One row of upstream's table."""

    name: str
    pod: PodImages
    nodes: tuple[NodeInfo, ...]
    expected: dict[str, int]


@dataclass(frozen=True)
class Table:
    """One upstream table: where it comes from, its minor, its cases."""

    path: Path
    source: dict[str, str]
    minor: KubernetesMinor
    cases: tuple[Case, ...]
    normalized_names: tuple[dict[str, str], ...]

    @property
    def label(self) -> str:
        return str(self.source["version"])


def _pod(name: str, spec: dict[str, Any]) -> PodImages:
    return PodImages(
        name=name,
        init_containers=tuple(spec.get("init_containers", ())),
        containers=tuple(spec["containers"]),
        image_volumes=tuple(spec.get("image_volumes", ())),
    )


def _node(name: str, images: list[dict[str, Any]]) -> NodeInfo:
    return NodeInfo(
        name, tuple(NodeImage(tuple(i["names"]), int(i["size_mib"]) * MIB) for i in images)
    )


def load_table(path: Path) -> Table:
    """A table file as :class:`Table` (KeyError/TypeError on a malformed file)."""
    record = yaml.safe_load(path.read_text(encoding="utf-8"))
    statuses = record["node_statuses"]
    pods = {name: _pod(name, spec) for name, spec in record["pods"].items()}
    cases = tuple(
        Case(
            name=row["name"],
            pod=pods[row["pod"]],
            nodes=tuple(_node(node, statuses[status]) for node, status in row["nodes"].items()),
            expected={str(k): int(v) for k, v in row["expected"].items()},
        )
        for row in record["cases"]
    )
    return Table(
        path=path,
        source=record["source"],
        minor=parse_kubernetes_minor(str(record["minor"])),
        cases=cases,
        normalized_names=tuple(record.get("normalized_names", ())),
    )


TABLES = tuple(load_table(path) for path in sorted(TABLE_DIR.glob(TABLE_GLOB)))


def _minors_from(minor: KubernetesMinor) -> list[KubernetesMinor]:
    return [(1, m) for m in range(minor[1], NEWEST_KUBERNETES_MINOR[1] + 1)]


def _case_params() -> list[Any]:
    return [
        pytest.param(case, minor, id=f"{table.label}/{format_kubernetes_minor(minor)}/{case.name}")
        for table in TABLES
        for minor in _minors_from(table.minor)
        for case in table.cases
    ]


def worked(case: Case, port: ImageLocality, index: LayerIndex) -> str:
    """The arithmetic behind each node's score, as upstream's comments spell it out."""
    total = index.node_count
    threshold = MAX_CONTAINER_THRESHOLD_BYTES * max(port.threshold_count(case.pod), 1)
    lines = [f"{case.name} (Kubernetes {format_kubernetes_minor(port.kubernetes_minor)}):"]
    for node in case.nodes:
        held = {name for image in node.images for name in image.names}
        terms = []
        for image in port.images(case.pod):
            name = normalized_image_name(image)
            state = index.image_state(name)
            if name in held and state is not None:
                terms.append(f"{state[0] // MIB}M * {state[1]}/{total}")
        lines.append(
            f"  {node.name}: 100 * (clamp({' + '.join(terms) or '0'}) - "
            f"{MIN_THRESHOLD_BYTES // MIB}M) / ({threshold // MIB}M - "
            f"{MIN_THRESHOLD_BYTES // MIB}M) = {case.expected[node.name]}?"
        )
    return "\n".join(lines)


@pytest.mark.parametrize(("case", "minor"), _case_params())
def test_upstream_table(case: Case, minor: KubernetesMinor) -> None:
    port = ImageLocality(ImageLocalityArgs(minor))
    inventory = build_layer_index(case.nodes)
    candidates = inventory.indices_of([node.name for node in case.nodes])[0]
    got = port.score(case.pod, (), inventory, candidates).as_dict(inventory)
    assert got == case.expected, worked(case, port, inventory)


@pytest.mark.parametrize(
    ("table", "row"),
    [
        pytest.param(table, row, id=f"{table.label}/{row['name']}")
        for table in TABLES
        for row in table.normalized_names
    ],
)
def test_upstream_normalized_image_names(table: Table, row: dict[str, str]) -> None:
    assert normalized_image_name(row["input"]) == row["output"]


@pytest.mark.parametrize("table", TABLES, ids=[t.label for t in TABLES])
def test_each_table_names_its_source(table: Table) -> None:
    # the facts carry over, with where they were read; an emptied table would pass silently
    assert all(table.source.get(key) for key in SOURCE_FIELDS), table.path
    assert table.source["path"].endswith("imagelocality/image_locality_test.go")
    assert table.cases and table.normalized_names


def test_the_tables_are_the_oldest_and_newest_we_have() -> None:
    # 1.20 (the testbed's minor) and the newest table this project could read (1.30-era)
    assert [table.minor for table in TABLES] == [(1, 20), (1, 30)]
    assert [len(table.cases) for table in TABLES] == [6, 7]


def test_the_init_container_case_needs_its_minor() -> None:
    # the 1.30 table's init-container case scores as upstream says only from 1.30: in
    # 1.29 gcr.io/300 (an init container) counts for nothing, so node1 falls from 6 to 0
    # (gcr.io/30 is on node2 only: 30M * 1/2 = 15M < 23M -> 0 there in either minor)
    (table,) = (t for t in TABLES if t.minor == (1, 30))
    case = next(c for c in table.cases if c.pod.init_containers)
    inventory = build_layer_index(case.nodes)
    candidates = inventory.indices_of([node.name for node in case.nodes])[0]
    port = ImageLocality(ImageLocalityArgs((1, 29)))
    before = port.score(case.pod, (), inventory, candidates).as_dict(inventory)
    assert before == {"node1": 0, "node2": 0} != case.expected
