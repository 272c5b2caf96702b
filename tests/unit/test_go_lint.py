"""make go-lint covers every Go module of the repository (scripts/go_lint.py): a module
added later is vetted and race-tested without anyone listing it, and one with nothing of
its own to check says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import go_lint  # noqa: E402


def test_every_tracked_module_is_checked_or_says_why_not() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "*go.mod"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = {m.name: m for m in go_lint.modules()}
    assert sorted(found) == sorted(str(Path(t).parent) for t in tracked)
    for module in found.values():
        assert module.packages or module.why_none, module.name
    assert found["plugin/kube-scheduler"].packages == ("./...",)
    assert found["plugin/imagelocality-reference"].packages == ("./...",)
    # a minor's module has no Go file of its own: it checks the plugin's packages against
    # its release
    minors = [m for name, m in found.items() if name.startswith("plugin/kube-scheduler/minors/")]
    assert minors and all(m.packages == (go_lint.MAIN_PACKAGES,) for m in minors)
    # CRI-O's module only builds the release's binary
    assert found["plugin/crio"].packages == () and "tool" in found["plugin/crio"].why_none


def test_a_nested_modules_files_are_not_its_parents(tmp_path: Path) -> None:
    # plugin/kube-scheduler/minors/1.35 is its own module, not plugin/kube-scheduler's
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "go.mod").write_text("module b\n")
    (tmp_path / "a" / "b" / "x.go").write_text("package b\n")
    (tmp_path / "a" / "y.go").write_text("package a\n")
    assert go_lint._in_nested_module(tmp_path / "a" / "b" / "x.go", tmp_path / "a")
    assert not go_lint._in_nested_module(tmp_path / "a" / "y.go", tmp_path / "a")


def test_testmain_alone_is_no_test() -> None:
    # plugin/kube-scheduler/perf holds TestMain and a benchmark: nothing to race-test
    assert not go_lint._TEST_FUNC.search("func TestMain(m *testing.M) {\n")
    assert go_lint._TEST_FUNC.search("func TestScores(t *testing.T) {\n")
    assert not go_lint._TEST_FUNC.search("func BenchmarkPerfScheduling(b *testing.B) {\n")


def test_the_plugins_packages_keep_tests_for_go_lint_to_race() -> None:
    # make go-lint is where the plugin's Go tests run (the integration tests no longer run
    # them a second time): each of these packages must keep a test for it to run
    module = ROOT / "plugin" / "kube-scheduler"
    for package in ("pkg/layers", "pkg/inventorywatch", "pkg/layerlocality", "pkg/resolver"):
        tests = sorted((module / package).glob("*_test.go"))
        assert any(go_lint._TEST_FUNC.search(f.read_text("utf-8")) for f in tests), package
    # the index's race test: Score readers against the watch's writer
    layers = "".join(f.read_text("utf-8") for f in (module / "pkg" / "layers").glob("*_test.go"))
    assert "func TestScoresAreReadWhileEventsArrive(" in layers


def test_race_tested_packages_are_vetted_against_the_race_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # one compile of a release per module: vet -race type-checks the race-tested packages
    # against the race build their tests then reuse; the others (the control plane's
    # mains) are vetted as make kubernetes compiles them, not compiled again with -race
    calls: list[tuple[tuple[str, ...], bool]] = []

    def go(_go: str, _module: object, *args: str, race: bool = False) -> Any:
        calls.append((args, race))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(go_lint, "_go", go)
    module = go_lint.Module(ROOT / "plugin" / "kube-scheduler", ("./...",))
    split = (["x/pkg/layers"], ["x/cmd/kube-apiserver"])
    monkeypatch.setattr(go_lint, "split_packages", lambda _go, _m: split)
    assert go_lint.check("go", module, race=True) == []
    assert calls == [
        (("vet", "-trimpath", "-race", "x/pkg/layers"), True),
        (("vet", "-trimpath", "x/cmd/kube-apiserver"), False),
        (("test", "-trimpath", "-race", "-count=1", "x/pkg/layers"), True),
    ]
    # nothing to race-test, or --no-race: every package vetted as make kubernetes compiles
    calls.clear()
    monkeypatch.setattr(go_lint, "split_packages", lambda _go, _m: ([], ["x/cmd/a"]))
    assert go_lint.check("go", module, race=True) == []
    assert go_lint.check("go", module, race=False) == []
    assert calls == [(("vet", "-trimpath", "./..."), False)] * 2
    assert "go vet: ok" in capsys.readouterr().out


def test_go_lint_runs_the_go_tests_the_integration_stage_no_longer_runs() -> None:
    # the reference harness, its per-minor programs and the plugin's per-minor modules:
    # their vet and tests are go-lint's alone (tests/integration/test_image_locality_minors.py
    # and test_kube_scheduler_minors.py keep what only they check)
    found = {m.name: m for m in go_lint.modules()}
    reference = [n for n in found if n.startswith("plugin/imagelocality-reference/minors/")]
    plugin = [n for n in found if n.startswith("plugin/kube-scheduler/minors/")]
    assert len(reference) >= 2 and len(plugin) >= 2, sorted(found)
    for name in [*reference, *plugin, "plugin/imagelocality-reference"]:
        assert found[name].packages, name
    integration = ROOT / "tests" / "integration"
    for name in ("test_image_locality_minors.py", "test_kube_scheduler_minors.py"):
        text = (integration / name).read_text("utf-8")
        assert '"vet"' not in text, name
