"""``layersched score`` end to end in-process: files in, one JSON object or a table out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched.cli.main import main

MB = 1024 * 1024
L = {k: "sha256:" + k.encode().hex().ljust(64, "0") for k in ("L1", "L2", "L3", "L4")}
SIZES = {"L1": 30 * MB, "L2": 10 * MB, "L3": 4 * MB, "L4": 4 * MB}


def _layers(*labels: str) -> list[dict]:
    return [{"digest": L[x], "size": SIZES[x]} for x in labels]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    def node(name: str, images: list[tuple[str, int]]) -> dict:
        return {
            "metadata": {"name": name},
            "status": {"images": [{"names": [n], "sizeBytes": s} for n, s in images]},
        }

    nodes = {
        "kind": "NodeList",
        "items": [
            node("n1", [("reg:5000/img1:v1", 44 * MB)]),
            node("n2", [("reg:5000/img2:v1", 44 * MB)]),
            node("n3", []),
        ],
    }
    paths = {
        "nodes": tmp_path / "nodes.json",
        "pod": tmp_path / "pod.yaml",
        "layers": tmp_path / "layers.json",
    }
    paths["nodes"].write_text(json.dumps(nodes))
    paths["pod"].write_text(
        "kind: Pod\nmetadata: {name: p1}\n"
        "spec:\n  containers:\n  - {name: c, image: reg:5000/img1:v1}\n"
    )
    paths["layers"].write_text(
        json.dumps(
            {
                "reg:5000/img1:v1": _layers("L1", "L2", "L3"),
                "reg:5000/img2:v1": _layers("L1", "L2", "L4"),
            }
        )
    )
    return {k: str(v) for k, v in paths.items()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # n2 holds L1+L2 = 40M of 44M -> floor(100 * 40/44) = 90
        ("layer-locality", {"n1": 100, "n2": 90, "n3": 0}),
        # only n1 holds img1 by name: 44M * 1/3 = 14.7M < 23M threshold -> 0 everywhere
        ("image-locality", {"n1": 0, "n2": 0, "n3": 0}),
    ],
    ids=["layer-locality", "image-locality"],
)
def test_json_output_is_one_object(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], strategy: str, expected: dict
) -> None:
    code, out, _ = run(
        capsys, "score", "--nodes", files["nodes"], "--pod", files["pod"],
        "--strategy", strategy, "--layers", files["layers"], "--format", "json",
    )  # fmt: skip
    assert code == 0
    assert json.loads(out) == expected


def test_table_explains_present_and_total(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "score",
        "--nodes",
        files["nodes"],
        "--pod",
        files["pod"],
        "--layers",
        files["layers"],
    )
    assert code == 0
    row = next(line for line in out.splitlines() if "n2" in line)
    assert "41,943,040" in row and "46,137,344" in row and row.rstrip(" │|").endswith("90")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"nodes": "/nonexistent/nodes.json"}, "/nonexistent/nodes.json: cannot read it"),
        ({"pod": "BADJSON"}, "invalid JSON at line 1"),
        ({"layers": "EMPTY_LAYERS"}, "is not in the offline layer file"),
    ],
    ids=["missing-file", "bad-json", "unresolvable-pod-image"],
)
def test_errors_are_one_line(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    override: dict,
    message: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    args = dict(files)
    for key, value in override.items():
        args[key] = {"BADJSON": str(bad), "EMPTY_LAYERS": str(empty)}.get(value, value)
    code, out, err = run(
        capsys, "score", "--nodes", args["nodes"], "--pod", args["pod"], "--layers", args["layers"]
    )
    assert code != 0
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
