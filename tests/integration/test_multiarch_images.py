"""The images of another architecture, built here: the layersched index (amd64 and arm64,
arm64's Debian packages and wheels really downloaded and checked) and, where ``make
images`` cached it, the arm64 kube-scheduler; checked structurally (ELF machines, the
index's platforms) and run under qemu-user (Debian's ``qemu-user-static``: the arm64
programs run with the unpacked image as their root prefix, no binfmt registration needed).

CI cross-compiles no kube-scheduler (docs/deploy.md, "What CI checks of the images"): it
cross-compiles the testbed's ``pause`` for arm64 through the same path instead (seconds),
and the arm64 kube-scheduler tests skip, saying so, unless ``make images`` (or
``harness/scripts/kubernetes_build.py --arch arm64``) cached it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from layersched import __version__
from layersched.builds import scheduler_build
from layersched.images.binary import elf_facts, go_build_info
from layersched.images.build import (
    build_kube_scheduler_image,
    build_kube_scheduler_index,
    build_layersched_index,
    unpack,
)
from layersched.images.oci import BuiltIndex
from layersched.images.product import LAYERSCHED_BIN
from layersched.images.wheels import SITE_PACKAGES
from layersched_harness.testbed.builds import kubernetes_build
from tests.fixtures import prereq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Debian's qemu-user-static, else qemu-user's dynamic build.
QEMU_AARCH64 = ("qemu-aarch64-static", "qemu-aarch64")
#: Emulated, Python imports numpy and grpc in seconds; a minute is a hang.
QEMU_TIMEOUT_S = 180
PYTHON = "usr/bin/python3.11"
REPO_ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_BUILD = REPO_ROOT / "harness" / "scripts" / "kubernetes_build.py"
#: A cold cross-compile of pause (the Go runtime for arm64, one small main) takes seconds of
#: CPU; a loaded machine stretches them.
CROSS_COMPILE_TIMEOUT_S = 900


def _qemu() -> str:
    for name in QEMU_AARCH64:
        found = shutil.which(name)
        if found is not None:
            return found
    prereq.missing(
        "qemu-user for arm64 (Debian's qemu-user-static, which .ci/run installs) is not "
        "installed: the arm64 programs cannot be run"
    )


def _under_qemu(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # -L: the image's root is where the arm64 loader and libraries are looked up
    return subprocess.run(
        [_qemu(), "-L", str(root), *argv],
        capture_output=True,
        text=True,
        timeout=QEMU_TIMEOUT_S,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent"},
    )


@pytest.fixture(scope="module")
def index() -> BuiltIndex:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        prereq.missing("apt-get and dpkg-deb are needed to build the image from Debian packages")
    return build_layersched_index(("amd64", "arm64"))


@pytest.fixture(scope="module")
def arm64_root(index: BuiltIndex, tmp_path_factory: pytest.TempPathFactory) -> Path:
    [arm64] = [image for image in index.images if image.platform.architecture == "arm64"]
    root = tmp_path_factory.mktemp("arm64-rootfs")
    list(unpack(arm64, root))
    return root


def test_one_index_of_both_platforms_sharing_the_product_layer(index: BuiltIndex) -> None:
    doc: dict[str, Any] = json.loads(index.index_bytes)
    platforms = [(m["platform"]["os"], m["platform"]["architecture"]) for m in doc["manifests"]]
    assert platforms == [("linux", "amd64"), ("linux", "arm64")]
    assert doc["annotations"]["org.opencontainers.image.version"] == __version__
    amd64, arm64 = index.images
    configs = [json.loads(image.config_bytes) for image in index.images]
    assert [c["architecture"] for c in configs] == ["amd64", "arm64"]
    # the Debian and wheel layers are each architecture's; the product layer is one blob
    assert amd64.layers[0] != arm64.layers[0] and amd64.layers[1] != arm64.layers[1]
    assert amd64.layers[2] == arm64.layers[2]
    # the same entrypoint, command and user on both
    assert configs[0]["config"] == configs[1]["config"]
    # and the reproducible build: again, the same index
    assert build_layersched_index(("amd64", "arm64")).digest == index.digest


def test_the_arm64_image_holds_arm64_programs(arm64_root: Path) -> None:
    facts = elf_facts((arm64_root / PYTHON).read_bytes(), PYTHON)
    assert facts.machine == "arm64" and not facts.static  # Debian's Python: dynamic
    # a wheel's C extension, the arm64 wheel's
    [numpy_core] = (arm64_root / SITE_PACKAGES / "numpy" / "_core").glob(
        "_multiarray_umath.cpython-311-*.so"
    )
    assert "aarch64" in numpy_core.name
    assert elf_facts(numpy_core.read_bytes(), numpy_core.name).machine == "arm64"


def test_the_arm64_python_and_its_wheels_run_under_qemu(arm64_root: Path) -> None:
    python = str(arm64_root / PYTHON)
    done = _under_qemu(
        arm64_root,
        python,
        "-c",
        "import platform, numpy, grpc, aiohttp, msgspec, yaml, ssl; "
        "print(platform.machine(), numpy.__version__ != '', ssl.OPENSSL_VERSION.split()[0])",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["aarch64", "True", "OpenSSL"]
    version = _under_qemu(arm64_root, python, str(arm64_root / LAYERSCHED_BIN), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"layersched {__version__}"


def test_an_arm64_binary_is_cross_compiled_static_and_runs_under_qemu(tmp_path: Path) -> None:
    # CI's arm64 binary: the testbed's pause, through the path make images compiles every
    # kube-scheduler (kubernetes_build.py --arch): the same flags, cache and checks
    done = subprocess.run(
        [sys.executable, str(KUBERNETES_BUILD), "--arch", "arm64", "--binary", "pause"],
        capture_output=True,
        text=True,
        timeout=CROSS_COMPILE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    binary = kubernetes_build().platform_binary("pause", "arm64")
    data = binary.read_bytes()
    facts = elf_facts(data, str(binary))
    assert (facts.machine, facts.static) == ("arm64", True)
    info = go_build_info(data, str(binary))
    assert (info.setting("GOARCH"), info.setting("CGO_ENABLED")) == ("arm64", "0")
    # no VCS stamp: the binary is the build ID's and the architecture's, not a commit's
    assert info.setting("vcs.revision") is None
    ran = _under_qemu(tmp_path, str(binary), "-v")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "pause (layersched)"


@pytest.fixture(scope="module")
def arm64_kube_scheduler() -> Path:
    build = scheduler_build()
    path = build.platform_binary("kube-scheduler", "arm64")
    if not path.is_file():
        pytest.skip(
            f"no arm64 kube-scheduler cached at {path}: CI cross-compiles none (minutes of "
            "two cores); `make images` (or harness/scripts/kubernetes_build.py --arch arm64) "
            "builds it"
        )
    return path


def test_the_arm64_kube_scheduler_is_a_static_arm64_binary(arm64_kube_scheduler: Path) -> None:
    facts = elf_facts(arm64_kube_scheduler.read_bytes(), str(arm64_kube_scheduler))
    assert (facts.machine, facts.static) == ("arm64", True)


def test_the_kube_scheduler_index_lists_both_platforms(arm64_kube_scheduler: Path) -> None:
    build = scheduler_build()
    amd64_binary = build.platform_binary("kube-scheduler", "amd64")
    if not amd64_binary.is_file():
        amd64_binary = build.require("kube-scheduler") / "kube-scheduler"
    images = [
        build_kube_scheduler_image(amd64_binary, build.version, "amd64"),
        build_kube_scheduler_image(arm64_kube_scheduler, build.version, "arm64"),
    ]
    index = build_kube_scheduler_index(images, build.version)
    doc = json.loads(index.index_bytes)
    assert [m["platform"]["architecture"] for m in doc["manifests"]] == ["amd64", "arm64"]
    labels = json.loads(images[1].config_bytes)["config"]["Labels"]
    assert "GOARCH=arm64" in labels["io.layersched.inputs.go-build"].split()
    assert "CGO_ENABLED=0" in labels["io.layersched.inputs.go-build"].split()
    assert labels["io.layersched.inputs.kubernetes-module"].startswith(
        f"k8s.io/kubernetes {build.version} h1:"
    )


def test_the_arm64_kube_scheduler_runs_under_qemu(
    arm64_kube_scheduler: Path, tmp_path: Path
) -> None:
    done = _under_qemu(tmp_path, str(arm64_kube_scheduler), "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Kubernetes {kubernetes_build().version}"
