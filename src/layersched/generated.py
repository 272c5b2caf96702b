"""Generated blocks in Markdown files: the text between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` is written by a command from a report, and tests hold it to that
report. Shared by the simulator's and the scenario's results (README, docs)."""

from __future__ import annotations

from pathlib import Path

from layersched.core.errors import InputError


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of block ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _block_span(text: str, path: Path, name: str) -> tuple[int, int]:
    """Offsets of what lies between the markers (exclusive), one pair exactly."""
    begin, end_marker = markers(name)
    begins, ends = text.count(begin), text.count(end_marker)
    start, end = text.find(begin), text.find(end_marker)
    if begins != 1 or ends != 1 or end < start:
        raise InputError(
            f"{path}: expected one '{begin}' line followed by one '{end_marker}' line, "
            f"found {begins} and {ends}: add the pair where the {name} results belong"
        )
    return start + len(begin), end


def read_block(path: Path, name: str) -> str:
    """The text between the markers of ``path``, without the surrounding newlines."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"reading {path}: {err.strerror}: check the path") from err
    start, end = _block_span(text, path, name)
    return text[start:end].strip("\n")


def write_block(path: Path, name: str, snippet: str) -> None:
    """Replace the text between the markers of ``path`` with ``snippet``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"reading {path} to put the results in: {err.strerror}") from err
    start, end = _block_span(text, path, name)
    updated = f"{text[:start]}\n{snippet}\n{text[end:]}"
    if updated == text:
        return
    try:
        path.write_text(updated, encoding="utf-8")
    except OSError as err:
        raise InputError(f"writing the results into {path}: {err.strerror}") from err
