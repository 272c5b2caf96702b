"""The e2e's testbed fixture (tests/fixtures/testbed.py): brought up once per session for
the modules that share it, refreshed only when this session did not bring it up, and
taken down whatever happens."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures import testbed as fixture


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    made: list[str] = []

    def up(settings: Any) -> Any:
        made.append("up")
        (settings.state_dir / "state.json").write_text("{}")
        return SimpleNamespace(ok=True, log_path=None)

    def down(state_dir: Path, prefix: str) -> None:
        made.append("down")
        (state_dir / "state.json").unlink()

    monkeypatch.setattr(fixture, "up", up)
    monkeypatch.setattr(fixture, "down", down)
    monkeypatch.setattr(fixture, "state_path", lambda d: d / "state.json")
    monkeypatch.setattr(fixture, "load_state", lambda d: f"state of {d.name}")
    monkeypatch.setattr(fixture, "_SHARED", {})
    return made


def _settings(tmp_path: Path) -> Any:
    return SimpleNamespace(state_dir=tmp_path, prefix="lsev")


def test_a_shared_testbed_comes_up_once_per_session(calls: list[str], tmp_path: Path) -> None:
    with fixture.testbed_up(_settings(tmp_path), refresh=False, shared=True):
        pass
    assert calls == ["up"]  # left up for the next module
    # the next module asks for a refresh: this session brought it up, so it is current
    with fixture.testbed_up(_settings(tmp_path)) as state:
        assert state == f"state of {tmp_path.name}"
    assert calls == ["up"]
    fixture.down_shared()
    assert calls == ["up", "down"]


def test_a_testbed_up_before_the_session_is_refreshed_and_left_up(
    calls: list[str], tmp_path: Path
) -> None:
    (tmp_path / "state.json").write_text("{}")  # a developer's, from an older checkout
    with fixture.testbed_up(_settings(tmp_path)):
        pass
    assert calls == ["up"]  # brought up to date, and not taken down: it is not ours


def test_an_unshared_testbed_goes_down_even_when_the_body_fails(
    calls: list[str], tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError), fixture.testbed_up(_settings(tmp_path)):
        raise RuntimeError("a test failed")
    assert calls == ["up", "down"]
