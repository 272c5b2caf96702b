"""The LayerLocality plugin against every older supported minor: compiled, vetted and
tested against Kubernetes 1.35 and 1.36 as released (1.37, the build's own release, is
``test_kube_scheduler_plugin.py``'s).

Each minor has a Go module of its own (``src/kube-scheduler/minors/<minor>``) that
requires layersched's module and replaces the release, and every module that release's
``go.mod`` requires, with the version it requires (``hack/pin_kubernetes.py
--as-released``). ``make go-lint`` vets and race-tests the plugin's packages
(``layersched.io/kube-scheduler/pkg/...``) in each of those modules (``harness/scripts/go_lint.py``;
held by ``tests/unit/test_go_lint.py``). Here, per minor: the generator's plugin
configurations for that minor (the testbed's, and the install's under in-flight) decoded by
that minor's scheduler scheme, and the module selecting exactly the release's own
dependencies.

The decoding test compiles with ``-race`` (cgo on), as go-lint's race tests of the same
packages do: CI runs it after go-lint (``harness/scripts/ci-beside.sh``), so it links from their
compile instead of compiling the release's scheduler framework a second time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from layersched.builds import (
    KUBERNETES_MODULE,
    KubernetesBuild,
    scheduler_build,
    scheduler_minor_builds,
)
from layersched.core.errors import InputError
from layersched.deploy import SCHEDULER_PLUGIN, StackSpec, scheduler_config
from layersched_harness.testbed.builds import find_go, minor_builds
from layersched_harness.testbed.scheduler_configs import (
    TestbedSchedulers,
)
from layersched_harness.testbed.scheduler_configs import (
    testbed_scheduler_configs as generate_testbed_configs,
)
from tests.fixtures import prereq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: A cold minor compiles part of Kubernetes: minutes on 2 busy cores.
GO_TIMEOUT_S = 1800
ARGS_TEST = "TestArgsFromTheGenerator"
ARGS_ENV = "LAYERSCHED_GENERATED_CONFIGS"

MINORS = scheduler_minor_builds()
#: The testbed's control plane of each (the harness's module under minors/).
CONTROL_PLANES = minor_builds()


def _ids(build: KubernetesBuild) -> str:
    return build.version


@pytest.fixture(scope="module")
def go() -> str:
    try:
        go, _ = find_go(scheduler_build().go_version_needed())
    except InputError as err:
        prereq.missing(f"compiling the plugin against older minors: {err}")
    return go


def _run(
    go: str, build: KubernetesBuild, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [go, *args]
    print(f"$ {' '.join(argv)}  (in {build.module})")
    return subprocess.run(
        argv,
        cwd=build.directory(),
        env={**build.go_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=GO_TIMEOUT_S,
        check=False,
    )


def test_there_are_the_two_older_minors() -> None:
    # upstream supports three minors: the build's and the two before it
    main = scheduler_build().minor
    assert [b.version.rsplit(".", 1)[0] for b in MINORS] == [
        f"v1.{main[1] - 2}",
        f"v1.{main[1] - 1}",
    ]


@pytest.mark.parametrize("build", MINORS, ids=_ids)
def test_that_minors_scheme_decodes_the_generated_plugin_args(
    go: str, build: KubernetesBuild, tmp_path: Path
) -> None:
    # what layersched renders for this minor, decoded by this minor's scheduler scheme
    configs = generate_testbed_configs(
        TestbedSchedulers(
            kubeconfig="/state/control-plane/kube-scheduler.kubeconfig",
            extender_url="http://10.250.71.1:8888",
            extender_timeout_s=5.0,
            kubernetes_version=build.version,
        )
    )
    # and the install's with in-flight (issue 42; the testbed's profile is layer-locality)
    install = scheduler_config(
        StackSpec(scheduler=SCHEDULER_PLUGIN, strategy="in-flight").for_version(build.version)
    )
    (args,) = (c["args"] for c in install["profiles"][0]["pluginConfig"])
    assert args["strategy"] == "in-flight", args
    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"testbed": configs["layer-locality-plugin"], "install": install}))
    done = _run(
        go,
        build,
        "test",
        "-trimpath",
        "-race",
        "-count=1",
        "-v",
        "-run",
        ARGS_TEST,
        f"{build.mains}/pkg/layerlocality",
        env={ARGS_ENV: str(path), "CGO_ENABLED": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "decoded 2 generated configurations" in done.stdout, done.stdout


def _assert_compiled_as_released(go: str, build: KubernetesBuild, *packages: str) -> None:
    # minimal version selection would lift the older release's dependencies to the
    # build's (newer) ones; the minor's replaces hold each at what its release requires
    info = json.loads(
        _run(go, build, "mod", "download", "-json", f"{KUBERNETES_MODULE}@{build.version}").stdout
    )
    upstream = {}
    for line in Path(info["GoMod"]).read_text("utf-8").splitlines():
        words = line.split("//", 1)[0].split()
        words = words[1:] if words[:1] == ["require"] else words
        if len(words) == 2 and words[1].startswith("v") and words[1] != "v0.0.0":
            upstream[words[0]] = words[1]
    # the modules of every package compiled (the plugin's and each main's): a module
    # the newer build requires and this release does not have (1.37's new staging
    # modules) is in the graph but never compiled, and `go list -m all` would fetch it
    module = (
        "{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}"
    )
    listed = _run(go, build, "list", "-deps", "-f", module, *packages)
    assert listed.returncode == 0, listed.stderr
    compiled = dict(line.split() for line in listed.stdout.splitlines() if len(line.split()) == 2)
    assert compiled[KUBERNETES_MODULE] == build.version
    differing = {
        path: (version, upstream[path])
        for path, version in compiled.items()
        if path in upstream and upstream[path] != version
    }
    assert differing == {}, f"compiled != {build.version}'s go.mod: {differing}"


@pytest.mark.parametrize("build", MINORS, ids=_ids)
def test_each_minor_compiles_its_release_as_released(go: str, build: KubernetesBuild) -> None:
    mains = [build.main_package(name) for name in build.binaries]
    _assert_compiled_as_released(go, build, f"{build.mains}/pkg/...", *mains)


@pytest.mark.parametrize("build", CONTROL_PLANES, ids=_ids)
def test_each_minors_control_plane_compiles_its_release_as_released(
    go: str, build: KubernetesBuild
) -> None:
    # the harness's module of that minor (make live-minors): its etcd and kube-apiserver
    assert build.includes is not None and build.includes.version == build.version
    _assert_compiled_as_released(go, build, *map(build.main_package, build.own_binaries))
