"""The options every user command shares, spelled as kubectl spells them, and docs/cli.md's
table of them, held to each command's ``--help``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layersched.cli.main import main
from tests.unit.test_extender_flags_doc import doc_table_flags

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: An option line of argparse's help: two spaces, the flags and their metavariables, then
#: two spaces or a line break before the help text.
HELP_OPTION = re.compile(r"^  (-\S.*?)(?:  |$)", re.M)
FLAG = re.compile(r"(?<![\w-])--?[a-z][a-z0-9-]*")
CLUSTER = {"--kubeconfig", "--context"}
NAMESPACE = {"-n", "--namespace"}
OUTPUT = {"-o", "--output"}


def _help(capsys: pytest.CaptureFixture[str], *command: str) -> tuple[set[str], str]:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    flags: set[str] = set()
    for names in HELP_OPTION.findall(text):
        flags |= set(FLAG.findall(names))
    return flags, text


@pytest.mark.parametrize(
    ("command", "shared"),
    [
        (("estimate",), CLUSTER | NAMESPACE | OUTPUT),
        (("explain", "pod"), CLUSTER | NAMESPACE | OUTPUT),
        (("inventory", "show"), CLUSTER | NAMESPACE | OUTPUT),
        (("deploy", "render"), CLUSTER | NAMESPACE),
        (("score",), OUTPUT),
        (("inventory", "manifests"), OUTPUT),
        (("deploy", "images"), OUTPUT),
        (("deploy", "overlay"), OUTPUT),
        (("deploy", "agent-guard"), OUTPUT),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_every_command_takes_the_shared_options(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], shared: set[str]
) -> None:
    flags, text = _help(capsys, *command)
    assert shared <= flags, f"{' '.join(command)} --help lacks {sorted(shared - flags)}"
    # the old spellings are aliases, never shown
    assert "--format" not in flags and "--json" not in flags, text


def test_the_docs_table_is_the_shared_options(capsys: pytest.CaptureFixture[str]) -> None:
    documented = doc_table_flags(DOC.read_text(encoding="utf-8"))
    assert documented == CLUSTER | NAMESPACE | OUTPUT
    # and what the table says of each matches the commands: -o's choices are -o's
    _, text = _help(capsys, "estimate")
    assert "-o {json,yaml,wide}, --output {json,yaml,wide}" in text
