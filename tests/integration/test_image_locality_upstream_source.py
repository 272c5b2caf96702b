"""The 1.20 ImageLocality table we run is upstream's: checked against the Go source.

``tests/unit/upstream/image_locality_v1.20.yaml`` holds upstream's
``TestImageLocalityPriority`` as our own data. This test reads the same test file in the
Kubernetes build's source tree (Debian's source package, unpacked by ``make kubernetes``)
and extracts its facts with a few regular expressions: the node statuses (names, sizes),
the pod specs (images), and per case its name, pod, nodes and expected scores. They must
equal the data file's, so a transcription slip (or an edited expectation) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.builds import BUILD_COMMAND, kubernetes_build
from tests.fixtures import prereq

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "unit" / "upstream" / "image_locality_v1.20.yaml"
GO_TEST = "pkg/scheduler/framework/plugins/imagelocality/image_locality_test.go"
#: upstream's framework.MaxNodeScore
MAX_NODE_SCORE = 100

#: ``name := v1.NodeStatus{...}`` spanning lines, or the empty ``v1.NodeStatus{}``
_NODE_STATUS = re.compile(r"(\w+) := v1\.NodeStatus\{(?:\}|(.*?)\n\t\}\n)", re.S)
_IMAGE = re.compile(r"Names: \[\]string\{(.*?)\},\s*SizeBytes: int64\((\d+) \* mb\)", re.S)
_POD_SPEC = re.compile(r"(\w+) := v1\.PodSpec\{(.*?)\n\t\}\n", re.S)
_CASE = re.compile(
    r"pod:\s+&v1\.Pod\{Spec: (\w+)\},\s*"
    r"nodes:\s+\[\]\*v1\.Node\{(.*?)\},\s*"
    r"expectedList:\s+\[\]framework\.NodeScore\{(.*?)\},\s*"
    r'name:\s+"(.*?)",',
    re.S,
)
_MAKE_NODE = re.compile(r'makeImageNode\("(\w+)", (\w+)\)')
_SCORE = re.compile(r'\{Name: "(\w+)", Score: ([\w.]+)\}')
_QUOTED = re.compile(r'"([^"]*)"')


def _source_file() -> Path:
    build = kubernetes_build()
    source = build.source_tree() / GO_TEST
    if not source.is_file():
        prereq.missing(
            f"the Kubernetes {build.version} source tree is not in {build.source_tree()}: "
            f"run `{BUILD_COMMAND}`"
        )
    return source


def _score(text: str) -> int:
    return MAX_NODE_SCORE if text == "framework.MaxNodeScore" else int(text)


def upstream_facts(go: str) -> dict[str, Any]:
    """The table's facts as the data file spells them."""
    statuses = {
        name: [
            {"names": _QUOTED.findall(names), "size_mib": int(size)}
            for names, size in _IMAGE.findall(body)
        ]
        for name, body in _NODE_STATUS.findall(go)
    }
    pods = {name: {"containers": _QUOTED.findall(body)} for name, body in _POD_SPEC.findall(go)}
    cases = [
        {
            "name": name,
            "pod": pod,
            "nodes": dict(_MAKE_NODE.findall(nodes)),
            "expected": {node: _score(score) for node, score in _SCORE.findall(expected)},
        }
        for pod, nodes, expected, name in _CASE.findall(go)
    ]
    return {"node_statuses": statuses, "pods": pods, "cases": cases}


def test_the_1_20_table_is_upstreams() -> None:
    go = _source_file().read_text(encoding="utf-8")
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    facts = upstream_facts(go)
    assert data["source"]["version"] == kubernetes_build().version
    # the parse found the whole table (6 cases), not a fragment of it
    assert len(facts["cases"]) == len(data["cases"]) == 6
    assert facts["node_statuses"] == data["node_statuses"]
    assert facts["pods"] == data["pods"]
    assert facts["cases"] == data["cases"]
