"""A prerequisite .ci/run provides fails the test under CI, and only skips elsewhere."""

from __future__ import annotations

import pytest

from tests.fixtures import prereq


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [
        ("true", pytest.fail.Exception),
        ("1", pytest.fail.Exception),
        ("", pytest.skip.Exception),
        (None, pytest.skip.Exception),
    ],
    ids=["ci-true", "ci-1", "ci-empty", "no-ci"],
)
def test_missing_fails_under_ci_and_skips_elsewhere(
    ci: str | None, outcome: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    if ci is None:
        monkeypatch.delenv(prereq.CI_ENV, raising=False)
    else:
        monkeypatch.setenv(prereq.CI_ENV, ci)
    with pytest.raises(outcome, match="containerd not found"):
        prereq.missing("containerd not found on PATH")
    prereq.require(None)  # present: nothing happens


def test_what_no_machine_of_ours_has_always_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prereq.CI_ENV, "true")
    with pytest.raises(pytest.skip.Exception, match="kind not found"):
        prereq.unavailable("kind not found on PATH")
