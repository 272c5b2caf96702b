"""`layersched scenario` records how long the whole `make testbed` took (bring-up
included), from the start time harness/scripts/testbed.sh exports; `make help` shows it."""

from __future__ import annotations

import pytest

from layersched.core.errors import InputError
from layersched_harness.testbed.cli.scenario import make_testbed_s


@pytest.mark.parametrize(
    ("started", "expected"),
    [
        # not run by harness/scripts/testbed.sh: the report records the scenario's time only
        (None, None),
        # make testbed started 9 min 30 s before the report was written
        ("999430", 570.0),
        ("999430.25", 569.8),  # date +%s.%N style, rounded to tenths
    ],
    ids=["unset", "seconds", "fraction"],
)
def test_make_testbed_s_counts_from_the_scripts_start(
    started: str | None, expected: float | None
) -> None:
    assert make_testbed_s(started, 1_000_000.0) == expected


@pytest.mark.parametrize(
    "started",
    [
        "yesterday",  # not a number
        "1000100",  # in the future: a clock or a typo
        "1",  # more than a day ago: left over from another shell
        "nan",
    ],
    ids=["word", "future", "stale", "nan"],
)
def test_make_testbed_s_refuses_an_implausible_start(started: str) -> None:
    with pytest.raises(InputError, match="LAYERSCHED_TESTBED_STARTED_S"):
        make_testbed_s(started, 1_000_000.0)
