"""``-o json|yaml|wide``: one output option, spelled as kubectl spells it, on every
command that prints objects or tables.

Without ``-o`` a command prints a table that fits the terminal (columns dropped rather
than numbers cut, :func:`layersched.cli._tables.table`); ``-o wide`` the same table with
every column; ``-o json`` and ``-o yaml`` the whole document, exact numbers. The old
``--format json`` and ``--json`` still work, with a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

JSON = "json"
YAML = "yaml"
WIDE = "wide"
OUTPUTS = (JSON, YAML, WIDE)


class _Deprecated(argparse.Action):
    """An old spelling of ``-o``: stores the same value and says what to use."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = self.const if self.const is not None else values
        output = None if value == "table" else str(value)
        print(
            f"warning: {option_string} is deprecated: use -o {output or 'wide'}"
            + ("" if output else " (or nothing, for a table that fits)"),
            file=sys.stderr,
        )
        setattr(namespace, self.dest, output)


def add_output_option(
    p: argparse.ArgumentParser, *, outputs: Sequence[str] = OUTPUTS, old: str | None = None
) -> None:
    """``-o/--output`` (``outputs``: what the command prints), and its old spelling
    ``old`` (``--format`` or ``--json``) as a hidden alias."""
    shown = ", ".join(outputs)
    p.add_argument(
        "-o",
        "--output",
        choices=outputs,
        default=None,
        help=f"{shown}: json and yaml print every field with exact numbers; wide prints "
        "the table with every column (default: a table that fits the terminal)",
    )
    if old == "--format":
        p.add_argument(
            "--format",
            dest="output",
            choices=("table", JSON),
            action=_Deprecated,
            help=argparse.SUPPRESS,
        )
    elif old == "--json":
        p.add_argument(
            "--json",
            dest="output",
            nargs=0,
            const=JSON,
            action=_Deprecated,
            help=argparse.SUPPRESS,
        )


def is_document(output: str | None) -> bool:
    """Whether ``-o`` asks for a document (json or yaml) rather than a table."""
    return output in (JSON, YAML)


def print_document(document: Any, output: str | None) -> None:
    """``document`` as ``-o`` asks: JSON (indented) or YAML (keys in their order)."""
    if output == YAML:
        print(yaml.safe_dump(document, sort_keys=False), end="")
    else:
        print(json.dumps(document, indent=2))
