"""Entry point: ``layersched <command> …``.

Each subcommand lives in its own module exposing ``register(subparsers)``;
the parser calls the chosen module's handler, which returns an exit code.
:class:`LayerschedError` becomes a one-line message, never a traceback.

The product's commands live here. Other installed distributions add theirs through the
entry-point group :data:`COMMAND_GROUP`, each entry a ``register(subparsers)``: the
harness's distribution (``harness/pyproject.toml``: the testbed's ``testbed`` and
``scenario``, the simulator's ``simulate``) does, in a checkout's venv; the production
wheel and image carry neither the harness nor its entries, so they list none of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from layersched import __version__
from layersched.cli import (
    admission,
    agent,
    deploy,
    estimate,
    explain,
    extender,
    inventory,
    layers,
    relay,
    score,
)
from layersched.cli._logging import add_log_options, configure_logging
from layersched.core.errors import InputError, LayerschedError

#: The product's command modules, in help order.
COMMAND_MODULES: tuple[ModuleType, ...] = (
    score,
    layers,
    estimate,
    explain,
    extender,
    agent,
    relay,
    admission,
    inventory,
    deploy,
)
#: Their commands' names.
COMMANDS: tuple[str, ...] = tuple(m.__name__.rpartition(".")[2] for m in COMMAND_MODULES)
#: The entry-point group through which an installed distribution adds commands: each
#: entry names a ``register(subparsers)`` (the harness's: harness/pyproject.toml).
COMMAND_GROUP = "layersched.commands"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: 128 + SIGPIPE, as a shell reports a program its pipe's reader closed on.
EXIT_BROKEN_PIPE = 141


#: The console script kubectl runs as ``kubectl layersched`` (the wheel installs both).
KUBECTL_PLUGIN = "kubectl-layersched"


def program_name() -> str:
    """``kubectl layersched`` when kubectl ran us as its plugin, else ``layersched``."""
    return "kubectl layersched" if Path(sys.argv[0]).name == KUBECTL_PLUGIN else "layersched"


def build_parser() -> argparse.ArgumentParser:
    """The full parser, every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog=program_name(), description="Container-layer-aware scheduling for Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"layersched {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    add_log_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    for register in added_commands():
        register(sub)
    return parser


Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def added_commands() -> list[Register]:
    """The ``register`` functions installed distributions add under :data:`COMMAND_GROUP`,
    by command name (none in the production wheel and image)."""
    found = []
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        dist = entry.dist.name if entry.dist is not None else "an installed distribution"
        try:
            register = entry.load()
        except ImportError as err:
            raise LayerschedError(
                f"command {entry.name!r} of {dist} ({entry.value}): {err}; reinstall it "
                "(in a checkout: make venv), or uninstall it to use the product's commands"
            ) from err
        if not callable(register):
            raise LayerschedError(
                f"command {entry.name!r} of {dist}: {entry.value} is not a register function"
            )
        found.append(register)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`layersched --help | head -1`): what it did not read is
        # nobody's, so say nothing; point stdout at /dev/null so the interpreter's own
        # flush at exit does not raise a second time.
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
    except LayerschedError as err:
        print(f"layersched: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    args = parser.parse_args(argv)
    configure_logging(args.verbose, args.log_level, args.log_format)
    try:
        code: int = args.handler(args)
    except InputError as err:
        print(f"layersched: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except LayerschedError as err:
        print(f"layersched: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("layersched: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture): nothing to mend
        pass
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
