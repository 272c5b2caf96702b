"""The commands other distributions add to ``layersched`` (the entry-point group
``layersched.commands``): the harness's distribution declares the testbed's and the
simulator's there, the product's CLI registers whatever the group holds and nothing else,
and an entry that cannot load is a one-line error. (That the production wheel's CLI has
none of them and the checkout's venv all of them: tests/integration/test_pip_install.py.)"""

from __future__ import annotations

import argparse
import tomllib
from importlib.metadata import EntryPoint, EntryPoints
from pathlib import Path

import pytest

from layersched.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "harness" / "pyproject.toml"
#: The harness's commands, as its distribution declares them.
HARNESS_COMMANDS = ("testbed", "scenario", "simulate")


def _declared() -> dict[str, str]:
    project = tomllib.loads(HARNESS.read_text(encoding="utf-8"))["project"]
    entries: dict[str, str] = project["entry-points"][cli.COMMAND_GROUP]
    return entries


def _group(entries: dict[str, str]) -> EntryPoints:
    return EntryPoints(
        EntryPoint(name, value, cli.COMMAND_GROUP) for name, value in entries.items()
    )


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def _installed(monkeypatch: pytest.MonkeyPatch, entries: dict[str, str]) -> None:
    def only(*, group: str) -> EntryPoints:
        return _group(entries) if group == cli.COMMAND_GROUP else EntryPoints(())

    monkeypatch.setattr(cli, "entry_points", only)


def test_the_harness_declares_its_commands() -> None:
    assert tuple(_declared()) == HARNESS_COMMANDS
    # each entry is the register function of the module that adds that very command
    for entry in _group(_declared()):
        parser = argparse.ArgumentParser()
        entry.load()(parser.add_subparsers())
        assert _commands(parser) == [entry.name]


def test_the_products_cli_adds_what_the_group_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, {})
    product = _commands(cli.build_parser())
    assert product == list(cli.COMMANDS)  # the wheel's: nothing of the harness
    _installed(monkeypatch, _declared())
    # after the product's, by name (whichever distribution declares them)
    assert _commands(cli.build_parser()) == [*cli.COMMANDS, *sorted(HARNESS_COMMANDS)]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        # the harness's metadata installed without its modules (a wheel beside it)
        ("layersched.no_such_harness.cli:register", "No module named 'layersched.no_such_harness'"),
        # an entry naming something that registers nothing
        ("layersched.cli.main:COMMAND_GROUP", "is not a register function"),
    ],
    ids=["module-missing", "not-callable"],
)
def test_an_entry_that_cannot_register_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    _installed(monkeypatch, {"broken": value})
    assert cli.main(["--version"]) == cli.EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.startswith("layersched: error: command 'broken'") and says in err
    assert "Traceback" not in err and err.count("\n") == 1
