"""Entry point: ``layersched <command> …``.

Each subcommand lives in its own module exposing ``register(subparsers)``;
the parser calls the chosen module's handler, which returns an exit code.
:class:`LayerschedError` becomes a one-line message, never a traceback.

The product's commands live here. The harness's (the testbed's ``testbed`` and
``scenario``, the simulator's ``simulate``) live in the harness packages, which the
production wheel and image do not carry: they are listed when installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from layersched import __version__
from layersched.cli._logging import add_log_options, configure_logging
from layersched.core.errors import InputError, LayerschedError

#: Subcommand modules under ``layersched.cli``, in help order.
COMMANDS: tuple[str, ...] = (
    "score",
    "layers",
    "estimate",
    "explain",
    "extender",
    "agent",
    "relay",
    "admission",
    "inventory",
    "deploy",
)
#: The harness's command modules, in help order, registered when the harness is installed.
HARNESS_COMMANDS: tuple[str, ...] = (
    "layersched.testbed.cli.testbed",
    "layersched.testbed.cli.scenario",
    "layersched.sim.cli",
)
#: The harness packages (absent from the production wheel).
HARNESS_PACKAGES = ("layersched.testbed", "layersched.sim")

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
    for name in COMMANDS:
        importlib.import_module(f"layersched.cli.{name}").register(sub)
    for module in harness_commands():
        module.register(sub)
    return parser


def harness_commands() -> list[ModuleType]:
    """The harness's command modules that are installed (none in the production image)."""
    found = []
    for name in HARNESS_COMMANDS:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as err:
            if err.name not in HARNESS_PACKAGES:
                raise  # a real missing import inside the harness: a bug, not an absence
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
    args = build_parser().parse_args(argv)
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
