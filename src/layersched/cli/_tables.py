"""Terminal tables that fit: compact byte units, names shortened in the middle, and
columns dropped rather than numbers cut.

Every table command renders within the terminal's width (80 columns is the floor the tests
hold them to): sizes print in binary units with three significant figures (``40.0 MiB``,
exact bytes in ``-o json``), and a name too long for its column keeps its start and
its end (``edge-wor…-node-17``: the distinguishing part of a node or image name is as
often at the end as at the start). A number is never shortened: when the names are as
short as they go and the table is still too wide, whole columns are left out (the
command's least telling first, named under the table), and ``-o wide`` shows them all.
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
            if abs(value) >= _THREE_DIGITS:  # 100 to 1023: no decimal ("1000 KiB", not 1e+03)
                return f"{value:.0f} {unit}"
            return f"{value:.1f} {unit}"
        value /= _KIB
    raise AssertionError("unreachable")


#: Seconds in a minute and an hour (durations print in the largest unit that fits).
_MINUTE_S = 60.0
_HOUR_S = 3600.0


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit up to hours, one decimal: ``17.8 s``, ``2.5 min``."""
    for unit, scale in (("h", _HOUR_S), ("min", _MINUTE_S)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds:.1f} s"


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


#: ``-o wide``: a console this wide never crops a table at its full width.
WIDE_CONSOLE = 1000


def console(width: int | None = None, *, wide: bool = False) -> Console:
    """A console of the terminal's width (no soft wrapping of long lines); ``wide``:
    one that never crops (``-o wide``)."""
    return Console(width=WIDE_CONSOLE if wide else width or terminal_width(), soft_wrap=False)


def table_width(out: Console, output: str | None) -> int | None:
    """The width a table fits: the console's, or None (every column whole) for ``-o wide``."""
    return None if output == "wide" else out.width


def fit_columns(columns: Sequence[Sequence[str]], width: int, shrink: Sequence[int]) -> list[int]:
    """Each column's width (its header and cells given per column) in a table ``width`` wide
    with rich's default box (a border and 3 characters between columns): the columns
    ``shrink`` give up room, the widest first, until the table fits."""
    widths = [max(len(cell) for cell in column) for column in columns]
    room = width - (3 * (len(columns) - 1) + 4)
    floor = len(ELLIPSIS) + 3
    while sum(widths) > room:
        candidates = [i for i in shrink if widths[i] > floor]
        if not candidates:
            break  # as narrow as it goes: rich folds what is left
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _room(widths: Sequence[int], width: int) -> int:
    return width - (3 * (len(widths) - 1) + 4)


def table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None,
    *,
    shrink: Sequence[int] = (0,),
    left: Sequence[int] = (0,),
    drop: Sequence[int] = (),
) -> Table:
    """A table that fits ``width`` (None: ``-o wide``, every column at its full width):
    the columns ``shrink`` (the first by default) are shortened in the middle, the widest
    first; if that is not enough, the columns ``drop`` are left out in that order (their
    headers named in the caption). No column wraps, and no other column is cut. Columns
    ``left`` are left-aligned, the rest right."""
    columns = [[header, *(row[i] for row in rows)] for i, header in enumerate(headers)]
    keep = list(range(len(headers)))
    if width is None:
        widths = [max(len(cell) for cell in column) for column in columns]
    else:
        for column in (None, *drop):
            if column is not None:
                keep.remove(column)
            widths = fit_columns(
                [columns[i] for i in keep], width, [keep.index(i) for i in shrink if i in keep]
            )
            if sum(widths) <= _room(widths, width):
                break
    dropped = [headers[i] for i in range(len(headers)) if i not in keep]
    caption = f"(narrow terminal: {', '.join(dropped)} left out; -o wide shows all)"
    out = Table(
        title=title,
        title_justify="left",
        caption=caption if dropped else None,
        caption_justify="left",
    )
    for position, i in enumerate(keep):
        cut = i in shrink and width is not None
        out.add_column(
            middle(headers[i], widths[position]) if cut else headers[i],
            justify="left" if i in left else "right",
            no_wrap=True,
            max_width=widths[position],
            # a number (any column not shortened on purpose) keeps every character
            min_width=min(widths[position], len(headers[i])) if cut else widths[position],
        )
    for row in rows:
        out.add_row(
            *(
                middle(row[i], widths[position]) if i in shrink and width is not None else row[i]
                for position, i in enumerate(keep)
            )
        )
    return out
