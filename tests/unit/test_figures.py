"""Every measured figure in README.md and docs/*.md is a generated block, held equal to its
results file here (bench/figures.py lists them all and rewrites them)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import figures  # noqa: E402

from layersched import _generated as generated  # noqa: E402
from layersched.core.errors import InputError  # noqa: E402

IDS = [f"{b.document}:{b.name}" for b in figures.BLOCKS]


@pytest.mark.parametrize("block", figures.BLOCKS, ids=IDS)
def test_every_block_is_its_results_file(block: figures.Block) -> None:
    # the text between the markers is exactly what the results file renders to today:
    # a hand edit, a rerun benchmark without regeneration, or a renderer change fails here
    assert generated.read_block(ROOT / block.document, block.name) == figures.render(block), (
        f"{block.document}'s {block.name} block differs from {block.results}: "
        f"run {figures.REGENERATE}"
    )


def _extender() -> dict[str, object]:
    return json.loads((ROOT / figures.EXTENDER_RESULTS).read_text())


def test_the_cost_table_follows_the_file() -> None:
    # a changed measurement changes the text: p50 17.6 ms for the naive loop and an 8x
    # speedup are what the README said by hand while the file said 16.3 ms and 9.6x
    results = copy.deepcopy(_extender())
    results["naive_python_node_names_5000"] |= {"p50_ms": 17.6, "extender_speedup_p50": 8.0}  # type: ignore[operator]
    text = figures.extender_cost_markdown(results)
    assert "p50 17.6 ms" in text and "8× the extender's whole request" in text
    assert "16.3 ms" not in figures.extender_cost_markdown(results)


@pytest.mark.parametrize(
    ("peak_mib", "flagged"),
    [(336.6, True), (299.0, False)],
    ids=["peak-over-300-flagged", "peak-under-300-not-flagged"],
)
def test_the_watch_peak_is_flagged_only_over_the_target(peak_mib: float, flagged: bool) -> None:
    # the committed run peaked at 336.6 MiB against a 300 MiB target: the table says so in
    # bold; a run under the target must not carry the warning
    results = copy.deepcopy(_extender())
    results["node_names_watch_5000"]["vm_hwm_mb"] = peak_mib  # type: ignore[index]
    assert ("over the memory target" in figures.extender_cost_markdown(results)) is flagged
    assert ("over the 300 MiB target" in figures.extender_watch_markdown(results)) is flagged


def test_the_hop_is_the_difference_of_the_two_p50s() -> None:
    # 6.9 ms across the link minus 1.6 ms on loopback: 5.3 ms per pod, not a rounded "5 ms"
    hop = json.loads((ROOT / figures.HOP_RESULTS).read_text())
    assert "adds 5.3 ms per pod at p50 (against 1.6 ms in the pod)" in (
        figures.extender_hop_markdown(hop)
    )


def test_the_regeneration_writes_every_block(tmp_path: Path) -> None:
    # a copy of the documents with emptied blocks comes back equal to the committed ones
    for block in figures.BLOCKS:
        for rel in (block.document, block.results):
            target = tmp_path / rel
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text((ROOT / rel).read_text())
        generated.write_block(tmp_path / block.document, block.name, "stale")
    assert figures.main(tmp_path) == 0
    for block in figures.BLOCKS:
        assert (tmp_path / block.document).read_text() == (ROOT / block.document).read_text()


def test_a_missing_results_file_names_the_file(tmp_path: Path) -> None:
    # no traceback: the error names the file and what writes it
    with pytest.raises(InputError, match=r"extender\.json.*run the benchmark"):
        figures.render(next(b for b in figures.BLOCKS if b.name == "extender-cost"), tmp_path)
