"""Terminal tables that fit: compact byte units, and names shortened in the middle.

Every table command renders within the terminal's width (80 columns is the floor the tests
hold them to): sizes print in binary units with three significant figures (``40.0 MiB``,
exact bytes in ``--format json``), and a name too long for its column keeps its start and
its end (``edge-wor…-node-17``: the distinguishing part of a node or image name is as
often at the end as at the start).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

#: What one step of the binary units is.
_KIB = 1024
#: From 100 up a unit's value shows no decimal (three figures either way).
_THREE_DIGITS = 100
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
#: A terminal narrower than this is treated as this wide (tables need some room).
MIN_WIDTH = 40
ELLIPSIS = "…"


def size(size_bytes: int | float) -> str:
    """``size_bytes`` in binary units, three significant figures: ``40.0 MiB``, ``512 B``."""
    value = float(size_bytes)
    for unit in _UNITS:
        if abs(value) < _KIB or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if abs(value) >= 100 else f"{value:.1f} {unit}"
        value /= _KIB
    raise AssertionError("unreachable")


def middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters by cutting its middle."""
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:width]
    keep = width - len(ELLIPSIS)
    head = (keep + 1) // 2
    return f"{text[:head]}{ELLIPSIS}{text[len(text) - (keep - head) :]}"


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` wins), at least :data:`MIN_WIDTH`."""
    return max(MIN_WIDTH, shutil.get_terminal_size().columns)


def console(width: int | None = None) -> Console:
    """A console of the terminal's width (no soft wrapping of long lines)."""
    return Console(width=width or terminal_width(), soft_wrap=False)


def fit_column(
    names: Sequence[str], width: int, others: Sequence[Sequence[str]], title: str
) -> int:
    """The width left for a table's first column of ``names`` next to columns whose cells
    are ``others`` (each column's header first), in a table ``width`` wide with rich's
    default box (a border and 3 characters between columns)."""
    fixed = sum(max(len(cell) for cell in column) for column in others)
    borders = 3 * (len(others) + 1) + 1
    wanted = max([len(title), *(len(name) for name in names)])
    return max(min(wanted, width - fixed - borders), len(ELLIPSIS) + 2)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> Table:
    """A table whose first column is shortened in the middle to fit ``width``; the other
    columns are right-aligned and never wrap."""
    columns = [[header, *(row[i] for row in rows)] for i, header in enumerate(headers)][1:]
    first = fit_column([row[0] for row in rows], width, columns, headers[0])
    out = Table(title=title, title_justify="left")
    out.add_column(headers[0], no_wrap=True, max_width=first)
    for header in headers[1:]:
        out.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        out.add_row(middle(row[0], first), *row[1:])
    return out
