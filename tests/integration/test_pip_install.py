"""The CLI installs with pip: the sdist and the wheel, built from this checkout by
setuptools' own PEP 517 backend, each installed into a clean virtual environment (no
checkout on its path), run as a user would: ``layersched --help``, ``estimate`` against a
stand-in API server, ``deploy render``, and ``kubectl layersched`` through the kubectl of
the Kubernetes build. What the wheel holds (the product only) is the unit suite's
(tests/unit/test_wheel.py).

The venv's dependencies come from the package index (pip's cache after ``make venv``):
this is the one test that reads the index, as a user's ``pip install`` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from layersched.cli.main import COMMANDS
from layersched.core.errors import InputError
from layersched_harness.testbed.builds import kubernetes_build
from tests.fixtures import prereq
from tests.fixtures.kube_api import StandInApi, stand_in_api
from tests.fixtures.wheel import build, copy_sources
from tests.unit.test_cli_estimate import IMG1, IMG2, SIZES, L, _cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Building both artifacts takes seconds; installing the wheel's dependencies into a new
#: venv from pip's cache about a minute on 2 cores, from the index a few.
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 120
#: The commands the harness's distribution adds (harness/pyproject.toml), through the
#: entry-point group the product's CLI reads (layersched.cli.main.COMMAND_GROUP).
HARNESS_COMMANDS = ("testbed", "scenario", "simulate")


def _run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel of this checkout's tracked files (tests/fixtures/wheel.py)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    copy_sources(src)
    sdist, wheel = build("sdist", src, out), build("wheel", src, out)
    assert sdist.is_file() and wheel.is_file(), sorted(out.iterdir())
    assert sdist.name.endswith(".tar.gz") and wheel.suffix == ".whl"
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    """A new venv with the wheel and its dependencies installed, nothing of the checkout."""
    directory = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(directory)])
    pip = [str(directory / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    done = subprocess.run(
        [*pip, "--disable-pip-version-check", str(artifacts["wheel"])],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        prereq.missing(f"pip install of the wheel's dependencies failed: {done.stderr[-800:]}")
    return directory


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandInApi]:
    with stand_in_api(tmp_path_factory.mktemp("kube-api")) as server:
        _cluster(server)
        yield server


@pytest.fixture(scope="module")
def layers_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layers") / "layers.json"
    path.write_text(
        json.dumps(
            {
                image: [{"digest": L[x], "size": SIZES[x]} for x in labels]
                for image, labels in ((IMG1, ("L1", "L2", "L3")), (IMG2, ("L1", "L2", "L4")))
            }
        )
    )
    return path


def _env(venv: Path, home: Path) -> dict[str, str]:
    """A user's environment: the venv first on PATH, no checkout on PYTHONPATH, a home
    of its own (no ~/.kube/config but the test's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG")}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "HOME": str(home)}


def test_installed_cli_runs_help_estimate_and_render(
    venv: Path, api: StandInApi, layers_file: Path, tmp_path: Path
) -> None:
    env = _env(venv, tmp_path)
    layersched = str(venv / "bin" / "layersched")
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import layersched; print(layersched.__file__)"],
        env=env,
        cwd=tmp_path,
    )
    assert str(venv) in where  # the installed copy, not the checkout
    helped = _run([layersched, "--help"], env=env, cwd=tmp_path)
    assert set(_commands(helped)) == set(COMMANDS)  # the harness is not installed
    # estimate through $KUBECONFIG, as a user's shell has it
    out = _run(
        [layersched, "estimate", "--layers", str(layers_file), "-o", "json"],
        env={**env, "KUBECONFIG": str(api.kubeconfig)},
        cwd=tmp_path,
    )
    document = json.loads(out)
    assert document["nodes"] == 3 and document["coverage"]["complete"] is True
    rendered = tmp_path / "install"
    _run(
        [layersched, "deploy", "render", "--kubernetes-version", "1.37", "--dir", str(rendered)],
        env=env,
        cwd=tmp_path,
    )
    assert (rendered / "kustomization.yaml").is_file()


def _commands(helped: str) -> list[str]:
    """The commands ``layersched --help`` lists, in its order (under ``COMMAND``, each
    indented four spaces; their help's continuation lines further)."""
    return re.findall(r"^ {4}([a-z][a-z-]*)(?: |$)", helped, re.M)


def test_the_checkouts_cli_has_the_harness_commands(tmp_path: Path) -> None:
    """The dev install (``make venv``: the product editable and the harness's distribution)
    lists the product's commands and the harness's, the harness's last, by name."""
    helped = _run([sys.executable, "-m", "layersched.cli.main", "--help"], cwd=tmp_path)
    assert _commands(helped) == [*COMMANDS, *sorted(HARNESS_COMMANDS)]


def test_kubectl_runs_it_as_a_plugin(
    venv: Path, api: StandInApi, layers_file: Path, tmp_path: Path
) -> None:
    try:
        kubectl = kubernetes_build().require("kubectl") / "kubectl"
    except InputError as err:
        prereq.missing(str(err))
    env = _env(venv, tmp_path)
    listed = _run([str(kubectl), "plugin", "list", "--name-only"], env=env, cwd=tmp_path)
    assert "kubectl-layersched" in listed
    argv = [str(kubectl), "layersched", "estimate", "--kubeconfig", str(api.kubeconfig)]
    out = _run([*argv, "--layers", str(layers_file), "-o", "yaml"], env=env, cwd=tmp_path)
    assert "nodes: 3" in out and "complete: true" in out


def test_the_sdist_installs_the_same_commands(
    venv: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    # over the wheel's venv (its dependencies already there): the sdist builds and installs
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps"]
    _run([*pip, "--force-reinstall", str(artifacts["sdist"])], cwd=tmp_path)
    env = _env(venv, tmp_path)
    assert "usage: kubectl layersched" in _run(
        [str(venv / "bin" / "kubectl-layersched"), "--help"], env=env, cwd=tmp_path
    )
    assert "estimate" in _run([str(venv / "bin" / "layersched"), "--help"], env=env, cwd=tmp_path)
