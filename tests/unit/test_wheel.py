"""The wheel carries the product only: every file under ``layersched/`` (but its metadata),
none of the harness's (``layersched_harness``, a root of its own), nothing of the Go
modules that namespace discovery once found (``kube-scheduler/hack/pin_kubernetes.py``
shipped so). The wheel is built from
the checkout's tracked files as a release builds it (tests/fixtures/wheel.py); installing
it is the integration suite's (tests/integration/test_pip_install.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from layersched.cli.main import COMMAND_GROUP
from tests.fixtures.wheel import build, copy_sources, outside_the_product


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    copy_sources(src)
    return build("wheel", src, out)


def test_the_wheel_holds_the_product_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "layersched/cli/main.py" in names and "layersched/deploy/_stack.py" in names
    assert "layersched/kubernetes-build.yml" in names  # the build its images package
    assert outside_the_product(names) == []


def test_the_wheel_has_the_products_commands_not_the_harness(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert "layersched = layersched.cli.main:main" in scripts
    assert "kubectl-layersched = layersched.cli.main:main" in scripts
    assert f"[{COMMAND_GROUP}]" not in scripts  # the harness's commands are its own


@pytest.mark.parametrize(
    "name",
    [
        "kube-scheduler/hack/pin_kubernetes.py",
        "crio/README.md",
        "layersched_harness/testbed/builds.py",
        "layersched_harness/sim/engine.py",
        "layersched_harness/evidence/results.py",
        "layersched_harness-0-py3-none-any.whl",
    ],
)
def test_the_check_refuses_what_is_not_the_product(name: str) -> None:
    # the check above could pass by accident: it fails on each kind of stray file
    kept = ["layersched/__init__.py", "layersched-0.1.0.dist-info/RECORD"]
    assert outside_the_product([*kept, name]) == [name]
