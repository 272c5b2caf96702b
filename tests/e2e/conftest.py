"""Where the e2e scenario reports go, and their tables printed at the end of the run.

The e2e never writes the committed ``harness/results/scenario.json``/``.png`` (``make testbed``
does): each run writes under pytest's temp dir, or under ``$LAYERSCHED_E2E_REPORT_DIR``
when that is set (``harness/infra/kind/kind.sh up`` can point it at ``harness/results/``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from layersched_harness.testbed.report import print_table
from tests.fixtures.testbed import down_shared

#: Overrides the temp dir the e2e writes its scenario.json and scenario.png to.
REPORT_DIR_ENV = "LAYERSCHED_E2E_REPORT_DIR"
#: Width of the printed tables (pytest's terminal writer is not a rich console).
TABLE_WIDTH = 120
_REPORTS = pytest.StashKey[list[tuple[Path, Mapping[str, Any]]]]()


@pytest.fixture(scope="session")
def scenario_report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the scenario's report and plot go to (see the module docstring)."""
    configured = os.environ.get(REPORT_DIR_ENV)
    if configured:
        path = Path(configured).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("scenario")


@pytest.fixture(scope="session")
def record_scenario_report(pytestconfig: pytest.Config) -> Any:
    """``record(path, report)``: print this report's table in the terminal summary."""

    def record(path: Path, report: Mapping[str, Any]) -> None:
        pytestconfig.stash.setdefault(_REPORTS, []).append((path, report))

    return record


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The table of every scenario run, whether its assertions passed or not."""
    for path, report in config.stash.get(_REPORTS, []):
        buffer = io.StringIO()
        print_table(report, Console(file=buffer, width=TABLE_WIDTH, force_terminal=False))
        terminalreporter.write_sep("=", f"seed scenario ({report['driver']}): {path}")
        terminalreporter.write(buffer.getvalue())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Take down the testbed the deploy modules shared (tests/fixtures/testbed.py)."""
    down_shared()
