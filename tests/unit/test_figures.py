"""Every measured figure in README.md and docs/*.md is a generated block, held equal to its
results file here (harness/bench/figures.py lists them all and rewrites them)."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "bench"))

import figures  # noqa: E402

from layersched import generated  # noqa: E402
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
    # a changed measurement changes the text, whatever the committed one says: the README
    # once said 17.6 ms and 8x by hand while the file said otherwise
    results = copy.deepcopy(_extender())
    for p50_ms, speedup in ((17.6, 8.0), (3.25, 2.5)):
        results["naive_python_node_names_5000"] |= {  # type: ignore[operator]
            "p50_ms": p50_ms,
            "extender_speedup_p50": speedup,
        }
        [naive] = [
            line
            for line in figures.extender_cost_markdown(results).splitlines()
            if "naive pure-Python loop" in line
        ]
        assert f"p50 {figures._ms(p50_ms)}" in naive
        assert f"{speedup:g}× the extender's whole request" in naive


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
    # 9.5 ms across the link minus 2 ms on loopback: 7.5 ms per pod (the committed file's
    # own p50s give its own difference; neither is pinned here)
    hop = copy.deepcopy(json.loads((ROOT / figures.HOP_RESULTS).read_text()))
    hop["node_names"]["across_nodes"]["p50_ms"] = 9.5
    hop["node_names"]["sidecar_loopback"]["p50_ms"] = 2.0
    assert "adds 7.5 ms per pod at p50 (against 2 ms in the pod)" in (
        figures.extender_hop_markdown(hop)
    )


@pytest.mark.parametrize(
    ("full_p50_ms", "said"),
    [(1830.2, "1.83 s at p50, past kube-scheduler's"), (917.3, "0.92 s at p50, 92% of")],
    ids=["past-the-timeout", "within-the-timeout"],
)
def test_the_full_nodes_hop_is_held_against_the_timeout(full_p50_ms: float, said: str) -> None:
    # kube-scheduler's httpTimeout is 1 s: "past" only when the p50 is over it
    hop = copy.deepcopy(json.loads((ROOT / figures.HOP_RESULTS).read_text()))
    hop["full_nodes"]["across_nodes"]["p50_ms"] = full_p50_ms
    assert said in figures.extender_hop_markdown(hop)


def test_the_regeneration_writes_every_block(tmp_path: Path) -> None:
    # a copy of the documents with emptied blocks comes back equal to the committed ones
    for block in figures.BLOCKS:
        for rel in (block.document, block.results, *block.also):
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


def test_make_figures_names_a_results_file_that_records_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a file without provenance is named; a file measured at HEAD is not
    head = figures.provenance._git("rev-parse", "HEAD", root=ROOT)
    (tmp_path / "old.json").write_text(json.dumps({"x": 1}))
    (tmp_path / "new.json").write_text(json.dumps({"provenance": {"commit": head}}))
    blocks = (
        figures.Block("a.md", "a", "old.json", lambda r: ""),
        figures.Block("b.md", "b", "new.json", lambda r: ""),
    )
    monkeypatch.setattr(figures, "BLOCKS", blocks)
    monkeypatch.setattr(figures.provenance, "ROOT", ROOT)
    notes = figures.provenance_notes(tmp_path)
    assert notes == ["old.json: records no commit"]


def test_make_figures_reads_a_commit_kept_at_the_top_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # harness/results/live-minors.json keeps its commit beside its figures, not under
    # "provenance": make figures once said it "records no commit"
    head = figures.provenance._git("rev-parse", "HEAD", root=ROOT)
    (tmp_path / "minors.json").write_text(json.dumps({"commit": head, "minors": {}}))
    monkeypatch.setattr(figures, "BLOCKS", (figures.Block("a.md", "a", "minors.json", str),))
    monkeypatch.setattr(figures.provenance, "ROOT", ROOT)
    assert figures.provenance_notes(tmp_path) == []


@pytest.mark.parametrize("block", figures.BLOCKS, ids=IDS)
def test_every_block_names_its_results_commit(block: figures.Block) -> None:
    # a reader sees which commit and day a figure is from, and so when it is older than
    # the code it describes; a file recording none is said to be unverified
    record = figures.provenance.record_of(figures.read_results(ROOT / block.results))
    text = generated.read_block(ROOT / block.document, block.name)
    commit = (record or {}).get("commit")
    if commit:
        assert f"`{commit[:12]}`" in text, f"{block.document}:{block.name} names no commit"
    else:
        assert "records no commit, date, machine or load" in text


def test_a_block_whose_renderer_names_no_commit_ends_with_the_files_provenance(
    tmp_path: Path,
) -> None:
    record = {"commit": "c" * 40, "date": "2026-11-28T20:00:00+00:00"}
    (tmp_path / "r.json").write_text(json.dumps({"provenance": record, "v": 7}))
    bare = figures.Block("a.md", "a", "r.json", lambda r: f"v = {r['v']}")
    said = figures.Block("a.md", "a", "r.json", lambda r: f"v = {r['v']} at `{'c' * 12}`")
    assert figures.render(bare, tmp_path) == "v = 7\n\n" + figures.provenance.describe(record)
    assert figures.render(said, tmp_path) == f"v = 7 at `{'c' * 12}`"


def _memory() -> dict[str, object]:
    return json.loads((ROOT / figures.MEMORY_RESULTS).read_text())


@pytest.mark.parametrize(
    ("ratio", "verdict"),
    [(0.974, "within the 10 % bound"), (1.43, "outside the 10 % bound")],
    ids=["back-within-10-percent", "residue-over-10-percent"],
)
def test_the_flood_block_judges_the_return_from_the_file(ratio: float, verdict: str) -> None:
    # 0.974 x the baseline is within 1 + 0.1; 1.43 x (pymalloc without a recycle) is not
    results = copy.deepcopy(_memory())
    results["after_deletion_vs_baseline"] = ratio
    text = figures.extender_memory_markdown(results)
    assert f"{ratio:g} × the baseline: {verdict}" in text


def test_the_flood_block_says_when_no_recycle_happened() -> None:
    # a run whose extender never re-executed has no neutral seconds to quote
    results = copy.deepcopy(_memory())
    results["phases"]["deleted"]["recycle_neutral_s"] = None  # type: ignore[index]
    text = figures.extender_memory_markdown(results)
    assert "did not recycle" in text and "neutral scores for" not in text


def test_the_hostile_table_counts_failed_lists_and_the_honest_nodes() -> None:
    # 1,000 nodes with 6 hostile inventories leave 994 honest ones; the old extender's 8
    # failed Node lists are said beside its "never"
    hostile = json.loads((ROOT / figures.HOSTILE_RESULTS).read_text())
    hostile["hostile_node"]["old"]["list_failures"]["nodes"] = 8.0
    hostile["hostile_node"]["old"]["ready_after_s"] = "never (>240 s)"
    hostile["hostile_inventories"]["new"]["nodes_with_layers"] = 990.0
    text = figures.extender_hostile_markdown(hostile)
    assert "never (>240 s); 8 failed lists" in text
    assert "| 990 of 994 |" in text


def test_the_request_size_is_scaled_from_the_benchmarks_request() -> None:
    # 4,000,000 bytes for 500 nodes: 8,000 per node, 40.0 MB for 5,000, and 64 MiB
    # (67,108,864 bytes) holds that 1.7 times over
    results = copy.deepcopy(_extender())
    results["workload"] |= {"full_request_bytes": 4_000_000, "full_nodes": 500}  # type: ignore[operator]
    text = figures.extender_request_size_markdown(results)
    assert "8,000 bytes per node, so about 40.0 MB for 5,000 nodes" in text
    assert "holds 1.7 times over" in text


def test_the_relay_block_gives_the_spread_over_nodes_and_methods() -> None:
    # two nodes at p50 41 and 45 µs, p99 150 and 720 µs (0.15-0.72 ms); one method added
    # 3,900 µs at p50 and another 5,300 µs (3.9-5.3 ms); a single value prints once
    relay = json.loads((ROOT / figures.RELAY_RESULTS).read_text())
    nodes = dict(list(relay["dump"].items())[:2])
    for (_, dump), p50, p99 in zip(nodes.items(), (41.0, 45.0), (150.0, 720.0), strict=True):
        dump["all"] |= {"p50_us": p50, "p99_us": p99}
        dump["by_method"]["PullImage"] = {"p50_us": 330.0}
    relay["dump"] = nodes
    added = {"Version": 3_900.0, "ListImages": 5_300.0}
    relay["paired"] = {
        m: relay["paired"][m] | {"added_p50_us": v, "added_p99_us": 10_000.0}
        for m, v in added.items()
    }
    text = figures.relay_latency_markdown(relay)
    assert "on 2 nodes: p50 41–45 µs, p99 0.15–0.72 ms per node" in text
    assert "(`PullImage` p50 0.33 ms:" in text
    assert "added p50 3.9–5.3 ms and p99 10 ms" in text


def test_the_overhead_that_gives_hotedges_ratios_is_worked_out_from_the_file() -> None:
    # pull waits a = 0.5 s, b = 0.04 s: (a + o) / (b + o) = 12.5x at o = 0; 2.3x at
    # o = (0.5 - 2.3 * 0.04) / 1.3 = 0.314 s; 1.4x at o = (0.5 - 1.4 * 0.04) / 0.4 = 1.11 s
    report = copy.deepcopy(json.loads((ROOT / figures.sim_report.DEFAULT_REPORT).read_text()))
    report["settings"]["hotedge20"]["mean_pull_s"] |= {
        "image-locality": 0.5,
        "layer-locality": 0.04,
    }
    text = figures.simulation_reading_markdown(report)
    assert "is 12.50× at o = 0, 2.3× at o ≈ 0.31 s, 1.4× at o ≈ 1.11 s" in text


def test_the_index_table_shows_the_runs_spread_and_the_refusals() -> None:
    # runs of 25.0 and 25.0 MiB print once, 49.4 and 50.5 as 49-50 (0 decimals for the
    # peak); 5,000 nodes less 4,919 holding after the flood: 81 refused, 100 - 81 = 19 held
    results = json.loads((ROOT / figures.INDEX_MEMORY_RESULTS).read_text())
    after = results["after"]
    after["honest"]["settled_mib"] |= {"min": 25.0, "max": 25.0}
    after["honest"]["peak_mib"] |= {"min": 49.4, "max": 50.5}
    after["flood"]["nodes"] = [4919, 4919]
    results["flooding_nodes"]["after"] = 100
    text = figures.index_memory_markdown(results)
    assert "| 25.0 / 49-50 |" in text
    assert "(19 held, 81 refused) |" in text
    # a run whose settled heap passes the budget says it missed
    results["pass"] = False
    assert "**missed**" in figures.index_memory_markdown(results)


#: Phrases only a measurement writes. Outside a generated block each is a figure that no
#: results file holds; a setting or a target is written otherwise ("p99 ≤ 5 ms", "default
#: 5 s", "lease 15 s"), and an upstream figure names no percentile, load or peak of ours.
MEASURED_PHRASES = {
    "a latency percentile": re.compile(r"\bp(50|90|95|99)\s+[\d.,–-]+\s*(ms|µs|us|s)\b"),
    "a load average": re.compile(r"\bload average (of )?[\d.]+"),
    "a peak memory": re.compile(r"\bpeak(ed)? (at )?[\d.,]+\s*(MiB|MB|GB|KiB)"),
    "a resident memory": re.compile(r"\bresident( memory)? [\d.,]+\s*(MiB|MB|GB)"),
    "a time taken": re.compile(
        r"\b(took|takes about|took about|in about) [\d.,]+\s*(s|ms|min|minutes|seconds)\b"
    ),
    "a median time": re.compile(r"\bmedian [\d.,]+\s*(ms|s|µs)\b"),
}
DOCUMENTS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(
            readme
            for root in ("src", "install", "harness")
            for readme in (ROOT / root).rglob("README.md")
        ),
    ]
)
_BEGIN = re.compile(r"<!-- (\S+):begin -->")


def _outside_blocks(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` not between a block's begin and end markers, numbered."""
    kept, block = [], None
    for number, line in enumerate(text.splitlines(), 1):
        begin = _BEGIN.fullmatch(line.strip())
        if block is None and begin:
            block = begin.group(1)
        elif block is not None and line.strip() == generated.markers(block)[1]:
            block = None
        elif block is None:
            kept.append((number, line))
    return kept


def _measured_phrases(text: str) -> list[str]:
    return [
        f"{number}: {what}: {line.strip()[:120]}"
        for number, line in _outside_blocks(text)
        for what, pattern in MEASURED_PHRASES.items()
        if pattern.search(line)
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_no_measured_figure_outside_a_generated_block(document: Path) -> None:
    # a measured figure is written by make figures from a results file, or not at all
    found = _measured_phrases(document.read_text(encoding="utf-8"))
    assert not found, (
        f"{document.relative_to(ROOT)}: measured figures outside a generated block: {found}; "
        f"render them from a results file ({figures.REGENERATE}) or say it in words"
    )


@pytest.mark.parametrize(
    ("line", "measured"),
    [
        ("p50 1.79 ms and p99 7.2 ms under glibc", True),
        ("added p50 0.9–1.3 ms in one run", True),
        ("on a 2-core machine at load average 19", True),
        ("284.4 MiB (peak 295.8 MiB, under the limit)", True),
        ("Install took 54 s (kubelet restarts)", True),
        ("after the write (median 0.274 s over 12 repairs)", True),
        ("| `NodeNames` | p99 ≤ 5 ms |", False),
        ("`--request-read-timeout-s` (default 5 s)", False),
        ("kube-scheduler's default timing (lease 15 s, renew deadline 10 s)", False),
        ("the p99 of each round", False),
    ],
    ids=[
        "latency",
        "latency-range",
        "load",
        "peak",
        "time-taken",
        "median",
        "target",
        "default",
        "upstream-setting",
        "no-figure",
    ],
)
def test_the_phrases_tell_a_measurement_from_a_setting(line: str, measured: bool) -> None:
    assert bool(_measured_phrases(line)) is measured


def test_a_measured_phrase_inside_a_block_is_allowed() -> None:
    # the same line is a finding outside the markers and nothing between them
    line = "p50 1.70 ms, p99 2.18 ms"
    inside = f"<!-- x:begin -->\n{line}\n<!-- x:end -->\n"
    assert _measured_phrases(inside) == []
    assert _measured_phrases(f"{inside}{line}\n") == [f"4: a latency percentile: {line}"]
