"""make go-lint covers every Go module of the repository (harness/scripts/go_lint.py): a module
added later is vetted and race-tested without anyone listing it, and one with nothing of
its own to check says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "scripts"))

import go_lint  # noqa: E402

from layersched_harness.testbed.builds import kubernetes_build  # noqa: E402


def test_every_tracked_module_is_checked_or_says_why_not() -> None:
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "*go.mod"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = {m.name: m for m in go_lint.modules()}
    assert sorted(found) == sorted(str(Path(t).parent) for t in tracked)
    for module in found.values():
        assert module.packages or module.why_none, module.name
    assert found["src/kube-scheduler"].packages == ("./...",)
    assert found["harness/imagelocality-reference"].packages == ("./...",)
    # a minor's module has no Go file of its own: it checks the plugin's packages against
    # its release
    minors = [m for name, m in found.items() if name.startswith("src/kube-scheduler/minors/")]
    assert minors and all(m.packages == (go_lint.MAIN_PACKAGES,) for m in minors)
    # CRI-O's module only builds the release's binary
    assert found["harness/crio"].packages == () and "tool" in found["harness/crio"].why_none


def test_a_nested_modules_files_are_not_its_parents(tmp_path: Path) -> None:
    # src/kube-scheduler/minors/1.35 is its own module, not src/kube-scheduler's
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "go.mod").write_text("module b\n")
    (tmp_path / "a" / "b" / "x.go").write_text("package b\n")
    (tmp_path / "a" / "y.go").write_text("package a\n")
    assert go_lint._in_nested_module(tmp_path / "a" / "b" / "x.go", tmp_path / "a")
    assert not go_lint._in_nested_module(tmp_path / "a" / "y.go", tmp_path / "a")


def test_testmain_alone_is_no_test() -> None:
    # harness/scheduler-perf holds TestMain and a benchmark: nothing to race-test
    assert not go_lint._TEST_FUNC.search("func TestMain(m *testing.M) {\n")
    assert go_lint._TEST_FUNC.search("func TestScores(t *testing.T) {\n")
    assert not go_lint._TEST_FUNC.search("func BenchmarkPerfScheduling(b *testing.B) {\n")


def test_the_plugins_packages_keep_tests_for_go_lint_to_race() -> None:
    # make go-lint is where the plugin's Go tests run (the integration tests no longer run
    # them a second time): each of these packages must keep a test for it to run
    module = ROOT / "src" / "kube-scheduler"
    for package in ("pkg/layers", "pkg/inventorywatch", "pkg/layerlocality", "pkg/resolver"):
        tests = sorted((module / package).glob("*_test.go"))
        assert any(go_lint._TEST_FUNC.search(f.read_text("utf-8")) for f in tests), package
    # the index's race test: Score readers against the watch's writer
    layers = "".join(f.read_text("utf-8") for f in (module / "pkg" / "layers").glob("*_test.go"))
    assert "func TestScoresAreReadWhileEventsArrive(" in layers


BUILT = "v1.37.2"


def _module(release: str) -> Any:
    return go_lint.Module(ROOT / "src" / "kube-scheduler", ("./...",), release=release)


def test_each_module_is_vetted_against_a_compile_that_exists() -> None:
    tested, untested = ["x/pkg/layers"], ["x/cmd/kube-apiserver"]
    race_test = (
        "go test -race",
        ["test", "-trimpath", "-race", "-vet=off", "-count=1", *tested],
        True,
    )
    # at make kubernetes's release: everything vetted plainly, on that build's compile
    # (vetting the control plane's mains with -race would compile all of Kubernetes
    # again); the race test then compiles only the race build, and does not vet again
    assert go_lint.steps(_module(BUILT), tested, untested, True, BUILT) == [
        ("go vet", ["vet", "-trimpath", "./..."], False),
        race_test,
    ]
    # an older release: the race-tested packages type-checked against the race build the
    # tests reuse (one compile of the release), the others plainly
    assert go_lint.steps(_module("v1.35.4"), tested, untested, True, BUILT) == [
        ("go vet -race", ["vet", "-trimpath", "-race", *tested], True),
        ("go vet", ["vet", "-trimpath", *untested], False),
        race_test,
    ]
    assert go_lint.steps(_module("v1.35.4"), tested, [], True, BUILT) == [
        ("go vet -race", ["vet", "-trimpath", "-race", *tested], True),
        race_test,
    ]
    # nothing to race-test, or --no-race: every package vetted plainly
    for release in (BUILT, "v1.35.4"):
        assert go_lint.steps(_module(release), [], untested, True, BUILT) == [
            ("go vet", ["vet", "-trimpath", "./..."], False)
        ]
        assert go_lint.steps(_module(release), tested, untested, False, BUILT) == [
            ("go vet", ["vet", "-trimpath", "./..."], False)
        ]


def test_check_runs_the_steps_and_names_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[tuple[str, ...], bool]] = []

    def go(_go: str, _module: object, *args: str, race: bool = False) -> Any:
        calls.append((args, race))
        failed = args[0] == "test"
        return subprocess.CompletedProcess(
            args, int(failed), "", "--- FAIL: TestX" if failed else ""
        )

    monkeypatch.setattr(go_lint, "_go", go)
    monkeypatch.setattr(go_lint, "split_packages", lambda _go, _m: (["x/a"], []))
    failures = go_lint.check("go", _module(BUILT), race=True, built_release=BUILT)
    assert [race for _args, race in calls] == [False, True]
    assert len(failures) == 1 and "src/kube-scheduler: go test" in failures[0]
    assert "--- FAIL: TestX" in failures[0]
    out = capsys.readouterr().out
    assert "go vet: ok" in out and "go test -race: FAILED (exit 1)" in out


def test_modules_know_their_release() -> None:
    # the modules at the Kubernetes build's release share its compile; the older minors'
    # modules compile their own
    built = kubernetes_build().version
    found = {m.name: m for m in go_lint.modules()}
    for name in ("src/kube-scheduler", "harness/scheduler-perf"):
        assert found[name].release == built, name
    minors = [m for n, m in found.items() if n.startswith("src/kube-scheduler/minors/")]
    assert minors and all(m.release and m.release != built for m in minors)
    for module in minors:
        assert module.release.startswith(f"v{module.directory.name}."), module.name


def test_go_lint_runs_the_go_tests_the_integration_stage_no_longer_runs() -> None:
    # the reference harness, its per-minor programs and the plugin's per-minor modules:
    # their vet and tests are go-lint's alone (tests/integration/test_image_locality_minors.py
    # and test_kube_scheduler_minors.py keep what only they check)
    found = {m.name: m for m in go_lint.modules()}
    reference = [n for n in found if n.startswith("harness/imagelocality-reference/minors/")]
    plugin = [n for n in found if n.startswith("src/kube-scheduler/minors/")]
    assert len(reference) >= 2 and len(plugin) >= 2, sorted(found)
    for name in [*reference, *plugin, "harness/imagelocality-reference"]:
        assert found[name].packages, name
    integration = ROOT / "tests" / "integration"
    for name in ("test_image_locality_minors.py", "test_kube_scheduler_minors.py"):
        text = (integration / name).read_text("utf-8")
        assert '"vet"' not in text, name
