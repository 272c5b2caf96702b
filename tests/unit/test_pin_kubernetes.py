"""``src/kube-scheduler/hack/pin_kubernetes.py``'s reading of a release's go.mod: the
staging modules it replaces, and (``--as-released``) every module it requires, with the
version it requires. The go commands it runs are exercised by pinning the real modules
(``tests/integration/test_kube_scheduler_minors.py`` checks what a minor's module selects).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "src" / "kube-scheduler" / "hack"
UPSTREAM_GO_MOD = """\
module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
\tgithub.com/spf13/pflag v1.0.10
\tgo.etcd.io/etcd/client/v3 v3.6.5
\tk8s.io/api v0.0.0
\tk8s.io/klog/v2 v2.130.1 // a comment
)

require go.etcd.io/etcd/server/v3 v3.6.5 // indirect

require (
\tgithub.com/beorn7/perks v1.0.1 // indirect
\tk8s.io/kube-scheduler v0.0.0 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
)
"""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pin_kubernetes", SCRIPT / "pin_kubernetes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_staging_modules_are_the_local_replaces() -> None:
    assert _script().staging_modules(UPSTREAM_GO_MOD) == ["k8s.io/api", "k8s.io/kube-scheduler"]


def test_as_released_is_every_requirement_at_its_version_but_staging() -> None:
    # both require blocks and the single line; v0.0.0 (staging) left to the staging pins
    assert _script().released_requirements(UPSTREAM_GO_MOD) == {
        "github.com/spf13/pflag": "v1.0.10",
        "go.etcd.io/etcd/client/v3": "v3.6.5",
        "k8s.io/klog/v2": "v2.130.1",
        "go.etcd.io/etcd/server/v3": "v3.6.5",
        "github.com/beorn7/perks": "v1.0.1",
    }


def test_a_release_without_staging_replaces_is_refused() -> None:
    with pytest.raises(SystemExit, match=r"replaces no k8s\.io"):
        _script().staging_modules("module k8s.io/kubernetes\n")


@pytest.mark.parametrize("minor", ["1.35", "1.36"])
def test_each_minors_module_is_pinned_as_released(minor: str) -> None:
    # the committed pin: the release itself replaced with a release of that minor, and the
    # etcd server it requires replaced too (what make live-minors builds)
    go_mod = (SCRIPT.parent / "minors" / minor / "go.mod").read_text("utf-8")
    replaces = {
        words[1]: words[4]
        for line in go_mod.splitlines()
        if len(words := line.split()) == 5 and words[0] == "replace" and words[2] == "=>"
    }
    assert replaces["k8s.io/kubernetes"].startswith(f"v{minor}.")
    assert replaces["k8s.io/api"] == "v0." + replaces["k8s.io/kubernetes"].removeprefix("v1.")
    assert replaces["go.etcd.io/etcd/server/v3"].startswith("v3.6.")
    assert "replace layersched.io/kube-scheduler => ../.." in go_mod
