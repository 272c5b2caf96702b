"""docs/extender.md's flag table lists exactly the flags `layersched extender --help` shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layersched.cli.main import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "extender.md"
#: An option line of argparse's help: two spaces, then the flag (and its aliases).
HELP_OPTION = re.compile(r"^  (-[\w-]+(?:, -[\w-]+)*)", re.M)
FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
#: Documented in the table though they are the top-level parser's (`layersched -v extender`).
TOP_LEVEL = {"-v", "-vv"}


def _help_flags(capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit) as done:
        main(["extender", "--help"])
    assert done.value.code == 0
    flags = set()
    for names in HELP_OPTION.findall(capsys.readouterr().out):
        flags |= set(FLAG.findall(names))
    return flags - {"--help"}


def doc_table_flags(text: str) -> set[str]:
    """Every flag named in the first column of the table headed ``| flag | meaning |``."""
    lines = text.split("\n| flag | meaning |\n", 1)[1].splitlines()
    flags: set[str] = set()
    for line in lines[1:]:  # after the |---| row
        if not line.startswith("|"):
            break
        first = line.split("|")[1]
        flags |= set(re.findall(r"`(-[\w-]+)", first)) | set(FLAG.findall(first))
    return flags


def test_the_flag_table_is_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    # a flag added to the parser without a row (as --watch, --kubeconfig and
    # --agent-grace-s once were), or a row for a flag that is gone, fails here
    shown = _help_flags(capsys)
    documented = doc_table_flags(DOC.read_text(encoding="utf-8")) - TOP_LEVEL
    assert {"--watch", "--kubeconfig", "--agent-grace-s"} <= shown
    assert sorted(shown - documented) == [], "flags in --help without a row in docs/extender.md"
    assert sorted(documented - shown) == [], "rows in docs/extender.md for flags --help lacks"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        # two flags in one cell, with their metavariables, both counted
        ("| `--a-b N`, `--c` | x |\n", {"--a-b", "--c"}),
        # the table ends at the first line that is not a row
        ("| `--a` | x |\n\n| `--later` | y |\n", {"--a"}),
    ],
    ids=["two-flags-one-cell", "stops-after-the-table"],
)
def test_the_table_parser(table: str, expected: set[str]) -> None:
    text = "intro\n| flag | meaning |\n|---|---|\n" + table
    assert doc_table_flags(text) == expected
