"""Terminal tables fit 80 columns: compact sizes, names shortened in the middle."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from layersched.cli._tables import middle, size, table


@pytest.mark.parametrize(
    ("size_bytes", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (40 * 1024 * 1024, "40.0 MiB"),  # the scenario's shared base
        (46_137_344, "44.0 MiB"),  # Img1 (MiB, never MB, for the same pull)
        (231 * 1024 * 1024, "231 MiB"),  # three figures: no decimal past 100
        (3 * 1024**4, "3.0 TiB"),
    ],
    ids=["zero", "bytes", "kib", "mib", "img1", "hundreds", "tib"],
)
def test_sizes_are_compact_binary_units(size_bytes: int, shown: str) -> None:
    assert size(size_bytes) == shown


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [
        ("n1", 10, "n1"),
        ("ip-10-0-113-42.eu-west-3.compute.internal", 16, "ip-10-0-…nternal"),
        ("abcdef", 4, "ab…f"),
    ],
    ids=["fits", "node-name", "tiny"],
)
def test_names_keep_their_start_and_end(text: str, width: int, shown: str) -> None:
    assert middle(text, width) == shown
    assert len(middle(text, width)) <= width


def _render(width: int, rows: list[tuple[str, ...]], shrink: tuple[int, ...]) -> list[str]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False)
    headers = ("component", "version", "pid", "detail")
    console.print(table("title", headers, rows, width, shrink=shrink, left=(0, 3)))
    return buffer.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 60], ids=["80", "100", "60"])
def test_wide_rows_fit_without_wrapping(width: int) -> None:
    rows = [
        (f"layersched extender (layer-locality) {i}", "v1.20.2", "31009", "x" * 90)
        for i in range(5)
    ]
    lines = _render(width, rows, shrink=(0, 3))
    assert max(len(line) for line in lines) <= width
    body = [line for line in lines if "31009" in line]
    assert len(body) == len(rows)  # no row wrapped onto a second line
    assert all(line.count("…") == 2 for line in body)  # both long cells cut in the middle
