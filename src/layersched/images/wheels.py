"""The layersched image's Python layer: the wheels of
``install/images/layersched/requirements.lock``
(pinned, hash-checked by ``pip download --require-hashes``, each architecture's by its
manylinux tags), installed with ``pip install --target`` into
``/usr/local/lib/python3.11/dist-packages``, a directory Debian's Python searches."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from layersched.images.commands import BUILD_TIMEOUT_S, FETCH_TIMEOUT_S, run
from layersched.images.locks import LOCK_DEFAULT_ARCH, Pin
from layersched.images.oci import LayerBlob
from layersched.images.rootfs import PYTHON, PYTHON_VERSION, TarTree

SITE_PACKAGES = f"usr/local/lib/{PYTHON}/dist-packages"


#: The manylinux tags pip may take a wheel of, per architecture (newest first): the image's
#: glibc is bookworm's 2.36.
WHEEL_PLATFORMS = {
    arch: tuple(f"{tag}_{machine}" for tag in ("manylinux_2_36", "manylinux_2_28", "manylinux2014"))
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64"))
}


def _wheel_platform_args(arch: str) -> list[str]:
    argv = ["--only-binary", ":all:", "--python-version", PYTHON_VERSION]
    argv += ["--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"]
    for tag in WHEEL_PLATFORMS[arch]:
        argv += ["--platform", tag]
    return argv


def fetch_wheels(lock: Path, directory: Path, arch: str = LOCK_DEFAULT_ARCH) -> None:
    """Every wheel of ``lock`` for ``arch`` in ``directory`` (pip download, hashes
    required: the lock lists each platform's wheel's)."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    argv += [*_wheel_platform_args(arch), "--dest", str(directory), "-r", str(lock)]
    run(argv, f"pip download of {lock.name} for {arch}", FETCH_TIMEOUT_S)


def pip_target(
    wheel_dir: Path, names: Sequence[str], target: Path, arch: str | None = None
) -> None:
    """``pip install --target``; with ``arch``, that architecture's wheels (pip installs
    another platform's wheels only when told its tags)."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    argv += ["--no-compile", "--no-warn-script-location", "--disable-pip-version-check"]
    if arch is not None:
        argv += _wheel_platform_args(arch)
    argv += ["--find-links", str(wheel_dir), "--target", str(target), *names]
    # A constraint file of the machine's (pip.conf) must not override our pins.
    env_argv = ["env", "PIP_CONSTRAINT=", "PIP_CONFIG_FILE=/dev/null", *argv]
    run(env_argv, f"pip install --target {target}", BUILD_TIMEOUT_S)
    shutil.rmtree(target / "bin", ignore_errors=True)


def python_layer(pins: Sequence[Pin], wheel_dir: Path, arch: str | None = None) -> LayerBlob:
    """Layer 2: the pinned wheels (``arch``'s) installed into Debian Python's dist-packages."""
    with tempfile.TemporaryDirectory(prefix="layersched-image-") as tmp:
        target = Path(tmp) / "site"
        pip_target(wheel_dir, [f"{p.name}=={p.version}" for p in pins], target, arch)
        tree = TarTree()
        tree.add_tree(target, SITE_PACKAGES)
    tree.add_bytecode(SITE_PACKAGES)
    return tree.layer()
