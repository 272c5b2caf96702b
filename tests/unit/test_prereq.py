"""A prerequisite .ci/run provides fails the test under CI, and only skips elsewhere."""

from __future__ import annotations

from pathlib import Path

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


def test_a_missing_module_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prereq.CI_ENV, "true")
    assert prereq.module("json", "stdlib").dumps([]) == "[]"
    with pytest.raises(pytest.fail.Exception, match=r"plots need it \(no_such_mod_46"):
        prereq.module("no_such_mod_46", "plots need it")


def test_no_test_skips_on_a_missing_module_under_ci() -> None:
    # pytest.importorskip skips in CI too, around the rule above: prereq.module instead
    tests = Path(__file__).resolve().parents[1]
    calls = sorted(
        str(path.relative_to(tests))
        for path in tests.rglob("*.py")
        if "importorskip(" in path.read_text(encoding="utf-8") and path.name != Path(__file__).name
    )
    assert calls == [], f"use prereq.module(name, reason) instead of importorskip in {calls}"
